#pragma once
// Side-by-side comparisons for scripts/bench.sh: every subject is measured in
// the same process, in interleaved rounds (the order rotates each round), and
// each ratio is taken within a round, so machine noise that spans a round
// cancels. Reports median and spread (min..max) over the rounds.
//
// Not Google Benchmark: it accepts and ignores --benchmark_* flags except
// --benchmark_out=PATH, where it writes {"comparison": ..., "rows": [...]}.
#include <algorithm>
#include <cstdio>
#include <functional>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

namespace dflash_bench {

struct subject {
  std::string name;
  std::function<double()> measure;  // one round: a rate or a cost, see `higher_is_better`
};

struct stats {
  double median, min, max;
};
inline stats summarize(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  const double med = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
  return {med, v.front(), v.back()};
}

struct comparison {
  std::string name, unit;
  std::vector<std::string> skipped;  // anchors not built in, with why
  std::vector<std::string> rows;     // JSON objects

  // Runs `rounds` interleaved rounds of `subjects`; subjects[0] is ours, every
  // other one an anchor; ratio = ours / anchor per round (for costs, anchor / ours
  // is *not* taken: ratio stays ours / anchor and the unit says which way is better).
  void run(const std::string& shape, const std::vector<subject>& subjects, int rounds) {
    std::vector<std::vector<double>> v(subjects.size());
    for (int r = 0; r < rounds; ++r)
      for (std::size_t k = 0; k < subjects.size(); ++k) {
        const std::size_t i = (k + static_cast<std::size_t>(r)) % subjects.size();
        v[i].push_back(subjects[i].measure());
      }
    const stats ours = summarize(v[0]);
    std::printf("%-28s %-34s %12.3f %s  [%.3f .. %.3f]\n", shape.c_str(), subjects[0].name.c_str(), ours.median,
                unit.c_str(), ours.min, ours.max);
    for (std::size_t i = 1; i < subjects.size(); ++i) {
      std::vector<double> ratio;
      for (int r = 0; r < rounds; ++r) ratio.push_back(v[0][r] / v[i][r]);
      const stats a = summarize(v[i]), q = summarize(ratio);
      std::printf("%-28s %-34s %12.3f %s  [%.3f .. %.3f]   ours/this %.2f [%.2f .. %.2f]\n", shape.c_str(),
                  subjects[i].name.c_str(), a.median, unit.c_str(), a.min, a.max, q.median, q.min, q.max);
      add_row(shape, subjects[0].name, subjects[i].name, rounds, ours.median, a.median, q);
    }
    std::fflush(stdout);
  }

  /// One JSON row (what run() records per anchor); `extra` = more `"key":value` pairs, or empty.
  void add_row(const std::string& shape, const std::string& subject, const std::string& anchor, int rounds,
               double subject_median, double anchor_median, const stats& ratio, const std::string& extra = {}) {
    char buf[1024];
    std::snprintf(buf, sizeof buf,
                  "{\"shape\":\"%s\",\"subject\":\"%s\",\"anchor\":\"%s\",\"unit\":\"%s\",\"rounds\":%d,"
                  "\"subject_median\":%.6g,\"anchor_median\":%.6g,\"ratio_median\":%.4f,\"ratio_min\":%.4f,"
                  "\"ratio_max\":%.4f%s%s}",
                  shape.c_str(), subject.c_str(), anchor.c_str(), unit.c_str(), rounds, subject_median, anchor_median,
                  ratio.median, ratio.min, ratio.max, extra.empty() ? "" : ",", extra.c_str());
    rows.emplace_back(buf);
  }

  void write(int argc, char** argv) const {
    for (const auto& s : skipped) std::printf("skipped: %s\n", s.c_str());
    for (int i = 1; i < argc; ++i) {
      const std::string_view a = argv[i];
      if (a.rfind("--benchmark_out=", 0) != 0) continue;
      std::ofstream f(std::string(a.substr(16)));
      f << "{\"comparison\":\"" << name << "\",\"skipped\":[";
      for (std::size_t k = 0; k < skipped.size(); ++k) f << (k ? "," : "") << '"' << skipped[k] << '"';
      f << "],\"rows\":[";
      for (std::size_t k = 0; k < rows.size(); ++k) f << (k ? ",\n" : "\n") << rows[k];
      f << "]}\n";
    }
  }
};

/// --rounds=N (default `def`).
inline int rounds_arg(int argc, char** argv, int def) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a.rfind("--rounds=", 0) == 0) return std::max(1, std::stoi(std::string(a.substr(9))));
  }
  return def;
}

}  // namespace dflash_bench
