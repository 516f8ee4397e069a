// AdamW must reproduce torch.optim.AdamW bit for bit (docs/contracts.md §2): checked against the
// transcribed reference always, and against torch itself when /usr/bin/python3 has it.
#include <gtest/gtest.h>
#include <omp.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>

#include "core/error.h"
#include "kernels/adamw.h"
#include "kernels/kernel_harness.h"
#include "kernels/reduce.h"
#include "kernels/reference/reference.h"

namespace mt::test {
namespace {

size_t bit_mismatches(const Buf& a, const Buf& b) {
  size_t bad = 0;
  for (size_t i = 0; i < a.size(); i++) bad += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
  return bad;
}

struct AdamWRun {
  Buf param, m, v;
};

// Runs `steps` updates with grads[s] and returns the state after each step.
template <typename Update>
std::vector<AdamWRun> run_adamw(Update update, const Buf& param0, const std::vector<Buf>& grads,
                                AdamWParams hp) {
  AdamWRun st{param0, Buf(param0.size()), Buf(param0.size())};
  std::vector<AdamWRun> history;
  for (size_t s = 0; s < grads.size(); s++) {
    hp.step = static_cast<int>(s) + 1;
    update(st.param.data(), grads[s].data(), st.m.data(), st.v.data(), st.param.size(), hp);
    history.push_back(st);
  }
  return history;
}

const AdamWParams kConfigs[] = {
    {3e-3, 0.9, 0.95, 1e-8, 0.1, 0},
    {6e-4 * 3 / 10, 0.9, 0.999, 1e-6, 0.0, 0},  // a warmup lr, other betas, no decay
};

std::vector<Buf> make_grads(size_t n, int steps) {
  std::vector<Buf> grads;
  for (int s = 0; s < steps; s++) grads.push_back(random_normal(n, 40 + s, 0.05f));
  grads[1][0] = 0.0f;  // a zero gradient after a non-zero one
  return grads;
}

TEST(AdamW, FastEqualsTranscribedReferenceBitwise) {
  const size_t n = 1003;  // not a multiple of any vector width: exercises the tail
  Buf param0 = random_normal(n, 30);
  std::vector<Buf> grads = make_grads(n, 4);
  int saved = omp_get_max_threads();
  for (const AdamWParams& hp : kConfigs) {
    auto ref = run_adamw(ref::adamw_update, param0, grads, hp);
    for (int threads : {1, 2}) {
      omp_set_num_threads(threads);
      auto fast = run_adamw(adamw_update, param0, grads, hp);
      for (size_t s = 0; s < grads.size(); s++) {
        EXPECT_EQ(bit_mismatches(fast[s].param, ref[s].param), 0u) << "step " << s + 1;
        EXPECT_EQ(bit_mismatches(fast[s].m, ref[s].m), 0u) << "step " << s + 1;
        EXPECT_EQ(bit_mismatches(fast[s].v, ref[s].v), 0u) << "step " << s + 1;
      }
    }
  }
  omp_set_num_threads(saved);
}

TEST(AdamW, MatchesTorchBitwise) {
  const char* python = "/usr/bin/python3";
  if (std::system(str(python, " -c 'import torch' 2>/dev/null").c_str()) != 0)
    GTEST_SKIP() << "no torch under " << python;
  const size_t n = 1003;
  const int steps = 4;
  Buf param0 = random_normal(n, 31);
  std::vector<Buf> grads = make_grads(n, steps);
  auto dir = std::filesystem::temp_directory_path();
  std::string tag = str("mt_adamw_", ::getpid());
  std::string in_path = dir / (tag + ".in"), out_path = dir / (tag + ".out");
  {
    std::ofstream f(in_path, std::ios::binary);
    for (const AdamWParams& hp : kConfigs) {
      int32_t header[2] = {static_cast<int32_t>(n), steps};
      double scalars[5] = {hp.lr, hp.beta1, hp.beta2, hp.eps, hp.weight_decay};
      f.write(reinterpret_cast<const char*>(header), sizeof header);
      f.write(reinterpret_cast<const char*>(scalars), sizeof scalars);
      f.write(reinterpret_cast<const char*>(param0.data()), n * sizeof(float));
      for (const Buf& g : grads)
        f.write(reinterpret_cast<const char*>(g.data()), n * sizeof(float));
    }
  }
  std::string cmd = str(python, " ", MESHTRAIN_SOURCE_DIR, "/tests/kernels/adamw_torch.py ",
                        in_path, " ", out_path);
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream f(out_path, std::ios::binary);
  for (const AdamWParams& hp : kConfigs) {
    auto ours = run_adamw(adamw_update, param0, grads, hp);
    for (int s = 0; s < steps; s++) {
      Buf p(n), m(n), v(n);
      f.read(reinterpret_cast<char*>(p.data()), n * sizeof(float));
      f.read(reinterpret_cast<char*>(m.data()), n * sizeof(float));
      f.read(reinterpret_cast<char*>(v.data()), n * sizeof(float));
      ASSERT_TRUE(f.good());
      EXPECT_EQ(bit_mismatches(ours[s].param, p), 0u) << "param, step " << s + 1 << " lr " << hp.lr;
      EXPECT_EQ(bit_mismatches(ours[s].m, m), 0u) << "exp_avg, step " << s + 1;
      EXPECT_EQ(bit_mismatches(ours[s].v, v), 0u) << "exp_avg_sq, step " << s + 1;
    }
  }
  std::filesystem::remove(in_path);
  std::filesystem::remove(out_path);
}

// The finiteness flag fused into the update (train/step.cpp stops the run on it) must say
// exactly what a separate all_finite pass over param, m and v would: a non-finite value
// reaching any of the three, in the AVX-512 body or the scalar tail, on either thread's
// chunk, turns it false; a clean update leaves it true. The update's bits stay the
// reference's (FastEqualsTranscribedReferenceBitwise) whatever the flag.
TEST(AdamW, ReportsNonFiniteStateLikeASeparatePass) {
  const size_t n = 1003;
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const AdamWParams hp{3e-3, 0.9, 0.95, 1e-8, 0.1, 1};
  int saved = omp_get_max_threads();
  for (int threads : {1, 2}) {
    omp_set_num_threads(threads);
    // 0, 17: first thread's vector body; 600: the second thread's (1 thread: still body);
    // 1001: the scalar tail.
    for (size_t pos : {size_t(0), size_t(17), size_t(600), size_t(1001)}) {
      // Which array is poisoned before the update: grad (reaches m, v and param), param
      // (stays non-finite), m or v (stay non-finite); or none, with an update that
      // overflows param alone at pos, or none at all (clean).
      for (int what = 0; what < 6; what++) {
        Buf p = random_normal(n, 50), g = random_normal(n, 51, 0.05f), m(n), v(n);
        AdamWParams h = hp;
        const float bad = what % 2 ? nan : inf;
        if (what == 0) g[pos] = bad;
        if (what == 1) p[pos] = bad;
        if (what == 2) m[pos] = bad;
        if (what == 3) v[pos] = -inf;
        if (what == 4) {  // decay factor 1 - lr * wd = 2: only the largest float overflows
          p[pos] = std::numeric_limits<float>::max();
          h.weight_decay = -1.0 / h.lr;
        }
        const bool finite = adamw_update(p.data(), g.data(), m.data(), v.data(), n, h);
        const bool separate =
            all_finite(p.data(), n) && all_finite(m.data(), n) && all_finite(v.data(), n);
        EXPECT_EQ(finite, separate) << threads << " threads, pos " << pos << ", case " << what;
        EXPECT_EQ(finite, what == 5) << threads << " threads, pos " << pos << ", case " << what;
      }
    }
  }
  omp_set_num_threads(saved);
}

}  // namespace
}  // namespace mt::test
