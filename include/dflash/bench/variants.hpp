#pragma once
// dflash::bench::run: one workload under several profiler policies and
// configurations, measured side by side in one process — the harness for
// "what does profiling cost my pipeline?", "is depth 8 or 60 faster?",
// "was the advisor right?" (host core; no CCCL, no Google Benchmark).
//
//   auto r = dflash::bench::run(
//       dflash::bench::policies<dflash::NullProfiler, dflash::AccumulatingProfiler<keys>>{},
//       dflash::bench::grid().add("depth", {2, 8, 60}),
//       [](const auto& prof, const dflash::bench::config& c) {   // one run: returns the units of work done
//         return run_my_pipeline(prof, c["depth"]);                 // (items, tokens, ...)
//       },
//       {.rounds = 7, .unit = "tokens"});
//   std::printf("%s", r.table().c_str());
//
// Measurement, by default done right: every variant (policy x configuration)
// runs `warmup` times unmeasured, then `rounds` rounds, each running every
// variant once in a seeded order rotated by one per round (bench/stats.hpp),
// so a slow minute of a shared machine falls on every variant alike. Per run:
// wall time, process CPU time and the units the workload returned. Per
// variant: rate (units/s) and wall and CPU seconds per unit, as median,
// p25..p75 and min..max over the rounds; and the per-round ratio of its rate
// to the baseline's (measured in the same round, so noise spanning a round
// cancels), with a verdict only when enough rounds agree — a sign test at the
// 10 % level (bench/stats.hpp), "within noise" otherwise. The load average at start and end says how busy the machine was.
//
// Bad input is an error that names what is wrong: no round, an unknown
// baseline, a workload that throws (the variant named) or returns no units
// (zero, negative, not finite). Nothing is skipped silently.
//
// result::json() schema:
//   {"unit": str, "rounds": int, "warmup": int, "seed": int, "baseline": str,
//    "load_average": {"start": num, "end": num},          (-1: not known on this system)
//    "variants": [{"name": str, "policy": str, "config": {setting: int, ...},
//                  "rounds": [{"wall_s": num, "cpu_s": num, "units": num}, ...],
//                  "rate": S, "wall_per_unit_s": S, "cpu_per_unit_s": S,
//                  "vs_baseline": S, "rounds_faster": int, "rounds_slower": int,
//                  "verdict": "faster" | "slower" | "within noise" | "baseline"}]}
//   where S = {"median": num, "p25": num, "p75": num, "min": num, "max": num}.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <exception>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "dflash/bench/grid.hpp"
#include "dflash/bench/policies.hpp"
#include "dflash/bench/stats.hpp"
#include "dflash/detail/std_chrono.hpp"

namespace dflash::bench {

struct options {
  std::size_t rounds = 9;    ///< measured rounds (at least 1; a verdict needs 5 or more, 9 forgives one odd round)
  std::size_t warmup = 1;    ///< unmeasured runs of each variant first
  std::uint64_t seed = 1;    ///< the order of the variants (then rotated each round)
  std::string baseline;      ///< the variant the others are compared with; empty: the first
  std::string unit = "items";  ///< what the workload's return value counts
  std::function<void(const std::string&)> progress;  ///< told "round 3/7" etc. (null: nothing)
};

/// One variant's measurements and what they say.
struct variant_result {
  std::string name, policy;
  config settings;
  std::vector<double> wall_s, cpu_s, units;  ///< per round
  spread rate;                               ///< units per second of wall time
  spread wall_per_unit, cpu_per_unit;        ///< seconds per unit
  spread vs_baseline;                        ///< rate / the baseline's rate, per round
  round_votes votes;                         ///< the rounds it was faster / slower than the baseline in
  bench::verdict verdict = verdict::within_noise;
};

/// Variant a against variant b, round by round.
struct comparison {
  spread ratio;        ///< a's rate over b's in each round
  round_votes votes;   ///< rounds a was faster / slower in
  bench::verdict verdict = verdict::within_noise;
};

struct result {
  options opts;
  std::vector<variant_result> variants;
  std::size_t baseline = 0;
  double load_start = -1, load_end = -1;

  /// The index of the variant named `name`; std::invalid_argument listing the names if none is.
  [[nodiscard]] std::size_t index_of(const std::string& name) const;
  /// Variant a's rate over variant b's, round by round (both measured in each
  /// round), and the verdict the rounds give.
  [[nodiscard]] comparison compare(std::size_t a, std::size_t b) const;
  [[nodiscard]] comparison compare(const std::string& a, const std::string& b) const {
    return compare(index_of(a), index_of(b));
  }

