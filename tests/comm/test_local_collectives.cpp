// Every collective of the local backend, world sizes 1..8, counts 0/1/7/1000/2^20+3,
// every dtype and reduction, in place and out of place, compared exactly.
#include <gtest/gtest.h>

#include "comm/world.h"
#include "comm_test_util.h"

namespace mt {
namespace {

using test::for_each_dtype;
using test::input;
using test::inputs;
using test::reduce_ref;

class LocalCollectives : public ::testing::TestWithParam<int> {};

// Counts mismatches instead of failing per element, so a broken case reports once.
template <typename T>
size_t mismatches(const T* got, const std::vector<T>& want) {
  size_t bad = 0;
  for (size_t i = 0; i < want.size(); ++i) bad += !(got[i] == want[i]);
  return bad;
}

TEST_P(LocalCollectives, AllReduce) {
  const int n = GetParam();
  run_local(n, test::test_options(), [&](CommWorld& w) {
    auto c = w.world();
    for_each_dtype([&]<typename T>() {
      const DType t = dtype_of<T>();
      for (size_t count : test::sweep_counts(n)) {
        const bool big = count > 100000;
        for (ReduceOp op : test::ops_for(t)) {
          if (big && (t != DType::f32 || op == ReduceOp::min)) continue;
          std::vector<T> want(count);
          for (size_t i = 0; i < count; ++i) want[i] = reduce_ref<T>(n, i, op);
          for (bool in_place : {false, true}) {
            std::vector<T> send = inputs<T>(w.rank(), count), recv(count, T(99));
            T* out = in_place ? send.data() : recv.data();
            c->all_reduce(send.data(), out, count, t, op).wait();
            EXPECT_EQ(mismatches(out, want), 0u)
                << "rank " << w.rank() << " " << dtype_name(t) << " " << reduce_op_name(op)
                << " count " << count << (in_place ? " in place" : "");
            if (!in_place) {
              EXPECT_EQ(mismatches(send.data(), inputs<T>(w.rank(), count)), 0u);
            }
          }
        }
      }
    });
  });
}

TEST_P(LocalCollectives, ReduceScatter) {
  const int n = GetParam();
  run_local(n, test::test_options(), [&](CommWorld& w) {
    auto c = w.world();
    const int me = w.rank();
    for_each_dtype([&]<typename T>() {
      const DType t = dtype_of<T>();
      for (size_t block : test::sweep_counts(n)) {
        if (block > 100000) block /= n;  // keep the n*block input a few MB
        for (ReduceOp op : test::ops_for(t)) {
          std::vector<T> want(block);
          for (size_t i = 0; i < block; ++i) want[i] = reduce_ref<T>(n, me * block + i, op);
          for (bool in_place : {false, true}) {
            std::vector<T> send = inputs<T>(me, n * block), recv(block, T(99));
            T* out = in_place ? send.data() + me * block : recv.data();
            c->reduce_scatter(send.data(), out, block, t, op).wait();
            EXPECT_EQ(mismatches(out, want), 0u)
                << "rank " << me << " " << dtype_name(t) << " " << reduce_op_name(op) << " block "
                << block << (in_place ? " in place" : "");
          }
        }
      }
    });
  });
}

TEST_P(LocalCollectives, AllGather) {
  const int n = GetParam();
  run_local(n, test::test_options(), [&](CommWorld& w) {
    auto c = w.world();
    const int me = w.rank();
    for_each_dtype([&]<typename T>() {
      const DType t = dtype_of<T>();
      for (size_t block : test::sweep_counts(n)) {
        if (block > 100000) block /= n;
        std::vector<T> want(n * block);
        for (int r = 0; r < n; ++r)
          for (size_t i = 0; i < block; ++i) want[r * block + i] = input<T>(r, i);
        for (bool in_place : {false, true}) {
          std::vector<T> send = inputs<T>(me, block), recv(n * block, T(99));
          const T* src = send.data();
          if (in_place) {
            std::copy(send.begin(), send.end(), recv.begin() + me * block);
            src = recv.data() + me * block;
          }
          c->all_gather(src, recv.data(), block, t).wait();
          EXPECT_EQ(mismatches(recv.data(), want), 0u)
              << "rank " << me << " " << dtype_name(t) << " block " << block
              << (in_place ? " in place" : "");
        }
      }
    });
  });
}

TEST_P(LocalCollectives, Broadcast) {
  const int n = GetParam();
  run_local(n, test::test_options(), [&](CommWorld& w) {
    auto c = w.world();
    for_each_dtype([&]<typename T>() {
      for (size_t count : test::sweep_counts(n)) {
        for (int root = 0; root < n; root += (count > 100000 ? n : 1)) {
          std::vector<T> buf = inputs<T>(w.rank(), count);
          c->broadcast(std::span<T>(buf), root).wait();
          EXPECT_EQ(mismatches(buf.data(), inputs<T>(root, count)), 0u)
              << "rank " << w.rank() << " root " << root << " count " << count;
        }
      }
    });
  });
}

// Rank r sends (r + j + k) % 4 * scale elements to rank j, so counts differ per pair and
// include zeros.
TEST_P(LocalCollectives, AllToAllV) {
  const int n = GetParam();
  run_local(n, test::test_options(), [&](CommWorld& w) {
    auto c = w.world();
    const int me = w.rank();
    for_each_dtype([&]<typename T>() {
      for (size_t scale : {size_t(1), size_t(1000)}) {
        for (int k = 0; k < 2; ++k) {
          auto cnt = [&](int from, int to) { return size_t((from + to + k) % 4) * scale; };
          std::vector<size_t> sc(n), rc(n);
          size_t stotal = 0, rtotal = 0;
          for (int j = 0; j < n; ++j) {
            sc[j] = cnt(me, j);
            rc[j] = cnt(j, me);
            stotal += sc[j];
            rtotal += rc[j];
          }
          // Element i of the block for rank j carries (sender, receiver, i) in its value.
          std::vector<T> send, recv(rtotal, T(99)), want;
          for (int j = 0; j < n; ++j)
            for (size_t i = 0; i < sc[j]; ++i) send.push_back(input<T>(me * 8 + j, i));
          for (int j = 0; j < n; ++j)
            for (size_t i = 0; i < rc[j]; ++i) want.push_back(input<T>(j * 8 + me, i));
          c->all_to_all_v(send.data(), sc.data(), recv.data(), rc.data(), dtype_of<T>()).wait();
          EXPECT_EQ(mismatches(recv.data(), want), 0u) << "rank " << me << " scale " << scale;
        }
      }
    });
  });
}

// Each rank sends to every rank (itself included) with two tags, the receiver posting the
// receives in the opposite tag order: tags must not cross, nothing may deadlock.
TEST_P(LocalCollectives, SendRecvTags) {
  const int n = GetParam();
  run_local(n, test::test_options(), [&](CommWorld& w) {
    auto c = w.world();
    const int me = w.rank();
    for (size_t count : {size_t(0), size_t(7), size_t(1) << 16}) {
      std::vector<std::vector<float>> out(2 * n), in(2 * n, std::vector<float>(count, -1.f));
      std::vector<Work> works;
      for (int j = 0; j < n; ++j)
        for (int tag = 0; tag < 2; ++tag) {
          out[2 * j + tag] = inputs<float>(me * 8 + j, count, tag);
          works.push_back(c->send(out[2 * j + tag].data(), count, DType::f32, j, tag));
        }
      for (int j = n - 1; j >= 0; --j)
        for (int tag = 1; tag >= 0; --tag)
          works.push_back(c->recv(in[2 * j + tag].data(), count, DType::f32, j, tag));
      for (auto& wk : works) wk.wait();
      for (int j = 0; j < n; ++j)
        for (int tag = 0; tag < 2; ++tag)
          EXPECT_EQ(in[2 * j + tag], inputs<float>(j * 8 + me, count, tag))
              << "rank " << me << " from " << j << " tag " << tag;
    }
  });
}

// Many asynchronous calls in flight at once on one communicator complete in issue order
// (each all-reduce reads the result of the previous one in place).
TEST_P(LocalCollectives, AsyncCallsCompleteInOrder) {
  const int n = GetParam();
  run_local(n, test::test_options(), [&](CommWorld& w) {
    auto c = w.world();
    std::vector<int64_t> buf(1000, 1);
    std::vector<Work> works;
    for (int k = 0; k < 10; ++k)
      works.push_back(c->all_reduce(buf.data(), buf.data(), buf.size(), DType::i64, ReduceOp::sum));
    works.push_back(c->barrier());
    int64_t want = 1;
    for (int k = 0; k < 10; ++k) want *= n;
    works.back().wait();
    for (auto& wk : works) EXPECT_TRUE(wk.test());
    EXPECT_EQ(buf[0], want);
    EXPECT_EQ(buf[999], want);
  });
}

INSTANTIATE_TEST_SUITE_P(World, LocalCollectives, ::testing::Range(1, 9), [](const auto& info) {
  return std::string("n").append(std::to_string(info.param));
});

}  // namespace
}  // namespace mt
