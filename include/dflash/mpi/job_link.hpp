#pragma once
// dflash::mpi::job_link — a link as the job sees it: what it does on the
// job's progress thread (not a device_channel, the device links' endpoint).
// The job drives every attached job_link once per pass of its loop and
// co-owns it, so a link's MPI requests complete even if the link's handle
// goes first.

namespace dflash::mpi {

class job_link {
 public:
  virtual ~job_link() = default;
  /// Post / complete sends and receives; true if anything happened.
  virtual bool progress() = 0;
  /// The job stopped: wake blocked senders and receivers (they end their stage).
  virtual void on_stop() = 0;
  /// This rank's pipeline ended normally: producers tell consumers (FIN).
  /// Returns true if that end is premature for the link (a consumer that
  /// stopped taking items before every producer finished): the job then
  /// stops every rank, as producers would otherwise wait for credits forever.
  virtual bool finish_sending() = 0;
  /// Every send of this rank on the link has completed (matched). Asked
  /// only when this rank is about to say FINAL (nothing of the link is sent
  /// after it), so a link may then post the synchronous messages that end
  /// its unsynchronised streams, and answer true once they matched.
  virtual bool quiescent() = 0;
  /// MPI requests of this link are in flight here (sends or receives not
  /// complete): the progress thread keeps polling (see progress_waker).
  virtual bool in_flight() = 0;
  /// First tag of the three the link uses (must be equal on every rank).
  virtual int tag_base() const = 0;
  /// The job's loop ended (every rank said FINAL, so no message of the link
  /// is on its way here): cancel the receives the link keeps posted, before
  /// MPI_Finalize. With the job's MPI lock held.
  virtual void retire() {}
};

}  // namespace dflash::mpi
