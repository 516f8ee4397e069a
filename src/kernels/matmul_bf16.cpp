#include "kernels/matmul_bf16.h"
#include "kernels/phase_profile.h"

#include <dlfcn.h>
#include <omp.h>

#include <cstdint>
#include <cstring>
#include <map>
#if defined(__AVX2__)
#include <immintrin.h>
#endif
#include <algorithm>
#include <atomic>
#include <oneapi/dnnl/dnnl.hpp>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "kernels/bias_grad.h"

namespace mt {

namespace {

using dnnl::memory;

// One GEMM C (M, N) [+]= A (M, K) @ B (K, N) [+ bias (N)], A and B bf16 with any row/column
// strides, C fp32 row-major. The three linear-layer products are this with different
// strides (a transposed operand is a stride swap, no copy).
struct GemmShape {
  int64_t M, N, K;
  int64_t a_rs, a_cs, b_rs, b_cs;  // row and column strides of A and B, in elements
  bool bias, accumulate;
  int threads;  // the primitive is built for the team size it will run with
  auto key() const { return std::tie(M, N, K, a_rs, a_cs, b_rs, b_cs, bias, accumulate, threads); }
  bool operator<(const GemmShape& o) const { return key() < o.key(); }
};

struct Gemm {
  dnnl::matmul prim;
  memory::desc a, b, bias, c;
  std::vector<uint8_t> scratchpad;  // user-managed: never shared with another thread
  std::string impl;
};

// Primitive creation costs far more than a small GEMM, so primitives are kept per shape.
// The cache is per thread: in the local backend every rank is a thread calling this, and
// a per-thread cache needs no lock and never shares a scratchpad. The thread count is part
// of the key because oneDNN sizes a primitive's work split for the team it was built with.
struct Context {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::map<GemmShape, Gemm> cache;
};

Context& context() {
  thread_local Context ctx;
  return ctx;
}

Gemm make_gemm(Context& ctx, const GemmShape& s) {
  Gemm g;
  g.a = memory::desc({s.M, s.K}, memory::data_type::bf16, {s.a_rs, s.a_cs});
  g.b = memory::desc({s.K, s.N}, memory::data_type::bf16, {s.b_rs, s.b_cs});
  g.c = memory::desc({s.M, s.N}, memory::data_type::f32, {s.N, 1});
  if (s.bias) g.bias = memory::desc({1, s.N}, memory::data_type::f32, {s.N, 1});
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (s.accumulate) {  // C += A @ B: the sum post-op adds the old fp32 C
    dnnl::post_ops ops;
    ops.append_sum(1.0f);
    attr.set_post_ops(ops);
  }
  auto desc =
      s.bias ? dnnl::matmul::desc(g.a, g.b, g.bias, g.c) : dnnl::matmul::desc(g.a, g.b, g.c);
  dnnl::matmul::primitive_desc pd(desc, attr, ctx.engine);
  g.impl = pd.impl_info_str();
  g.scratchpad.resize(pd.scratchpad_desc().get_size());
  g.prim = dnnl::matmul(pd);
  return g;
}

// An empty product (K = 0): C = bias, or zeros, or C unchanged when accumulating. Neither
// routine takes K = 0 (a leading dimension of 0 is invalid to the gemm routine).
void gemm_empty(const GemmShape& shape, const float* bias, float* C) {
  for (int64_t m = 0; m < shape.M; ++m)
    for (int64_t n = 0; n < shape.N; ++n) {
      float& c = C[m * shape.N + n];
      c = (shape.accumulate ? c : 0.0f) + (bias ? bias[n] : 0.0f);
    }
}

void gemm_exact(const GemmShape& shape, const bf16* A, const bf16* B, const float* bias, float* C) {
  if (shape.M == 0 || shape.N == 0) return;
  if (shape.K == 0) return gemm_empty(shape, bias, C);
  Context& ctx = context();
  auto it = ctx.cache.find(shape);
  if (it == ctx.cache.end()) {
    try {
      it = ctx.cache.emplace(shape, make_gemm(ctx, shape)).first;
    } catch (const dnnl::error& e) {
      MT_CHECK(false, "oneDNN bf16 matmul (M=", shape.M, " N=", shape.N, " K=", shape.K,
               ") could not be created: ", e.what());
    }
  }
  Gemm& g = it->second;
  // oneDNN takes non-const handles; it only reads A, B and the bias.
  memory a(g.a, ctx.engine, const_cast<bf16*>(A));
  memory b(g.b, ctx.engine, const_cast<bf16*>(B));
  memory c(g.c, ctx.engine, C);
  memory pad(memory::desc({int64_t(g.scratchpad.size())}, memory::data_type::u8, {1}), ctx.engine,
             g.scratchpad.data());
  std::unordered_map<int, memory> args{
      {DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}, {DNNL_ARG_SCRATCHPAD, pad}};
  if (bias) args.emplace(DNNL_ARG_BIAS, memory(g.bias, ctx.engine, const_cast<float*>(bias)));
  g.prim.execute(ctx.stream, args);
  ctx.stream.wait();
}

// ---- the JIT gemm routine --------------------------------------------------------------
// oneDNN exports gemm_bf16bf16f32, the bf16 sibling of the dnnl_sgemm that the fp32 layers
// run, but declares it only in its internal headers. It is looked up at run time, so a
// oneDNN without it leaves the matmul primitive in charge instead of failing to link.
// Row-major, like dnnl_sgemm: C (M, N) = alpha A (M, K) B (K, N) + beta C.
using GemmBf16Fn = dnnl_status_t (*)(char transa, char transb, dnnl_dim_t M, dnnl_dim_t N,
                                     dnnl_dim_t K, float alpha, const bf16* A, dnnl_dim_t lda,
                                     const bf16* B, dnnl_dim_t ldb, float beta, float* C,
                                     dnnl_dim_t ldc);

GemmBf16Fn jit_gemm_fn() {
  static const GemmBf16Fn fn =
      reinterpret_cast<GemmBf16Fn>(dlsym(RTLD_DEFAULT, "dnnl_gemm_bf16bf16f32"));
  return fn;
}

// An operand with unit column stride is row-major ('N', leading dimension = row stride); one
// with unit row stride is its transpose stored row-major ('T', leading dimension = column
// stride). GemmShape's operands always have one of the two.
char trans_of(int64_t cs) {
  return cs == 1 ? 'N' : 'T';
}

// Whether oneDNN's effective ISA here includes `isa` (its values are nested bit sets).
bool cpu_has(dnnl::cpu_isa isa) {
  const auto have = unsigned(dnnl::get_effective_cpu_isa()), want = unsigned(isa);
  return (have & want) == want;
}

void gemm_jit(const GemmShape& s, const bf16* A, const bf16* B, const float* bias, float* C) {
  if (s.M == 0 || s.N == 0) return;
  if (s.K == 0) return gemm_empty(s, bias, C);
  const char ta = trans_of(s.a_cs), tb = trans_of(s.b_cs);
  const int64_t lda = std::max<int64_t>(ta == 'N' ? s.a_rs : s.a_cs, ta == 'N' ? s.K : s.M),
                ldb = std::max<int64_t>(tb == 'N' ? s.b_rs : s.b_cs, tb == 'N' ? s.N : s.K);
  // The bias goes in first and the GEMM accumulates onto it, as the fp32 matmul_forward
  // does: one write-only pass instead of a read-modify-write pass after the product.
  if (bias && !s.accumulate) {
#pragma omp parallel for schedule(static) if (s.M * s.N >= (int64_t(1) << 16))
    for (int64_t m = 0; m < s.M; ++m) std::memcpy(C + m * s.N, bias, size_t(s.N) * sizeof(float));
  }
  const float beta = (s.accumulate || bias) ? 1.0f : 0.0f;
  const dnnl_status_t st = jit_gemm_fn()(ta, tb, s.M, s.N, s.K, 1.0f, A, lda, B, ldb, beta, C, s.N);
  MT_CHECK(st == dnnl_success, "oneDNN gemm_bf16bf16f32 (M=", s.M, " N=", s.N, " K=", s.K,
           ") failed with status ", int(st));
}

// Which routine the GEMMs take when ScopedBf16GemmPath overrides the default (-1: none).
// Process-wide, so that a benchmark or test reaches the rank threads it starts.
std::atomic<int> path_override{-1};

// Whether the gemm routine runs this product on the calling path: on mixed, all but a
// forward with a bias, whose bias the primitive adds in its epilogue (matmul_bf16.h).
bool on_jit(const GemmShape& shape) {
  switch (matmul_bf16_path()) {
    case Bf16GemmPath::jit_gemm:
      return true;
    case Bf16GemmPath::mixed:
      return !(shape.bias && !shape.accumulate);
    case Bf16GemmPath::primitive:
      break;
  }
  return false;
}

// Rows of C depend only on their rows of A, so a GEMM runs as one per piece of
// matmul_bf16_row_pieces (few shapes, so few cached primitives).
void gemm(const GemmShape& shape, const bf16* A, const bf16* B, const float* bias, float* C) {
  const bool jit = on_jit(shape);
  int64_t m0 = 0;
  for (const int64_t m : matmul_bf16_row_pieces(shape.M)) {
    GemmShape part = shape;
    part.M = m;
    if (jit)
      gemm_jit(part, A + m0 * shape.a_rs, B, bias, C + m0 * shape.N);
    else
      gemm_exact(part, A + m0 * shape.a_rs, B, bias, C + m0 * shape.N);
    m0 += m;
  }
}

size_t cached_primitives() {
  return context().cache.size();
}

// dst (cols, rows) = src (rows, cols)^T, 16-bit elements. 16 x 16 blocks go through
// registers (four rounds of unpacks); the edges are copied one element at a time.
void transpose_u16(uint16_t* dst, const uint16_t* src, int64_t rows, int64_t cols) {
  const int64_t r16 = rows & ~int64_t(15), c16 = cols & ~int64_t(15);
#if defined(__AVX2__)
#pragma omp parallel for schedule(static) if (rows * cols >= (int64_t(1) << 16))
  for (int64_t j = 0; j < c16; j += 16)
    for (int64_t i = 0; i < r16; i += 16) {
      const uint16_t* s = src + i * cols + j;
      uint16_t* d = dst + j * rows + i;
      __m256i r[16], t[16];
      for (int k = 0; k < 16; k++)
        r[k] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + k * cols));
      for (int k = 0; k < 16; k += 2) {
        t[k] = _mm256_unpacklo_epi16(r[k], r[k + 1]);
        t[k + 1] = _mm256_unpackhi_epi16(r[k], r[k + 1]);
      }
      for (int k = 0; k < 16; k += 4) {
        r[k] = _mm256_unpacklo_epi32(t[k], t[k + 2]);
        r[k + 1] = _mm256_unpackhi_epi32(t[k], t[k + 2]);
        r[k + 2] = _mm256_unpacklo_epi32(t[k + 1], t[k + 3]);
        r[k + 3] = _mm256_unpackhi_epi32(t[k + 1], t[k + 3]);
      }
      for (int k = 0; k < 16; k += 8)
        for (int c = 0; c < 4; c++) {
          t[k + 2 * c] = _mm256_unpacklo_epi64(r[k + c], r[k + 4 + c]);
          t[k + 2 * c + 1] = _mm256_unpackhi_epi64(r[k + c], r[k + 4 + c]);
        }
      // t[c] holds columns c (low lane) and c + 8 (high lane) of rows 0-7, t[8 + c] of rows 8-15.
      for (int c = 0; c < 8; c++) {
        r[c] = _mm256_permute2x128_si256(t[c], t[8 + c], 0x20);
        r[8 + c] = _mm256_permute2x128_si256(t[c], t[8 + c], 0x31);
      }
      for (int k = 0; k < 16; k++)
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + k * rows), r[k]);
    }
