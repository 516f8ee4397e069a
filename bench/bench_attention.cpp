// Attention core forward + backward: the GPT block's kernels (attention.h, which keep the
// (B, H, T, T) probabilities) against flash attention (flash_attention.h) in fp32 and bf16,
// at B = 8, H = 8, hd = 64, T = 128 / 256 / 1024; then grouped-query attention (H = 32,
// Hkv = 4: 8 query heads per kv head) against MHA at the same H, T = 1024 (issue 32's goal:
// GQA's attention core <= 0.6x of MHA's time). GFLOP/s count the causal FLOPs every variant
// needs (forward q k^T and P v over the lower triangle, backward twice that), not the
// recomputation flash attention adds. Medians of rounds; the path each flash call ran is
// printed. --cpu times with this process's CPU time divided by the thread count, which a
// loaded machine disturbs far less than wall time (as bench_step --cpu).
//
// --no-amx runs the bf16 kernels the CPU would run without the hand-written AMX tiles
// (AmxTiles::forbid, FlashAttention::amx = false), for alternated comparisons; --hd sets the
// head dim of the T sweep (the 4L d256 breakdown shape is --hd 32).
//
// --batch and --seq set the sweep's B and lengths (--seq also leaves out the GQA rows): the
// 4L d256 step's per-rank shape is --batch 4 --seq 128 --hd 32.
//
//   bench_attention [--quick] [--threads 1,2] [--rounds 5] [--cpu] [--no-amx] [--hd 64]
//                   [--batch 8] [--seq 128,256,1024]
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <functional>
#include <string>
#include <vector>

#include "bench_util.h"
#include "core/timer.h"
#include "kernels/attention.h"
#include "kernels/flash_attention.h"

namespace {

struct Options {
  bool quick = false, cpu = false, amx = true;
  std::vector<int> threads = {1, 2};
  int rounds = 5, hd = 64;
  int batch = 0;          // --batch: the T sweep's B (0: 8, or 2 with --quick)
  std::vector<int> seqs;  // --seq: the T sweep's lengths (empty: 128, 256, 1024)
  bool gqa = true;        // false with --seq: the sweep only
};

// Seconds: wall, or (--cpu) process CPU time divided by the threads running.
double now(const Options& o) {
  if (!o.cpu) return mt::now_seconds();
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (ts.tv_sec + ts.tv_nsec * 1e-9) / omp_get_max_threads();
}

enum class Kind { gpt, gpt_bf16, flash, flash_bf16 };

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::gpt:
      return "attention (GPT)";
    case Kind::gpt_bf16:
      return "attention bf16 (GPT)";
    case Kind::flash:
      return "flash fp32";
    case Kind::flash_bf16:
      return "flash bf16";
  }
  return "";
}

struct Shape {
  int B, T, H, Hkv, hd;
};

struct Timing {
  double fwd = 0, bwd = 0;
  std::string path;
};

// Median seconds of one call over o.rounds batches, each at least `batch_s` long.
double median_seconds(const std::function<void()>& fn, const Options& o, double batch_s) {
  fn();  // warm-up: page faults, thread start
  std::vector<double> per_call;
  for (int r = 0; r < o.rounds; r++) {
    const double start = now(o);
    int calls = 0;
    do {
      fn();
      calls++;
    } while (now(o) - start < batch_s);
    per_call.push_back((now(o) - start) / calls);
  }
  std::sort(per_call.begin(), per_call.end());
  return per_call[per_call.size() / 2];
}

