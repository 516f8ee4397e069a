// The TokenExchange contract (model/token_exchange.h) on both implementations: dispatch
// leaves every rank's rows for this rank's experts expert-major (local expert 0's rows from
// source ranks 0, 1, .., then expert 1's), and combine brings them back where they were,
// out of place and in place alike. IdentityExchange at ep 1, TokenDispatcher's all-to-all-v
// at ep 2 and 4 over the local backend. Started exchanges (start_dispatch / start_combine,
// as the overlapped MoE layer issues them, model/moe_parts.h): two parts in flight at once,
// each landing where its blocking twin would, on staging of its own.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "core/threads.h"
#include "model/token_exchange.h"
#include "parallel/expert_parallel/token_dispatcher.h"
#include "parallel/parallel_context.h"

namespace mt {
namespace {

constexpr int kWidth = 3;    // a row is (source rank, global expert, index within the pair)
constexpr int kPerRank = 3;  // local experts
constexpr int kMaxRows = 4;  // rows one rank sends one expert at most

// Rows rank `src` sends global expert e: 0..kMaxRows, some zero (an empty block must work).
int32_t rows_for(int src, int e) {
  return int32_t((2 * src + 3 * e + src * e + 1) % (kMaxRows + 1));
}

void check_exchange(TokenExchange& x, bool in_place) {
  const int ranks = x.size(), me = x.rank(), E = ranks * kPerRank;
  // This rank's rows, expert-sorted: row i of the block for expert e reads (me, e, i).
  std::vector<int32_t> send_counts(E), recv_counts(E);
  std::vector<float> rows;
  for (int e = 0; e < E; ++e) {
    send_counts[e] = rows_for(me, e);
    for (int i = 0; i < send_counts[e]; ++i)
      rows.insert(rows.end(), {float(me), float(e), float(i)});
  }
  x.exchange_counts(send_counts.data(), recv_counts.data(), kPerRank);
  const ExchangeCounts c{send_counts.data(), recv_counts.data(), kPerRank};

  std::vector<float> want;  // expert-major: local expert, then source rank, then index
  for (int le = 0; le < kPerRank; ++le)
    for (int s = 0; s < ranks; ++s) {
      const int e = me * kPerRank + le;
      ASSERT_EQ(recv_counts[s * kPerRank + le], rows_for(s, e)) << "from " << s << " for " << e;
      for (int i = 0; i < rows_for(s, e); ++i)
        want.insert(want.end(), {float(s), float(e), float(i)});
    }
  const size_t most = std::max(rows.size(), want.size());
  std::vector<float> buffer(most), staging(most);
  std::copy(rows.begin(), rows.end(), buffer.begin());
  std::vector<float> received(most);
  float* dispatched = in_place ? buffer.data() : received.data();
  x.dispatch(dispatched, buffer.data(), staging.data(), c, kWidth);
  EXPECT_EQ(std::vector<float>(dispatched, dispatched + want.size()), want) << "rank " << me;

  std::vector<float> back(most);
  float* combined = in_place ? dispatched : back.data();
  x.combine(combined, dispatched, staging.data(), c, kWidth);
  EXPECT_EQ(std::vector<float>(combined, combined + rows.size()), rows) << "rank " << me;
}

TEST(TokenExchange, IdentityAtEpOneMovesNothing) {
  IdentityExchange x;
  check_exchange(x, /*in_place=*/false);
  check_exchange(x, /*in_place=*/true);
}

// One part of the started-exchange check: its rows tagged with `part` in the third column.
struct Part {
  std::vector<int32_t> send_counts, recv_counts;
  std::vector<float> rows, want, dispatched, staging, back;
};

Part make_part(TokenExchange& x, int part) {
  const int ranks = x.size(), me = x.rank(), E = ranks * kPerRank;
  Part p{std::vector<int32_t>(E), std::vector<int32_t>(E), {}, {}, {}, {}, {}};
  for (int e = 0; e < E; ++e) {
    p.send_counts[e] = rows_for(me + part, e);
    for (int i = 0; i < p.send_counts[e]; ++i)
      p.rows.insert(p.rows.end(), {float(me), float(e), float(100 * part + i)});
  }
  x.exchange_counts(p.send_counts.data(), p.recv_counts.data(), kPerRank);
  for (int le = 0; le < kPerRank; ++le)
    for (int s = 0; s < ranks; ++s)
      for (int i = 0; i < rows_for(s + part, me * kPerRank + le); ++i)
        p.want.insert(p.want.end(), {float(s), float(me * kPerRank + le), float(100 * part + i)});
  const size_t most = std::max(p.rows.size(), p.want.size());
  p.dispatched.resize(most), p.staging.resize(most), p.back.resize(most);
  return p;
}

// Both parts' dispatches started before either finishes, then both combines.
void check_started(TokenExchange& x) {
  std::vector<Part> parts;
  for (int i = 0; i < 2; ++i) parts.push_back(make_part(x, i));
  std::vector<std::unique_ptr<PendingExchange>> pending;
  for (Part& p : parts) {
    const ExchangeCounts c{p.send_counts.data(), p.recv_counts.data(), kPerRank};
    pending.push_back(
        x.start_dispatch(p.dispatched.data(), p.rows.data(), p.staging.data(), c, kWidth));
  }
  for (auto& w : pending) w->finish();
  pending.clear();
  for (Part& p : parts) {
    EXPECT_EQ(std::vector<float>(p.dispatched.begin(), p.dispatched.begin() + p.want.size()),
              p.want)
        << "rank " << x.rank();
    const ExchangeCounts c{p.send_counts.data(), p.recv_counts.data(), kPerRank};
    pending.push_back(
        x.start_combine(p.back.data(), p.dispatched.data(), p.staging.data(), c, kWidth));
  }
  for (auto& w : pending) w->finish();
  for (Part& p : parts)
    EXPECT_EQ(std::vector<float>(p.back.begin(), p.back.begin() + p.rows.size()), p.rows)
        << "rank " << x.rank();
}

TEST(TokenExchange, StartedExchangesAtEpOne) {
  IdentityExchange x;
  check_started(x);
}

void check_dispatcher(int ep) {
  run_local(ep, WorldOptions{.timeout_s = 60}, [&](CommWorld& w) {
    set_compute_threads(1);
    ParallelContext ctx = make_parallel_context(w, MeshShape{1, ep, 1, ep});
    TokenDispatcher x(ctx.ep);
    ASSERT_EQ(x.size(), ep);
    check_exchange(x, /*in_place=*/false);
    check_exchange(x, /*in_place=*/true);
    check_started(x);
  });
}

TEST(TokenExchange, DispatcherAtEpTwo) {
  check_dispatcher(2);
}

TEST(TokenExchange, DispatcherAtEpFour) {
  check_dispatcher(4);
}

}  // namespace
}  // namespace mt