#else
  for (int64_t j = 0; j < c16; j++)
    for (int64_t i = 0; i < r16; i++) dst[j * rows + i] = src[i * cols + j];
#endif
  for (int64_t i = r16; i < rows; i++)  // bottom rows, all columns
    for (int64_t j = 0; j < cols; j++) dst[j * rows + i] = src[i * cols + j];
  for (int64_t i = 0; i < r16; i++)  // right columns of the other rows
    for (int64_t j = c16; j < cols; j++) dst[j * rows + i] = src[i * cols + j];
}

// oneDNN's implementation name for a representative bf16 matmul primitive here.
std::string bf16_primitive_isa() {
  // The forward shape of a d256 linear; the backward shapes pick the same kernel family.
  try {
    Context& ctx = context();
    GemmShape s{128, 256, 256, 256, 1, 1, 256, false, false, 1};
    return make_gemm(ctx, s).impl;
  } catch (const dnnl::error&) {
    return "unsupported";
  }
}

// Whether the weight gradient multiplies a transposed copy of dout (matmul_bf16_backward_weight):
// only on the primitive, as the JIT gemm routine reads a transposed A at its plain rate
// (measured: at most 1-3 % apart), and only where dout is the smaller operand.
bool weight_grad_copies_dout_on(Bf16GemmPath path, int N, int C, int OC) {
  return path == Bf16GemmPath::primitive && OC <= C && N > 0;
}