Timing time_gpt(const Shape& s, bool bf16, const Options& o, double batch_s) {
  const int C = s.H * s.hd;
  const size_t rows = size_t(s.B) * s.T;
  auto qkv = mt::bench::filled(rows * 3 * C, 1.0f), dout = mt::bench::filled(rows * C, 1.0f);
  const mt::AmxTiles amx = o.amx ? mt::AmxTiles::allow : mt::AmxTiles::forbid;
  const mt::AttentionKernel k = mt::attention_kernel(bf16, C, s.H, amx);
  // What the GPT block keeps for this kernel: the register tiles' row statistics (" rs": P
  // recomputed in the backward) and the AVX512-BF16 tiles' packed q and k (" pk": not packed
  // again), else the probabilities.
  const mt::AttentionSaved saved =
      k == mt::AttentionKernel::bf16_avx512   ? mt::AttentionSaved::row_stats_packed
      : k == mt::AttentionKernel::fp32_avx512 ? mt::AttentionSaved::row_stats
                                              : mt::AttentionSaved::probabilities;
  std::vector<float> out(rows * C), dqkv(rows * 3 * C),
      att(mt::attention_saved_floats(saved, s.B, s.T, C, s.H));
  std::vector<float> scratch(mt::attention_backward_scratch_floats(s.B, s.T, C, s.H));
  Timing t;
  t.path = k == mt::AttentionKernel::bf16_amx_tiles ? "amx-tiles"
           : k == mt::AttentionKernel::bf16_amx     ? "amx-onednn"
           : k == mt::AttentionKernel::bf16_avx512  ? "avx512-bf16"
                                                    : "fp32";
  if (saved != mt::AttentionSaved::probabilities) t.path += " rs";
  if (saved == mt::AttentionSaved::row_stats_packed) t.path += " pk";
  t.fwd = median_seconds(
      [&] {
        if (bf16)
          mt::attention_forward_bf16(out.data(), att.data(), qkv.data(), s.B, s.T, C, s.H, amx,
                                     saved);
        else
          mt::attention_forward(out.data(), att.data(), qkv.data(), s.B, s.T, C, s.H, saved);
      },
      o, batch_s);
  t.bwd = median_seconds(
      [&] {
        if (bf16)
          mt::attention_backward_bf16(dqkv.data(), scratch.data(), dout.data(), qkv.data(),
                                      att.data(), s.B, s.T, C, s.H, true, amx, saved);
        else
          mt::attention_backward(dqkv.data(), scratch.data(), dout.data(), qkv.data(), att.data(),
                                 s.B, s.T, C, s.H, saved);
      },
      o, batch_s);
  return t;
}

// Flash attention on the rows of a fused [q | k | v] GEMM output, positions 0 .. T-1.
Timing time_flash(const Shape& s, bool bf16, const Options& o, double batch_s) {
  const size_t ld = size_t(s.H + 2 * s.Hkv) * s.hd, C = size_t(s.H) * s.hd;
  const size_t rows = size_t(s.B) * s.T;
  auto qkv = mt::bench::filled(rows * ld, 1.0f), dout = mt::bench::filled(rows * C, 1.0f);
  std::vector<float> out(rows * C), lse(size_t(s.B) * s.H * s.T), D(lse.size()), dqkv(rows * ld);
  std::vector<int> pos(s.T);
  for (int i = 0; i < s.T; i++) pos[i] = i;
  mt::FlashAttention a;
  a.B = s.B, a.Tq = a.Tk = s.T, a.H = s.H, a.Hkv = s.Hkv, a.hd = s.hd;
  a.q = qkv.data(), a.k = a.q + C, a.v = a.k + size_t(s.Hkv) * s.hd;
  a.ldq = a.ldk = a.ldv = ld;
  a.qpos = a.kpos = pos.data();
  a.precision = bf16 ? mt::FlashPrecision::bf16 : mt::FlashPrecision::fp32;
  a.amx = o.amx;
  std::vector<float> scratch(std::max(mt::flash_attention_forward_scratch_floats(a),
                                      mt::flash_attention_backward_scratch_floats(a)));
  const mt::FlashGrads g{
      dqkv.data(), dqkv.data() + C, dqkv.data() + C + size_t(s.Hkv) * s.hd, ld, ld, ld};
  Timing t;
  t.path = mt::flash_attention_path(a);
  t.fwd = median_seconds(
      [&] { mt::flash_attention_forward(out.data(), C, lse.data(), a, false, scratch); }, o,
      batch_s);
  t.bwd = median_seconds(
      [&] {
        mt::flash_attention_backward_prep(D.data(), out.data(), C, dout.data(), C, s.B, s.T, s.H,
                                          s.hd);
        mt::flash_attention_backward(g, dout.data(), C, lse.data(), D.data(), a, scratch);
      },
      o, batch_s);
  return t;
}

// Causal FLOPs of the forward (2 products over T (T + 1) / 2 pairs); backward is twice this.
double forward_flops(const Shape& s) {
  return 2.0 * 2.0 * s.B * s.H * (double(s.T) * (s.T + 1) / 2) * s.hd;
}

