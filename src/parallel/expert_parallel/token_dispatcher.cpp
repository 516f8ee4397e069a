#include "parallel/expert_parallel/token_dispatcher.h"

#include <utility>

#include "comm/hybrid/hierarchical_communicator.h"
#include "core/error.h"
#include "core/timer.h"
#include "kernels/token_permutation.h"

namespace mt {

// A started exchange: the all-to-all-v's Work, the counts it reads, and for a dispatch the
// regroup that finish does once the rows are in staging.
class TokenDispatcher::Pending final : public PendingExchange {
 public:
  struct Regroup {
    float* dst = nullptr;  // null: a combine, nothing to do after the wait
    const float* staging = nullptr;
    const int32_t* recv = nullptr;
    int ranks = 0, per_rank = 0, width = 0;
  };
  Pending(TokenDispatcher& owner, Elems elems) : owner_(owner), elems_(std::move(elems)) {}
  void start(Work w, const Regroup& r) { work_ = std::move(w), regroup_ = r; }
  const Elems& elems() const { return elems_; }
  void finish() override {
    owner_.wait(work_);
    const Regroup& r = regroup_;
    if (!r.dst) return;
    regroup_blocks(r.dst, r.staging, r.recv, r.ranks, r.per_rank, r.width,
                   /*to_expert_major=*/true);
    if (owner_.sink_) owner_.last_dispatch_end_ = now_seconds();
  }

 private:
  TokenDispatcher& owner_;
  Elems elems_;
  Work work_;
  Regroup regroup_;
};

TokenDispatcher::TokenDispatcher(std::shared_ptr<Communicator> ep)
    : ep_(std::move(ep)), send_elems_(ep_->size()), recv_elems_(ep_->size()) {}

void TokenDispatcher::exchange_counts(const int32_t* send_counts, int32_t* recv_counts,
                                      int per_rank) {
  for (int d = 0; d < size(); ++d) send_elems_[d] = recv_elems_[d] = size_t(per_rank);
  mark_issue("ep counts issued", false);
  WaitedAtOnce at_once;
  Work w = ep_->all_to_all_v(send_counts, send_elems_.data(), recv_counts, recv_elems_.data(),
                             DType::i32);
  wait(w);
}

std::unique_ptr<PendingExchange> TokenDispatcher::start_exchange_counts(const int32_t* send_counts,
                                                                        int32_t* recv_counts,
                                                                        int per_rank) {
  mark_issue("ep counts issued", false);
  auto p = std::make_unique<Pending>(*this, Elems{std::vector<size_t>(size(), size_t(per_rank)),
                                                  std::vector<size_t>(size(), size_t(per_rank))});
  p->start(ep_->all_to_all_v(send_counts, p->elems().to_rank.data(), recv_counts,
                             p->elems().from_rank.data(), DType::i32),
           Pending::Regroup{});
  return p;
}

TokenDispatcher::Elems TokenDispatcher::dispatch_elems(const ExchangeCounts& c, int width) const {
  Elems e{std::vector<size_t>(size()), std::vector<size_t>(size())};
  for (int d = 0; d < size(); ++d) {
    int64_t out = 0, in = 0;
    for (int i = 0; i < c.per_rank; ++i) {
      out += c.send[d * c.per_rank + i];
      in += c.recv[d * c.per_rank + i];
    }
    MT_CHECK(out >= 0 && in >= 0, "negative row count");
    e.to_rank[d] = size_t(out) * width;
    e.from_rank[d] = size_t(in) * width;
  }
  return e;
}

void TokenDispatcher::set_span_sink(SpanSink sink) {
  sink_ = std::move(sink);
  last_dispatch_end_ = 0;
  if (auto* h = dynamic_cast<hybrid::HierarchicalCommunicator*>(ep_.get()))
    h->set_recording(bool(sink_));
}

void TokenDispatcher::wait(Work& w) const {
  if (!sink_) return w.wait();
  const double begin = now_seconds();
  w.wait();
  sink_("ep all-to-all wait", "comm", begin, now_seconds());
  drain_worker_spans();
}

void TokenDispatcher::drain_worker_spans() const {
  auto* h = dynamic_cast<hybrid::HierarchicalCommunicator*>(ep_.get());
  if (!h) return;
  for (const auto& span : h->take_spans()) sink_(span.name, "comm worker", span.begin, span.end);
}

void TokenDispatcher::mark_issue(const char* what, bool combine) {
  if (!sink_) return;
  const double now = now_seconds();
  if (combine && last_dispatch_end_ > 0) sink_("experts", "compute", last_dispatch_end_, now);
  if (combine) last_dispatch_end_ = 0;
  sink_(what, "comm", now, now + 1e-6);
}

Work TokenDispatcher::exchange_rows(const float* send, float* recv, const Elems& e) {
  return ep_->all_to_all_v(send, e.to_rank.data(), recv, e.from_rank.data(), DType::f32);
}

void TokenDispatcher::dispatch(float* dst, const float* src, float* staging,
                               const ExchangeCounts& c, int width) {
  const Elems e = dispatch_elems(c, width);
  mark_issue("ep dispatch issued", false);
  {
    WaitedAtOnce at_once;  // no wake-up of the ep communicator's progress thread
    Work w = exchange_rows(src, staging, e);
    wait(w);
  }
  regroup_blocks(dst, staging, c.recv, size(), c.per_rank, width, /*to_expert_major=*/true);
  if (sink_) last_dispatch_end_ = now_seconds();
}

void TokenDispatcher::combine(float* dst, const float* src, float* staging, const ExchangeCounts& c,
                              int width) {
  mark_issue("ep combine issued", true);
  Elems e = dispatch_elems(c, width);
  std::swap(e.to_rank, e.from_rank);
  regroup_blocks(staging, src, c.recv, size(), c.per_rank, width, /*to_expert_major=*/false);
  WaitedAtOnce at_once;
  Work w = exchange_rows(staging, dst, e);
  wait(w);
}

std::unique_ptr<PendingExchange> TokenDispatcher::start_dispatch(float* dst, const float* src,
                                                                 float* staging,
                                                                 const ExchangeCounts& c,
                                                                 int width) {
  mark_issue("ep dispatch issued", false);
  auto p = std::make_unique<Pending>(*this, dispatch_elems(c, width));
  p->start(exchange_rows(src, staging, p->elems()),
           Pending::Regroup{dst, staging, c.recv, size(), c.per_rank, width});
  return p;
}

std::unique_ptr<PendingExchange> TokenDispatcher::start_combine(float* dst, const float* src,
                                                                float* staging,
                                                                const ExchangeCounts& c,
                                                                int width) {
  mark_issue("ep combine issued", true);
  Elems e = dispatch_elems(c, width);
  std::swap(e.to_rank, e.from_rank);
  auto p = std::make_unique<Pending>(*this, std::move(e));
  regroup_blocks(staging, src, c.recv, size(), c.per_rank, width, /*to_expert_major=*/false);
  p->start(exchange_rows(staging, dst, p->elems()), Pending::Regroup{});
  return p;
}

}  // namespace mt
