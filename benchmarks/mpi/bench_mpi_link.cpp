// mpi_link throughput next to raw MPI_Send/MPI_Recv of the same bytes, in the
// same run: rounds interleaved (raw, link, raw, link, ...), median and spread.
// Rank 0 sends, rank 1 receives; a round is timed on the receiver between two
// barriers. Usage: mpirun -np 2 bench_mpi_link [rounds=7]
//
// The program initialises MPI with MPI_THREAD_MULTIPLE so that its raw rounds
// (main thread) may run while the job's progress thread exists (it is idle
// then, polling every 0.2 ms).

#include <dflash/dflash.hpp>
#include <dflash/mpi.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

struct small_item {  // 64 bytes, trivially copyable: one message per item
  std::array<std::uint64_t, 8> w{};
};
struct big_item {  // one 1 MiB buffer by pointer and size, plus a header field
  std::uint64_t seq = 0;
  std::vector<std::uint8_t> bytes;
};

}  // namespace

template <>
struct dflash::mpi::wire<big_item> {
  static void for_each_field(big_item& x, auto&& f) {
    f(x.seq);
    f(x.bytes);
  }
};

namespace {

using clock_type = std::chrono::steady_clock;
constexpr std::size_t depth = 8;

struct stats {
  double median, lo, hi;
};
stats summarize(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t h = v.size() / 2;
  return {v.size() % 2 ? v[h] : (v[h - 1] + v[h]) / 2, v.front(), v.back()};
}

double raw_round(int rank, std::size_t bytes, int n, std::vector<std::uint8_t>& buf) {
  MPI_Barrier(MPI_COMM_WORLD);
  const auto t0 = clock_type::now();
  for (int i = 0; i < n; ++i) {
    if (rank == 0) MPI_Send(buf.data(), static_cast<int>(bytes), MPI_BYTE, 1, 7, MPI_COMM_WORLD);
    else MPI_Recv(buf.data(), static_cast<int>(bytes), MPI_BYTE, 0, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  }
  const double s = std::chrono::duration<double>(clock_type::now() - t0).count();
  MPI_Barrier(MPI_COMM_WORLD);
  return s;
}

template <class Link, class Make>
double link_round(int rank, Link& link, int n, Make make) {
  dflash::NullProfiler np;
  MPI_Barrier(MPI_COMM_WORLD);
  const auto t0 = clock_type::now();
  for (int i = 0; i < n; ++i) {
    if (rank == 0) link.send(make(i), np);
    else if (!link.receive(np)) std::abort();
  }
  const double s = std::chrono::duration<double>(clock_type::now() - t0).count();
  MPI_Barrier(MPI_COMM_WORLD);
  return s;
}

template <class Link, class Make>
void compare(const char* what, dflash::mpi::job& job, Link& link, std::size_t bytes, int n, int rounds, Make make) {
  const int rank = job.rank();
  std::vector<std::uint8_t> buf(bytes, 1);
  std::vector<double> raw, lnk, ratio;
  link_round(rank, link, std::max(1, n / 10), make);  // warm-up: connections, allocations
  raw_round(rank, bytes, std::max(1, n / 10), buf);
  for (int r = 0; r < rounds; ++r) {
    const double a = raw_round(rank, bytes, n, buf);
    const double b = link_round(rank, link, n, make);
    raw.push_back(n / a);
    lnk.push_back(n / b);
    ratio.push_back(a / b);  // link throughput / raw throughput, same round pair
  }
  if (rank != 1) return;  // the receiver timed it
  const auto R = summarize(raw), L = summarize(lnk), Q = summarize(ratio);
  const double gb = static_cast<double>(bytes) / 1e9;
  std::printf("%-21s raw  %11.0f items/s [%.0f..%.0f]  %7.3f GB/s\n", what, R.median, R.lo, R.hi, R.median * gb);
  std::printf("%-21s link %11.0f items/s [%.0f..%.0f]  %7.3f GB/s\n", what, L.median, L.lo, L.hi, L.median * gb);
  std::printf("%-21s link/raw %.2f (per-round-pair median; spread %.2f..%.2f)\n", what, Q.median, Q.lo, Q.hi);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (provided < MPI_THREAD_MULTIPLE || size != 2) {
    std::fprintf(stderr, "bench_mpi_link: needs exactly 2 ranks and MPI_THREAD_MULTIPLE (got %d ranks, level %d)\n",
                 size, provided);
    MPI_Finalize();
    return 2;
  }
  int rounds = 7;
  if (argc > 1) {
    char* end = nullptr;
    const long v = std::strtol(argv[1], &end, 10);
    if (*end || v < 1 || v > 1000) {
      std::fprintf(stderr, "bench_mpi_link: rounds must be an integer in 1..1000 (got '%s')\n", argv[1]);
      MPI_Finalize();
      return 2;
    }
    rounds = static_cast<int>(v);
  }
  {
    dflash::mpi::job job(argc, argv);
    job.start();
    dflash::mpi::mpi_link<small_item, "bench_small", depth> small(job, {0}, {1});
    dflash::mpi::mpi_link<small_item, "bench_small64", 64> small64(job, {0}, {1});
    dflash::mpi::mpi_link<big_item, "bench_big", depth> big(job, {0}, {1});
    if (job.rank() == 1)
      std::printf("mpi_link (progress thread) vs MPI_Send/MPI_Recv, 2 ranks, %d interleaved rounds, "
                  "median [min..max]\n", rounds);
    auto make_small = [](int i) {
      small_item s;
      s.w[0] = static_cast<std::uint64_t>(i);
      return s;
    };
    compare("64 B items, depth 8", job, small, sizeof(small_item), 20000, rounds, make_small);
    compare("64 B items, depth 64", job, small64, sizeof(small_item), 20000, rounds, make_small);
    constexpr std::size_t mib = 1 << 20;
    std::vector<std::uint8_t> payload(mib, 7);
    compare("1 MiB items, depth 8", job, big, mib, 200, rounds, [&](int i) {
      big_item b;  // the copy is the producer's work, as a stage making a new item; timed in the link rounds
      b.seq = static_cast<std::uint64_t>(i);
      b.bytes = payload;
      return b;
    });
    (void)job.finish();
  }
  MPI_Finalize();
  return 0;
}
