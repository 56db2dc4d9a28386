#pragma once
// detail::help_first_state<Types>: who may run a helped stage's calls besides
// its own threads — its seats (agents/stage_seats.hpp), made for each stage
// core_types::helped names where both it and its producer run here — and the
// source's park where stage 1's threads call the source
// (agents/source_pull.hpp). The rules are core_types'; this is their state.

#include <array>
#include <cstddef>
#include <memory>
#include <utility>

#include "dflash/pipeline/agents/source_pull.hpp"
#include "dflash/pipeline/agents/stage_seats.hpp"

namespace dflash::detail {

template <class Types>
class help_first_state {
 public:
  /// The seats of helped stage I; null where its producer or it runs in another process.
  template <std::size_t I>
  [[nodiscard]] stage_seats* seats() noexcept {
    return seats_[I].get();
  }
  /// The source's seats and park where stage 1's threads call it; null elsewhere.
  [[nodiscard]] source_pull* pull() noexcept { return pull_.get(); }

 protected:
  template <class Shape>
  void open_help_first(const Shape& shape) {
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      (([&] {
         if constexpr (Types::template helped<I>)
           if (shape.here(I - 1) && shape.here(I))
             seats_[I] = std::make_unique<stage_seats>(Types::topo::template in_order_at<I> ? 1 : shape.workers[I]);
       }()),
       ...);
    }(std::make_index_sequence<Types::stage_count>{});
    // One source worker only: several workers' calls may wait for one another
    // (a barrier, one index's input made by another), and a consumer thread in
    // one index's call would leave the others' own threads parked.
    if constexpr (Types::source_pulled)
      if (shape.here(0) && shape.here(1) && shape.workers[0] == 1) pull_ = std::make_unique<source_pull>();
  }
  /// A parked source thread exits (drain, cancel).
  void end_pull() noexcept {
    if (pull_) pull_->end();
  }

 private:
  std::array<std::unique_ptr<stage_seats>, Types::stage_count> seats_{};  // helped stages only
  std::unique_ptr<source_pull> pull_;                                      // a source stage 1's threads call
};

}  // namespace dflash::detail
