#pragma once
// dflash::mpi::mpi_link<T, "hs_net", Depth>: items of type T from pipelines on
// producer ranks to pipelines on consumer ranks, with an in-process queue's
// semantics, expressed as two adapter stages so dflash::Pipeline is unchanged:
//
//   producer rank:  source -> ... -> mpi_link_sink<P, hs_link>      (last stage)
//   consumer rank:  mpi_link_source<P, hs_link> -> ... -> sink      (first stage)
//
//   using hs_link = dflash::mpi::mpi_link<HsItem, "hs_net", 8>;
//   hs_link link(job, /*producers*/ {1, 2}, /*consumers*/ {0});
//
// The endpoints, for a stage or a pipeline link kind built on top:
//   producer: send(item, prof)  blocks for a credit, hands the item over
//             take_sent()       an item whose send completed, to refill
//                               (its vectors keep their memory), or empty
//             close()           no more items from this rank: FIN follows
//                               the last one (job::run's normal end does it)
//   consumer: receive(prof)     the next item, or empty once closed
//             recycle(item)     a consumed item back: the next arriving item
//                               is received into its vectors
//   both:     a job stop (any rank's stage threw or stopped the job) wakes
//             every blocked call with dflash::pipeline_stop.
//
// * Backpressure by credits: each producer rank has at most Depth items in
//   flight (sent, not yet taken by a consumer's source stage); a consumer
//   returns credits for the items its source stage took, in batches
//   (credit_policy.hpp: a batch while the stage takes items, what is owed
//   once it holds none of that producer's items and is idle, so a producer
//   never waits long for credits of items already consumed). A consumer
//   so buffers at most Depth items per producer. A producer sends each item
//   to the consumer with the fewest of its items in flight.
// * Exactly once: every item goes to one consumer and is delivered once.
// * Close: when a producer rank's pipeline ends normally (job::run), or it
//   calls close(), it sends FIN to every consumer after its last item; a consumer's source returns
//   "exhausted" once every producer's FIN and item has arrived.
// * Stop / error: job stops (see job.hpp) wake blocked sink / source calls,
//   which end their pipeline with dflash::pipeline_stop. Code on top of the
//   endpoints raises them with job::fail(reason) (an error rank 0 reports)
//   or job::stop_all() (a stop without error); both reach every rank.
// * Keys: "<Name>.push_wait" (sink blocked for a credit), "<Name>.pop_wait"
//   (source blocked for an item), plus the stages' own "<Name>.send.*" /
//   "<Name>.recv.*".
// * Wire: trivially copyable T, or wire<T> (wire.hpp). Items queued while
//   a batch header is in flight (or while the sink waits for credits) go
//   as one header message per consumer (small items cross as their
//   headers; a batch over 1 MiB of headers is split, and an item whose
//   header alone is over it is refused by send()), then each buffer
//   straight from the item's memory (MPI_Issend, no staging copy). Headers
//   and credits land in receives kept posted: testing one costs less than a
//   probe, and a message that finds its receive posted is copied once.
// * Unsynchronised headers and credits: batch headers and credits are
//   MPI_Isend (no acknowledgement from the receiver: a 64-byte item would
//   otherwise pay a message back per batch and per credit). Each such
//   stream ends with a synchronous message on its tag (FIN, or an empty
//   marker / credit when the rank says FINAL, see quiescent()): MPI keeps
//   one source's messages on one tag in order, so its match proves every
//   earlier one matched and nothing is left unmatched at MPI_Finalize.
// * Threads: a blocked send / receive makes the link's MPI calls itself
//   (job::drive) for a while before it sleeps, and an item or credit
//   handed over is posted by the calling thread when the job's MPI lock is
//   free (that post alone, not a whole pass): the progress thread is the
//   fallback, not a hop per item.
// * Validation: a consumer checks each header against its wire<T> layout and
//   each size against the buffer message that arrived (matched probes)
//   before it allocates; an item that does not fit fails the job with the
//   reason (its bytes are still received, so every send completes).
// The job co-owns the link's MPI state: the handle may go before finish().

#include <mpi.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "dflash/mpi/credit_policy.hpp"
#include "dflash/mpi/job.hpp"
#include "dflash/mpi/owned_sends.hpp"
#include "dflash/mpi/wire.hpp"
#include "dflash/pipeline/stop.hpp"
#include "dflash/profile/profiler_policy.hpp"
#include "dflash/queue/queue_keys.hpp"

