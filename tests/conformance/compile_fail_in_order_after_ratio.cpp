// An in_order stage after a link that drops items (delivers_ratio) would wait
// for items that never come: a compile-time error that says so. The control
// (-DDFLASH_CONTROL) puts a link that delivers each item once there instead.
#include <dflash/pipeline.hpp>
#include <dflash/queue/bounded_queue.hpp>

#include <memory>
#include <optional>

namespace {
struct src {
  static constexpr dflash::fixed_string name{"src"};
  using input_type = void;
  using output_type = int;
  std::optional<int> operator()() { return std::nullopt; }
};
struct sink {
  static constexpr dflash::fixed_string name{"sink"};
  using input_type = int;
  using output_type = void;
  void operator()(int&&) {}
};

// Passes every other item (the endpoint is a queue: what it drops does not matter here).
template <dflash::fixed_string Name>
struct halving_link : dflash::link_answers<Name, 4, dflash::consumer_on_own_threads, dflash::carries_values, false,
                                           dflash::analysis::model_kind::queue> {
#ifndef DFLASH_CONTROL
  using delivery = dflash::delivers_ratio<1, 2>;
#endif
  template <class Item, class P>
  using endpoint = dflash::bounded_queue<Item, P, Name>;
  template <class Item, class P, class Ctx>
  static std::unique_ptr<endpoint<Item, P>> open(const Ctx& c) {
    return std::make_unique<endpoint<Item, P>>(c.depth, c.prof);
  }
  template <class E>
  static void cancel(E& e) noexcept {
    e.close();
  }
};
}  // namespace

int main() {
  dflash::Pipeline<dflash::NullProfiler, src, halving_link<"half">, dflash::in_order<sink>> p;
  p.run_to_completion();
}
