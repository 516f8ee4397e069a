#include "model/expert_gemm.h"

#include "core/error.h"
#include "kernels/grouped_gemm.h"

namespace mt {

namespace {

std::vector<const float*> weights_of(const std::vector<Linear>& w) {
  std::vector<const float*> out(w.size());
  for (size_t le = 0; le < w.size(); ++le) out[le] = w[le].w;
  return out;
}

std::vector<float*> weight_grads_of(const std::vector<Linear>& w) {
  std::vector<float*> out(w.size());
  for (size_t le = 0; le < w.size(); ++le) out[le] = w[le].dw;
  return out;
}

std::vector<const int32_t*> offsets_of(const ExpertGroups* g, int count) {
  std::vector<const int32_t*> out(static_cast<size_t>(count));
  for (int p = 0; p < count; ++p) {
    MT_CHECK(g[p].count == g[0].count, "expert blocks of ", g[p].count, " and ", g[0].count,
             " experts");
    out[size_t(p)] = g[p].offset;
  }
  return out;
}

// y's rows of each expert += its bias (out).
void add_biases(float* y, const std::vector<Linear>& w, const ExpertGroups& g) {
#pragma omp parallel for schedule(dynamic)
  for (int le = 0; le < g.count; ++le) {
    const int out = w[le].out;
    const float* b = w[le].b;
    for (int r = g.begin(le); r < g.begin(le) + g.rows(le); ++r) {
      float* row = y + size_t(r) * out;
#pragma omp simd
      for (int o = 0; o < out; ++o) row[o] += b[o];
    }
  }
}

float as_float(float v) {
  return v;
}
float as_float(bf16 v) {
  return bf16_to_float(v);
}

// db_e += column sums of dy_e, per expert: a block of columns per thread (as
// matmul_backward_weight), each summing an expert's rows in row order whatever the team.
template <typename T>
void add_bias_grads(const std::vector<Linear>& w, const T* dy, const ExpertGroups& g) {
  constexpr int kBlock = 64;
  const int out = w.empty() ? 0 : w[0].out;
  const int blocks = (out + kBlock - 1) / kBlock;
#pragma omp parallel for collapse(2) schedule(static)
  for (int le = 0; le < g.count; ++le) {
    for (int blk = 0; blk < blocks; ++blk) {
      const int o0 = blk * kBlock, o1 = std::min(out, o0 + kBlock);
      float acc[kBlock] = {};
      for (int r = g.begin(le); r < g.begin(le) + g.rows(le); ++r) {
        const T* row = dy + size_t(r) * out;
#pragma omp simd
        for (int o = o0; o < o1; ++o) acc[o - o0] += as_float(row[o]);
      }
      for (int o = o0; o < o1; ++o) w[le].db[o] += acc[o - o0];
    }
  }
}

}  // namespace

void expert_gemm_forward(float* y, const float* x, const std::vector<Linear>& w,
                         const ExpertGroups& g, bool with_bias) {
  if (g.count == 0) return;
  grouped_matmul_forward(y, x, weights_of(w).data(), g.offset, g.count, w[0].in, w[0].out);
  if (with_bias) add_biases(y, w, g);
}

void expert_gemm_backward_input(float* dx, const float* dy, const std::vector<Linear>& w,
                                const ExpertGroups& g, bool accumulate) {
  if (g.count == 0) return;
  grouped_matmul_backward_input(dx, dy, weights_of(w).data(), g.offset, g.count, w[0].in, w[0].out,
                                accumulate);
}

void expert_gemm_backward_weight(const std::vector<Linear>& w, const float* dy, const float* x,
                                 const ExpertGroups* g, int count, bool with_bias) {
  if (count == 0 || g[0].count == 0) return;
  grouped_matmul_backward_weight_segments(weight_grads_of(w).data(), dy, x,
                                          offsets_of(g, count).data(), count, g[0].count, w[0].in,
                                          w[0].out);
  if (with_bias)
    for (int p = 0; p < count; ++p) add_bias_grads(w, dy, g[p]);
}

Bf16ExpertWeights::Bf16ExpertWeights(const std::vector<Linear>& w, const uint64_t* version)
    : pointers_(w.size()), version_(version) {
  for (const Linear& l : w) copies_.emplace_back(size_t(l.in) * l.out, version);
  if (!w.empty()) in_ = w[0].in, out_ = w[0].out;
}

const std::vector<const bf16*>& Bf16ExpertWeights::get(const std::vector<Linear>& w) {
  for (size_t le = 0; le < w.size(); ++le) pointers_[le] = copies_[le].get(w[le].w);
  return pointers_;
}

const uint32_t* const* Bf16ExpertWeights::packed(const std::vector<Linear>& w, GroupedPack which) {
  if (!grouped_bf16_reads_packs() || w.empty()) return nullptr;
  Packs& p = packs_of_[int(which)];
  if (p.version == *version_) return p.pointers.data();
  const std::vector<const bf16*>& w16 = get(w);
  const size_t n = grouped_bf16_packed_size(which, in_, out_);
  p.data.resize(w.size());
  p.pointers.resize(w.size());
  for (size_t le = 0; le < w.size(); ++le) p.data[le].resize(n), p.pointers[le] = p.data[le].data();
  const int experts = int(w.size());
#pragma omp parallel for schedule(dynamic)
  for (int le = 0; le < experts; ++le)
    grouped_bf16_pack(p.data[size_t(le)].data(), which, w16[size_t(le)], in_, out_);
  p.version = *version_;
  ++packs_;
  return p.pointers.data();
}

size_t Bf16ExpertWeights::bytes() const {
  return copies_.size() * expert_bytes(in_, out_);
}

size_t Bf16ExpertWeights::expert_bytes(int in, int out) {
  const size_t packs = grouped_bf16_packed_size(GroupedPack::forward, in, out) +
                       grouped_bf16_packed_size(GroupedPack::backward_input, in, out);
  return size_t(in) * size_t(out) * sizeof(bf16) + packs * sizeof(uint32_t);
}

void expert_gemm_forward(float* y, const bf16* x, const std::vector<Linear>& w,
                         Bf16ExpertWeights& w16, const ExpertGroups& g, bool with_bias) {
  if (g.count == 0) return;
  const uint32_t* const* packed = w16.packed(w, GroupedPack::forward);
  grouped_matmul_bf16_forward(y, x, w16.get(w).data(), g.offset, g.count, w[0].in, w[0].out,
                              packed);
  if (with_bias) add_biases(y, w, g);
}

void expert_gemm_backward_input(float* dx, const bf16* dy, const std::vector<Linear>& w,
                                Bf16ExpertWeights& w16, const ExpertGroups& g, bool accumulate) {
  if (g.count == 0) return;
  const uint32_t* const* packed = w16.packed(w, GroupedPack::backward_input);
  grouped_matmul_bf16_backward_input(dx, dy, w16.get(w).data(), g.offset, g.count, w[0].in,
                                     w[0].out, accumulate, packed);
}

void expert_gemm_forward_into_tokens(float* tokens, const int32_t* token, const float* gate,
                                     float* y, const bf16* x, const std::vector<Linear>& w,
                                     Bf16ExpertWeights& w16, const ExpertGroups& g) {
  if (g.count == 0) return;
  const uint32_t* const* packed = w16.packed(w, GroupedPack::forward);
  grouped_matmul_bf16_forward_into_tokens(tokens, token, gate, y, x, w16.get(w).data(), g.offset,
                                          g.count, w[0].in, w[0].out, packed);
}

void expert_gemm_backward_input_into_tokens(float* tokens, const int32_t* token, const bf16* dy,
                                            const std::vector<Linear>& w, Bf16ExpertWeights& w16,
                                            const ExpertGroups& g) {
  if (g.count == 0) return;
  const uint32_t* const* packed = w16.packed(w, GroupedPack::backward_input);
  grouped_matmul_bf16_backward_input_into_tokens(tokens, token, dy, w16.get(w).data(), g.offset,
                                                 g.count, w[0].in, w[0].out, packed);
}

void expert_gemm_forward_swiglu(float* gu, bf16* act, const bf16* x, const std::vector<Linear>& up,
                                Bf16ExpertWeights& up16, const ExpertGroups& g) {
  if (g.count == 0) return;
  const uint32_t* const* packed = up16.packed(up, GroupedPack::forward);
  grouped_matmul_bf16_forward_swiglu(gu, act, x, up16.get(up).data(), g.offset, g.count, up[0].in,
                                     up[0].out / 2, packed);
}

void expert_gemm_backward_input_swiglu(bf16* d_gu, const float* gu, const bf16* dy,
                                       const std::vector<Linear>& down, Bf16ExpertWeights& down16,
                                       const ExpertGroups& g) {
  if (g.count == 0) return;
  const uint32_t* const* packed = down16.packed(down, GroupedPack::backward_input);
  grouped_matmul_bf16_backward_input_swiglu(d_gu, gu, dy, down16.get(down).data(), g.offset,
                                            g.count, down[0].in, down[0].out, packed);
}

void expert_gemm_backward_weight(const std::vector<Linear>& w, const bf16* dy, const bf16* x,
                                 const ExpertGroups* g, int count, bool with_bias) {
  if (count == 0 || g[0].count == 0) return;
  grouped_matmul_bf16_backward_weight_segments(weight_grads_of(w).data(), dy, x,
                                               offsets_of(g, count).data(), count, g[0].count,
                                               w[0].in, w[0].out);
  if (with_bias)
    for (int p = 0; p < count; ++p) add_bias_grads(w, dy, g[p]);
}

}  // namespace mt
