// detail::indexed_storage, what a pipeline keeps its stages, link endpoints and
// reorder buffers in: each element built from its own argument (moved, not
// copied), reached by index, destroyed once; empty and move-only elements work.
#include <catch2/catch.hpp>
#include <dflash/detail/indexed_storage.hpp>

#include <memory>
#include <string>
#include <type_traits>
#include <utility>

using dflash::detail::get;
using dflash::detail::indexed_storage;

namespace {
struct counted {
  static inline int alive = 0;
  int v = 0;
  counted() { ++alive; }
  explicit counted(int x) : v(x) { ++alive; }
  counted(counted&& o) noexcept : v(o.v) { ++alive; }
  counted(const counted&) = delete;
  ~counted() { --alive; }
};
struct empty {};
}  // namespace

TEST_CASE("indexed_storage: each element from its argument, by index", "[indexed_storage]") {
  auto p = std::make_unique<int>(7);
  int* raw = p.get();
  indexed_storage<std::unique_ptr<int>, std::string, int, std::string> s(std::move(p), std::string("a"), 3, "b");
  CHECK(get<0>(s).get() == raw);  // moved in, not copied
  CHECK(p == nullptr);
  CHECK(get<1>(s) == "a");
  CHECK(get<2>(s) == 3);
  CHECK(get<3>(s) == "b");  // same type at another index: its own element
  get<2>(s) = 4;
  const auto& c = s;
  CHECK(get<2>(c) == 4);
  static_assert(std::is_same_v<decltype(get<3>(c)), const std::string&>);
}

TEST_CASE("indexed_storage: default-constructed elements are value-initialized", "[indexed_storage]") {
  indexed_storage<int, std::unique_ptr<int>, empty> s;
  CHECK(get<0>(s) == 0);
  CHECK(get<1>(s) == nullptr);
  static_assert(sizeof(indexed_storage<int, empty>) == sizeof(int), "an empty element takes no room");
}

TEST_CASE("indexed_storage: a one-element storage copies and moves as a whole", "[indexed_storage]") {
  // Its own type as the one argument is a copy or a move, not an element built from the storage.
  indexed_storage<std::string> a(std::string("x"));
  indexed_storage<std::string> b(a);  // direct-initialised from a non-const lvalue
  CHECK(get<0>(b) == "x");
  CHECK(get<0>(a) == "x");
  indexed_storage<std::string> c(std::move(b));
  CHECK(get<0>(c) == "x");
}

TEST_CASE("indexed_storage: every element destroyed once", "[indexed_storage]") {
  {
    counted a(1), b(2);
    indexed_storage<counted, counted, counted> s(std::move(a), std::move(b), counted(3));
    CHECK(counted::alive == 5);  // a, b, and the three elements
    CHECK(get<0>(s).v == 1);
    CHECK(get<2>(s).v == 3);
  }
  CHECK(counted::alive == 0);
}
