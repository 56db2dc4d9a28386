// The example's own pieces: mask adaptation, the CPU postprocess against
// the definitions, the source's steps, the CLI's validation, runtime pipeline sizes.
#include <catch2/catch.hpp>

#include <thread>

#include <sstream>
#include <string>
#include <vector>

#include "cli.hpp"
#include "train_pipeline.hpp"

using namespace dflash_example;

namespace {
Options small() {
  Options o;
  o.steps = 6;
  o.seq_len = 256;
  o.anchors = 8;
  o.hidden = 16;
  o.quiet = true;
  return o;
}

int parse(std::vector<std::string> args, Options& o, bool profiled, std::string* err_text = nullptr) {
  args.insert(args.begin(), "prog");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  std::ostringstream out, err;
  const auto rc = parse_cli(static_cast<int>(argv.size()), argv.data(), o, profiled, out, err);
  if (err_text) *err_text = err.str();
  return rc ? *rc : -1;
}
}  // namespace

TEST_CASE("host-twin target_forward + postprocess: packed hidden states, doc ids, anchors and mask match the definitions",
          "[example]") {
  using twin = dflash::host_stream_backend;
  const Setup setup(small());
  const TokenBatch tb = setup.source.make_batch(setup.opts.seed, 3, setup.opts.seq_len);
  twin backend;
  auto st = backend.create_stream();
  const dflash::device_stream<twin> s(backend, st);
  target_forward<dflash::NullProfiler, twin> fwd({}, &setup, 1);
  postprocess<dflash::NullProfiler, twin> post({}, &setup, nullptr);
  HsSlot<twin> slot;
  fwd(Batch{3, tb}, slot, s, 0);  // forward on this thread, copy into the slot on the stream
  auto item = post(slot, s);      // the ops run later, on the stream's thread
  backend.synchronize(st);        // the pipeline's wait, done by hand
  const HsItem& it = *item;
  REQUIRE_FALSE(it.dropped);
  CHECK(it.tokens == tb.packed_tokens());
  CHECK(it.loss_mask == tb.packed_loss_mask());
  CHECK(it.doc_ids == tb.packed_doc_ids());
  CHECK(it.hidden == setup.target.forward_packed(it.tokens, tb.lengths));
  const std::int32_t S = it.num_tokens(), B = setup.opts.block_size;
  std::size_t kept = 0;
  for (std::size_t i = 0; i < it.anchors.size(); ++i) {
    if (!it.keep[i]) continue;
    ++kept;
    const auto a = static_cast<std::size_t>(it.anchors[i]);
    CHECK(it.anchors[i] + B <= S);
    CHECK(it.loss_mask[a] == 1);
    CHECK(it.doc_ids[a + static_cast<std::size_t>(B) - 1] == it.doc_ids[a]);
  }
  CHECK(kept == it.anchors.size());  // 256 tokens have far more than 8 candidates
  // The drafter's CSR mask, built from the block-sparse form, is the dense definition.
  const dflash::ops::block_mask_params mp{S, setup.opts.anchors, B, 0};
  const auto dense = dflash::ops::dense_block_mask(mp, it.doc_ids, it.anchors, it.keep);
  CHECK(it.attention == AttentionMask::from_dense(dense.rows, dense.cols, dense.allowed));
  backend.destroy_stream(st);
}

TEST_CASE("mask adaptation agrees with the dense mask for a window and dropped blocks", "[example]") {
  const std::vector<std::int32_t> lengths{40, 30, 50};
  const auto ids = dflash::ops::doc_ids(std::span<const std::int32_t>(lengths));
  const std::vector<std::int32_t> anchors{3, 20, 45, 90, 0};
  const std::vector<std::uint8_t> keep{1, 1, 1, 1, 0};
  for (std::int32_t window : {0, 7}) {
    const dflash::ops::block_mask_params mp{120, 5, 4, window};
    for (dflash::ops::tile_shape tile : {dflash::ops::tile_shape{16, 16}, dflash::ops::tile_shape{7, 33}}) {
      const auto sparse = dflash::ops::build_block_mask(mp, tile, ids, anchors, keep);
      const auto got = drafter_attention(sparse);
      const auto dense = dflash::ops::dense_block_mask(mp, ids.doc_id, anchors, keep);
      CHECK(got == AttentionMask::from_dense(dense.rows, dense.cols, dense.allowed));
    }
  }
}