namespace dflash::mpi {

/// Counters of one rank's end of a link, for tests and reports.
struct link_stats {
  // consumer side
  std::uint64_t received = 0;              ///< items delivered to this rank's source stage
  std::uint64_t max_buffered_per_producer = 0;  ///< most items of one producer held here at once
  std::vector<std::uint64_t> taken_from;   ///< per rank: its items this rank's source stage took
  std::vector<std::uint64_t> credits_to;   ///< per rank: credits returned to it
  std::uint64_t max_credit_batch = 0;      ///< most credits returned in one message
  std::uint64_t credit_messages = 0;       ///< credit messages sent (credits / this: the mean batch)
  std::uint64_t rejected = 0;              ///< items that did not fit this rank's wire<T> (job failed)
  // producer side
  std::uint64_t sent = 0;                  ///< items handed to MPI
  std::uint64_t queued = 0;                ///< items handed to send(), not yet posted (now)
  std::uint64_t max_batch = 0;             ///< most items posted in one header message
  std::uint64_t batches = 0;               ///< header messages posted (sent / this: the mean batch)
  std::vector<std::uint64_t> credits_from; ///< per rank: credits it returned
  // both
  std::uint64_t driven = 0;  ///< passes over the link made by a stage thread in send/receive (job::drive)
};

namespace detail {

// A link's state and its work on the progress thread. The job co-owns it, so
// its MPI requests complete even if the mpi_link handle is destroyed first.
template <WireItem T, fixed_string Name, std::size_t Depth>
class link_core final : public channel {
 public:
  link_core(job& j, std::vector<int> producers, std::vector<int> consumers)
      : job_(j), producers_(std::move(producers)), consumers_(std::move(consumers)) {
    for (int r : producers_) producer_ |= r == j.rank();
    for (int r : consumers_) consumer_ |= r == j.rank();
    const auto n = static_cast<std::size_t>(j.size());
    outstanding_.assign(consumers_.size(), 0);
    buffered_.assign(n, 0);
    unsync_headers_to_.assign(n, 0);
    unsync_credits_to_.assign(n, 0);
    waiting_.assign(n, 0);
    credit_due_.assign(n, 0);
    stats_.taken_from.assign(n, 0);
    stats_.credits_to.assign(n, 0);
    stats_.credits_from.assign(n, 0);
    credits_ = {credit_policy::batch_for(Depth), consumers_.size() == 1};
  }

  [[nodiscard]] bool is_producer() const noexcept { return producer_; }
  [[nodiscard]] bool is_consumer() const noexcept { return consumer_; }

  template <class P>
  void send(T&& item, const P& prof) {
    if (!producer_) throw std::logic_error("dflash::mpi::mpi_link::send: this rank is not a producer of the link");
    check_sendable(item);  // here, so an item MPI cannot carry fails this stage, not the progress thread
    std::unique_lock lk(m_);
    if (closing_) throw std::logic_error(link_name() + ": send() after close()");
    if (in_flight_ >= Depth && !stopped_) {
      auto t = prof.scope(push_wait_key<Name>{});
      ++blocked_senders_;  // what is queued goes now, whatever is in flight
      wait_driving(lk, [&] { return in_flight_ < Depth || stopped_; });
      --blocked_senders_;
    }
    if (stopped_) throw pipeline_stop{};
    // A close() while this send waited for a credit: FIN may be out already, and
    // an item after it would reach a consumer that has ended.
    if (closing_) throw std::logic_error(link_name() + ": send() after close() (close() was called while it waited)");
    ++in_flight_;
    outbox_.push_back(std::move(item));
    // With a header in flight the item waits to join the next batch (whoever
    // sees that header complete posts it: the progress thread polls meanwhile),
    // unless it fills the window: nothing more can join that batch.
    const bool post_now = headers_in_flight_ == 0 || in_flight_ >= Depth;
    lk.unlock();
    // Items with vectors: completed sends too, so take_sent() has items to refill.
    auto post = [this] {
      if constexpr (reusable) complete_sends();
      post_batches(job_.comm());
    };
    if (post_now && !drive(post)) job_.wake();
  }

  std::optional<T> take_sent() {
    if constexpr (!reusable) return std::nullopt;  // nothing kept: a new item costs as much
    std::lock_guard lk(m_);
    if (spent_.empty()) return std::nullopt;
    T x = std::move(spent_.back());
    spent_.pop_back();
    return x;
  }

  void close() {
    if (!producer_) throw std::logic_error("dflash::mpi::mpi_link::close: this rank is not a producer of the link");
    {
      std::lock_guard lk(m_);
      closing_ = true;
    }
    job_.wake();
  }

  template <class P>
  std::optional<T> receive(const P& prof, int* from) {
    if (!consumer_) throw std::logic_error("dflash::mpi::mpi_link::receive: this rank is not a consumer of the link");
    std::unique_lock lk(m_);
    if (inbox_.empty() && !closed_ && !stopped_) {
      auto t = prof.scope(pop_wait_key<Name>{});
      wait_driving(lk, [&] { return !inbox_.empty() || closed_ || stopped_; });
    }
    if (stopped_) throw pipeline_stop{};
    if (inbox_.empty()) return std::nullopt;  // closed
    auto [item, src] = std::move(inbox_.front());
    inbox_.pop_front();
    const auto r = static_cast<std::size_t>(src);
    --buffered_[r];
    ++credit_due_[r];
    const bool credits_go = credits_due(r, /*idle=*/false);
    ++stats_.received;
    ++stats_.taken_from[r];
    lk.unlock();
    if (from) *from = src;
    if (credits_go && !drive([this] { post_credits(job_.comm(), /*idle=*/false); })) job_.wake();
    return std::move(item);
  }

  void recycle(T&& item) {
    if constexpr (!reusable) return;  // no vectors to keep: receiving into it saves nothing
    std::lock_guard lk(m_);
    if (spare_.size() < Depth) spare_.push_back(std::move(item));
  }

  [[nodiscard]] bool settled() const {
    std::lock_guard lk(m_);
    const bool sent = !producer_ || in_flight_ == 0;  // counts each item from send() to its credit
    const bool owed = consumer_ && (!inbox_.empty() || std::any_of(credit_due_.begin(), credit_due_.end(),
                                                                   [](std::uint64_t n) { return n > 0; }));
    return sent && !owed;
  }

  [[nodiscard]] link_stats stats() const {
    std::lock_guard lk(m_);
    auto s = stats_;
    s.queued = outbox_.size();
    s.driven = driven_.load(std::memory_order_relaxed);
    return s;
  }

