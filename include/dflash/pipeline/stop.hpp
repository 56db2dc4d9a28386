#pragma once
// How a dflash::Pipeline ends early: stop_mode (what Pipeline::stop() asks
// for) and pipeline_stop (what a stage throws to ask for it from inside).
// Public and apart from the engine, so that code which only ends a run — a
// link's endpoint that is told every rank stopped, a user's stage — needs
// nothing else.

namespace dflash {

enum class stop_mode {
  cancel,  ///< close every link now; threads exit after their current call
  drain,   ///< stop the source; items already in links still reach the sink
};

/// Thrown from a stage's call to end the pipeline early and cleanly: the same
/// as stop() (stop_mode::cancel) from outside. The call's item is dropped,
/// every thread exits after its current call, and join() returns normally
/// (it still rethrows a real error another stage threw). Deliberately not a
/// std::exception, so a `catch (const std::exception&)` does not swallow it.
/// (A source that wants to drain instead returns an empty optional.)
struct pipeline_stop {};

}  // namespace dflash
