#include <catch2/catch.hpp>
#include <dflash/ops/doc_ids.hpp>
#include <dflash/profile.hpp>

#include <random>
#include <stdexcept>
#include <vector>

#include "ops_test_util.hpp"

using dflash::ops::doc_ids;
using vec = std::vector<std::int32_t>;

TEST_CASE("doc_ids on a hand-written case with empty and length-1 documents", "[doc_ids]") {
  const vec lengths{3, 0, 1, 2, 0};
  const auto r = doc_ids(lengths);
  CHECK(r.doc_id == vec{0, 0, 0, 2, 3, 3});
  CHECK(r.pos == vec{0, 1, 2, 0, 0, 1});
}

TEST_CASE("doc_ids matches repeat_interleave on random inputs", "[doc_ids]") {
  std::mt19937 rng(1234);
  for (int iter = 0; iter < 300; ++iter) {
    const std::size_t n = std::uniform_int_distribution<std::size_t>(0, 40)(rng);
    const vec lengths = ops_test::random_lengths(rng, n, 200);
    vec want_doc, want_pos;
    ops_test::naive_doc_ids(lengths, want_doc, want_pos);
    const auto r = doc_ids(lengths);
    REQUIRE(r.doc_id == want_doc);
    REQUIRE(r.pos == want_pos);
  }
}

TEST_CASE("doc_ids edge shapes: no documents, all empty, one huge document, one document", "[doc_ids]") {
  CHECK(doc_ids(vec{}).doc_id.empty());
  const auto empty = doc_ids(vec{0, 0, 0});
  CHECK(empty.doc_id.empty());
  CHECK(empty.pos.empty());

  const std::int32_t big = 1 << 20;
  const auto huge = doc_ids(vec{0, big, 0});
  REQUIRE(huge.doc_id.size() == static_cast<std::size_t>(big));
  bool ok = true;
  for (std::int32_t t = 0; t < big; ++t) ok = ok && huge.doc_id[static_cast<std::size_t>(t)] == 1 && huge.pos[static_cast<std::size_t>(t)] == t;
  CHECK(ok);

  const auto one = doc_ids(vec{1});
  CHECK(one.doc_id == vec{0});
  CHECK(one.pos == vec{0});
}

TEST_CASE("doc_ids_thrust is the same algorithm for any Thrust policy", "[doc_ids]") {
  const vec lengths{2, 0, 3};
  vec offsets(3), doc(5), pos(5);
  dflash::ops::doc_ids_thrust(thrust::host, lengths.data(), 3, offsets.data(), doc.data(), pos.data(), 5);
  CHECK(offsets == vec{0, 2, 2});
  CHECK(doc == vec{0, 0, 2, 2, 2});
  CHECK(pos == vec{0, 1, 0, 1, 2});
}

TEST_CASE("doc_ids rejects bad input with a clear message", "[doc_ids]") {
  vec doc(3), pos(3);
  CHECK_THROWS_WITH(doc_ids(vec{1, -2, 4}, doc, pos), Catch::Contains("lengths[1] = -2 is negative"));
  CHECK_THROWS_WITH(doc_ids(vec{1, 1}, doc, pos), Catch::Contains("doc_id has 3 elements, expected 2"));
  vec pos2(2), doc2(2);
  CHECK_THROWS_WITH(doc_ids(vec{1, 1}, doc2, pos), Catch::Contains("pos has 3 elements, expected 2"));
  CHECK_THROWS_AS(doc_ids(vec{1, 1}, doc2, pos), std::invalid_argument);
  CHECK_THROWS_WITH(doc_ids(vec{0x7fffffff, 1}), Catch::Contains("does not fit int32"));
}

TEST_CASE("doc_ids records one sample under its profiler key", "[doc_ids][profile]") {
  dflash::AccumulatingProfiler<dflash::ops::keys> prof;
  vec doc(4), pos(4);
  doc_ids(vec{4}, doc, pos, dflash::profiler_ref(prof));
  const auto s = prof.snapshot();
  CHECK(s.find("doc_ids")->count == 1);
  CHECK(s.find("anchors")->count == 0);
}