  // ---- channel (with the job's MPI lock: progress thread or a driving stage) --
  int tag_base() const override { return tag_base_; }

  void on_stop() override {
    std::lock_guard lk(m_);
    stopped_ = true;
    outbox_.clear();  // not yet posted: dropped
    cv_.notify_all();
  }
  bool finish_sending() override {
    std::lock_guard lk(m_);
    closing_ = closing_ || producer_;
    return consumer_ && fins_ < producers_.size();
  }

  // Asked when this rank is about to say FINAL (nothing more is sent after):
  // the first time it is otherwise quiescent it ends its unsynchronised
  // streams with a synchronous message each, and is quiescent once they
  // matched.
  bool quiescent() override {
    {
      std::lock_guard lk(m_);
      if (!sends_.empty() || (!(outbox_.empty() || stopped_)) || (closing_ && !fin_sent_)) return false;
    }
    if (!streams_closed_) {
      streams_closed_ = true;
      MPI_Comm c = job_.comm();
      // headers: FIN (an MPI_Issend after the last batch) already ended them.
      // A marker only where unsynchronised messages went: a peer rank that never
      // made the link (it failed first) never matches one, and nothing of ours
      // is left unmatched there anyway.
      if (producer_ && !fin_sent_)
        for (int dest : consumers_)
          if (unsync_headers_to_[static_cast<std::size_t>(dest)])
            credits_out_.post({std::byte{sync_marker}}, dest, tag_header, c);
      if (consumer_)
        for (int r : producers_) {
          std::uint64_t n = 0;
          {
            std::lock_guard lk(m_);
            n = std::exchange(credit_due_[static_cast<std::size_t>(r)], 0);
            count_credits(static_cast<std::size_t>(r), n);  // what is still owed goes with the closing marker
          }
          if (n > 0 || unsync_credits_to_[static_cast<std::size_t>(r)]) credits_out_.post_copy(&n, sizeof n, r, tag_credit, c);
        }
    }
    credits_out_.complete();
    return credits_out_.empty();
  }

  bool in_flight() override { return !sends_.empty() || !recvs_.empty() || !credits_out_.empty(); }  // under the job's MPI lock

  bool progress() override { return pass(/*idle=*/true); }

  void retire() override {
    for (MPI_Request* r : {&credit_req_, &header_req_})
      if (*r != MPI_REQUEST_NULL) {
        check(MPI_Cancel(r), "MPI_Cancel");
        check(MPI_Wait(r, MPI_STATUS_IGNORE), "MPI_Wait");  // cancelled, or a closing marker that matched
      }
  }

  static constexpr int tag_base_ =
      tag_links + tags_per_link * static_cast<int>(key_set_hash(std::array{Name.view()}) % link_tag_slots);

 private:
  static constexpr int tag_header = tag_base_, tag_buffer = tag_base_ + 1, tag_credit = tag_base_ + 2;
  // A header message (a 0-byte one is FIN) carries a batch of items:
  //   marker 1, the item count, then per item: the number of buffer messages
  //   that follow it (so a consumer that rejects the item can still receive
  //   them and let the producer's sends complete), the length of its wire<T>
  //   header (the consumer checks it against its own layout), the header.
  // The buffers follow, item by item, in order.
  // A 1-byte header message with sync_marker ends the unsynchronised header
  // stream of a producer that did not close (see quiescent()); it carries no items.
  static constexpr std::uint8_t batch_marker = 1, sync_marker = 2;
  using frame_word = std::uint32_t;
  // No header message is longer, whatever the item type: a producer splits a
  // batch to fit, and send() refuses an item whose header alone does not. So
  // a consumer receives every header into one buffer of this size it keeps
  // posted, even from a producer that disagrees on the item type (a message
  // longer than a posted receive is an error in MPI, and OpenMPI's
  // shared-memory transport then writes past the buffer).
  static constexpr std::size_t max_header_message = std::size_t{1} << 20;
  static constexpr std::size_t max_item_header = max_header_message - 1 - 3 * sizeof(frame_word);
  static_assert(WireCustom<T> || sizeof(T) <= max_item_header,
                "dflash::mpi::mpi_link: a trivially copyable item crosses as one header message, at most about "
                "1 MiB; describe the item with dflash::mpi::wire<T> and put its large arrays in std::vector fields, "
                "so they cross as buffers of their own");
  // Items whose buffers a producer or consumer keeps for reuse: vectors only.
  static constexpr bool reusable = WireCustom<T>;

  struct send_rec {
    std::vector<T> items;
    std::vector<std::byte> header;
    std::vector<wire_buffer> bufs;  // the items' buffers, in order
    std::vector<MPI_Request> reqs;  // the header's first, then the buffers'
    bool header_done = false;
  };
  struct recv_rec {
    T item;
    int src = -1;
    std::uint32_t nbufs = 0;
    std::vector<std::byte> header;  // wire<T>'s part
    std::vector<MPI_Message> msgs;  // the buffer messages, matched in order
    std::vector<int> sizes;         // their byte counts, as they arrived
    std::vector<MPI_Request> reqs;
    std::vector<std::vector<std::byte>> scratch;  // a rejected item's buffers land here
    bool posted = false, rejected = false;
  };