bool weight_grad_copies_dout(int N, int C, int OC) {
  return weight_grad_copies_dout_on(matmul_bf16_path(), N, C, OC);
}

// The transposed dout copy's bytes on `path` (none where dout is read as it is).
size_t weight_grad_scratch_bytes_on(Bf16GemmPath path, int N, int C, int OC) {
  return weight_grad_copies_dout_on(path, N, C, OC) ? size_t(N) * size_t(OC) * sizeof(bf16) : 0;
}

}  // namespace

void bf16_transpose(bf16* dst, const bf16* src, int64_t rows, int64_t cols) {
  PhaseScope phase_scope(Phase::conversion, 0, 4.0 * double(rows) * double(cols));
  static_assert(sizeof(bf16) == sizeof(uint16_t));
  transpose_u16(reinterpret_cast<uint16_t*>(dst), reinterpret_cast<const uint16_t*>(src), rows,
                cols);
}

void matmul_bf16_forward(float* out, const bf16* inp, const bf16* weight, const float* bias, int N,
                         int C, int OC) {
  PhaseScope phase_scope(Phase::gemm, 2.0 * N * C * OC,
                         2.0 * (double(N) * C + double(OC) * C) + 4.0 * double(N) * OC);
  // A = inp (N, C) row-major; B = weight^T (C, OC): weight (OC, C) read column-wise.
  GemmShape s{N, OC, C, C, 1, 1, C, bias != nullptr, false, omp_get_max_threads()};
  gemm(s, inp, weight, bias, out);
}