  [[nodiscard]] std::string table() const;
  [[nodiscard]] std::string json() const;
  /// A PNG of each variant's rate (median, p25..p75, min..max) where gnuplot
  /// is on PATH; false with the reason otherwise (never required).
  bool plot(const std::string& png, std::string* why = nullptr) const;
};

namespace detail {
inline double process_cpu_s() noexcept {
#if defined(CLOCK_PROCESS_CPUTIME_ID)
  timespec t{};
  if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t) == 0) return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
#endif
  return static_cast<double>(std::clock()) / CLOCKS_PER_SEC;
}
inline double load_average() noexcept {
#if defined(__unix__) || defined(__APPLE__)
  double l[1];
  if (getloadavg(l, 1) == 1) return l[0];
#endif
  return -1;
}

struct variant_slot {
  std::string policy;
  config settings;
  std::function<double(const config&)> run;  // one run: units
};

template <class Entry, class Workload>
variant_slot make_slot(const config& c, Workload& work) {
  using P = policy_of<Entry>;
  return {label_of<Entry>(), c, [&work](const config& cfg) -> double {
            const instance<P> prof;  // fresh for each run, made before the clock starts
            using units_t = std::invoke_result_t<Workload&, const P&, const config&>;
            static_assert(std::is_arithmetic_v<units_t>,
                          "dflash::bench::run: the workload must return the units of work it did (an arithmetic "
                          "value: items, tokens)");
            return static_cast<double>(work(prof.get(), cfg));
          }};
}
}  // namespace detail

/// Runs every policy of Ps under every configuration of `g` (see the header).
template <class... Ps, class Workload>
result run(policies<Ps...>, const grid& g, Workload&& work, const options& o = {}) {
  if (o.rounds == 0) throw std::invalid_argument("dflash::bench::run: rounds must be at least 1 (got 0)");
  const std::vector<config> configs = g.configs();
  std::vector<detail::variant_slot> slots;
  for (const config& c : configs) (slots.push_back(detail::make_slot<Ps>(c, work)), ...);
  result r;
  r.opts = o;
  for (const auto& s : slots) {
    variant_result v;
    v.policy = s.policy;
    v.settings = s.settings;
    v.name = s.settings.label().empty() ? s.policy : s.policy + " " + s.settings.label();
    r.variants.push_back(std::move(v));
  }
  if (!o.baseline.empty()) r.baseline = r.index_of(o.baseline);
  auto once = [&](std::size_t i, std::size_t round, bool measured) {
    auto& v = r.variants[i];
    const double c0 = detail::process_cpu_s();
    const auto t0 = std::chrono::steady_clock::now();
    double units = 0;
    try {
      units = slots[i].run(slots[i].settings);
    } catch (const std::exception& e) {
      throw std::runtime_error("dflash::bench::run: variant '" + v.name + "' threw: " + e.what());
    } catch (...) {
      throw std::runtime_error("dflash::bench::run: variant '" + v.name + "' threw a non-standard exception");
    }
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double cpu = detail::process_cpu_s() - c0;
    if (!(units > 0) || !std::isfinite(units))
      throw std::runtime_error("dflash::bench::run: variant '" + v.name + "' did no work in " +
                               (measured ? "round " + std::to_string(round + 1) : std::string("its warm-up")) +
                               " (it returned " + std::to_string(units) + " " + o.unit +
                               "; a rate needs a positive count)");
    if (!measured) return;
    v.wall_s.push_back(wall > 0 ? wall : 1e-9);
    v.cpu_s.push_back(cpu);
    v.units.push_back(units);
  };
  r.load_start = detail::load_average();
  for (std::size_t w = 0; w < o.warmup; ++w)
    for (std::size_t i = 0; i < slots.size(); ++i) once(i, w, false);
  const auto order = rotation(slots.size(), o.rounds, o.seed);
  for (std::size_t k = 0; k < o.rounds; ++k) {
    if (o.progress) o.progress("round " + std::to_string(k + 1) + "/" + std::to_string(o.rounds));
    for (const std::size_t i : order[k]) once(i, k, true);
  }
  r.load_end = detail::load_average();
  for (auto& v : r.variants) {
    std::vector<double> rate, wpu, cpu;
    for (std::size_t k = 0; k < o.rounds; ++k) {
      rate.push_back(v.units[k] / v.wall_s[k]);
      wpu.push_back(v.wall_s[k] / v.units[k]);
      cpu.push_back(v.cpu_s[k] / v.units[k]);
    }
    v.rate = spread_of(rate);
    v.wall_per_unit = spread_of(wpu);
    v.cpu_per_unit = spread_of(cpu);
  }
  for (std::size_t i = 0; i < r.variants.size(); ++i) {
    auto& v = r.variants[i];
    const comparison c = r.compare(i, r.baseline);
    v.vs_baseline = c.ratio;
    v.votes = c.votes;
    v.verdict = i == r.baseline ? verdict::baseline : c.verdict;
  }
  return r;
}

