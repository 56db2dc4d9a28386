#pragma once
// The example's pipeline types:
//
//   batch_source ─batch_queue─▶ target_forward × N ═hs_device (device link)═▶ postprocess ─hs_queue (60)─▶ drafter_train
//                               (stream per worker)                           (own stream)
//   --hs-link rows:                                ═hs_rows (device queue)═▶
//   --cuda-graphs: target_forward replays a captured graph per step
//
// The target workers write hidden states into device slots; the postprocess
// reads them on its own stream (doc ids, packing, anchors, block mask) and
// copies the results into host memory asynchronously; the drafter trains on
// the CPU. Every stage is a template on the profiler policy P and the device
// backend B: dflash::cuda_backend (--device cuda) or the asynchronous host
// twin dflash::host_stream_backend (--device cpu), where "device" work runs
// on executor threads and device memory is host memory. With NullProfiler
// the timers compile to nothing. Stage names give the profile keys
// "<name>.wait" / "<name>.work" (and "<name>.gpu" for the device stages).

#include <dflash/device/host_stream_backend.hpp>
#include <dflash/dflash.hpp>

#include "batch_source.hpp"
#include "console.hpp"
#include "drafter_train.hpp"
#include "payloads.hpp"
#include "postprocess.hpp"
#include "setup.hpp"
#include "target_forward.hpp"
#include "target_forward_graphed.hpp"

namespace dflash_example {

/// Target: the target forward's stage (the graphed one with --cuda-graphs, below).
template <class P, class B, class Target = target_forward<P, B>>
using train_pipeline = dflash::Pipeline<P,                                                    //
                                        batch_source, dflash::queue_link<"batch_queue", 8>,   //
                                        dflash::workers<Target, 2>,                           //
                                        dflash::device_link<"hs_device", 4>,                  //
                                        postprocess<P, B>, dflash::queue_link<"hs_queue", 60>,  //
                                        drafter_train<P>>;

/// --hs-link rows: the same stages with a dflash::device_queue_link between the
/// target workers and the postprocess. The workers push only their valid
/// tokens' rows (hidden state as the payload) into a ring in device memory;
/// the postprocess pops exactly --seq-len of them per batch (full_batches),
/// across steps and documents, without the host ever reading a count.
/// Capacity and sizes are the shape's (run_training sets them from the options).
template <class P, class B>
using train_rows_pipeline =
    dflash::Pipeline<P,                                                                      //
                     batch_source, dflash::queue_link<"batch_queue", 8>,                     //
                     dflash::workers<target_forward<P, B, HsRows<B>>, 2>,                    //
                     dflash::device_queue_link<"hs_rows", 1920, 384, 384, dflash::full_batches>,  //
                     postprocess<P, B, HsRows<B>>, dflash::queue_link<"hs_queue", 60>,       //
                     drafter_train<P>>;

/// --cuda-graphs: the same stages, the target forward a dflash::graphed stage: its work for a step
/// is captured once per worker and slot and replayed with one graph launch per step
/// (target_forward_graphed.hpp says what travels through memory instead of arguments).
template <class P, class B>
using train_graphed_pipeline = train_pipeline<P, B, dflash::graphed<target_forward_graphed<P, B>>>;

/// The host-twin instance (keys do not depend on the backend or the policy).
template <class P>
using train_pipeline_twin = train_pipeline<P, dflash::host_stream_backend>;

/// Every key the pipelines record, known at compile time (the rows pipeline
/// has the same stages; only its link's keys differ).
using train_keys = dflash::key_set_cat_t<dflash::pipeline_keys<train_pipeline_twin<dflash::NullProfiler>>,
                                         dflash::queue_keys<"hs_rows">>;

}  // namespace dflash_example
