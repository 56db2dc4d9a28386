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
// * Backpressure by credits: each producer rank has at most Depth items in
//   flight (sent, not yet taken by a consumer's source stage); a consumer
//   returns a credit when its source stage takes the item. A consumer so
//   buffers at most Depth items per producer. A producer sends each item to
//   the consumer with the fewest of its items in flight.
// * Exactly once: every item goes to one consumer and is delivered once.
// * Close: when a producer rank's pipeline ends normally (job::run) it sends
//   FIN to every consumer after its last item; a consumer's source returns
//   "exhausted" once every producer's FIN and item has arrived.
// * Stop / error: job stops (see job.hpp) wake blocked sink / source calls,
//   which end their pipeline with dflash::pipeline_stop.
// * Keys: "<Name>.push_wait" (sink blocked for a credit), "<Name>.pop_wait"
//   (source blocked for an item), plus the stages' own "<Name>.send.*" /
//   "<Name>.recv.*".
// * Wire: trivially copyable T, or wire<T> (wire.hpp). One header message per
//   item, then each buffer straight from the item's memory (MPI_Issend).
// The link must outlive job::finish() (its requests complete there).

#include <mpi.h>

#include <algorithm>
#include <array>
#include <condition_variable>
#include <cstring>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <list>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "dflash/mpi/job.hpp"
#include "dflash/mpi/wire.hpp"
#include "dflash/pipeline/pipeline.hpp"
#include "dflash/pipeline/stage.hpp"
#include "dflash/profile/profiler_policy.hpp"
#include "dflash/queue/queue_keys.hpp"

namespace dflash::mpi {

/// Observed on the consumer side, for tests and reports.
struct link_stats {
  std::uint64_t received = 0;              ///< items delivered to this rank's source stage
  std::uint64_t max_buffered_per_producer = 0;  ///< most items of one producer held here at once
};

template <WireItem T, fixed_string Name, std::size_t Depth>
class mpi_link final : public channel {
  static_assert(Depth > 0, "dflash::mpi::mpi_link<T, Name, Depth>: Depth must be at least 1");

 public:
  using value_type = T;
  static constexpr auto name = Name;
  static constexpr std::size_t depth = Depth;
  using push_wait = push_wait_key<Name>;
  using pop_wait = pop_wait_key<Name>;

  mpi_link(job& j, std::vector<int> producers, std::vector<int> consumers)
      : job_(j), producers_(std::move(producers)), consumers_(std::move(consumers)) {
    auto bad = [](const std::string& m) {
      throw std::invalid_argument("dflash::mpi::mpi_link \"" + std::string(Name.view()) + "\": " + m);
    };
    if (producers_.empty()) bad("needs at least one producer rank");
    if (consumers_.empty()) bad("needs at least one consumer rank");
    std::vector<bool> seen(static_cast<std::size_t>(j.size()), false);
    for (const auto* v : {&producers_, &consumers_})
      for (int r : *v) {
        if (r < 0 || r >= j.size())
          bad("rank " + std::to_string(r) + " is not in the job (size " + std::to_string(j.size()) + ")");
        if (seen[static_cast<std::size_t>(r)])
          bad("rank " + std::to_string(r) + " is listed twice (a rank is a producer or a consumer, once)");
        seen[static_cast<std::size_t>(r)] = true;
      }
    for (int r : producers_) producer_ |= r == j.rank();
    for (int r : consumers_) consumer_ |= r == j.rank();
    outstanding_.assign(consumers_.size(), 0);
    buffered_.assign(static_cast<std::size_t>(j.size()), 0);
    credit_due_.assign(static_cast<std::size_t>(j.size()), 0);
    job_.attach(this);
  }
  ~mpi_link() override { job_.detach(this); }
  mpi_link(const mpi_link&) = delete;
  mpi_link& operator=(const mpi_link&) = delete;

  [[nodiscard]] bool is_producer() const noexcept { return producer_; }
  [[nodiscard]] bool is_consumer() const noexcept { return consumer_; }

  /// Producer side: blocks (recorded as "<Name>.push_wait") until a credit is
  /// free, then hands the item to the progress thread. Throws pipeline_stop
  /// when the job stopped.
  template <class P>
  void send(T&& item, const P& prof) {
    if (!producer_) throw std::logic_error("dflash::mpi::mpi_link::send: this rank is not a producer of the link");
    std::unique_lock lk(m_);
    if (in_flight_ >= Depth && !stopped_) {
      auto t = prof.scope(push_wait{});
      cv_.wait(lk, [&] { return in_flight_ < Depth || stopped_; });
    }
    if (stopped_) throw pipeline_stop{};
    ++in_flight_;
    outbox_.push_back(std::move(item));
    lk.unlock();
    job_.wake();
  }