TEST_CASE("batch_source makes steps first, first + stride, ... below --steps; a bad stride is an error", "[example]") {
  Options o = small();
  o.steps = 8;
  const Setup setup(o);
  auto steps = [&](batch_source src) {
    std::vector<std::int64_t> got;
    while (auto b = src()) {
      CHECK(b->tokens.tokens == setup.source.make_batch(o.seed, static_cast<std::uint64_t>(b->step), o.seq_len).tokens);
      got.push_back(b->step);
    }
    return got;
  };
  CHECK(steps(batch_source(&setup)) == std::vector<std::int64_t>{0, 1, 2, 3, 4, 5, 6, 7});
  CHECK(steps(batch_source(&setup, 1, 3)) == std::vector<std::int64_t>{1, 4, 7});  // target rank 1 of 3
  CHECK(steps(batch_source(&setup, 9, 2)).empty());
  CHECK_THROWS_WITH(batch_source(&setup, 0, 0), Catch::Contains("stride >= 1"));
  CHECK_THROWS_WITH(batch_source(&setup, -1, 1), Catch::Contains("first >= 0"));
}

TEST_CASE("the pipeline runs with runtime worker counts and queue depths", "[example]") {
  Options o = small();
  o.target_workers = 3;
  o.hs_queue_depth = 1;
  const Setup setup(o);
  using profiler = dflash::AccumulatingProfiler<train_keys>;
  using pipeline = train_pipeline_twin<profiler>;
  using B = dflash::host_stream_backend;
  profiler prof;
  auto shape = pipeline::default_shape();
  CHECK(shape.workers[1] == 2);
  CHECK(shape.depths[2] == 60);
  shape.workers[1] = 3;
  shape.depths[2] = 1;
  Drafter drafter(setup.drafter_cfg);
  TrainLog log;
  Console console(stdout, false, true);
  pipeline p(prof, shape, batch_source(&setup), target_forward<profiler, B>(prof, &setup, 3),
             postprocess<profiler, B>(prof, &setup, nullptr),
             drafter_train<profiler>(prof, &drafter, &log, &console, o.steps, 0.0));
  CHECK(p.shape().workers[1] == 3);
  p.run();
  p.join();
  CHECK(log.losses.size() == 6);
  const auto snap = prof.snapshot();
  for (const auto& k : snap.keys) {
    if (k.name == "target_forward.work" || k.name == "drafter_step" || k.name == "postprocess.work" ||
        k.name == "target_forward.gpu" || k.name == "postprocess.gpu")
      CHECK(k.count == 6);
  }
  auto make = [&](const pipeline::shape_type& sh) {
    pipeline q(prof, sh, batch_source(&setup), target_forward<profiler, B>(prof, &setup, 3),
               postprocess<profiler, B>(prof, &setup, nullptr),
               drafter_train<profiler>(prof, &drafter, &log, &console, o.steps, 0.0));
  };
  shape.depths[0] = 0;
  CHECK_THROWS_WITH(make(shape), Catch::Contains("link 0 ('batch_queue') needs a depth of at least 1"));
  shape.depths[0] = 8;
  shape.workers[1] = 0;
  CHECK_THROWS_WITH(make(shape), Catch::Contains("stage 1 needs at least one worker"));
}

TEST_CASE("the postprocess stages through a bounded pinned pool: no pinned allocation per item once warm",
          "[example]") {
  using profiler = dflash::NullProfiler;
  using pipeline = train_pipeline_twin<profiler>;
  using B = dflash::host_stream_backend;
  Options o = small();
  o.steps = 64;
  o.target_workers = 1;
  o.hs_queue_depth = 2;  // a bound of staging_blocks(o) = 7 blocks
  o.post_link_depth = 1;
  const Setup setup(o);
  profiler prof;
  Drafter drafter(setup.drafter_cfg);
  TrainLog log;
  Console console(stdout, false, true);
  auto shape = pipeline::default_shape();
  shape.workers[pipeline::stage_index<"target_forward">] = 1;
  shape.depths[pipeline::link_index<"hs_device">] = 1;
  shape.depths[pipeline::link_index<"hs_queue">] = 2;
  pipeline p(prof, shape, batch_source(&setup), target_forward<profiler, B>(prof, &setup, 1),
             postprocess<profiler, B>(prof, &setup, nullptr),
             drafter_train<profiler>(prof, &drafter, &log, &console, o.steps, 0.0));
  p.run_to_completion();
  REQUIRE(log.digests.size() == 64);
  const auto pool = p.stage<pipeline::stage_index<"postprocess">>().staging_stats();
  REQUIRE(pool.has_value());
  // Every item took a block, allocated or reused; the bound caps how many were ever allocated.
  CHECK(pool->allocations + pool->reuses == 64);
  CHECK(pool->bound == staging_bound(o, static_cast<std::size_t>(o.seq_len) *
                                            static_cast<std::size_t>(setup.target.feature_dim()) * sizeof(float)));
  CHECK(pool->high_water <= pool->bound);
  CHECK(pool->bytes_in_use == 0);  // every block came back
  // The pipeline's backend counts every pinned allocation of the run: the pool's blocks and the
  // target worker's grow-to-fit input buffers. 64 items make a handful, not one each.
  const std::uint64_t host = p.backend().stats().host_allocations;
  CHECK(host >= pool->allocations);
  CHECK(host < 16);
}