void matmul_bf16_backward_input(float* dinp, const bf16* dout, const bf16* weight, int N, int C,
                                int OC, bool accumulate) {
  PhaseScope phase_scope(Phase::gemm, 2.0 * N * C * OC,
                         2.0 * (double(N) * OC + double(OC) * C) + 8.0 * double(N) * C);
  // A = dout (N, OC), B = weight (OC, C), both row-major; dinp (+)= A @ B.
  GemmShape s{N, C, OC, OC, 1, C, 1, false, accumulate, omp_get_max_threads()};
  gemm(s, dout, weight, nullptr, dinp);
}

size_t matmul_bf16_weight_grad_scratch_bytes(int N, int C, int OC) {
  return weight_grad_scratch_bytes_on(matmul_bf16_path(), N, C, OC);
}

size_t matmul_bf16_weight_grad_scratch_bytes_any_cpu(int N, int C, int OC) {
  return weight_grad_scratch_bytes_on(Bf16GemmPath::primitive, N, C, OC);
}

void matmul_bf16_backward_weight(float* dweight, float* dbias, const bf16* dout, const bf16* inp,
                                 int N, int C, int OC) {
  PhaseScope phase_scope(Phase::gemm, 2.0 * N * C * OC,
                         2.0 * (double(N) * OC + double(N) * C) + 8.0 * double(OC) * C);
  // dweight += A @ B with A = dout^T (OC, N) and B = inp (N, C). oneDNN runs this GEMM
  // 5-10 % under its plain-layout rate when A is read transposed (K = tokens is the slow dim
  // of dout). Where dout is the smaller operand (OC <= C: the projections back to the
  // residual stream) a register transpose of dout into a per-thread scratch costs less than
  // that: measured at N = 1024, 1 thread, C = 2048 OC = 512: 7.6 ms strided against 0.1 ms
  // transpose + 7.0 ms plain. Where OC > C (qkv, fc) the transpose ate the gain (fc:
  // 7.6 ms strided, 0.6 + 6.8 ms), so those keep the strided read.
  const int threads = omp_get_max_threads();
  if (weight_grad_copies_dout(N, C, OC)) {
    thread_local std::vector<bf16> dout_t;
    if (dout_t.size() < size_t(N) * OC) dout_t.resize(size_t(N) * OC);
    bf16_transpose(dout_t.data(), dout, N, OC);
    GemmShape s{OC, C, N, N, 1, C, 1, false, true, threads};
    gemm(s, dout_t.data(), inp, nullptr, dweight);
  } else {
    GemmShape s{OC, C, N, 1, OC, C, 1, false, true, threads};
    gemm(s, dout, inp, nullptr, dweight);
  }
  if (dbias) bias_grad_add(dbias, dout, N, OC);
}