inline std::size_t result::index_of(const std::string& name) const {
  for (std::size_t i = 0; i < variants.size(); ++i)
    if (variants[i].name == name) return i;
  std::string names;
  for (const auto& v : variants) names += (names.empty() ? "'" : ", '") + v.name + "'";
  throw std::invalid_argument("dflash::bench: no variant named '" + name + "' (the variants: " + names + ")");
}

inline comparison result::compare(std::size_t a, std::size_t b) const {
  if (a >= variants.size() || b >= variants.size()) throw std::out_of_range("dflash::bench::result::compare: no such variant");
  auto rates = [&](std::size_t i) {
    std::vector<double> r;
    for (std::size_t k = 0; k < variants[i].units.size(); ++k) r.push_back(variants[i].units[k] / variants[i].wall_s[k]);
    return r;
  };
  const std::vector<double> q = ratios(rates(a), rates(b));
  comparison c;
  c.ratio = spread_of(q);
  c.votes = votes_of(q);
  c.verdict = verdict_of(c.votes);
  return c;
}

// ---- output ------------------------------------------------------------------
namespace detail {
inline std::string fmt(const char* f, double a) {
  char b[64];
  std::snprintf(b, sizeof b, f, a);
  return b;
}
/// 3 significant digits and an SI suffix: 1234567 -> "1.23M".
inline std::string human(double x) {
  const char* suffix[] = {"", "k", "M", "G", "T"};
  int k = 0;
  while (std::fabs(x) >= 1000 && k < 4) x /= 1000, ++k;
  return fmt(std::fabs(x) >= 100 ? "%.0f" : std::fabs(x) >= 10 ? "%.1f" : "%.2f", x) + suffix[k];
}
inline std::string seconds(double s) {
  if (s >= 1) return fmt("%.3f s", s);
  if (s >= 1e-3) return fmt("%.3f ms", s * 1e3);
  if (s >= 1e-6) return fmt("%.3f us", s * 1e6);
  return fmt("%.1f ns", s * 1e9);
}
inline std::string pad(std::string s, std::size_t w) {
  if (s.size() < w) s.append(w - s.size(), ' ');
  return s;
}
inline std::string json_spread(const spread& s) {
  char b[256];
  std::snprintf(b, sizeof b, "{\"median\": %.9g, \"p25\": %.9g, \"p75\": %.9g, \"min\": %.9g, \"max\": %.9g}", s.median,
                s.p25, s.p75, s.min, s.max);
  return b;
}
inline std::string json_string(const std::string& s) {
  std::string o = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      char b[8];
      std::snprintf(b, sizeof b, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
      o += b;
      continue;
    }
    o += c;
  }
  return o + "\"";
}
}  // namespace detail

inline std::string result::table() const {
  using detail::fmt;
  const std::string& u = opts.unit;
  const std::string one = u.size() > 1 && u.back() == 's' ? u.substr(0, u.size() - 1) : u;  // "tokens" -> "token"
  auto range = [](const std::string& lo, const std::string& hi) {
    std::string r = "[";
    r += lo;
    r += " .. ";
    r += hi;
    r += "]";
    return r;
  };
  // Cells first, then each column as wide as its widest cell.
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"variant", u + "/s", "[p25 .. p75]", "cpu/" + one, "vs baseline", "[min .. max]", "verdict"});
  for (const auto& v : variants) {
    std::string verdict_text = to_string(v.verdict);
    if (v.verdict == verdict::faster || v.verdict == verdict::slower) {
      verdict_text += fmt(" by %.1f %%", std::fabs(v.vs_baseline.median - 1) * 100);
      verdict_text += " (" + std::to_string(v.verdict == verdict::faster ? v.votes.faster : v.votes.slower) + " of " +
                      std::to_string(v.votes.rounds) + " rounds)";
    } else if (v.verdict == verdict::within_noise) {
      verdict_text += " (" + std::to_string(v.votes.faster) + " faster, " + std::to_string(v.votes.slower) + " slower)";
    }
    rows.push_back({v.name, detail::human(v.rate.median), range(detail::human(v.rate.p25), detail::human(v.rate.p75)),
                    detail::seconds(v.cpu_per_unit.median), fmt("%.3f", v.vs_baseline.median),
                    range(fmt("%.3f", v.vs_baseline.min), fmt("%.3f", v.vs_baseline.max)), verdict_text});
  }
  std::vector<std::size_t> width(rows[0].size(), 0);
  for (const auto& r : rows)
    for (std::size_t c = 0; c < r.size(); ++c) width[c] = std::max(width[c], r[c].size());
  std::string s = std::to_string(variants.size());
  s += " variants x " + std::to_string(opts.rounds) + " rounds (+" + std::to_string(opts.warmup);
  s += " warm-up), order rotated each round, seed " + std::to_string(opts.seed) + "; load average ";
  s += load_start < 0 ? std::string("?") : fmt("%.2f", load_start);
  s += " -> ";
  s += load_end < 0 ? std::string("?") : fmt("%.2f", load_end);
  s += "; baseline: " + variants[baseline].name + "\n";
  for (const auto& r : rows) {
    for (std::size_t c = 0; c < r.size(); ++c) {
      s += c + 1 < r.size() ? detail::pad(r[c], width[c]) : r[c];
      if (c + 1 < r.size()) s += "  ";
    }
    s += "\n";
  }
  s += "(rates: median of the rounds; vs baseline: the rate over the baseline's in the same round; ";
  if (rounds_needed(opts.rounds) > opts.rounds)
    s += "no verdict from " + std::to_string(opts.rounds) + " rounds: a sign test at the 10 % level needs 5 or more)\n";
  else
    s += "a verdict when " + std::to_string(rounds_needed(opts.rounds)) + " of the " + std::to_string(opts.rounds) +
         " rounds agree, a sign test at the 10 % level)\n";
  return s;
}

