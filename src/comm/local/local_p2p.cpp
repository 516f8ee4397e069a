// Point-to-point messages of the local backend.
//
// A send and a receive are matched at issue time, in issue order per (source, destination,
// tag) channel, and whichever of the two is issued second copies the data straight from the
// send buffer into the receive buffer. Nothing is queued behind collectives and nothing
// waits for the peer to make progress, so "send to next, receive from next" on both sides
// of a pipeline boundary cannot deadlock, and a receive can be pending while the rank is
// inside a collective on another communicator.
#include <cstring>

#include "comm/local/local_communicator.h"
#include "comm/local/local_job.h"
#include "comm/local/local_work.h"
#include "core/error.h"
#include "core/timer.h"

namespace mt::local {

namespace {

// Copies the message and completes both sides.
void deliver(P2POp& s, P2POp& r) {
  if (s.count != r.count || s.dtype != r.dtype) {
    const std::string why =
        str("the send has ", s.count, " ", dtype_name(s.dtype), " elements but the recv expects ",
            r.count, " ", dtype_name(r.dtype));
    s.error = why;
    r.error = why;
    s.status.store(2);
    r.status.store(2);
    return;
  }
  if (s.count > 0 && s.send != r.recv) std::memcpy(r.recv, s.send, s.count * dtype_size(s.dtype));
  s.status.store(1);
  r.status.store(1);
}

}  // namespace

Work LocalCommunicator::send(const void* buf, size_t count, DType t, int peer, int tag) {
  return p2p(true, buf, nullptr, count, t, peer, tag);
}

Work LocalCommunicator::recv(void* buf, size_t count, DType t, int peer, int tag) {
  return p2p(false, nullptr, buf, count, t, peer, tag);
}

Work LocalCommunicator::p2p(bool is_send, const void* sbuf, void* rbuf, size_t count, DType t,
                            int peer, int tag) {
  const char* op_kind = is_send ? "send" : "recv";
  MT_CHECK(peer >= 0 && peer < size(), op_kind, " peer ", peer, " outside ", group_->name);
  MT_CHECK((is_send ? sbuf : rbuf) != nullptr || count == 0, op_kind, " buffer is null");
  stats_->calls.fetch_add(1, std::memory_order_relaxed);
  if (is_send && peer != me_)
    stats_->bytes_sent.fetch_add(count * dtype_size(t), std::memory_order_relaxed);

  auto op = std::make_shared<P2POp>();
  op->send = sbuf;
  op->recv = rbuf;
  op->count = count;
  op->dtype = t;
  const P2PWork::Key key = is_send ? P2PWork::Key{me_, peer, tag} : P2PWork::Key{peer, me_, tag};
  std::shared_ptr<P2POp> match;
  {
    std::lock_guard lock(group_->mailbox.mu);
    Mailbox::Channel& ch = group_->mailbox.channels[key];
    auto& theirs = is_send ? ch.recvs : ch.sends;
    if (theirs.empty()) {
      (is_send ? ch.sends : ch.recvs).push_back(op);
    } else {
      match = std::move(theirs.front());
      theirs.pop_front();
    }
  }
  if (match) {
    if (is_send) {
      deliver(*op, *match);
    } else {
      deliver(*match, *op);
    }
    group_->bell.ring();
  }
  return Work(std::make_shared<P2PWork>(group_, op, key, is_send, global_rank_, queue_,
                                        queue_->issued(), stats_, p2p_seq_++));
}

int P2PWork::peer_global() const {
  return g_->members[size_t(is_send_ ? std::get<1>(key_) : std::get<0>(key_))];
}

std::string P2PWork::where() const {
  return str("rank ", global_rank_, ": ", is_send_ ? "send" : "recv", " #", seq_,
             is_send_ ? " to" : " from", " rank ", peer_global(), " (tag ", std::get<2>(key_),
             ") on group ", g_->name);
}

std::string P2PWork::missing() const {
  return str("rank ", peer_global(), is_send_ ? " did not post a matching recv" : " did not send");
}

bool P2PWork::test() {
  const bool prior_done = q_->poll(prior_);  // a test is a safe point for the collectives
  const int st = op_->status.load();
  if (st == 0 || !prior_done) return false;
  if (st == 2) fail(op_->error);
  return true;
}

void P2PWork::wait() {
  Stopwatch sw;
  LocalJob& job = g_->job;
  const double timeout = job.options().timeout_s;
  const double deadline = now_seconds() + timeout;
  // check() runs under the doorbell's lock, and fail() rings every doorbell: leave first.
  std::string why;
  try {
    g_->bell.wait(
        job.wait_policy(), [&] { return op_->status.load() != 0; },
        [&] {
          if (job.failed())
            why =
                str("stopped because rank ", job.failed_rank(), " failed: ", job.failure_message());
          else if (now_seconds() > deadline)
            why = str(missing(), " within ", timeout, " s");
          if (!why.empty()) throw RuntimeError(why);
        });
  } catch (const RuntimeError&) {
    fail(why);
  }
  if (op_->status.load() == 2) fail(op_->error);
  q_->wait(prior_);
  stats_->wait_seconds.fetch_add(sw.elapsed(), std::memory_order_relaxed);
}

P2PWork::~P2PWork() {
  if (!withdrawn_ && op_->status.load() == 0) withdraw();
}

void P2PWork::withdraw() {
  if (withdrawn_) return;
  withdrawn_ = true;
  bool withdrawn = false;
  {
    std::lock_guard lock(g_->mailbox.mu);
    auto& ch = g_->mailbox.channels[key_];
    auto& mine = is_send_ ? ch.sends : ch.recvs;
    for (auto it = mine.begin(); it != mine.end(); ++it)
      if (*it == op_) {
        mine.erase(it);
        withdrawn = true;
        break;
      }
  }
  if (!withdrawn)
    while (op_->status.load() == 0) std::this_thread::yield();
}

void P2PWork::fail(const std::string& why) {
  // Withdraw the request so a late peer cannot write into a buffer the caller may free.
  withdraw();
  auto error = std::make_exception_ptr(RuntimeError(where() + ": " + why));
  g_->job.fail(global_rank_, error);
  std::rethrow_exception(error);
}

}  // namespace mt::local
