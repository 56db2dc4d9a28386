#pragma once
// dflash::bench::run_main: the main of a comparison binary (what
// dflash_add_variants builds, cmake/dflash-variants.cmake): options from the
// command line, every variant run side by side (bench/variants.hpp), the
// table on stdout.
//
//   int main(int argc, char** argv) {
//     return dflash::bench::run_main(argc, argv, policies<...>{}, grid, workload, defaults);
//   }
//
//   --rounds N      measured rounds (default: defaults.rounds)
//   --warmup N      unmeasured runs of each variant first
//   --seed N        the variants' order (then rotated each round)
//   --baseline V    the variant the others are compared with (its name as the table prints it)
//   --json FILE     the result as JSON (the schema is in variants.hpp)
//   --plot FILE     a PNG of the rates, where gnuplot is on PATH (a note otherwise)
//   --quiet         no progress lines on stderr
// (Built with DFLASH_BENCH_POLICY_INDEX a summary may not find the variants it
// compares: it should say so rather than fail.)
// Exit codes: 0 done, 1 a variant failed (the message names it), 2 usage error.
//
// Built with DFLASH_BENCH_POLICY_INDEX=k (dflash_add_variants' per-policy
// binaries), only the k-th policy is compiled in and run: a binary for
// deployment, or for an external profiler that should see no other variant's code.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>

#include "dflash/bench/variants.hpp"

namespace dflash::bench {

namespace detail {
/// A decimal integer in [lo, hi], or empty.
inline std::optional<std::uint64_t> decimal(std::string_view s, std::uint64_t lo, std::uint64_t hi) {
  if (s.empty() || s.size() > 19) return std::nullopt;
  std::uint64_t v = 0;
  for (const char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + static_cast<std::uint64_t>(c - '0');
  }
  if (v < lo || v > hi) return std::nullopt;
  return v;
}

template <std::size_t K, class... Ps>
using nth_policy = std::tuple_element_t<K, std::tuple<Ps...>>;
}  // namespace detail

/// `summary`, if given, adds the program's own reading of the result after the
/// table (what a comparison means for this workload).
template <class... Ps, class Workload>
int run_main(int argc, char** argv, policies<Ps...> all, const grid& g, Workload&& work, options o = {},
             const std::function<std::string(const result&)>& summary = {}) {
  const char* self = argc > 0 ? argv[0] : "variants";
  std::string json, png;
  bool quiet = false;
  auto usage = [&](const std::string& what) {
    std::fprintf(stderr, "%s: error: %s\nRun with --help for the options.\n", self, what.c_str());
    return 2;
  };
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    auto value = [&]() -> std::optional<std::string_view> {
      if (i + 1 >= argc) return std::nullopt;
      return std::string_view(argv[++i]);
    };
    if (a == "--help" || a == "-h") {
      std::printf(
          "%s: one workload under several profiler policies and configurations, measured side by side\n"
          "  --rounds N    measured rounds (default %zu)\n  --warmup N    unmeasured runs of each variant first (default %zu)\n"
          "  --seed N      the variants' order, rotated each round (default %llu)\n"
          "  --baseline V  the variant to compare with (default: the first)\n  --json FILE   write the result as JSON\n"
          "  --plot FILE   write a PNG of the rates (needs gnuplot)\n  --quiet       no progress lines\n",
          self, o.rounds, o.warmup, static_cast<unsigned long long>(o.seed));
      return 0;
    }
    if (a == "--quiet") {
      quiet = true;
      continue;
    }
    const bool known = a == "--rounds" || a == "--warmup" || a == "--seed" || a == "--baseline" || a == "--json" ||
                       a == "--plot";
    if (!known) return usage("unknown option '" + std::string(a) + "'");
    const auto v = value();
    if (!v) return usage(std::string(a) + " needs a value");
    if (a == "--rounds" || a == "--warmup") {
      const auto n = detail::decimal(*v, a == "--rounds" ? 1 : 0, 1000000);
      if (!n) return usage(std::string(a) + ": '" + std::string(*v) + "' is not a decimal integer in [" +
                           (a == "--rounds" ? "1" : "0") + ", 1000000]");
      (a == "--rounds" ? o.rounds : o.warmup) = static_cast<std::size_t>(*n);
    } else if (a == "--seed") {
      const auto n = detail::decimal(*v, 0, ~std::uint64_t{0});
      if (!n) return usage("--seed: '" + std::string(*v) + "' is not a decimal integer");
      o.seed = *n;
    } else if (a == "--baseline") {
      o.baseline = std::string(*v);
    } else if (a == "--json") {
      json = std::string(*v);
    } else {
      png = std::string(*v);
    }
  }
  if (!quiet && !o.progress) o.progress = [](const std::string& s) { std::fprintf(stderr, "%s\n", s.c_str()); };
  try {
#if defined(DFLASH_BENCH_POLICY_INDEX)
    (void)all;
    const result r = run(policies<detail::nth_policy<DFLASH_BENCH_POLICY_INDEX, Ps...>>{}, g, work, o);
#else
    const result r = run(all, g, work, o);
#endif
    std::printf("%s", r.table().c_str());
    if (summary) std::printf("%s", summary(r).c_str());
    if (!json.empty()) {
      std::ofstream f(json);
      if (!(f << r.json()) || !f.flush()) throw std::runtime_error("cannot write " + json);
    }
    if (!png.empty()) {
      std::string why;
      if (r.plot(png, &why)) std::printf("plot: %s\n", png.c_str());
      else std::printf("plot: not written (%s)\n", why.c_str());
    }
  } catch (const std::invalid_argument& e) {
    return usage(e.what());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", self, e.what());
    return 1;
  }
  return 0;
}

}  // namespace dflash::bench