  static std::string link_name() { return "dflash::mpi::mpi_link \"" + std::string(Name.view()) + "\""; }
  static void check_sendable(T& x) {
    visit_fields(x, [&]<class M>(M& m) {
      if constexpr (is_vector<M>::value) {
        const std::size_t elem = sizeof(typename M::value_type);
        if (m.size() > wire_max_buffer_bytes / elem)
          throw std::length_error(link_name() + ": one buffer of an item is " + std::to_string(m.size() * elem) +
                                  " bytes, over 2 GiB (MPI's int count limit)");
      }
    });
    if (const std::size_t header = wire_header_bytes(x); header > max_item_header)
      throw std::length_error(link_name() + ": an item's header (its fields other than vectors) is " +
                              std::to_string(header) + " bytes, over the " + std::to_string(max_item_header) +
                              " bytes one header message carries; give large arrays a std::vector field in wire<T>, so "
                              "they cross as buffers of their own");
  }
  // A blocked send or receive drives the link itself (job::drive) for up to
  // drive_budget: within a credit window the answer usually comes in a few
  // µs, and a hand-off to the progress thread and back costs two thread
  // switches. Then it sleeps and leaves the polling to the progress thread.
  template <class Pred>
  void wait_driving(std::unique_lock<std::mutex>& lk, Pred ready) {
    if (ready()) return;
    job::driver_scope driving(job_);
    const auto until = std::chrono::steady_clock::now() + drive_budget;
    for (unsigned i = 1;; ++i) {
      lk.unlock();
      if (!drive([this] { pass(/*idle=*/false); })) std::this_thread::yield();  // the progress thread is in a pass
      lk.lock();
      if (ready()) return;
      if (i % 64 == 0 && std::chrono::steady_clock::now() > until) break;
    }
    driving.end();
    lk.unlock();
    job_.wake();  // the progress thread polls at full speed for a sleeping stage
    lk.lock();
    cv_.wait(lk, ready);
  }
  static constexpr std::chrono::microseconds drive_budget{200};
  template <class Work>
  bool drive(Work&& work) {
    if (!job_.drive(std::forward<Work>(work))) return false;
    driven_.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  // One pass over the link's work. `idle`: the pass is the progress thread's
  // (no stage is taking items), so credits short of a batch go back too.
  bool pass(bool idle) {
    bool busy = false;
    if (producer_) busy |= progress_producer();
    if (consumer_) busy |= progress_consumer(idle);
    return busy;
  }
  std::atomic<std::uint64_t> driven_{0};

  static bool test_all(std::vector<MPI_Request>& reqs) {
    int done = 0;
    check(MPI_Testall(static_cast<int>(reqs.size()), reqs.data(), &done, MPI_STATUSES_IGNORE), "MPI_Testall");
    return done != 0;
  }
  static void put_word(std::vector<std::byte>& b, frame_word w) {
    const auto* p = reinterpret_cast<const std::byte*>(&w);
    b.insert(b.end(), p, p + sizeof w);
  }
  // With m_ held: credits for producer r go back now (credit_policy.hpp)?
  bool credits_due(std::size_t r, bool idle) const {
    return credits_.due(credit_due_[r], buffered_[r], idle, stopped_ || fins_ == producers_.size());
  }

  // Credits land in a receive kept posted (a test of it costs less than a
  // probe, and a message that finds it posted is not copied twice).
  bool receive_credits(MPI_Comm c) {
    bool busy = false;
    MPI_Status st;
    int flag = 0;
    for (;;) {
      if (credit_req_ == MPI_REQUEST_NULL)
        check(MPI_Irecv(&credit_in_, 1, MPI_UINT64_T, MPI_ANY_SOURCE, tag_credit, c, &credit_req_), "MPI_Irecv");
      check(MPI_Test(&credit_req_, &flag, &st), "MPI_Test");
      if (!flag) break;
      const std::uint64_t n = credit_in_;
      std::lock_guard lk(m_);
      in_flight_ -= std::min<std::uint64_t>(n, in_flight_);
      for (std::size_t i = 0; i < consumers_.size(); ++i)
        if (consumers_[i] == st.MPI_SOURCE) outstanding_[i] -= std::min<std::uint64_t>(n, outstanding_[i]);
      stats_.credits_from[static_cast<std::size_t>(st.MPI_SOURCE)] += n;
      cv_.notify_all();
      busy = true;
    }
    return busy;
  }

  // Everything the sink handed over: one batch per consumer, each to the
  // consumer with the fewest of this rank's items in flight at the time, in
  // header messages of at most max_header_message bytes.
  bool post_batches(MPI_Comm c) {
    auto& to = to_;
    {
      std::lock_guard lk(m_);
      // Items queued while a header is in flight wait for it (they go as one
      // batch), unless they fill the window, the sink is blocked for credits
      // or it is closing.
      if (outbox_.empty() || (headers_in_flight_ > 0 && in_flight_ < Depth && blocked_senders_ == 0 && !closing_))
        return false;
      to.resize(consumers_.size());
      for (auto& x : outbox_) {
        std::size_t k = 0;
        for (std::size_t i = 1; i < consumers_.size(); ++i)
          if (outstanding_[i] < outstanding_[k]) k = i;
        ++outstanding_[k];
        ++stats_.sent;
        to[k].push_back(std::move(x));
      }
      outbox_.clear();
    }
    std::size_t headers = 0, largest = 0;
    for (std::size_t k = 0; k < to.size(); ++k) {
      send_rec* s = nullptr;
      for (auto& x : to[k]) {
        const std::size_t framed = 2 * sizeof(frame_word) + wire_header_bytes(x);
        if (s && s->header.size() + framed > max_header_message) {
          post_batch(*s, consumers_[k], c);
          largest = std::max(largest, s->items.size());
          s = nullptr;
        }
        if (!s) {
          s = &new_send();
          ++headers;
          s->items.reserve(to[k].size());  // items stay where they are encoded from
          s->header.push_back(std::byte{batch_marker});
          put_word(s->header, 0);  // the item count, set when the batch is posted
        }
        // The buffers go from the item the record keeps until its sends
        // complete: encoded after the move (a type without a move constructor
        // copies into new memory and the original is freed).
        auto& y = s->items.emplace_back(std::move(x));
        wire_encode(y, item_header_, item_bufs_);
        put_word(s->header, static_cast<frame_word>(item_bufs_.size()));
        put_word(s->header, static_cast<frame_word>(item_header_.size()));
        s->header.insert(s->header.end(), item_header_.begin(), item_header_.end());
        s->bufs.insert(s->bufs.end(), item_bufs_.begin(), item_bufs_.end());
      }
      to[k].clear();
      if (s) {
        post_batch(*s, consumers_[k], c);
        largest = std::max(largest, s->items.size());
      }
    }
    std::lock_guard lk(m_);
    headers_in_flight_ += headers;
    stats_.batches += headers;
    stats_.max_batch = std::max<std::uint64_t>(stats_.max_batch, largest);
    return true;
  }
  // A record for a send, from the completed ones when there are some (their
  // vectors keep their memory: a batch allocates nothing once warm).
  send_rec& new_send() {
    if (free_sends_.empty()) return sends_.emplace_back();
    sends_.splice(sends_.end(), free_sends_, free_sends_.begin());
    return sends_.back();
  }
  void post_batch(send_rec& s, int dest, MPI_Comm c) {
    const auto count = static_cast<frame_word>(s.items.size());
    std::memcpy(s.header.data() + 1, &count, sizeof count);
    // Sizes were checked by send(); posting is all or nothing.
    s.reqs.assign(1 + s.bufs.size(), MPI_REQUEST_NULL);
    const int hn = static_cast<int>(s.header.size());
    if (streams_closed_)  // after the closing marker every send must be matched before FINAL
      check(MPI_Issend(s.header.data(), hn, MPI_BYTE, dest, tag_header, c, &s.reqs[0]), "MPI_Issend");
    else {
      check(MPI_Isend(s.header.data(), hn, MPI_BYTE, dest, tag_header, c, &s.reqs[0]), "MPI_Isend");
      unsync_headers_to_[static_cast<std::size_t>(dest)] = 1;
    }
    for (std::size_t b = 0; b < s.bufs.size(); ++b)
      check(MPI_Issend(s.bufs[b].data, static_cast<int>(s.bufs[b].bytes), MPI_BYTE, dest, tag_buffer, c,
                       &s.reqs[1 + b]),
            "MPI_Issend");
  }

  bool progress_producer() {
    MPI_Comm c = job_.comm();
    // completed sends first: their items go back to the producer for reuse (or go), so
    // a sink woken by the credits below finds them in take_sent()
    bool busy = complete_sends();
    busy |= receive_credits(c);
    busy |= post_batches(c);
    // FIN after the last item (same tag, so it cannot overtake the headers)
    bool fin_now = false;
    {
      std::lock_guard lk(m_);
      fin_now = closing_ && !fin_sent_ && outbox_.empty();
      fin_sent_ = fin_sent_ || fin_now;
    }
    if (fin_now) {
      for (int dest : consumers_) {
        auto& s = new_send();
        s.header_done = true;  // not a batch: headers_in_flight_ does not count it
        s.reqs.assign(1, MPI_REQUEST_NULL);
        check(MPI_Issend(nullptr, 0, MPI_BYTE, dest, tag_header, c, &s.reqs[0]), "MPI_Issend");
      }
      busy = true;
    }
    return busy;
  }

  // Sends that completed: their records go back to the free list, their items
  // to take_sent() (items with vectors).
  bool complete_sends() {
    bool busy = false;
    for (auto it = sends_.begin(); it != sends_.end();) {
      if (!it->header_done) {
        int done = 0;
        check(MPI_Test(&it->reqs[0], &done, MPI_STATUS_IGNORE), "MPI_Test");
        if (done) {
          it->header_done = true;
          std::lock_guard lk(m_);
          --headers_in_flight_;
          busy = true;
        }
      }
      // a batch of items without buffers is done with its header (FIN has no items: tested here)
      if (it->header_done && ((it->reqs.size() == 1 && !it->items.empty()) || test_all(it->reqs))) {
        {
          std::lock_guard lk(m_);
          if constexpr (reusable)
            for (auto& x : it->items)
              if (spent_.size() < Depth) spent_.push_back(std::move(x));
        }
        it->items.clear();
        it->header.clear();
        it->bufs.clear();
        it->reqs.clear();
        it->header_done = false;
        free_sends_.splice(free_sends_.end(), sends_, it++);
        busy = true;
      } else {
        ++it;
      }
    }
    return busy;
  }

  // The header's sizes against the buffer messages that arrived: on success
  // the item's vectors are sized and its receives posted; otherwise the bytes
  // land in scratch (the producer's sends must complete) and the job fails.
  // Fills item from its wire<T> header and sizes its vectors to the buffer
  // messages that arrived (bufs: where to receive them); else why it does not fit.
  static std::string fit(T& item, const std::byte* header, std::size_t len, std::uint32_t nbufs,
                         const std::vector<int>& sizes, std::vector<wire_buffer>& bufs) {
    std::string why;
    try {
      const auto ext = wire_parse(item, header, len);
      std::size_t k = 0;
      for (const auto& e : ext) {
        if (!e.count) continue;
        if (k < nbufs && e.bytes != static_cast<std::size_t>(sizes[k]) && why.empty())
          why = "its header gives buffer " + std::to_string(k) + " " + std::to_string(e.bytes) + " bytes, " +
                std::to_string(sizes[k]) + " bytes arrived";
        ++k;
      }
      if (k != nbufs)
        why = "its header gives " + std::to_string(k) + " non-empty vectors, " + std::to_string(nbufs) +
              " buffers were sent";
      if (why.empty()) wire_allocate(item, ext, bufs);
    } catch (const std::exception& e) {
      why = e.what();
    }
    return why;
  }
  void report_reject(int src, const std::string& why) {
    if (reported_) return;
    reported_ = true;
    job_.fail(link_name() + ": an item from rank " + std::to_string(src) +
              " does not fit this rank's wire<T> layout (producer and consumer disagree on the item type): " + why);
  }

  void post_receives(recv_rec& r) {
    std::vector<wire_buffer> bufs;
    const std::string why = fit(r.item, r.header.data(), r.header.size(), r.nbufs, r.sizes, bufs);
    r.reqs.assign(r.nbufs, MPI_REQUEST_NULL);
    if (!why.empty()) {
      r.rejected = true;
      r.scratch.resize(r.nbufs);
      for (std::size_t k = 0; k < r.nbufs; ++k) {
        r.scratch[k].resize(static_cast<std::size_t>(r.sizes[k]));
        check(MPI_Imrecv(r.scratch[k].data(), r.sizes[k], MPI_BYTE, &r.msgs[k], &r.reqs[k]), "MPI_Imrecv");
      }
      report_reject(r.src, why);
    } else {
      for (std::size_t k = 0; k < r.nbufs; ++k)
        check(MPI_Imrecv(bufs[k].data, r.sizes[k], MPI_BYTE, &r.msgs[k], &r.reqs[k]), "MPI_Imrecv");
    }
    r.posted = true;
  }

  // A batch header into items (into recycled ones where there are some): an
  // item with no buffers and none of its producer's ahead of it goes to the
  // source stage at once, the others wait in a recv_rec for their buffers.
  void parse_batch(const std::byte* h, const std::size_t size, int src) {
    auto malformed = [&] {  // not from an mpi_link: nothing can be drained
      return std::runtime_error(link_name() + ": malformed item header from rank " + std::to_string(src));
    };
    std::size_t at = 1 + sizeof(frame_word);
    if (size < at || h[0] != std::byte{batch_marker}) throw malformed();
    auto word = [&] {
      if (size - at < sizeof(frame_word)) throw malformed();
      frame_word w = 0;
      std::memcpy(&w, h + at, sizeof w);
      at += sizeof w;
      return w;
    };
    frame_word count = 0;
    std::memcpy(&count, h + 1, sizeof count);
    auto& items = spans_;  // nbufs, header span
    items.clear();
    for (frame_word i = 0; i < count; ++i) {
      const frame_word nbufs = word();
      const std::size_t len = word();
      if (size - at < len) throw malformed();
      items.push_back({nbufs, {at, len}});
      at += len;
    }
    if (at != size || count == 0) throw malformed();
    const auto s = static_cast<std::size_t>(src);
    std::string why;
    bool delivered = false;
    std::lock_guard lk(m_);
    auto spare = [&] {
      T x{};
      if (!spare_.empty()) {
        x = std::move(spare_.back());
        spare_.pop_back();
      }
      return x;
    };
    for (const auto& [nbufs, span] : items) {
      if (nbufs == 0 && waiting_[s] == 0) {
        T x = spare();
        std::vector<wire_buffer> none;
        if (auto w = fit(x, h + span.first, span.second, 0, {}, none); !w.empty()) {
          ++stats_.rejected;
          if (why.empty()) why = std::move(w);
          continue;
        }
        inbox_.emplace_back(std::move(x), src);
        ++buffered_[s];
        delivered = true;
        continue;
      }
      auto& r = recvs_.emplace_back();
      r.item = spare();
      r.src = src;
      r.nbufs = nbufs;
      r.header.assign(h + span.first, h + span.first + span.second);
      ++waiting_[s];
      ++buffered_[s];
    }
    stats_.max_buffered_per_producer = std::max<std::uint64_t>(stats_.max_buffered_per_producer, buffered_[s]);
    if (delivered) cv_.notify_all();
    if (!why.empty()) report_reject(src, why);
  }

  bool progress_consumer(bool idle) {
    bool busy = false;
    MPI_Comm c = job_.comm();
    MPI_Status st;
    int flag = 0;
    // headers (or FIN), into the receive kept posted (see receive_credits)
    for (;;) {
      if (header_req_ == MPI_REQUEST_NULL) {
        header_in_.resize(max_header_message);
        check(MPI_Irecv(header_in_.data(), static_cast<int>(header_in_.size()), MPI_BYTE, MPI_ANY_SOURCE, tag_header,
                        c, &header_req_),
              "MPI_Irecv");
      }
      check(MPI_Test(&header_req_, &flag, &st), "MPI_Test");
      if (!flag) break;
      int n = 0;
      MPI_Get_count(&st, MPI_BYTE, &n);
      busy = true;
      if (n == 0) {
        std::lock_guard lk(m_);
        ++fins_;
        continue;
      }
      if (n == 1 && header_in_[0] == std::byte{sync_marker}) continue;
      parse_batch(header_in_.data(), static_cast<std::size_t>(n), st.MPI_SOURCE);
    }
    // buffer messages: matched in order per producer (an item's come before the next item's)
    auto& blocked = blocked_;
    blocked.assign(buffered_.size(), false);
    for (auto& r : recvs_) {
      if (r.posted) continue;
      auto&& blk = blocked[static_cast<std::size_t>(r.src)];
      if (blk) continue;
      while (r.msgs.size() < r.nbufs) {
        MPI_Message msg = MPI_MESSAGE_NULL;
        check(MPI_Improbe(r.src, tag_buffer, c, &flag, &msg, &st), "MPI_Improbe");
        if (!flag) break;
        int n = 0;
        MPI_Get_count(&st, MPI_BYTE, &n);
        r.msgs.push_back(msg);
        r.sizes.push_back(n);
        busy = true;
      }
      if (r.msgs.size() < r.nbufs) {
        blk = true;
        continue;
      }
      post_receives(r);
      busy = true;
    }
    // complete items go to the source stage, in arrival order per producer (one lock and
    // one notification for all of them)
    std::fill(blocked.begin(), blocked.end(), false);
    std::unique_lock deliver(m_, std::defer_lock);
    bool delivered = false;
    for (auto it = recvs_.begin(); it != recvs_.end();) {
      auto&& blk = blocked[static_cast<std::size_t>(it->src)];
      if (!blk && it->posted && (it->reqs.empty() || test_all(it->reqs))) {
        if (!deliver.owns_lock()) deliver.lock();
        if (it->rejected) {
          --buffered_[static_cast<std::size_t>(it->src)];
          ++stats_.rejected;
        } else {
          inbox_.emplace_back(std::move(it->item), it->src);
          delivered = true;
        }
        --waiting_[static_cast<std::size_t>(it->src)];
        it = recvs_.erase(it);
        busy = true;
      } else {
        blk = true;
        ++it;
      }
    }
    if (delivered) cv_.notify_all();
    if (deliver.owns_lock()) deliver.unlock();
    {
      std::lock_guard lk(m_);
      if (!closed_ && fins_ == producers_.size() && recvs_.empty()) {
        closed_ = true;
        cv_.notify_all();
      }
    }
    busy |= post_credits(c, idle);
    return busy;
  }

  // Under m_: n credits go back to rank r in one message (none: no batch).
  void count_credits(std::size_t r, std::uint64_t n) {
    if (n == 0) return;
    stats_.credits_to[r] += n;
    stats_.max_credit_batch = std::max(stats_.max_credit_batch, n);
    ++stats_.credit_messages;
  }

  // Credits for what the source stage took, in batches (credits_due).
  bool post_credits(MPI_Comm c, bool idle) {
    bool busy = false;
    auto& due = due_;
    due.clear();
    {
      std::lock_guard lk(m_);
      for (std::size_t r = 0; r < credit_due_.size(); ++r)
        if (credits_due(r, idle)) {
          const std::uint64_t n = std::exchange(credit_due_[r], 0);
          due.emplace_back(static_cast<int>(r), n);
          count_credits(r, n);
        }
    }
    for (auto [r, n] : due) {
      credits_out_.post_copy(&n, sizeof n, r, tag_credit, c,
                             streams_closed_ ? owned_sends::mode::synchronous : owned_sends::mode::unsynchronised);
      if (!streams_closed_) unsync_credits_to_[static_cast<std::size_t>(r)] = 1;
      busy = true;
    }
    busy |= credits_out_.complete();
    return busy;
  }

  job& job_;
  std::vector<int> producers_, consumers_;
  bool producer_ = false, consumer_ = false;

  credit_policy credits_;  // set by the constructor
  mutable std::mutex m_;
  std::condition_variable cv_;
  bool stopped_ = false, closed_ = false;
  // producer
  std::size_t in_flight_ = 0;
  std::deque<T> outbox_;
  std::vector<T> spent_;                    // sent items for take_sent()
  std::vector<std::uint64_t> outstanding_;  // per consumer index
  bool closing_ = false, fin_sent_ = false;
  std::size_t headers_in_flight_ = 0;  // batch headers posted, not yet matched
  int blocked_senders_ = 0;            // sends waiting for a credit
  // consumer
  std::deque<std::pair<T, int>> inbox_;
  std::vector<T> spare_;                              // recycled items to receive into
  std::vector<std::uint64_t> buffered_, credit_due_;  // per rank
  std::size_t fins_ = 0;
  link_stats stats_;

  // with the job's MPI lock held only
  std::list<send_rec> sends_, free_sends_;  // posted; completed, kept for their memory
  std::vector<char> unsync_headers_to_, unsync_credits_to_;  // per rank: an MPI_Isend went there (quiescent())
  std::vector<std::byte> item_header_;      // post_batches' scratch
  std::vector<wire_buffer> item_bufs_;
  std::list<recv_rec> recvs_;
  std::vector<std::byte> header_in_;  // the posted header receive's buffer
  MPI_Request header_req_ = MPI_REQUEST_NULL, credit_req_ = MPI_REQUEST_NULL;  // kept posted (retire() cancels)
  std::uint64_t credit_in_ = 0;
  bool reported_ = false;
  owned_sends credits_out_;      // credits, and the messages that end the unsynchronised streams
  bool streams_closed_ = false;  // those were posted: every later send is synchronous
  std::vector<std::size_t> waiting_;  // per rank: its items in recvs_
  // scratch, kept to allocate nothing per pass
  std::vector<std::pair<frame_word, std::pair<std::size_t, std::size_t>>> spans_;
  std::vector<bool> blocked_;
  std::vector<std::pair<int, std::uint64_t>> due_;
  std::vector<std::vector<T>> to_;  // per consumer: the items of the batch being posted
};

}  // namespace detail

template <WireItem T, fixed_string Name, std::size_t Depth>
class mpi_link {
  static_assert(Depth > 0, "dflash::mpi::mpi_link<T, Name, Depth>: Depth must be at least 1");
  using core = detail::link_core<T, Name, Depth>;

