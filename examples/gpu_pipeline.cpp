#include <dflash/dflash.hpp>

#include <cstdio>
#include <memory>
#include <optional>

using B = dflash::host_stream_backend;  // or dflash::cuda_backend: same pipeline, real streams
using DS = dflash::device_stream<B>;

struct Rows : dflash::device_item<B> {  // one slot of the device link, reused
  int step = 0;                         // host field: set before publish
  dflash::device_buffer<float, B> x;    // device memory, written in stream order
};

struct Steps {  // host source
  static constexpr dflash::fixed_string name{"steps"};
  using input_type = void;
  using output_type = int;
  int next = 0;
  std::optional<int> operator()() { return next < 100 ? std::optional(next++) : std::nullopt; }
};

struct Forward {  // host -> device link: enqueue the work that fills the slot
  static constexpr dflash::fixed_string name{"forward"};
  using input_type = int;
  using output_type = Rows;
  void operator()(int&& step, Rows& out, const DS& s) const {
    out.step = step;
    float* x = out.x.ensure(1024, s);
    s.enqueue([x, step] { for (int i = 0; i < 1024; ++i) x[i] = float(step); });  // CUDA: a kernel on s.native()
  }
};

struct Reduce {  // device link -> host: the result is written by enqueued work
  static constexpr dflash::fixed_string name{"reduce"};
  using input_type = Rows;
  using output_type = std::unique_ptr<float>;
  std::unique_ptr<float> operator()(Rows& in, const DS& s) const {
    auto sum = std::make_unique<float>(0.f);
    s.enqueue([x = in.x.data(), out = sum.get()] { for (int i = 0; i < 1024; ++i) *out += x[i]; });
    return sum;  // the pipeline makes the next stage wait for that work
  }
};

struct Print {  // host sink
  static constexpr dflash::fixed_string name{"print"};
  using input_type = std::unique_ptr<float>;
  using output_type = void;
  float total = 0;
  void operator()(std::unique_ptr<float>&& sum) { total += *sum; }
};

template <class P>
using gpu_pipeline = dflash::Pipeline<P, Steps, dflash::queue_spec<"steps_q", 8>, dflash::workers<Forward, 2>,
                                      dflash::device_link<"rows", 4>, Reduce, dflash::queue_spec<"sums", 16>, Print>;

int main() {
  dflash::AccumulatingProfiler<dflash::pipeline_keys_t<gpu_pipeline>> prof;
  gpu_pipeline<decltype(prof)> p(prof);
  p.run();
  p.join();
  std::printf("total %.0f (expected %.0f)\n%s", p.stage<3>().total, 1024.0 * 4950, prof.summary().c_str());
}
