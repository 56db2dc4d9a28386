#pragma once
// The example over MPI (--ranks target=T,drafter=D; built when DFLASH_ENABLE_MPI):
// one pipeline type, every rank constructs it, the shape places its stages —
//
//   ranks 0..T-1:   batch_source ─batch_queue─▶ target_forward ×N ═hs_device═▶ postprocess ─┐
//                                                                                hs_net (dflash::mpi::net_link)
//   ranks T..T+D-1: unpack ─hs_queue─▶ drafter_train  ◀──────────────────────────────────────┘
//
// Target rank r trains on steps r, r+T, r+2T, ... (the same data a single
// process makes, split); the profiler's keys are the one pipeline's, and rank
// 0 prints the job's table with a column per rank. The hs_device link runs on
// the host twin here (--device cpu).

#include <dflash/mpi.hpp>
#include <dflash/mpi/net_link.hpp>

#include <memory>
#include <string>
#include <vector>

#include "train.hpp"

/// HsItem crosses hs_net as its scalars plus one message per vector; the
/// drafter's CSR form of the mask is rebuilt on arrival (unpack), not sent.
template <>
struct dflash::mpi::wire<std::unique_ptr<dflash_example::HsItem>> {
  static void for_each_field(std::unique_ptr<dflash_example::HsItem>& p, auto&& f) {
    if (!p) p = std::make_unique<dflash_example::HsItem>();  // receiving: a fresh item
    auto& x = *p;
    f(x.step), f(x.dropped), f(x.hidden), f(x.tokens), f(x.loss_mask), f(x.doc_ids), f(x.pos), f(x.anchors), f(x.keep);
    auto& m = x.mask;
    f(m.params), f(m.tile), f(m.num_q_tiles), f(m.num_kv_tiles);
    f(m.kv_num_blocks), f(m.kv_indices), f(m.full_kv_num_blocks), f(m.full_kv_indices);
    f(m.rule.anchors), f(m.rule.keep), f(m.rule.pos), f(m.rule.bound);
  }
};

