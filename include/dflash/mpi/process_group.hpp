#pragma once
// dflash::mpi::ProcessGroup — what a link across processes (mpi_link.hpp,
// net_link.hpp) needs from the group of ranks it joins; dflash::mpi::job
// (job.hpp) models it.
//
// The group places the ranks (rank, size, its communicator), owns a link's
// MPI state once attached (it drives the link on its progress thread, tells
// it this rank's end of run with job_link::finish_sending and a stop with
// job_link::on_stop), stops every rank (fail with a reason, stop_all without),
// wakes its progress thread for work a stage thread handed over, lets a stage
// thread make the link's MPI calls itself (drive, under a driver_scope while
// it waits in a loop), and converts a flow stamp from another rank's clock.

#include <mpi.h>

#include <concepts>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "dflash/mpi/job_link.hpp"

namespace dflash::mpi {

namespace detail {
// Work for drive() where the concept checks it (a link passes a pass over itself).
struct no_work {
  void operator()() const noexcept {}
};
}  // namespace detail

template <class G>
concept ProcessGroup = requires(G& g, const G& cg, std::shared_ptr<job_link> link, const job_link* gone,
                                std::string why, std::int64_t t_ns, int from) {
  { cg.rank() } noexcept -> std::same_as<int>;
  { cg.size() } noexcept -> std::same_as<int>;
  { cg.comm() } noexcept -> std::same_as<MPI_Comm>;
  // The group co-owns and drives the link's MPI state; its handle is going.
  g.attach(std::move(link));
  g.release(gone, std::string_view{});
  // Stop every rank: with this rank's error, or without one.
  g.fail(std::move(why));
  g.stop_all();
  // The progress thread has work now (an item or credit handed over).
  g.wake();
  // The work, on this thread, if no other thread makes the group's MPI calls.
  { g.drive(detail::no_work{}) } -> std::same_as<bool>;
  // While one lives (until end()), this thread drives a link in a loop.
  requires std::constructible_from<typename G::driver_scope, G&>;
  requires requires(typename G::driver_scope& d) { d.end(); };
  // A flow stamp taken on rank `from`, on this rank's clock.
  { cg.to_local_clock(t_ns, from) } noexcept -> std::same_as<std::int64_t>;
};

}  // namespace dflash::mpi
