// A communicator that forwards every call to another one and tells the test about each
// collective before issuing it (which op), so that a test can look at a buffer when a
// reduction is issued, or hold one rank back (a sleep) before one of its collectives.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "comm/communicator.h"

namespace mt::test_util {

class ForwardingCommunicator final : public Communicator {
 public:
  // before(op): op is "all_reduce", "reduce_scatter" or "all_gather".
  ForwardingCommunicator(std::shared_ptr<Communicator> inner,
                         std::function<void(const std::string&)> before)
      : inner_(std::move(inner)), before_(std::move(before)) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  int global_rank(int i) const override { return inner_->global_rank(i); }
  const std::string& name() const override { return inner_->name(); }
  Work all_reduce(const void* s, void* r, size_t n, DType t, ReduceOp op) override {
    before_("all_reduce");
    return inner_->all_reduce(s, r, n, t, op);
  }
  Work reduce_scatter(const void* s, void* r, size_t n, DType t, ReduceOp op) override {
    before_("reduce_scatter");
    return inner_->reduce_scatter(s, r, n, t, op);
  }
  Work all_gather(const void* s, void* r, size_t n, DType t) override {
    before_("all_gather");
    return inner_->all_gather(s, r, n, t);
  }
  Work broadcast(void* b, size_t n, DType t, int root) override {
    return inner_->broadcast(b, n, t, root);
  }
  Work all_to_all_v(const void* s, const size_t* sc, void* r, const size_t* rc, DType t) override {
    return inner_->all_to_all_v(s, sc, r, rc, t);
  }
  Work send(const void* b, size_t n, DType t, int peer, int tag) override {
    return inner_->send(b, n, t, peer, tag);
  }
  Work recv(void* b, size_t n, DType t, int peer, int tag) override {
    return inner_->recv(b, n, t, peer, tag);
  }
  Work barrier() override { return inner_->barrier(); }
  CommStats stats() const override { return inner_->stats(); }
  void reset_stats() override { inner_->reset_stats(); }

 private:
  std::shared_ptr<Communicator> inner_;
  std::function<void(const std::string&)> before_;
};

}  // namespace mt::test_util
