#pragma once
// dflash::mpi::runtime — MPI start-up and shutdown for one process, and the
// job's own communicator (a duplicate of MPI_COMM_WORLD, so the job's tags
// never meet the program's).
//
// It asks for MPI_THREAD_SERIALIZED: after job::start() every MPI call of the
// process is made by the job's progress thread, before start() and after
// finish() by the calling thread, never at once. MPI_THREAD_MULTIPLE is not
// requested: many MPI builds (and network transports) lack it or serialise it
// with a global lock anyway. A program that initialised MPI itself keeps it
// (and finalises it); it only needs MPI_THREAD_SERIALIZED or more.

#include <mpi.h>

#include <cstddef>
#include <stdexcept>
#include <string>

namespace dflash::mpi {

/// Throws std::runtime_error naming the call and MPI's reason unless rc is MPI_SUCCESS.
inline void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char s[MPI_MAX_ERROR_STRING];
  int n = 0;
  MPI_Error_string(rc, s, &n);
  throw std::runtime_error(std::string("dflash::mpi: ") + what + " failed: " + std::string(s, static_cast<std::size_t>(n)));
}

class runtime {
 public:
  /// Initialises MPI (MPI_THREAD_SERIALIZED), or checks the level of an MPI
  /// the program initialised already (then the program finalises it).
  runtime(int& argc, char**& argv) {
    int inited = 0;
    MPI_Initialized(&inited);
    int provided = 0;
    if (!inited) {
      check(MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided), "MPI_Init_thread");
      owns_mpi_ = true;
    } else {
      MPI_Query_thread(&provided);
    }
    if (provided < MPI_THREAD_SERIALIZED) {
      if (owns_mpi_) MPI_Finalize();
      throw std::runtime_error("dflash::mpi::job: MPI provides thread level " + std::to_string(provided) +
                               ", the job needs MPI_THREAD_SERIALIZED (its progress thread makes the MPI calls)");
    }
    if (const int rc = MPI_Comm_dup(MPI_COMM_WORLD, &comm_); rc != MPI_SUCCESS) {
      if (owns_mpi_) MPI_Finalize();
      check(rc, "MPI_Comm_dup");
    }
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  ~runtime() {
    MPI_Comm_free(&comm_);
    if (owns_mpi_) MPI_Finalize();
  }
  runtime(const runtime&) = delete;
  runtime& operator=(const runtime&) = delete;

  [[nodiscard]] int rank() const noexcept { return rank_; }
  [[nodiscard]] int size() const noexcept { return size_; }
  [[nodiscard]] MPI_Comm comm() const noexcept { return comm_; }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  bool owns_mpi_ = false;
};

}  // namespace dflash::mpi
