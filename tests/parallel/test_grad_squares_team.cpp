// The gradient norm's sums of squares run in one OpenMP team per step
// (DataParallel::local_grad_squares through sum_squares_each), with each piece's sum the bits
// sum_squares gives it at the same team size. A team per piece cost ~50 team starts a step,
// each a wake of the sleeping helper threads (docs/performance.md, "Stop 48 (thr48)").
//
// Teams are counted by interposing libgomp's entry point for a parallel region
// (GOMP_parallel: GCC calls it for `#pragma omp parallel` and for `parallel for` without a
// dynamic or guided schedule, which have entry points of their own; every region of the
// norm's code is of the first kind): this executable's definition binds before libgomp's,
// counts the calling thread's regions and forwards to libgomp's.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <vector>

#include "core/rng.h"
#include "core/threads.h"
#include "kernels/reduce.h"
#include "model/gpt.h"
#include "parallel/data_parallel/data_parallel.h"
#include "parallel/parallel_context.h"

namespace {
thread_local long teams_started = 0;
}  // namespace

extern "C" void GOMP_parallel(void (*fn)(void*), void* data, unsigned threads, unsigned flags) {
  using Entry = void (*)(void (*)(void*), void*, unsigned, unsigned);
  static const Entry libgomp = reinterpret_cast<Entry>(dlsym(RTLD_NEXT, "GOMP_parallel"));
  ++teams_started;
  libgomp(fn, data, threads, flags);
}

namespace mt {
namespace {

std::vector<float> normal_values(size_t n, uint64_t seed) {
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) x[i] = float(uniform01(seed, 1, i) * 2.0 - 1.0) * 3.0f;
  return x;
}

TEST(GradSquaresTeam, EachPieceIsSumSquaresBitForBit) {
  // Sizes below, at and above a vector, a team share and the optimizer's pieces (biases of
  // 256 and 768, a 64K matrix, an odd size).
  const std::vector<size_t> sizes = {0, 1, 17, 256, 768, 1000, 65539, 100003};
  std::vector<std::vector<float>> pieces;
  std::vector<const float*> x;
  for (size_t i = 0; i < sizes.size(); ++i) pieces.push_back(normal_values(sizes[i], 40 + i));
  for (const auto& p : pieces) x.push_back(p.data());
  const int saved = compute_threads();
  for (int threads : {1, 2, 3}) {
    SCOPED_TRACE(threads);
    set_compute_threads(threads);
    std::vector<double> each(sizes.size(), -1.0);
    sum_squares_each(x.data(), sizes.data(), sizes.size(), each.data());
    for (size_t i = 0; i < sizes.size(); ++i) {
      const double want = sum_squares(x[i], sizes[i]);
      // Up to 2 threads sum_squares's reduction adds its shares in an order that cannot
      // change a bit; at 3 it adds them as the threads arrive, so it differs from itself.
      if (threads <= 2)
        EXPECT_EQ(each[i], want) << "piece of " << sizes[i];
      else
        EXPECT_NEAR(each[i], want, 1e-14 * want) << "piece of " << sizes[i];
    }
  }
  set_compute_threads(saved);
}

TEST(GradSquaresTeam, TheNormsSumsStartOneTeam) {
  ModelConfig cfg;
  cfg.layers = 2, cfg.dim = 32, cfg.heads = 2, cfg.seq = 8, cfg.vocab = 19;
  constexpr int kB = 2;
  std::vector<int> tokens, targets;
  for (int i = 0; i < kB * cfg.seq; ++i) {
    tokens.push_back(int(uniform01(7, 1, i) * cfg.vocab));
    targets.push_back(int(uniform01(7, 2, i) * cfg.vocab));
  }
  run_local(1, WorldOptions{}, [&](CommWorld& w) {
    set_compute_threads(2);
    ParallelContext ctx = make_parallel_context(w, MeshShape{1, 1, 1, 1});
    GPT model(cfg, GPT::whole_model(cfg), TensorParallelShard{}, kB);
    model.init(3);
    DataParallel dp(model, {.dp = ctx.dp, .zero = 0});
    dp.begin_step(1);
    model.train_microbatch(tokens.data(), targets.data(), kB, cfg.seq, 1e-2f);
    dp.finish_gradients();
    const long before = teams_started;
    const LocalGradSquares s = dp.local_grad_squares();
    // One team for the model's 2 + 12 * layers + 2 pieces.
    EXPECT_EQ(teams_started - before, 1);
    EXPECT_GT(s.replicated + s.split, 0.0);
    dp.release_params();
  });
}

}  // namespace
}  // namespace mt
