// The in_order stage's reorder buffer on its own: whatever order items
// arrive in, they are delivered in source order with their tags, exactly once.
#include <catch2/catch.hpp>
#include <dflash/pipeline/in_order.hpp>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

using dflash::flow_stamp;
using dflash::detail::reorder_buffer;

namespace {
const auto always = [] { return true; };

std::vector<std::uint64_t> shuffled(std::size_t n, unsigned seed) {
  std::vector<std::uint64_t> v(n);
  std::iota(v.begin(), v.end(), 0);
  std::shuffle(v.begin(), v.end(), std::mt19937(seed));
  return v;
}
}  // namespace

TEST_CASE("reorder_buffer delivers shuffled items in source order, each once", "[pipeline][in_order]") {
  for (unsigned seed = 1; seed <= 20; ++seed) {
    reorder_buffer<int> r;
    std::vector<int> got;
    for (const std::uint64_t seq : shuffled(1000, seed))
      REQUIRE(r.deliver(static_cast<int>(seq) * 3, seq, "sum", [&](int x, std::uint64_t tag) {
        REQUIRE(static_cast<std::uint64_t>(x) == 3 * tag);
        got.push_back(x);
        return true;
      }, always));
    REQUIRE(got.size() == 1000);
    for (std::size_t i = 0; i < got.size(); ++i) REQUIRE(got[i] == static_cast<int>(3 * i));
    REQUIRE(r.parked() == 0);
    REQUIRE(r.next() == 1000);
  }
}

TEST_CASE("reorder_buffer parks across a wide gap and keeps each item's flow_stamp", "[pipeline][in_order]") {
  reorder_buffer<std::unique_ptr<int>, flow_stamp> r;  // move-only values, stamps beside them
  std::vector<std::pair<int, std::int64_t>> got;
  const auto run = [&](std::unique_ptr<int> x, const flow_stamp& t) {
    got.emplace_back(*x, t.born_ns);
    return true;
  };
  for (std::uint64_t seq = 300; seq >= 1; --seq)  // the first item due arrives last: 300 parked
    r.deliver(std::make_unique<int>(static_cast<int>(seq)), flow_stamp{seq, -static_cast<std::int64_t>(seq)}, "s", run,
              always);
  REQUIRE(got.empty());
  REQUIRE(r.parked() == 300);
  REQUIRE_FALSE(r.due(1));
  REQUIRE(r.due(0));
  r.deliver(std::make_unique<int>(0), flow_stamp{0, 0}, "s", run, always);
  REQUIRE(got.size() == 301);
  for (std::size_t i = 0; i < got.size(); ++i) {
    REQUIRE(got[i].first == static_cast<int>(i));
    REQUIRE(got[i].second == -static_cast<std::int64_t>(i));
  }
  REQUIRE(r.parked() == 0);
}

TEST_CASE("reorder_buffer: a number seen twice is an error, parked or delivered", "[pipeline][in_order]") {
  reorder_buffer<int> r;
  const auto run = [](int, std::uint64_t) { return true; };
  r.deliver(0, 0, "sum", run, always);
  r.deliver(5, 5, "sum", run, always);
  REQUIRE_THROWS_WITH(r.deliver(0, 0, "sum", run, always),
                      "dflash::Pipeline: in_order stage 'sum' received item #0 twice");
  REQUIRE_THROWS_WITH(r.deliver(5, 5, "sum", run, always),
                      "dflash::Pipeline: in_order stage 'sum' received item #5 twice");
  REQUIRE(r.parked() == 1);
  REQUIRE(r.next() == 1);
}

TEST_CASE("reorder_buffer stops delivering parked items when run or go says so", "[pipeline][in_order]") {
  reorder_buffer<int> r;
  std::vector<int> got;
  const auto run = [&](int x, std::uint64_t) {
    got.push_back(x);
    return x != 2;  // the pipeline is closing after item 2
  };
  for (int seq : {3, 1, 2}) r.deliver(int{seq}, static_cast<std::uint64_t>(seq), "s", run, always);
  REQUIRE_FALSE(r.deliver(0, 0, "s", run, always));
  REQUIRE(got == std::vector<int>{0, 1, 2});
  REQUIRE(r.parked() == 1);  // item 3 stays parked

  reorder_buffer<int> g;
  got.clear();
  g.deliver(1, 1, "s", run, always);
  REQUIRE(g.deliver(0, 0, "s", run, [] { return false; }));  // cancelled: the parked item is not run
  REQUIRE(got == std::vector<int>{0});
  REQUIRE(g.parked() == 1);
}
