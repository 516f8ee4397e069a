// How a mixture-of-experts layer's rows travel between the ranks of its expert-parallel
// group, as an interface: model/ may not depend on parallel/, so the layer calls this and
// parallel/expert_parallel/token_dispatcher.h implements it over the ep communicator. At
// ep = 1 the layer runs the same calls on IdentityExchange (below), where nothing moves.
//
// Rows are token vectors of `width` floats. A microbatch's rows leave the layer sorted by
// expert (kernels/token_permutation.h), which is also grouped by destination rank, since
// rank d owns the consecutive experts d*El .. (d+1)*El - 1. dispatch moves them to the
// ranks owning their experts and leaves them expert-major there (local expert 0's rows
// from source ranks 0, 1, .., then expert 1's, ..): the order the expert GEMMs read.
// combine is its inverse. In backward each is the other's adjoint: the output gradients go
// to the experts by a dispatch, the input gradients come back by a combine.
//
// Each also comes as a start and a finish (start_dispatch / start_combine), so that the
// layer can compute while rows travel (--moe-overlap-parts, docs/moe.md "Overlapped
// all-to-all"): start moves nothing it does not have to and returns at once; finish waits
// and completes. The blocking calls are start + finish.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>

#include "kernels/phase_profile.h"

namespace mt {

// One microbatch's row counts per (rank, local expert), as exchange_counts leaves them.
struct ExchangeCounts {
  const int32_t* send;  // (ep, El): rows this rank sends to local expert i of rank d
  const int32_t* recv;  // (ep, El): rows rank s sends to this rank's local expert i
  int per_rank;         // El, local experts per rank
};

// An exchange started and not yet finished. finish() once, on the thread that started it;
// until then the buffers and counts passed to the start stay alive and untouched (dst may
// be read only after finish).
class PendingExchange {
 public:
  virtual ~PendingExchange() = default;
  virtual void finish() = 0;
};

class TokenExchange {
 public:
  virtual ~TokenExchange() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // False where nothing travels (IdentityExchange): the layer then packs the experts' rows
  // straight from the tokens, in the experts' own form (ExpertMlp::gather_input), and lets
  // their outputs land where the combine reads them, instead of the fp32 row blocks an
  // exchange carries.
  virtual bool moves_rows() const { return true; }

  // recv_counts from every rank's send_counts (layouts as ExchangeCounts). Blocking: the
  // payload sizes depend on it.
  virtual void exchange_counts(const int32_t* send_counts, int32_t* recv_counts, int per_rank) = 0;
  // The same, started: recv_counts is valid after finish, and both arrays stay untouched
  // until then (the overlapped layer gathers rows meanwhile). By default blocking.
  virtual std::unique_ptr<PendingExchange> start_exchange_counts(const int32_t* send_counts,
                                                                 int32_t* recv_counts,
                                                                 int per_rank) {
    exchange_counts(send_counts, recv_counts, per_rank);
    return std::make_unique<Finished>();
  }

  // dst (received rows, width), expert-major = the rows src (this rank's sent rows, width,
  // expert-sorted) of every rank of the group, for this rank's experts. combine is the
  // inverse: dst (this rank's rows, expert-sorted) from src (expert-major). dst may be src.
  // staging holds as many rows as the larger side and is overwritten. Collective over the
  // group, in the same order on every rank; blocking.
  virtual void dispatch(float* dst, const float* src, float* staging, const ExchangeCounts& c,
                        int width) = 0;
  virtual void combine(float* dst, const float* src, float* staging, const ExchangeCounts& c,
                       int width) = 0;

  // The same exchanges, split: dispatch's rows travel into staging between start and
  // finish, and finish regroups them into dst; combine regroups src into staging at the
  // start, and its rows travel into dst until finish. Exchanges started on one group finish
  // in the order they were started, on every rank. By default (ep = 1, where nothing
  // travels) start does the whole exchange and finish nothing.
  virtual std::unique_ptr<PendingExchange> start_dispatch(float* dst, const float* src,
                                                          float* staging, const ExchangeCounts& c,
                                                          int width) {
    dispatch(dst, src, staging, c, width);
    return std::make_unique<Finished>();
  }
  virtual std::unique_ptr<PendingExchange> start_combine(float* dst, const float* src,
                                                         float* staging, const ExchangeCounts& c,
                                                         int width) {
    combine(dst, src, staging, c, width);
    return std::make_unique<Finished>();
  }

 private:
  struct Finished final : PendingExchange {
    void finish() override {}
  };
};

// ep = 1: every expert is local and the expert-sorted order already is expert-major, so
// dispatch and combine copy only when dst is not src.
class IdentityExchange final : public TokenExchange {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  bool moves_rows() const override { return false; }
  void exchange_counts(const int32_t* send_counts, int32_t* recv_counts, int per_rank) override {
    std::memcpy(recv_counts, send_counts, size_t(per_rank) * sizeof(int32_t));
  }
  void dispatch(float* dst, const float* src, float*, const ExchangeCounts& c, int width) override {
    copy_rows(dst, src, c, width);
  }
  void combine(float* dst, const float* src, float*, const ExchangeCounts& c, int width) override {
    copy_rows(dst, src, c, width);
  }

 private:
  static void copy_rows(float* dst, const float* src, const ExchangeCounts& c, int width) {
    if (dst == src) return;
    size_t rows = 0;
    for (int e = 0; e < c.per_rank; ++e) rows += size_t(c.send[e]);
    PhaseScope phase(Phase::permutation, 0, 2.0 * double(rows) * width * sizeof(float));
    std::memcpy(dst, src, rows * size_t(width) * sizeof(float));
  }
};

}  // namespace mt