inline std::string result::json() const {
  using detail::json_spread;
  using detail::json_string;
  std::string s = "{\"unit\": " + json_string(opts.unit) + ", \"rounds\": " + std::to_string(opts.rounds) +
                  ", \"warmup\": " + std::to_string(opts.warmup) + ", \"seed\": " + std::to_string(opts.seed) +
                  ", \"baseline\": " + json_string(variants[baseline].name) + ", \"load_average\": {\"start\": " +
                  detail::fmt("%.3f", load_start) + ", \"end\": " + detail::fmt("%.3f", load_end) + "}, \"variants\": [";
  for (std::size_t i = 0; i < variants.size(); ++i) {
    const auto& v = variants[i];
    s += (i ? ", " : "") + std::string("{\"name\": ") + json_string(v.name) + ", \"policy\": " + json_string(v.policy) +
         ", \"config\": {";
    for (std::size_t k = 0; k < v.settings.values().size(); ++k)
      s += (k ? ", " : "") + json_string(v.settings.values()[k].first) + ": " +
           std::to_string(v.settings.values()[k].second);
    s += "}, \"rounds\": [";
    for (std::size_t k = 0; k < v.units.size(); ++k) {
      char b[160];
      std::snprintf(b, sizeof b, "%s{\"wall_s\": %.9g, \"cpu_s\": %.9g, \"units\": %.9g}", k ? ", " : "", v.wall_s[k],
                    v.cpu_s[k], v.units[k]);
      s += b;
    }
    s += "], \"rate\": " + json_spread(v.rate) + ", \"wall_per_unit_s\": " + json_spread(v.wall_per_unit) +
         ", \"cpu_per_unit_s\": " + json_spread(v.cpu_per_unit) + ", \"vs_baseline\": " + json_spread(v.vs_baseline) +
         ", \"rounds_faster\": " + std::to_string(v.votes.faster) + ", \"rounds_slower\": " +
         std::to_string(v.votes.slower) + ", \"verdict\": " + json_string(to_string(v.verdict)) + "}";
  }
  return s + "]}\n";
}

inline bool result::plot(const std::string& png, std::string* why) const {
  auto fail = [&](std::string w) {
    if (why) *why = std::move(w);
    return false;
  };
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) return fail("gnuplot is not on PATH");
  const std::string dat = png + ".dat", gp = png + ".gp";
  {
    std::ofstream d(dat);
    if (!d) return fail("cannot write " + dat);
    for (std::size_t i = 0; i < variants.size(); ++i) {
      const auto& v = variants[i];
      d << i << " \"" << v.name << "\" " << v.rate.median << " " << v.rate.p25 << " " << v.rate.p75 << " "
        << v.rate.min << " " << v.rate.max << "\n";
    }
  }
  {
    std::ofstream g(gp);
    if (!g) return fail("cannot write " + gp);
    g << "set terminal pngcairo size 1000,500\nset output '" << png << "'\nset ylabel '" << opts.unit
      << "/s'\nset xtics rotate by -30\nset boxwidth 0.5\nset style fill empty\nset yrange [0:*]\n"
      << "plot '" << dat << "' using 1:4:6:7:5:xtic(2) with candlesticks title 'p25..p75, min..max' whiskerbars, "
      << "'' using 1:3:3:3:3 with candlesticks lt -1 notitle\n";
  }
  if (std::system(("gnuplot '" + gp + "' 2>/dev/null").c_str()) != 0) return fail("gnuplot failed on " + gp);
  return true;
}

}  // namespace dflash::bench
