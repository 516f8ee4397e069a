// Per pipeline stage, one microbatch: its chunks' blocks, the embedding on the first, the
// head on the last, from the candidate's cost model (cost_model.h), and what the stage holds
// (parameters, linear weights) for the steps after the pipeline.
#include "model/block.h"
#include "parallel/pipeline/stage_chunks.h"
#include "plan/cost_model.h"
#include "plan/time_model.h"
#include "tensor_parallel/vocab_parallel.h"

namespace mt::plan {

namespace {

void add(StageCosts& sc, const Passes& p) {
  sc.forward += p.forward, sc.backward += p.backward, sc.weight += p.weight;
}

// The weights of the layers the engine runs on the dense bf16 tiles (local_on_tiles), each
// {outputs, inputs}: packed once per step instead of rounded.
void add_tile_weights(const CostContext& c, StageCosts& sc,
                      const std::vector<LinearShape>& layers) {
  if (!c.local_bf16) return;
  for (const LinearShape& l : layers)
    if (local_on_tiles(c.rates, l.out)) sc.tile_weights += l.out * l.in;
}

void add_block(const CostContext& c, int layer, StageCosts& sc, double cover = 0) {
  const ModelConfig& m = c.r.model;
  const BlockCosts k = c.model->block(c, layer, cover);
  add(sc, k.passes);
  sc.tp_comm += k.tp_comm;
  sc.ep_comm += k.ep_comm;
  sc.cp_comm += k.cp_comm;
  sc.recompute += k.recompute;
  const double params =
      rank_block_params(m, layer, c.l.tp, c.l.ep, &sc.expert_params, c.r.attention);
  sc.params += params;
  // The linears' weights (their bf16 copies locally): attention (MHA: h (2q + 2kv) / t) and
  // the MLP (2 or 3 h F / t) or the rank's experts (E/ep x 2 or 3 h F).
  const double h = c.h, t = c.t, mlp = c.w.mlp_matrices() * h * c.w.ffn;
  sc.linear_weights +=
      c.w.att.weights(t) + (is_moe_layer(m, layer) ? double(m.experts) / c.l.ep * mlp : mlp / t);
  std::vector<LinearShape> attention;
  for (const Projection& x : c.w.att.projections)
    attention.push_back({x.rank_out(t), x.rank_in(t)});
  add_tile_weights(c, sc, attention);
  const double F = c.w.ffn / t, up = c.w.gated ? 2 * F : F;
  if (!is_moe_layer(m, layer))
    add_tile_weights(c, sc, {{up, h}, {h, F}});
  else if (c.local_bf16 && c.rates.expert_pack_s > 0)
    sc.expert_pack_weights += double(m.experts) / c.l.ep * mlp;
  ++sc.blocks;
  add(sc, c.model->after_block(c, params));
}

// The W of the unit above `layer` in its chunk: the block above, or the head on top of a
// chunk that holds it (none on top of another chunk). The engine runs it under a MoE
// layer's first backward dispatch where the layer takes it (ModelChunk::cover_below: not
// under full recomputation); the local block model applies the layer's own condition
// (local_costs.cpp). Only the W is read, which no cover changes. Not priced (0) where no
// overlapped layer could take it, to spare the search a second block's costs.
double weight_above(const CostContext& c, const ChunkSpec& spec, int layer) {
  const HardwareProfile& hw = c.r.hardware;
  if (!hw.local || c.l.ep <= 1 || hw.a2a_overlap_parts <= 1) return 0;
  if (!is_moe_layer(c.r.model, layer) || c.l.recompute == Recompute::full) return 0;
  if (layer + 1 < spec.last_layer) return c.model->block(c, layer + 1, 0).passes.weight;
  double tp = 0;
  return spec.has_head ? c.model->head(c, &tp).weight : 0;
}

// The token table (V/tp x h on the rank) and, when tied, the head that is the same matrix,
// counted once on the first chunk that holds the embedding or the head; an untied head
// (Llama's lm_head) is a matrix of its own on the last stage. The GPT block adds its
// position table.
void add_embedding(const CostContext& c, StageCosts& sc, bool& wte) {
  const double lookup = stream_seconds(c.rates, 3 * c.N * c.h * c.e, 2);
  add(sc, {lookup, lookup, 0});
  add(sc, c.model->embedding_comm(c, &sc.tp_comm));
  if (!c.r.model.llama()) sc.params += double(c.r.model.seq) * c.h;
  const double Vl = double(tp::padded_vocab(c.r.model.vocab, c.l.tp)) / c.l.tp;
  if (!wte) sc.params += Vl * c.h, wte = true;
}

void add_head(const CostContext& c, StageCosts& sc, bool& wte) {
  add(sc, c.model->head(c, &sc.tp_comm));
  const double Vl = double(tp::padded_vocab(c.r.model.vocab, c.l.tp)) / c.l.tp;
  sc.params += c.w.biases ? 2 * c.h : c.h;
  if (!c.r.model.tied())
    sc.params += Vl * c.h;
  else if (!wte)
    sc.params += Vl * c.h, wte = true;
  sc.linear_weights += Vl * c.h;
  add_tile_weights(c, sc, {{Vl, c.h}});
}

// DeepSeek-V3's multi-token prediction (its report, 2.2; depth D = 1, 4.2): each module is a
// Transformer block, a projection M_k of the concatenated RMSNorm'd hidden state and next
// token's embedding (2h -> h), and the output head and loss again (the embedding and head
// are shared with the main model, 3.2.3: their weights are not counted twice). The block
// is costed as the model's last (a MoE layer there); the two RMSNorms are left out.
void add_mtp(const CostContext& c, StageCosts& sc) {
  const int last = c.r.model.layers - 1;
  for (int k = 0; k < c.r.mtp_layers; ++k) {
    add_block(c, last, sc);
    const double fwd = weight_gemm(c, c.rates, c.N, c.h / c.t, 2 * c.h);
    add(sc, {fwd, fwd, weight_gemm(c, c.rates, c.h / c.t, 2 * c.h, c.N, 1, false)});
    sc.params += 2 * c.h * c.h / c.t;
    sc.linear_weights += 2 * c.h * c.h / c.t;
    add(sc, c.model->head(c, &sc.tp_comm));
  }
}

}  // namespace

std::vector<StageCosts> stage_costs(const PlanRequest& r, const Layout& l) {
  const CostContext c = make_context(r, l);
  const ModelConfig& m = r.model;
  std::vector<int> per_chunk = {m.layers};
  const std::vector<ChunkSpec> whole = {{0, m.layers, true, true}};
  if (l.pp > 1) per_chunk = default_stage_layers(m, l.pp, l.virtual_stages);
  std::vector<StageCosts> out(size_t(l.pp));
  for (int st = 0; st < l.pp; ++st) {
    StageCosts& sc = out[size_t(st)];
    bool wte = false;
    // DualPipe-V's V: stage 0 holds the first and the last model chunk (the embedding and
    // the head), so one embedding, on stage 0.
    const ChunkPlacement place = placement_of(schedule_kind(l.schedule));
    for (const ChunkSpec& spec : l.pp > 1 ? stage_chunk_specs(per_chunk, l.pp, st, place) : whole) {
      for (int layer = spec.first_layer; layer < spec.last_layer; ++layer)
        add_block(c, layer, sc, weight_above(c, spec, layer));
      if (spec.has_embedding) add_embedding(c, sc, wte);
      if (spec.has_head) add_head(c, sc, wte);
      if (spec.has_head && !r.hardware.local) add_mtp(c, sc);
    }
    add(sc, c.model->per_stage(c, sc.linear_weights));
  }
  return out;
}

}  // namespace mt::plan