 public:
  using value_type = T;
  static constexpr auto name = Name;
  static constexpr std::size_t depth = Depth;
  using push_wait = push_wait_key<Name>;
  using pop_wait = pop_wait_key<Name>;

  mpi_link(job& j, std::vector<int> producers, std::vector<int> consumers) : job_(j) {
    auto bad = [](const std::string& m) {
      throw std::invalid_argument("dflash::mpi::mpi_link \"" + std::string(Name.view()) + "\": " + m);
    };
    if (producers.empty()) bad("needs at least one producer rank");
    if (consumers.empty()) bad("needs at least one consumer rank");
    std::vector<bool> seen(static_cast<std::size_t>(j.size()), false);
    for (const auto* v : {&producers, &consumers})
      for (int r : *v) {
        if (r < 0 || r >= j.size())
          bad("rank " + std::to_string(r) + " is not in the job (size " + std::to_string(j.size()) + ")");
        if (seen[static_cast<std::size_t>(r)])
          bad("rank " + std::to_string(r) + " is listed twice (a rank is a producer or a consumer, once)");
        seen[static_cast<std::size_t>(r)] = true;
      }
    core_ = std::make_shared<core>(j, std::move(producers), std::move(consumers));
    job_.attach(core_);
  }
  /// Before start() or after finish(): the link's state goes. While the job
  /// runs, the job keeps it and completes its MPI requests (see job::release).
  ~mpi_link() { job_.release(core_.get(), Name.view()); }
  mpi_link(const mpi_link&) = delete;
  mpi_link& operator=(const mpi_link&) = delete;