Timing run(Kind k, const Shape& s, const Options& o) {
  const double batch_s = o.quick ? 0.0 : 0.2;
  if (k == Kind::gpt || k == Kind::gpt_bf16) return time_gpt(s, k == Kind::gpt_bf16, o, batch_s);
  return time_flash(s, k == Kind::flash_bf16, o, batch_s);
}

void print_row(Kind k, const Shape& s, const Timing& t) {
  const double f = forward_flops(s), total = t.fwd + t.bwd;
  std::printf("  %-21s %2d %5d %3d %4d %4d  %-14s %9.2f %9.2f %9.2f %8.1f %8.1f %8.1f\n",
              kind_name(k), s.B, s.T, s.H, s.Hkv, s.hd, t.path.c_str(), t.fwd * 1e3, t.bwd * 1e3,
              total * 1e3, f / t.fwd * 1e-9, 2 * f / t.bwd * 1e-9, 3 * f / total * 1e-9);
}

void print_header() {
  std::printf("  %-21s %2s %5s %3s %4s %4s  %-14s %9s %9s %9s %8s %8s %8s\n", "kernel", "B", "T",
              "H", "Hkv", "hd", "path", "fwd ms", "bwd ms", "total ms", "fwd GF/s", "bwd GF/s",
              "all GF/s");
}

void bench(const Options& o) {
  const std::vector<int> Ts = !o.seqs.empty() ? o.seqs
                              : o.quick       ? std::vector<int>{128}
                                              : std::vector<int>{128, 256, 1024};
  const int B = o.batch > 0 ? o.batch : o.quick ? 2 : 8;
  print_header();
  for (int T : Ts)
    for (Kind k : {Kind::gpt, Kind::gpt_bf16, Kind::flash, Kind::flash_bf16}) {
      const Shape s{B, T, 8, 8, o.hd};
      print_row(k, s, run(k, s, o));
    }
  if (!o.gqa) return;
  // GQA against MHA at the same H (the same FLOPs): only K/V's size differs.
  const Shape gqa{o.quick ? 1 : 8, o.quick ? 256 : 1024, 32, 4, 64}, mha{gqa.B, gqa.T, 32, 32, 64};
  for (Kind k : {Kind::flash, Kind::flash_bf16}) {
    const Timing tg = run(k, gqa, o), tm = run(k, mha, o);
    print_row(k, mha, tm);
    print_row(k, gqa, tg);
    std::printf("  %-21s GQA / MHA time: forward %.2f, backward %.2f, total %.2f (goal <= 0.6)\n",
                kind_name(k), tg.fwd / tm.fwd, tg.bwd / tm.bwd,
                (tg.fwd + tg.bwd) / (tm.fwd + tm.bwd));
  }
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; i++) {
    if (!std::strcmp(argv[i], "--quick"))
      o.quick = true, o.rounds = 1;
    else if (!std::strcmp(argv[i], "--threads") && i + 1 < argc)
      o.threads = mt::bench::parse_list(argv[++i]);
    else if (!std::strcmp(argv[i], "--cpu"))
      o.cpu = true;
    else if (!std::strcmp(argv[i], "--rounds") && i + 1 < argc)
      o.rounds = std::max(1, std::atoi(argv[++i]));
    else if (!std::strcmp(argv[i], "--batch") && i + 1 < argc)
      o.batch = std::max(1, std::atoi(argv[++i]));
    else if (!std::strcmp(argv[i], "--seq") && i + 1 < argc)
      o.seqs = mt::bench::parse_list(argv[++i]), o.gqa = false;
    else if (!std::strcmp(argv[i], "--no-amx"))
      o.amx = false;
    else if (!std::strcmp(argv[i], "--hd") && i + 1 < argc &&
             (o.hd = std::atoi(argv[i + 1])) >= 16 && o.hd % 2 == 0)
      i++;
    else {
      std::fprintf(stderr,
                   "usage: bench_attention [--quick] [--threads 1,2] [--rounds N] [--cpu] "
                   "[--no-amx] [--hd N] [--batch B] [--seq T,...]\n");
      return 2;
    }
  }
  if (o.quick) o.threads = {1};
  for (int threads : o.threads) {
    omp_set_num_threads(threads);
    std::printf(
        "attention core, %d thread%s (forward, backward incl. D; medians of %d rounds, %s time)\n",
        threads, threads == 1 ? "" : "s", o.rounds, o.cpu ? "CPU" : "wall");
    bench(o);
  }
  return 0;
}
