#include <dflash/dflash.hpp>
#if DFLASH_GPU_PIPELINE_CUDA
#include <dflash/device/cuda_backend.hpp>

#include "gpu_pipeline_kernels.hpp"  // launch_fill / launch_sum: kernels in gpu_pipeline_kernels.cu (nvcc)
#endif

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

template <class B>
using DS = dflash::device_stream<B>;

// The device stages' stream work, per backend: a task on the stream's executor
// thread (host twin, every build) or a kernel on the stream (CUDA builds).
void fill_rows(float* x, int n, float v, const DS<dflash::host_stream_backend>& s) {
  s.enqueue([=] { for (int i = 0; i < n; ++i) x[i] = v; });
}
void sum_rows(const float* x, int n, float* out, const DS<dflash::host_stream_backend>& s) {
  s.enqueue([=] { float t = 0; for (int i = 0; i < n; ++i) t += x[i]; *out = t; });
}
#if DFLASH_GPU_PIPELINE_CUDA
void fill_rows(float* x, int n, float v, const DS<dflash::cuda_backend>& s) { launch_fill(x, n, v, s.native()); }
void sum_rows(const float* x, int n, float* out, const DS<dflash::cuda_backend>& s) { launch_sum(x, n, out, s.native()); }
#endif

template <class B>
struct Rows : dflash::device_item<B> {  // one slot of the device link, reused
  int step = 0;                         // host field: set before publish
  dflash::device_buffer<float, B> x;    // device memory, written in stream order
  dflash::device_buffer<float, B> sum;  // x's sum, on the device
};
// Host results live in pinned memory (with CUDA: the copy into it is
// asynchronous), taken from a pool and given back when the sink drops them:
// cudaMallocHost / cudaFreeHost synchronise the whole device, so a stage that
// called them per item would stall every stream once per item.
template <class B>
class result_pool {
 public:
  using buffer = dflash::host_buffer<float, B>;
  struct give_back {
    result_pool* pool;
    void operator()(buffer* b) const { pool->put(b); }
  };
  using handle = std::unique_ptr<buffer, give_back>;
  handle take() {  // allocates only until the items in flight have a buffer each
    const std::lock_guard lock(m_);
    if (free_.empty()) return handle(new buffer, give_back{this});
    buffer* b = free_.back().release();
    free_.pop_back();
    return handle(b, give_back{this});
  }

 private:
  void put(buffer* b) {
    const std::lock_guard lock(m_);
    free_.emplace_back(b);
  }
  std::mutex m_;
  std::vector<std::unique_ptr<buffer>> free_;
};
template <class B>
using Sum = typename result_pool<B>::handle;

struct Steps {  // host source
  static constexpr dflash::fixed_string name{"steps"};
  using input_type = void;
  using output_type = int;
  int next = 0;
  std::optional<int> operator()() { return next < 100 ? std::optional(next++) : std::nullopt; }
};

template <class B>
struct Forward {  // host -> device link: enqueue the work that fills the slot
  static constexpr dflash::fixed_string name{"forward"};
  using input_type = int;
  using output_type = Rows<B>;
  void operator()(int&& step, Rows<B>& out, const DS<B>& s) const {
    out.step = step;
    fill_rows(out.x.ensure(1024, s), 1024, float(step), s);
  }
};

template <class B>
struct Reduce {  // device link -> host: the result is written by enqueued work
  static constexpr dflash::fixed_string name{"reduce"};
  using input_type = Rows<B>;
  using output_type = Sum<B>;
  result_pool<B>* pool = nullptr;  // set before run(); outlives every item
  Sum<B> operator()(Rows<B>& in, const DS<B>& s) const {
    Sum<B> sum = pool->take();
    float* d = in.sum.ensure(1, s);
    sum_rows(in.x.data(), 1024, d, s);
    s.copy(sum->ensure(1, s.backend()), d, sizeof(float));  // device -> host, in stream order
    return sum;  // the pipeline makes the next stage wait for that work
  }
};

template <class B>
struct Print {  // host sink
  static constexpr dflash::fixed_string name{"print"};
  using input_type = Sum<B>;
  using output_type = void;
  float total = 0;
  void operator()(Sum<B>&& sum) { total += *sum->data(); }
};

template <class P, class B>
using gpu_pipeline = dflash::Pipeline<P, Steps, dflash::queue_link<"steps_q", 8>, dflash::workers<Forward<B>, 2>,
                                      dflash::device_link<"rows", 4>, Reduce<B>, dflash::queue_link<"sums", 16>,
                                      Print<B>>;
template <class P>
using twin_pipeline = gpu_pipeline<P, dflash::host_stream_backend>;  // the keys do not depend on the backend

template <class B>  // the same pipeline on backend B; true when the total is right
bool run() {
  dflash::AccumulatingProfiler<dflash::pipeline_keys<twin_pipeline<dflash::NullProfiler>>> prof;
  result_pool<B> pool;  // declared first: destroyed after the pipeline and its items
  gpu_pipeline<decltype(prof), B> p(prof);
  p.template stage<2>().pool = &pool;
  p.run();
  p.join();
  const float total = p.template stage<3>().total;
  std::printf("%s: total %.0f (expected %.0f)\n%s", B::name, total, 1024.0 * 4950, prof.summary().c_str());
  return total == 1024.0f * 4950;
}

int main() {
  bool ok = run<dflash::host_stream_backend>();
#if DFLASH_GPU_PIPELINE_CUDA
  if (const std::string why = dflash::cuda_backend::probe(); why.empty()) {
    ok = run<dflash::cuda_backend>() && ok;
  } else {  // DFLASH_REQUIRE_GPU=1 (the GPU bundle): no device is a failure
    std::printf("cuda: not run: %s\n", why.c_str());
    const char* strict = std::getenv("DFLASH_REQUIRE_GPU");
    if (strict && std::strcmp(strict, "1") == 0) ok = false;
  }
#endif
  return ok ? 0 : 1;
}