  [[nodiscard]] bool is_producer() const noexcept { return core_->is_producer(); }
  [[nodiscard]] bool is_consumer() const noexcept { return core_->is_consumer(); }

  /// Producer side: blocks (recorded as "<Name>.push_wait") until a credit is
  /// free, then hands the item to the progress thread. Throws pipeline_stop
  /// when the job stopped, std::length_error for a buffer over 2 GiB.
  template <class P>
  void send(T&& item, const P& prof) {
    core_->send(std::move(item), prof);
  }

  /// Producer side: an item whose send completed (at most Depth are kept), to
  /// refill and send again: its vectors keep their memory, so a producer
  /// that reuses items allocates nothing per item. Empty if none.
  [[nodiscard]] std::optional<T> take_sent() { return core_->take_sent(); }

  /// Producer side: this rank sends no more items; consumers see FIN after
  /// its last item. job::run does it when this rank's pipeline ends
  /// normally; send() after close() throws std::logic_error.
  void close() { core_->close(); }

  /// Consumer side: the next item, or empty once every producer finished and
  /// everything arrived; `from` (if given) gets the producer rank it came
  /// from. Blocks as "<Name>.pop_wait"; throws pipeline_stop when the job
  /// stopped.
  template <class P>
  std::optional<T> receive(const P& prof, int* from = nullptr) {
    return core_->receive(prof, from);
  }

