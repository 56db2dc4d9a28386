#pragma once
// Run-time variants of a benchmark (bench/variants.hpp): a grid of named
// integer settings, every combination one configuration.
//
//   dflash::bench::grid g;
//   g.add("depth", {2, 8, 60}).add("workers", {1, 2});  // 6 configurations
//   for (const config& c : g.configs()) ... c["depth"] ...
//
// A grid without settings has one configuration, with none. A setting with no
// value, a repeated name or an unknown name asked of a configuration is an
// error that names it.

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace dflash::bench {

/// One combination of the grid's settings.
class config {
 public:
  config() = default;
  explicit config(std::vector<std::pair<std::string, std::int64_t>> v) : values_(std::move(v)) {}

  /// The value of setting `name`; std::out_of_range naming it if the grid has none.
  [[nodiscard]] std::int64_t operator[](const std::string& name) const {
    for (const auto& [n, v] : values_)
      if (n == name) return v;
    throw std::out_of_range("dflash::bench::config: no setting named '" + name + "' (the grid's settings: " +
                            names() + ")");
  }
  [[nodiscard]] const std::vector<std::pair<std::string, std::int64_t>>& values() const noexcept { return values_; }
  /// "depth=8 workers=2" (empty without settings).
  [[nodiscard]] std::string label() const {
    std::string s;
    for (const auto& [n, v] : values_) s += (s.empty() ? "" : " ") + n + "=" + std::to_string(v);
    return s;
  }

 private:
  [[nodiscard]] std::string names() const {
    std::string s;
    for (const auto& [n, v] : values_) s += (s.empty() ? "" : ", ") + n;
    return s.empty() ? "none" : s;
  }
  std::vector<std::pair<std::string, std::int64_t>> values_;
};

class grid {
 public:
  /// A setting and the values it takes (at least one; names unique).
  grid& add(std::string name, std::vector<std::int64_t> values) {
    if (name.empty()) throw std::invalid_argument("dflash::bench::grid::add: a setting needs a name");
    if (values.empty())
      throw std::invalid_argument("dflash::bench::grid::add: setting '" + name + "' has no value to take");
    for (const auto& s : settings_)
      if (s.first == name) throw std::invalid_argument("dflash::bench::grid::add: setting '" + name + "' added twice");
    settings_.emplace_back(std::move(name), std::move(values));
    return *this;
  }
  /// Every combination, the first setting varying slowest.
  [[nodiscard]] std::vector<config> configs() const {
    std::vector<std::vector<std::pair<std::string, std::int64_t>>> out{{}};
    for (const auto& [name, values] : settings_) {
      std::vector<std::vector<std::pair<std::string, std::int64_t>>> next;
      for (const auto& partial : out)
        for (const std::int64_t v : values) {
          next.push_back(partial);
          next.back().emplace_back(name, v);
        }
      out = std::move(next);
    }
    std::vector<config> c;
    for (auto& v : out) c.emplace_back(std::move(v));
    return c;
  }

 private:
  std::vector<std::pair<std::string, std::vector<std::int64_t>>> settings_;
};

}  // namespace dflash::bench
