// --results lines comparable across backends (step_check.hpp): the layout
// digest covers every integer field and nothing of the hidden states; the
// sums cover the hidden states; lines come out by step, then the loss curve.
#include <catch2/catch.hpp>

#include "payloads.hpp"
#include "step_check.hpp"

#include <sstream>
#include <string>
#include <vector>

using namespace dflash_example;

namespace {
HsItem item(std::int64_t step) {
  HsItem it;
  it.step = step;
  it.hidden = {1.0f, -2.0f, 0.5f, 0.0f};
  it.tokens = {3, 4};
  it.loss_mask = {0, 1};
  it.doc_ids = {0, 0};
  it.pos = {0, 1};
  it.anchors = {0};
  it.keep = {1};
  it.mask.kv_num_blocks = {1};
  it.mask.kv_indices = {0};
  it.mask.full_kv_num_blocks = {0};
  it.mask.full_kv_indices = {0};
  return it;
}
}  // namespace

TEST_CASE("step_check: the layout ignores the hidden states, the sums are theirs") {
  const HsItem a = item(5);
  const step_check c = step_check_of(a);
  CHECK(c.step == 5);
  CHECK(c.hidden_abs == 3.5);
  CHECK(c.hidden_sq == 5.25);
  HsItem b = item(5);
  b.hidden[1] = -2.000001f;  // another forward's rounding
  CHECK(step_check_of(b).layout == c.layout);
  CHECK(step_check_of(b).hidden_abs != c.hidden_abs);
  CHECK(b.digest() != a.digest());  // the bitwise digest sees it
  // Every integer field is in the layout.
  for (int field = 0; field < 10; ++field) {
    HsItem d = item(5);
    switch (field) {
      case 0: d.tokens[1] = 9; break;
      case 1: d.loss_mask[0] = 1; break;
      case 2: d.doc_ids[1] = 1; break;
      case 3: d.pos[1] = 0; break;
      case 4: d.anchors[0] = 1; break;
      case 5: d.keep[0] = 0; break;
      case 6: d.mask.kv_num_blocks[0] = 2; break;
      case 7: d.mask.kv_indices[0] = 1; break;
      case 8: d.mask.full_kv_num_blocks[0] = 1; break;
      default: d.dropped = true; break;
    }
    INFO("field " << field);
    CHECK(step_check_of(d).layout != c.layout);
  }
}

TEST_CASE("write_step_checks: items by step, then every step's loss") {
  std::ostringstream out;
  write_step_checks(out, {step_check_of(item(2)), step_check_of(item(1))}, {4.5, 4.25});
  const std::string s = out.str();
  const auto l1 = s.find("step1_layout "), l2 = s.find("step2_layout ");
  REQUIRE(l1 != std::string::npos);
  REQUIRE(l2 != std::string::npos);
  CHECK(l1 < l2);
  CHECK(s.find("step1_hidden_abs_f 3.5\n") != std::string::npos);
  CHECK(s.find("step2_hidden_sq_f 5.25\n") != std::string::npos);
  CHECK(s.find("loss0_f 4.5\nloss1_f 4.25\n") != std::string::npos);
}