  /// Consumer side: a consumed item back (at most Depth are kept); the next
  /// item that arrives is received into its vectors (no allocation when they
  /// are large enough, no zeroing when the size is the same).
  void recycle(T&& item) { core_->recycle(std::move(item)); }

  [[nodiscard]] link_stats stats() const { return core_->stats(); }

  /// Nothing of this rank's is pending on the link: as a producer, every item
  /// it sent was consumed (its credit came back); as a consumer, it holds no
  /// unread item and owes no credit. Items still on their way to a consumer
  /// are not seen there, so a consumer rank knows from its own count (or FIN)
  /// that it received everything. Before job::lock_mpi() on both sides of a
  /// link: a rank that holds the lock with traffic pending stalls its peer.
  [[nodiscard]] bool settled() const { return core_->settled(); }

 private:
  job& job_;
  std::shared_ptr<core> core_;
};

/// Last stage on a producer rank: sends each item over the link.
template <ProfilerPolicy P, class Link>
struct mpi_link_sink {
  static constexpr auto name = name_cat<Link::name, ".send">;
  using input_type = typename Link::value_type;
  using output_type = void;
  using keys = key_set<name_cat<Link::name, ".push_wait">>;

  Link* link;
  [[no_unique_address]] profiler_ref<P> prof;

  void operator()(input_type&& x) { link->send(std::move(x), prof.get()); }
};

/// First stage on a consumer rank: the items producers sent; exhausted once
/// every producer finished.
template <ProfilerPolicy P, class Link>
struct mpi_link_source {
  static constexpr auto name = name_cat<Link::name, ".recv">;
  using input_type = void;
  using output_type = typename Link::value_type;
  using keys = key_set<name_cat<Link::name, ".pop_wait">>;

  Link* link;
  [[no_unique_address]] profiler_ref<P> prof;

  std::optional<output_type> operator()() { return link->receive(prof.get()); }
};

}  // namespace dflash::mpi