namespace dflash_example {

/// On the drafter rank: the drafter's CSR attention mask from the block mask that arrived.
template <dflash::ProfilerPolicy P>
struct unpack {
  static constexpr dflash::fixed_string name{"unpack"};
  using input_type = std::unique_ptr<HsItem>;
  using output_type = std::unique_ptr<HsItem>;
  std::unique_ptr<HsItem> operator()(std::unique_ptr<HsItem>&& it) {
    if (!it->dropped) it->attention = drafter_attention(it->mask);  // the mask arrived with its rule
    return std::move(it);
  }
};

template <class P, class B>
using mpi_train_pipeline = dflash::Pipeline<P,                                                       //
                                            batch_source, dflash::queue_link<"batch_queue", 8>,       //
                                            dflash::workers<target_forward<P, B>, 2>,                 //
                                            dflash::device_link<"hs_device", 4>,                      //
                                            postprocess<P, B>, dflash::mpi::net_link<"hs_net", 8>,    //
                                            unpack<P>, dflash::queue_link<"hs_queue", 60>, drafter_train<P>>;
/// One key set for every rank (the job checks that at start-up).
using mpi_train_keys = dflash::pipeline_keys<mpi_train_pipeline<dflash::NullProfiler, dflash::host_stream_backend>>;

/// The run-time shape the CLI gives the pipeline on `rank`: sizes, and which
/// ranks run which stages (the target side on 0..T-1, the drafter side after).
template <class P, class B>
typename mpi_train_pipeline<P, B>::shape_type mpi_shape(const Options& o, int rank) {
  using pipe = mpi_train_pipeline<P, B>;
  auto shape = pipe::default_shape();
  shape.workers[pipe::template stage_index<"target_forward">] = static_cast<std::size_t>(o.target_workers);
  shape.depths[pipe::template link_index<"batch_queue">] = static_cast<std::size_t>(o.batch_queue_depth);
  shape.depths[pipe::template link_index<"hs_device">] = static_cast<std::size_t>(o.post_link_depth);
  shape.depths[pipe::template link_index<"hs_queue">] = static_cast<std::size_t>(o.hs_queue_depth);
  std::vector<int> targets, drafters;
  for (int r = 0; r < o.target_ranks + o.drafter_ranks; ++r) (r < o.target_ranks ? targets : drafters).push_back(r);
  shape.ranks = {targets, targets, targets, drafters, drafters};
  shape.rank = rank;
  return shape;
}

template <dflash::ProfilerPolicy Stats>
int mpi_train_main(const Options& o, int argc, char** argv) {
  constexpr bool profiled = Stats::enabled;
  const char* self = profiled ? "dflash_train_pipeline_profiled" : "dflash_train_pipeline";
  using P = std::conditional_t<profiled, dflash::AccumulatingProfiler<mpi_train_keys>, dflash::NullProfiler>;
  using B = dflash::host_stream_backend;
  dflash::mpi::job job(argc, argv);
  const int T = o.target_ranks;
  if (job.size() != T + o.drafter_ranks) {  // every rank sees the same sizes: all exit alike
    if (job.rank() == 0)
      std::fprintf(stderr, "%s: error: --ranks target=%d,drafter=%d needs %d MPI processes, mpirun started %d\n", self,
                   T, o.drafter_ranks, T + o.drafter_ranks, job.size());
    return exit_usage;
  }
  const bool target = job.rank() < T;
  Console console(stdout, false, o.quiet || target);
  P prof;
  dflash::mpi::job_options jo;
  const bool json = o.profile_format == output_format::json;
  if (profiled && o.profile_interval > 0) {
    jo.report_interval = std::chrono::milliseconds(static_cast<std::int64_t>(o.profile_interval * 1000));
    jo.on_report = [&console, json](const dflash::mpi::job_profile& j) {
      console.block("job profile so far:\n" + (json ? dflash::mpi::format_job_json(j) : dflash::mpi::format_job_table(j)));
    };
  }
  job.start(prof, jo);
  using pipeline = mpi_train_pipeline<P, B>;

  RunResult r;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    const Setup setup(o);
    if (job.rank() == 0) {
      char head[160];
      std::snprintf(head, sizeof head, "MPI job: %d target ranks (0..%d), drafter rank %d, hs_net link depth %zu\n", T,
                    T - 1, T, pipeline::template link_kind<2>::depth);
      console.block(head + describe(setup, profiled));
    }
    // Every rank builds the whole pipeline; only its placed stages run (and get their objects' work).
    Drafter drafter(setup.drafter_cfg);
    pipeline p(prof, mpi_shape<P, B>(o, job.rank()),
               batch_source(&setup, target ? static_cast<std::int64_t>(job.rank()) : 0, static_cast<std::int64_t>(T)),
               target_forward<P, B>(prof, &setup, static_cast<std::size_t>(o.target_workers)),
               postprocess<P, B>(prof, &setup, nullptr), unpack<P>{},
               drafter_train<P>(prof, &drafter, &r.log, &console, o.steps, o.progress_interval));
    job.run(p);
    if (!target) {
      r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      print_result(console, r);
    }
  } catch (const std::exception& e) {  // before the pipeline ran (e.g. the setup): stop the others too
    job.fail(e.what());
  }
  const auto res = job.finish();
  if (job.rank() == 0) {
    if (profiled && res.profile) {
      console.block("final job profile (whole run, every rank):\n" +
                    (json ? dflash::mpi::format_job_json(*res.profile) : dflash::mpi::format_job_table(*res.profile)));
      // Each rank's pipeline judged from its own snapshot: rank 0 knows every rank's role.
      const auto layout_of = [&](int rank) { return pipeline::local_layout(mpi_shape<P, B>(o, rank)); };
      console.block(std::string(json ? "" : "bottleneck per rank:\n") +
                    dflash::mpi::format_job_bottlenecks(*res.profile, layout_of,
                                                        json ? dflash::report_format::json : dflash::report_format::table) +
                    (json ? "\n" : ""));
    }
    if (!res.ok) std::fprintf(stderr, "%s: error: %s\n", self, res.error.c_str());
    else if (res.stopped_early)  // a stop (Ctrl-C, a drain) ended the run: not every step was trained
      console.block("the job was stopped before every step was trained (a stop, not an error)");
  }
  return res.ok ? 0 : exit_failure;
}

}  // namespace dflash_example
