#pragma once
// handoff<T>: hands a pipeline's items to a consumer loop on a thread the pipeline does not own
// (a Python training loop, a framework's train step), one at a time, and makes the consumer's
// step the sink's work, so the profile and the advisor see it as a stage like any other.
//
//   dflash::handoff<Batch> out;
//   dflash::Pipeline<P, source, dflash::queue_link<"q", 60>, dflash::handoff_sink<"drafter", Batch>>
//       p(prof, src, dflash::handoff_sink<"drafter", Batch>{&out});
//   std::thread runner([&] { try { p.run_to_completion(); out.finish(); }
//                            catch (...) { out.finish(std::current_exception()); } });
//   while (std::optional<Batch> b = out.next()) train(*b);   // "drafter.work" = each train(*b)
//   runner.join();
//
// The sink's call gives its item and returns when the consumer asks for the next one (or stops):
// "<sink>.work" is the consumer's step (all it does between two next() calls; for the first item,
// also the time before its first next()), "<sink>.wait" the wait on the link before it, both
// recorded by the pipeline as for any sink. next() ends the previous step, waits for an item and
// returns it; it returns empty once the producer side called finish() and every item was taken,
// and rethrows the error finish() was given. cancel() is the consumer's way out: a sink call
// waiting for the step's end returns, a later one throws pipeline_stop (the pipeline ends
// early, as stop() from outside would) and next() returns empty. One consumer at a time: a
// second thread calling next() while one waits there is a std::logic_error.

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <utility>

#include "dflash/pipeline/stop.hpp"
#include "dflash/profile/fixed_string.hpp"

namespace dflash {

template <class T>
class handoff {
 public:
  handoff() = default;
  handoff(const handoff&) = delete;
  handoff& operator=(const handoff&) = delete;

  // ---- the producer side: the sink stage's thread(s), and whoever ends the run ----

  /// Gives `item` to the consumer and waits until the consumer has ended its step on it (called
  /// next() again, or cancel()). Throws pipeline_stop, dropping the item, when the consumer had
  /// cancelled before taking it.
  void give(T&& item) {
    std::unique_lock lk(m_);
    room_.wait(lk, [&] { return !item_ || cancelled_; });  // several sink workers: one item at a time
    if (cancelled_) throw pipeline_stop{};
    item_.emplace(std::move(item));
    const std::uint64_t ticket = ++given_;
    ready_.notify_all();
    stepped_.wait(lk, [&] { return steps_done_ >= ticket || cancelled_; });
    if (taken_ < ticket) {  // cancelled before the consumer took it: the item is not delivered
      item_.reset();
      room_.notify_all();
      throw pipeline_stop{};
    }
  }

  /// No more items will come: next() returns empty after the last one is taken, or throws
  /// `error` (the run's first error) when there is one. Call once the pipeline has ended.
  void finish(std::exception_ptr error = nullptr) noexcept {
    const std::lock_guard lk(m_);
    finished_ = true;
    error_ = std::move(error);
    ready_.notify_all();
  }

  // ---- the consumer side: one thread at a time ----

  /// Ends the step on the previous item (if any), then waits for the next one. Empty at the end
  /// of the run or after cancel(); rethrows the error the run ended with.
  [[nodiscard]] std::optional<T> next() {
    std::unique_lock lk(m_);
    if (waiting_)
      throw std::logic_error("dflash::handoff::next: another thread is already waiting in next() (a handoff has "
                             "one consumer at a time)");
    end_step();
    waiting_ = true;
    ready_.wait(lk, [&] { return item_ || finished_ || cancelled_; });
    waiting_ = false;
    if (cancelled_) return std::nullopt;
    if (item_) {
      std::optional<T> out(std::move(item_));
      item_.reset();
      ++taken_;
      stepping_ = true;
      room_.notify_all();
      return out;
    }
    if (error_) std::rethrow_exception(error_);
    return std::nullopt;
  }

  /// The consumer stops: the sink's call returns now, later ones throw pipeline_stop, next()
  /// returns empty. Items not taken yet are not delivered (the run ends as a cancel does).
  void cancel() noexcept {
    const std::lock_guard lk(m_);
    cancelled_ = true;
    ready_.notify_all();
    stepped_.notify_all();
    room_.notify_all();
  }

  /// Items the consumer took so far.
  [[nodiscard]] std::uint64_t taken() const {
    const std::lock_guard lk(m_);
    return taken_;
  }
  [[nodiscard]] bool cancelled() const {
    const std::lock_guard lk(m_);
    return cancelled_;
  }

 private:
  void end_step() {
    if (!stepping_) return;
    stepping_ = false;
    ++steps_done_;
    stepped_.notify_all();
  }

  mutable std::mutex m_;
  std::condition_variable ready_, stepped_, room_;  // an item or the end; a step ended; the slot is free
  std::optional<T> item_;
  std::uint64_t given_ = 0, taken_ = 0, steps_done_ = 0;
  bool stepping_ = false, waiting_ = false, finished_ = false, cancelled_ = false;
  std::exception_ptr error_;
};

/// The sink stage that gives each item to a handoff; keeps its own thread (a producer never runs
/// the consumer's step inline).
template <fixed_string Name, class T>
struct handoff_sink {
  static constexpr fixed_string name = Name;
  using input_type = T;
  using output_type = void;
  static constexpr bool own_threads_only = true;

  handoff<T>* to = nullptr;

  void operator()(T&& item) { to->give(std::move(item)); }
};

}  // namespace dflash
