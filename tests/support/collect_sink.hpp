#pragma once
// A sink named `Name` that appends every item to a vector the test owns, and
// the check most pipeline tests make of what arrived: every value 0..n-1 once,
// and a producer worker's items reach a consumer worker in the order it made them.
#include <dflash/pipeline/stage.hpp>

#include <catch2/catch.hpp>

#include <cstddef>
#include <map>
#include <utility>
#include <vector>

namespace dflash_test {

template <class T, dflash::fixed_string Name = "collect">
struct collect {
  static constexpr dflash::fixed_string name{Name};
  using input_type = T;
  using output_type = void;
  std::vector<T>* out = nullptr;
  void operator()(T&& x) { out->push_back(std::move(x)); }
};

// `got` holds records with `value`, `producer` and `consumer` members; `each`
// checks what else a record must satisfy (its payload intact, its device, ...).
template <class R, class Each>
void check_exactly_once_in_producer_order(const std::vector<R>& got, int n, Each&& each) {
  REQUIRE(got.size() == static_cast<std::size_t>(n));
  std::map<int, int> count;
  std::map<std::pair<std::size_t, std::size_t>, int> last;  // (producer, consumer) -> last value
  for (const R& r : got) {
    each(r);
    ++count[r.value];
    auto [it, fresh] = last.try_emplace({r.producer, r.consumer}, r.value);
    if (!fresh) {
      CHECK(r.value > it->second);
      it->second = r.value;
    }
  }
  REQUIRE(count.size() == static_cast<std::size_t>(n));
  for (const auto& [v, c] : count) CHECK(c == 1);
}

}  // namespace dflash_test