  /// Consumer side: the next item, or empty once every producer finished and
  /// everything arrived. Blocks as "<Name>.pop_wait"; throws pipeline_stop
  /// when the job stopped.
  template <class P>
  std::optional<T> receive(const P& prof) {
    if (!consumer_) throw std::logic_error("dflash::mpi::mpi_link::receive: this rank is not a consumer of the link");
    std::unique_lock lk(m_);
    if (inbox_.empty() && !closed_ && !stopped_) {
      auto t = prof.scope(pop_wait{});
      cv_.wait(lk, [&] { return !inbox_.empty() || closed_ || stopped_; });
    }
    if (stopped_) throw pipeline_stop{};
    if (inbox_.empty()) return std::nullopt;  // closed
    auto [item, src] = std::move(inbox_.front());
    inbox_.pop_front();
    --buffered_[static_cast<std::size_t>(src)];
    ++credit_due_[static_cast<std::size_t>(src)];
    ++stats_.received;
    lk.unlock();
    job_.wake();  // the credit goes back now
    return std::move(item);
  }

  [[nodiscard]] link_stats stats() const {
    std::lock_guard lk(m_);
    return stats_;
  }

  // ---- channel (progress thread) ---------------------------------------------
  int tag_base() const override { return tag_base_; }

  void on_stop() override {
    std::lock_guard lk(m_);
    stopped_ = true;
    outbox_.clear();  // not yet posted: dropped
    cv_.notify_all();
  }
  bool finish_sending() override {
    fin_pending_ = producer_;
    std::lock_guard lk(m_);
    return consumer_ && fins_ < producers_.size();
  }

  bool quiescent() override {
    std::lock_guard lk(m_);
    return sends_.empty() && (outbox_.empty() || stopped_) && !fin_pending_;
  }

  bool progress() override {
    bool busy = false;
    if (producer_) busy |= progress_producer();
    if (consumer_) busy |= progress_consumer();
    return busy;
  }

 private:
  static constexpr int tag_base_ = job::tag_links + 3 * static_cast<int>(key_set_hash(std::array{Name.view()}) % 8000);
  static constexpr int tag_header = tag_base_, tag_buffer = tag_base_ + 1, tag_credit = tag_base_ + 2;

  struct send_rec {
    T item;
    std::vector<std::byte> header;
    std::vector<MPI_Request> reqs;
  };
  struct recv_rec {
    T item;
    int src;
    std::vector<MPI_Request> reqs;
  };

  static int count_of(std::size_t bytes) {
    if (bytes > static_cast<std::size_t>(INT32_MAX))
      throw std::length_error("dflash::mpi::mpi_link: one buffer of an item is over 2 GiB (MPI count limit)");
    return static_cast<int>(bytes);
  }
  static bool test_all(std::vector<MPI_Request>& reqs) {
    int done = 0;
    check(MPI_Testall(static_cast<int>(reqs.size()), reqs.data(), &done, MPI_STATUSES_IGNORE), "MPI_Testall");
    return done != 0;
  }

  bool progress_producer() {
    bool busy = false;
    MPI_Comm c = job_.comm();
    MPI_Status st;
    int flag = 0;
    // credits back from consumers
    for (;;) {
      check(MPI_Iprobe(MPI_ANY_SOURCE, tag_credit, c, &flag, &st), "MPI_Iprobe");
      if (!flag) break;
      std::uint64_t n = 0;
      check(MPI_Recv(&n, 1, MPI_UINT64_T, st.MPI_SOURCE, tag_credit, c, MPI_STATUS_IGNORE), "MPI_Recv");
      std::lock_guard lk(m_);
      in_flight_ -= std::min<std::uint64_t>(n, in_flight_);
      for (std::size_t i = 0; i < consumers_.size(); ++i)
        if (consumers_[i] == st.MPI_SOURCE) outstanding_[i] -= std::min<std::uint64_t>(n, outstanding_[i]);
      cv_.notify_all();
      busy = true;
    }
    // post what the sink handed over
    for (;;) {
      std::optional<T> item;
      std::size_t to = 0;
      {
        std::lock_guard lk(m_);
        if (outbox_.empty()) break;
        item.emplace(std::move(outbox_.front()));
        outbox_.pop_front();
        for (std::size_t i = 1; i < consumers_.size(); ++i)
          if (outstanding_[i] < outstanding_[to]) to = i;
        ++outstanding_[to];
      }
      auto& s = sends_.emplace_back(send_rec{std::move(*item), {}, {}});
      std::vector<wire_buffer> bufs;
      wire_encode(s.item, s.header, bufs);
      s.header.insert(s.header.begin(), std::byte{1});  // never empty: a 0-byte header means FIN
      s.reqs.resize(1 + bufs.size());
      const int dest = consumers_[to];
      check(MPI_Issend(s.header.data(), count_of(s.header.size()), MPI_BYTE, dest, tag_header, c, &s.reqs[0]),
            "MPI_Issend");
      for (std::size_t b = 0; b < bufs.size(); ++b)
        check(MPI_Issend(bufs[b].data, count_of(bufs[b].bytes), MPI_BYTE, dest, tag_buffer, c, &s.reqs[1 + b]),
              "MPI_Issend");
      busy = true;
    }
    // completed sends free their item
    for (auto it = sends_.begin(); it != sends_.end();) {
      if (test_all(it->reqs)) {
        std::lock_guard lk(m_);
        it = sends_.erase(it);
        busy = true;
      } else {
        ++it;
      }
    }
    // FIN after the last item (same tag, so it cannot overtake the headers)
    if (fin_pending_) {
      bool empty;
      {
        std::lock_guard lk(m_);
        empty = outbox_.empty();
      }
      if (empty) {
        for (int dest : consumers_) {
          auto& s = sends_.emplace_back();
          s.reqs.resize(1);
          check(MPI_Issend(nullptr, 0, MPI_BYTE, dest, tag_header, c, &s.reqs[0]), "MPI_Issend");
        }
        fin_pending_ = false;
        busy = true;
      }
    }
    return busy;
  }

