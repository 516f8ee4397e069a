#include "model/block.h"

#include <cmath>
#include <cstring>
#include <string>

#include "kernels/attention.h"
#include "kernels/gelu.h"
#include "kernels/layernorm.h"
#include "kernels/reduce.h"

namespace mt {

namespace {

ShardSpec rows_of(int64_t start, int64_t len) { return {0, {{start, len}}}; }

// y (N, C) += bias (C) on every row.
void add_bias_rows(float* y, const float* bias, int N, int C) {
#pragma omp parallel for
  for (int n = 0; n < N; ++n) {
    float* row = y + size_t(n) * C;
    for (int c = 0; c < C; ++c) row[c] += bias[c];
  }
}

}  // namespace

Block::Block(int layer, const ModelConfig& cfg, const TensorParallelShard& tp, int max_b,
             ParamTable& table, SlotLayout& layout)
    : C_(cfg.dim), max_b_(max_b), tp_(tp) {
  MT_REQUIRE(cfg.heads % tp.size == 0, "--tp ", tp.size, " does not divide --heads ", cfg.heads,
             " (each attention head must live on one rank)");
  T_ = cfg.seq;
  NHl_ = cfg.heads / tp.size;
  Cl_ = NHl_ * cfg.head_dim();
  Hl_ = cfg.hidden() / tp.size;
  const int64_t C = C_, H = cfg.hidden(), r = tp.rank;
  const std::string p = "transformer.h." + std::to_string(layer) + ".";
  const float proj_std = 0.02f / std::sqrt(2.0f * cfg.layers);

  // Column-parallel QKV: this rank's heads are rows [r*Cl, (r+1)*Cl) of each of q, k, v.
  ShardSpec qkv_rows = tp.size == 1 ? ShardSpec{}
                                    : ShardSpec{0, {{r * Cl_, Cl_}, {C + r * Cl_, Cl_},
                                                    {2 * C + r * Cl_, Cl_}}};
  ShardSpec attn_cols = tp.size == 1 ? ShardSpec{} : ShardSpec{1, {{r * Cl_, Cl_}}};
  ShardSpec fc_rows = tp.size == 1 ? ShardSpec{} : rows_of(r * Hl_, Hl_);
  ShardSpec mlp_cols = tp.size == 1 ? ShardSpec{} : ShardSpec{1, {{r * Hl_, Hl_}}};

  ln1_.w_info = &table.add(p + "ln_1.weight", {C}, InitKind::ones);
  ln1_.b_info = &table.add(p + "ln_1.bias", {C}, InitKind::zeros);
  qkv_.weight_info = &table.add(p + "attn.c_attn.weight", {3 * C, C}, InitKind::normal, 0.02f,
                                qkv_rows);
  qkv_.bias_info = &table.add(p + "attn.c_attn.bias", {3 * C}, InitKind::zeros, 0, qkv_rows);
  attn_proj_.weight_info = &table.add(p + "attn.c_proj.weight", {C, C}, InitKind::normal,
                                      proj_std, attn_cols);
  attn_proj_.bias_info = &table.add(p + "attn.c_proj.bias", {C}, InitKind::zeros);
  ln2_.w_info = &table.add(p + "ln_2.weight", {C}, InitKind::ones);
  ln2_.b_info = &table.add(p + "ln_2.bias", {C}, InitKind::zeros);
  fc_.weight_info = &table.add(p + "mlp.c_fc.weight", {H, C}, InitKind::normal, 0.02f, fc_rows);
  fc_.bias_info = &table.add(p + "mlp.c_fc.bias", {H}, InitKind::zeros, 0, fc_rows);
  mlp_proj_.weight_info = &table.add(p + "mlp.c_proj.weight", {C, H}, InitKind::normal,
                                     proj_std, mlp_cols);
  mlp_proj_.bias_info = &table.add(p + "mlp.c_proj.bias", {C}, InitKind::zeros);
  qkv_.in = C_, qkv_.out = 3 * Cl_;
  attn_proj_.in = Cl_, attn_proj_.out = C_;
  fc_.in = C_, fc_.out = Hl_;
  mlp_proj_.in = Hl_, mlp_proj_.out = C_;

  const size_t N = size_t(max_b) * T_;
  off_.ln1_out = layout.reserve(N * C_);
  off_.ln1_mean = layout.reserve(N);
  off_.ln1_rstd = layout.reserve(N);
  off_.qkv = layout.reserve(N * 3 * Cl_);
  off_.att = layout.reserve(size_t(max_b) * NHl_ * T_ * T_);
  off_.att_out = layout.reserve(N * Cl_);
  off_.x_mid = layout.reserve(N * C_);
  off_.ln2_out = layout.reserve(N * C_);
  off_.ln2_mean = layout.reserve(N);
  off_.ln2_rstd = layout.reserve(N);
  off_.fc_pre = layout.reserve(N * Hl_);
  off_.fc_out = layout.reserve(N * Hl_);
  off_.d_fc = layout.reserve(N * Hl_);
  off_.d_ln2 = layout.reserve(N * C_);
  off_.dx_mid = layout.reserve(N * C_);
  off_.d_att_out = layout.reserve(N * Cl_);
  off_.d_qkv = layout.reserve(N * 3 * Cl_);
  off_.d_ln1 = layout.reserve(N * C_);
}

void Block::bind(float* params, float* grads) {
  for (Norm* n : {&ln1_, &ln2_}) {
    n->w = params + n->w_info->offset;
    n->b = params + n->b_info->offset;
    n->dw = grads + n->w_info->offset;
    n->db = grads + n->b_info->offset;
  }
  for (Linear* l : {&qkv_, &attn_proj_, &fc_, &mlp_proj_}) l->bind(params, grads);
}

size_t Block::attention_scratch_floats() const {
  return attention_backward_scratch_floats(max_b_, T_, Cl_, NHl_);
}

void Block::all_reduce_tp(float* x, size_t n) {
  if (tp_.size > 1) tp_.comm->all_reduce(x, x, n, DType::f32, ReduceOp::sum).wait();
}

void Block::forward(float* s, const float* x_in, float* x_out, int b, int T) {
  const int N = b * T;
  float* ln1_out = s + off_.ln1_out;
  float* qkv = s + off_.qkv;
  float* att_out = s + off_.att_out;
  float* x_mid = s + off_.x_mid;
  float* ln2_out = s + off_.ln2_out;
  float* fc_pre = s + off_.fc_pre;
  float* fc_out = s + off_.fc_out;
  const bool tp = tp_.size > 1;

  layernorm_forward(ln1_out, s + off_.ln1_mean, s + off_.ln1_rstd, x_in, ln1_.w, ln1_.b, N, C_);
  qkv_.forward(qkv, ln1_out, N);
  attention_forward(att_out, s + off_.att, qkv, b, T, Cl_, NHl_);
  // Row-parallel projection: partial sums are reduced before the (replicated) bias is added
  // once, so the bias is not counted tp times.
  attn_proj_.forward(x_mid, att_out, N, /*with_bias=*/!tp);
  if (tp) {
    all_reduce_tp(x_mid, size_t(N) * C_);
    add_bias_rows(x_mid, attn_proj_.b, N, C_);
  }
  add_inplace(x_mid, x_in, size_t(N) * C_);

  layernorm_forward(ln2_out, s + off_.ln2_mean, s + off_.ln2_rstd, x_mid, ln2_.w, ln2_.b, N, C_);
  fc_.forward(fc_pre, ln2_out, N, /*with_bias=*/false);
  bias_gelu_forward(fc_out, fc_pre, fc_.b, N, Hl_);
  mlp_proj_.forward(x_out, fc_out, N, !tp);
  if (tp) {
    all_reduce_tp(x_out, size_t(N) * C_);
    add_bias_rows(x_out, mlp_proj_.b, N, C_);
  }
  add_inplace(x_out, x_mid, size_t(N) * C_);
}

void Block::backward_input(float* s, const float* x_in, const float* dx_out, float* dx_in,
                           float* scratch, int b, int T) {
  const size_t N = size_t(b) * T;
  float* d_fc = s + off_.d_fc;
  float* d_ln2 = s + off_.d_ln2;
  float* dx_mid = s + off_.dx_mid;
  float* d_att_out = s + off_.d_att_out;
  float* d_qkv = s + off_.d_qkv;
  float* d_ln1 = s + off_.d_ln1;

  // MLP: d_fc = gelu'(fc_pre) * (dx_out @ W_proj), then back through c_fc to ln_2's output.
  std::memset(d_fc, 0, N * Hl_ * sizeof(float));
  mlp_proj_.backward_input(d_fc, dx_out, int(N));
  gelu_backward(d_fc, s + off_.fc_pre, d_fc, N * Hl_);
  std::memset(d_ln2, 0, N * C_ * sizeof(float));
  fc_.backward_input(d_ln2, d_fc, int(N));
  all_reduce_tp(d_ln2, N * C_);
  std::memcpy(dx_mid, dx_out, N * C_ * sizeof(float));  // residual path
  layernorm_backward_input(dx_mid, d_ln2, s + off_.x_mid, ln2_.w, s + off_.ln2_mean,
                           s + off_.ln2_rstd, int(N), C_);

  // Attention.
  std::memset(d_att_out, 0, N * Cl_ * sizeof(float));
  attn_proj_.backward_input(d_att_out, dx_mid, int(N));
  std::memset(d_qkv, 0, N * 3 * Cl_ * sizeof(float));
  attention_backward(d_qkv, scratch, d_att_out, s + off_.qkv, s + off_.att, b, T, Cl_, NHl_);
  std::memset(d_ln1, 0, N * C_ * sizeof(float));
  qkv_.backward_input(d_ln1, d_qkv, int(N));
  all_reduce_tp(d_ln1, N * C_);
  // dx_in must not alias anything read below; the x_in statistics are in the slot.
  std::memcpy(dx_in, dx_mid, N * C_ * sizeof(float));  // residual path
  layernorm_backward_input(dx_in, d_ln1, x_in, ln1_.w, s + off_.ln1_mean, s + off_.ln1_rstd,
                           int(N), C_);
}

void Block::backward_weight(float* s, const float* x_in, const float* dx_out, int b, int T) {
  const int N = b * T;
  mlp_proj_.backward_weight(dx_out, s + off_.fc_out, N);
  fc_.backward_weight(s + off_.d_fc, s + off_.ln2_out, N);
  layernorm_backward_weight(ln2_.dw, ln2_.db, s + off_.d_ln2, s + off_.x_mid, s + off_.ln2_mean,
                            s + off_.ln2_rstd, N, C_);
  attn_proj_.backward_weight(s + off_.dx_mid, s + off_.att_out, N);
  qkv_.backward_weight(s + off_.d_qkv, s + off_.ln1_out, N);
  layernorm_backward_weight(ln1_.dw, ln1_.db, s + off_.d_ln1, x_in, s + off_.ln1_mean,
                            s + off_.ln1_rstd, N, C_);
}

}  // namespace mt
