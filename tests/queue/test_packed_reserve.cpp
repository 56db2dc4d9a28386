// enqueue_padded's reserve and copy steps, run on the host through their
// twins (dflash/queue/packed_reserve.hpp: the same functions the kernels call)
// over a ring_control + slot array in host memory. What must hold: bad lengths
// reserve nothing and write nothing; every reserved position is published, so
// a later pop sees every item and then `closed` (never `empty` forever).
#include <catch2/catch.hpp>
#include <dflash/queue/packed_reserve.hpp>

#include <climits>
#include <cstdint>
#include <string>
#include <vector>

using dflash::ring_status;

namespace {
constexpr int poison = -777;

// A ring in host memory laid out like device_queue's: header, sequence words, slots.
struct twin_ring {
  dflash::ring_header h{};
  std::vector<unsigned long long> seq;
  std::vector<int> slots;
  dflash::ring_control ctl;

  explicit twin_ring(std::size_t cap) : seq(cap), slots(cap, poison), ctl(&h, seq.data(), cap) {
    ctl.init_header();
    for (std::size_t i = 0; i < cap; ++i) ctl.init_slot(i);
  }
  // Push and pop k items so the next reservation starts at position k (and wraps sooner).
  void advance(int k) {
    for (int i = 0; i < k; ++i) {
      const auto t = ctl.try_reserve_push(1);
      REQUIRE(t.status == ring_status::ok);
      slots[ctl.slot(t.first)] = -1;
      ctl.publish(t.first);
      const auto p = ctl.try_reserve_pop(1);
      REQUIRE(p.status == ring_status::ok);
      ctl.release(p.first);
    }
  }
  void push(const std::vector<int>& items) {
    const auto t = ctl.try_reserve_push(static_cast<std::uint32_t>(items.size()));
    REQUIRE(t.status == ring_status::ok);
    for (std::size_t i = 0; i < items.size(); ++i) {
      slots[ctl.slot(t.first + i)] = items[i];
      ctl.publish(t.first + i);
    }
  }
  struct drained {
    std::vector<int> items;
    ring_status last;
  };
  // Pop until closed; a bounded number of consecutive `empty`s means a
  // reservation was never published (no producer is running here).
  drained drain() {
    drained d{{}, ring_status::empty};
    for (int empties = 0; empties < 1000;) {
      const auto t = ctl.try_reserve_pop(4);
      d.last = t.status;
      if (t.status == ring_status::closed) return d;
      if (t.status == ring_status::empty) {
        ++empties;
        continue;
      }
      empties = 0;
      for (std::uint32_t i = 0; i < t.count; ++i) {
        d.items.push_back(slots[ctl.slot(t.first + i)]);
        ctl.release(t.first + i);
      }
    }
    return d;
  }
  std::string state() const {
    std::string s = "enqueue=" + std::to_string(h.enqueue) + " dequeue=" + std::to_string(h.dequeue) + " seq=";
    for (auto v : seq) s += std::to_string(v) + ",";
    return s;
  }
};

std::vector<int> padded(const std::vector<int>& lengths, int max_len) {
  std::vector<int> v(lengths.size() * static_cast<std::size_t>(max_len), poison);
  for (std::size_t b = 0; b < lengths.size(); ++b)
    for (int t = 0; t < lengths[b] && t < max_len; ++t) v[b * max_len + t] = static_cast<int>(b) * 100 + t;
  return v;
}

// A bad batch: nothing reserved, nothing written or published; a later batch
// still goes in, and after close the ring drains to `closed`.
void check_rejected(const std::vector<int>& lengths, int max_len, ring_status want) {
  twin_ring r(8);
  r.advance(3);  // first = 3: a write "before first" would hit a consumed slot
  const int n = static_cast<int>(lengths.size());
  // The copy must not run, so a huge padded array is never needed (one poison element stands in).
  const bool small = static_cast<long long>(n) * max_len <= 4096;
  const auto values = small ? padded(lengths, max_len) : std::vector<int>(1, poison);
  std::vector<int> offsets(lengths.size());
  const std::string before = r.state();
  const auto slots_before = r.slots;

  dflash::host_exclusive_scan(lengths.data(), n, offsets.data());
  const auto t = dflash::packed_reserve(r.ctl, lengths.data(), n, max_len);
  CHECK(static_cast<int>(t.status) == static_cast<int>(want));
  CHECK(t.count == 0);
  REQUIRE(t.status != ring_status::ok);  // the copy below would read past `values`
  dflash::host_packed_copy(r.ctl, r.slots.data(), values.data(), max_len, lengths.data(), offsets.data(), n, t);
  CHECK(r.state() == before);
  CHECK(r.slots == slots_before);
  CHECK(r.ctl.size_approx() == 0);

  r.push({7, 8});
  r.ctl.close();
  const auto d = r.drain();
  CHECK(d.items == std::vector<int>{7, 8});
  CHECK(d.last == ring_status::closed);
}
}  // namespace