  bool progress_consumer() {
    bool busy = false;
    MPI_Comm c = job_.comm();
    MPI_Status st;
    int flag = 0;
    // headers (or FIN): build the item, post its buffers' receives
    for (;;) {
      check(MPI_Iprobe(MPI_ANY_SOURCE, tag_header, c, &flag, &st), "MPI_Iprobe");
      if (!flag) break;
      int n = 0;
      MPI_Get_count(&st, MPI_BYTE, &n);
      std::vector<std::byte> h(static_cast<std::size_t>(n));
      check(MPI_Recv(h.data(), n, MPI_BYTE, st.MPI_SOURCE, tag_header, c, MPI_STATUS_IGNORE), "MPI_Recv");
      busy = true;
      if (n == 0) {
        ++fins_;
        continue;
      }
      auto& r = recvs_.emplace_back();
      r.src = st.MPI_SOURCE;
      std::vector<wire_buffer> bufs;
      wire_decode(r.item, h.data() + 1, h.size() - 1, bufs);
      r.reqs.resize(bufs.size());
      for (std::size_t b = 0; b < bufs.size(); ++b)
        check(MPI_Irecv(bufs[b].data, count_of(bufs[b].bytes), MPI_BYTE, r.src, tag_buffer, c, &r.reqs[b]),
              "MPI_Irecv");
      std::lock_guard lk(m_);
      auto& b = buffered_[static_cast<std::size_t>(r.src)];
      ++b;
      stats_.max_buffered_per_producer = std::max<std::uint64_t>(stats_.max_buffered_per_producer, b);
    }
    // complete items go to the source stage, in arrival order per producer
    std::vector<bool> blocked(buffered_.size(), false);
    for (auto it = recvs_.begin(); it != recvs_.end();) {
      auto&& blk = blocked[static_cast<std::size_t>(it->src)];
      if (!blk && (it->reqs.empty() || test_all(it->reqs))) {
        std::lock_guard lk(m_);
        inbox_.emplace_back(std::move(it->item), it->src);
        it = recvs_.erase(it);
        cv_.notify_all();
        busy = true;
      } else {
        blk = true;
        ++it;
      }
    }
    // credits for what the source stage took
    std::vector<std::pair<int, std::uint64_t>> due;
    {
      std::lock_guard lk(m_);
      for (std::size_t r = 0; r < credit_due_.size(); ++r)
        if (credit_due_[r]) due.emplace_back(static_cast<int>(r), std::exchange(credit_due_[r], 0));
      if (!closed_ && fins_ == producers_.size() && recvs_.empty()) {
        closed_ = true;
        cv_.notify_all();
      }
    }
    for (auto [r, n] : due) {
      std::vector<std::byte> b(sizeof n);
      std::memcpy(b.data(), &n, sizeof n);
      job_.post_owned(std::move(b), r, tag_credit);
      busy = true;
    }
    return busy;
  }

  job& job_;
  std::vector<int> producers_, consumers_;
  bool producer_ = false, consumer_ = false;

  mutable std::mutex m_;
  std::condition_variable cv_;
  bool stopped_ = false, closed_ = false;
  // producer
  std::size_t in_flight_ = 0;
  std::deque<T> outbox_;
  std::vector<std::uint64_t> outstanding_;  // per consumer index
  // consumer
  std::deque<std::pair<T, int>> inbox_;
  std::vector<std::uint64_t> buffered_, credit_due_;  // per rank
  link_stats stats_;

  // progress thread only
  std::list<send_rec> sends_;
  std::list<recv_rec> recvs_;
  bool fin_pending_ = false;
  std::size_t fins_ = 0;
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
