// Must NOT compile with -DDFLASH_HOST_ONLY_STAGES (a device_link between two
// host-only stages) or -DDFLASH_NOT_A_DEVICE_ITEM (a plain type crossing a
// device_link): ctest expects dflash's static_assert message for each. With
// neither macro the file compiles, so each failure is the misuse's.
#include <dflash/device/host_stream_backend.hpp>
#include <dflash/pipeline.hpp>

#include <optional>

using B = dflash::host_stream_backend;
using DS = dflash::device_stream<B>;

struct slot : dflash::device_item<B> {
  int v = 0;
};
struct plain {
  int v = 0;
};
#ifdef DFLASH_NOT_A_DEVICE_ITEM
using item = plain;
#else
using item = slot;
#endif

struct numbers {
  static constexpr dflash::fixed_string name{"numbers"};
  using input_type = void;
  using output_type = int;
  std::optional<int> operator()() { return std::nullopt; }
};

#ifdef DFLASH_HOST_ONLY_STAGES
struct produce {  // a host transform: cannot feed a device link
  static constexpr dflash::fixed_string name{"produce"};
  using input_type = int;
  using output_type = item;
  item operator()(int&& x) const { return item{{}, x}; }
};
#else
struct produce {
  static constexpr dflash::fixed_string name{"produce"};
  using input_type = int;
  using output_type = item;
  void operator()(int&& x, item& out, const DS&) const { out.v = x; }
};
#endif

struct consume {
  static constexpr dflash::fixed_string name{"consume"};
  using input_type = item;
  using output_type = void;
  void operator()(item&, const DS&) const {}
};

int main() {
  dflash::Pipeline<dflash::NullProfiler, numbers, dflash::queue_link<"q", 2>, produce,
                   dflash::device_link<"link", 2>, consume>
      p;
  p.run();
  p.join();
}