// M = 64 q + r runs as the exact 64 q rows plus r in power-of-two pieces (at most 6), and
// M <= 16 as itself. Training's row counts (b x T) are nearly always multiples of 64 and run
// as one call; the sampler, whose window grows a token at a time, made one primitive per
// length (500 tokens of a 2-layer model: 4.1 s and 289 MB against fp32's 1.8 s and 104 MB).
std::vector<int64_t> matmul_bf16_row_pieces(int64_t rows) {
  constexpr int64_t kRowBlock = 64, kSmallRows = 16;
  if (rows <= kSmallRows || rows % kRowBlock == 0) return {rows};
  std::vector<int64_t> pieces;
  if (rows >= kRowBlock) pieces.push_back(rows / kRowBlock * kRowBlock);
  int64_t left = rows % kRowBlock;
  for (int64_t piece = kRowBlock / 2; piece >= 1; piece /= 2)
    if (left >= piece) pieces.push_back(piece), left -= piece;
  return pieces;
}

size_t matmul_bf16_cached_primitives() {
  return cached_primitives();
}

bool bf16_matmul_supported() {
  return matmul_bf16_isa() != "unsupported";
}

Bf16GemmPath matmul_bf16_default_path() {
  // The JIT gemm routine is oneDNN's kernel for AVX512-BF16 dot products; measured on an EPYC
  // with AVX512-BF16 at 1 thread it runs a d512 layer's twelve GEMMs (1024 rows) 6 % faster
  // than the matmul primitive's brgemm kernels (their weight-gradient GEMMs 5-15 %). With
  // AMX the primitive's tile kernels are far ahead; without AVX512-BF16 neither was measured.
  // Stop 42 moved the forwards with a bias back to the primitive there (mixed, matmul_bf16.h).
  static const Bf16GemmPath path =
      jit_gemm_fn() != nullptr && dnnl::get_effective_cpu_isa() == dnnl::cpu_isa::avx512_core_bf16
          ? Bf16GemmPath::mixed
          : Bf16GemmPath::primitive;
  return path;
}

Bf16GemmPath matmul_bf16_path() {
  const int over = path_override.load(std::memory_order_relaxed);
  return over < 0 ? matmul_bf16_default_path() : Bf16GemmPath(over);
}

bool matmul_bf16_bias_on_primitive() {
  return matmul_bf16_path() != Bf16GemmPath::jit_gemm;
}

bool matmul_bf16_path_available(Bf16GemmPath path) {
  if (path == Bf16GemmPath::primitive) return true;
  // The routine needs AVX-512 (it emulates the dot products where AVX512-BF16 is missing).
  return jit_gemm_fn() != nullptr && cpu_has(dnnl::cpu_isa::avx512_core);
}

ScopedBf16GemmPath::ScopedBf16GemmPath(Bf16GemmPath path) : saved_(path_override.load()) {
  MT_CHECK(matmul_bf16_path_available(path), "this bf16 GEMM path is not available here");
  path_override = int(path);
}

ScopedBf16GemmPath::~ScopedBf16GemmPath() {
  path_override = saved_;
}

std::string matmul_bf16_isa() {
  const std::string primitive = bf16_primitive_isa();
  if (matmul_bf16_path() == Bf16GemmPath::primitive || primitive == "unsupported") return primitive;
  return cpu_has(dnnl::cpu_isa::avx512_core_bf16) ? "gemm:jit:avx512_core_bf16"
                                                  : "gemm:jit:avx512_core";
}

}  // namespace mt