TEST_CASE("CLI: values are parsed and bad input is a usage error", "[example][cli]") {
  Options o;
  CHECK(parse({"--steps", "7", "--target-workers", "3", "--hs-queue-depth", "5", "--profile-interval", "0.5",
               "--profile-format", "json", "--device", "cuda", "--seed", "9"},
              o, true) == -1);
  CHECK(o.steps == 7);
  CHECK(o.target_workers == 3);
  CHECK(o.hs_queue_depth == 5);
  CHECK(o.profile_interval == 0.5);
  CHECK(o.profile_format == output_format::json);
  CHECK(o.device == device_kind::cuda);
  CHECK(o.seed == 9);
  CHECK(Options{}.hs_queue_depth == 60);
  CHECK(parse({"--post-link-depth", "3"}, o, true) == -1);  // the hs_device link's slots
  CHECK(o.post_link_depth == 3);

  std::string err;
  for (const auto& bad : std::vector<std::vector<std::string>>{{"--bogus"},
                                                               {"--steps", "abc"},
                                                               {"--steps", "0"},
                                                               {"--steps", "-3"},
                                                               {"--target-workers", "0"},
                                                               {"--hs-queue-depth", "0"},
                                                               {"--post-link-depth", "0"},
                                                               {"--batch-queue-depth", "-1"},
                                                               {"--profile-interval", "-1"},
                                                               {"--profile-interval", "soon"},
                                                               {"--profile-format", "xml"},
                                                               {"--device", "tpu"},
                                                               {"--seq-len", "10"},
                                                               {"--seed", "-1"},
                                                               {"--trace", ""}}) {
    Options x;
    INFO(bad[0]);
    CHECK(parse(bad, x, true, &err) == exit_usage);
    CHECK_THAT(err, Catch::Contains("error: "));
  }
  Options x;
  CHECK(parse({"--trace", "t.json"}, x, false, &err) == exit_usage);
  CHECK_THAT(err, Catch::Contains("--trace needs the profiled build"));
  CHECK(parse({"--profile-interval", "2"}, x, false, &err) == exit_usage);
  CHECK(parse({"--profile-interval", "0"}, x, false, &err) == -1);  // 0 = off is what the plain build does anyway
  CHECK(parse({"--help"}, x, false, &err) == 0);
}

TEST_CASE("the drafter finishes a --device cuda item on its own thread, once, before it trains on it", "[example]") {
  const Setup setup(small());
  Drafter drafter(setup.drafter_cfg);
  TrainLog log;
  Console console(stdout, false, true);
  drafter_train<dflash::NullProfiler> train({}, &drafter, &log, &console, 2, 0.0);
  int calls = 0;
  std::thread::id ran_on;
  auto item = std::make_unique<HsItem>();
  item->step = 4;
  item->finish_on_host = [&](HsItem& it) {  // stands for unpacking pinned results: marks the item dropped
    ++calls;
    ran_on = std::this_thread::get_id();
    it.dropped = true;
  };
  train(std::move(item));
  CHECK(calls == 1);
  CHECK(ran_on == std::this_thread::get_id());
  CHECK(log.dropped == 1);  // what the finish wrote is what the drafter saw
  REQUIRE(log.digests.size() == 1);
  CHECK(log.digests[0].first == 4);

  auto wrong = std::make_unique<HsItem>();  // a finish that finds the item wrong: never trained on
  wrong->finish_on_host = [](HsItem&) { throw std::runtime_error("device_postprocess: packing produced 3 tokens, expected 4"); };
  CHECK_THROWS_WITH(train(std::move(wrong)), Catch::Contains("packing produced 3 tokens"));
  CHECK(log.losses.empty());
}

TEST_CASE("the drafter refuses an item the device postprocess marked as failed", "[example]") {
  const Setup setup(small());
  Drafter drafter(setup.drafter_cfg);
  TrainLog log;
  Console console(stdout, false, true);
  drafter_train<dflash::NullProfiler> train({}, &drafter, &log, &console, 1, 0.0);
  auto item = std::make_unique<HsItem>();
  item->error = std::make_exception_ptr(std::runtime_error("device_postprocess: packing produced 3 tokens, expected 4"));
  CHECK_THROWS_WITH(train(std::move(item)), Catch::Contains("packing produced 3 tokens"));
  CHECK(log.losses.empty());
  CHECK(log.dropped == 0);
}