TEST_CASE("packed enqueue twin: sequences land packed, wrap around, then drain to closed", "[packed]") {
  twin_ring r(8);
  r.advance(5);  // positions 5..9 -> slots 5, 6, 7, 0, 1
  const std::vector<int> lengths = {3, 0, 2};
  const auto values = padded(lengths, 4);
  std::vector<int> offsets(3, poison);
  const auto t = dflash::host_enqueue_padded(r.ctl, r.slots.data(), values.data(), 4, lengths.data(), 3, offsets.data());
  REQUIRE(t.status == ring_status::ok);
  CHECK(t.first == 5);
  CHECK(t.count == 5);
  CHECK(offsets == std::vector<int>{0, 3, 3});
  r.ctl.close();
  const auto d = r.drain();
  CHECK(d.items == std::vector<int>{0, 1, 2, 200, 201});
  CHECK(d.last == ring_status::closed);
}

TEST_CASE("packed enqueue twin: empty batches reserve nothing and succeed", "[packed]") {
  twin_ring r(4);
  std::vector<int> offsets(2, poison);
  const std::vector<int> zeros = {0, 0};
  auto t = dflash::host_enqueue_padded<int>(r.ctl, r.slots.data(), nullptr, 0, zeros.data(), 2, offsets.data());
  CHECK(t.status == ring_status::ok);
  CHECK(t.count == 0);
  t = dflash::host_enqueue_padded<int>(r.ctl, r.slots.data(), nullptr, 3, nullptr, 0, offsets.data());
  CHECK(t.status == ring_status::ok);
  CHECK(t.count == 0);
  r.ctl.close();
  CHECK(r.drain().last == ring_status::closed);
}

TEST_CASE("packed enqueue twin: a negative length is rejected and writes nothing before first", "[packed]") {
  check_rejected({2, -3, 2}, 4, ring_status::invalid);  // old: offsets {0, 2, -1}, reserved 1, wrote first-1..first+1
  check_rejected({-1}, 4, ring_status::invalid);
}

TEST_CASE("packed enqueue twin: a length above max_len is rejected", "[packed]") {
  check_rejected({1, 5}, 4, ring_status::invalid);  // old: reserved 6, read past the padded rows
  check_rejected({4, 4, 1}, 4, ring_status::too_large);  // valid lengths, 9 > capacity 8: still all-or-nothing
}

TEST_CASE("packed enqueue twin: a total past 32 bits is too large, not wrapped", "[packed]") {
  // INT_MAX + INT_MAX + 3 == 2^32 + 1: a 32-bit sum says 1, int offsets go negative.
  check_rejected({INT_MAX, INT_MAX, 3}, INT_MAX, ring_status::too_large);
  // Fits 32 bits unsigned but not the int offsets DeviceScan writes.
  check_rejected({INT_MAX, 1}, INT_MAX, ring_status::too_large);
}

TEST_CASE("packed enqueue twin: max_len 0 with non-zero lengths leaves nothing reserved-but-unpublished",
          "[packed]") {
  twin_ring r(8);
  const std::vector<int> lengths = {0, 2};
  std::vector<int> offsets(2, poison);
  const auto t = dflash::host_enqueue_padded<int>(r.ctl, r.slots.data(), nullptr, 0, lengths.data(), 2, offsets.data());
  CHECK(t.status == ring_status::invalid);  // old: reserved 2 and skipped the copy
  CHECK(r.ctl.size_approx() == 0);
  r.push({7});
  r.ctl.close();
  const auto d = r.drain();
  INFO("a drain that ends `empty` means a reserved position was never published");
  CHECK(d.items == std::vector<int>{7});
  CHECK(d.last == ring_status::closed);
}

TEST_CASE("packed enqueue twin: bad n or max_len throws before anything is reserved", "[packed]") {
  twin_ring r(4);
  int offsets[1] = {};
  const int len[1] = {1};
  CHECK_THROWS_AS(dflash::host_enqueue_padded<int>(r.ctl, r.slots.data(), nullptr, 1, len, -1, offsets),
                  std::invalid_argument);
  CHECK_THROWS_AS(dflash::host_enqueue_padded<int>(r.ctl, r.slots.data(), nullptr, -1, len, 1, offsets),
                  std::invalid_argument);
  CHECK(r.ctl.size_approx() == 0);
}
