#include "train/global_view.h"

#include <cstdint>
#include <unordered_map>
#include <utility>

#include "core/error.h"
#include "model/gpt.h"

namespace mt {

namespace {

// Point-to-point tag of every tensor sent to rank 0: messages between one pair with one
// tag arrive in order, and both sides walk the whole list in the same order.
int lead_gather_tag() {
  return make_p2p_tag(P2PKind::user, 254, 0);
}

std::vector<LeadGather::Tensor> table_tensors(const ParamTable& t) {
  std::vector<LeadGather::Tensor> out;
  for (const ParamInfo& p : t.entries()) out.push_back({p.name, size_t(p.global_numel())});
  return out;
}

std::vector<std::string> table_names(const ParamTable& t) {
  std::vector<std::string> out;
  for (const ParamInfo& p : t.entries()) out.push_back(p.name);
  return out;
}

std::vector<LeadGather::Tensor> bias_tensors(const std::vector<std::string>& names, int experts) {
  std::vector<LeadGather::Tensor> out;
  for (const std::string& n : names) out.push_back({n, size_t(experts)});
  return out;
}

}  // namespace

ParamTable whole_model_table(const ModelConfig& cfg) {
  // A chunk registers its tensors at construction; activation slots are allocated on first
  // use, so with max_b 1 this costs a few small scratch buffers and no model-sized arena.
  ParamTable table;
  ModelChunk chunk(cfg, GPT::whole_model(cfg).front(), TensorParallelShard{}, 1, table);
  return table;
}

std::string router_bias_name(const std::string& router_weight_name) {
  const std::string weight = ".weight";
  MT_CHECK(router_weight_name.ends_with(".router" + weight), router_weight_name,
           " is not a router weight");
  return router_weight_name.substr(0, router_weight_name.size() - weight.size()) + ".expert_bias";
}

std::vector<std::string> router_bias_names(const ParamTable& table) {
  std::vector<std::string> out;
  const std::string router = ".mlp.router.weight";
  for (const ParamInfo& p : table.entries())
    if (p.name.size() > router.size() && p.name.ends_with(router))
      out.push_back(router_bias_name(p.name));
  return out;
}

LeadGather::LeadGather(std::vector<Tensor> whole, const std::vector<std::string>& held,
                       Communicator& world)
    : whole_(std::move(whole)), world_(world) {
  const size_t n = whole_.size();
  const int size = world.size(), me = world.rank();
  held_index_.assign(n, -1);
  std::unordered_map<std::string, size_t> index;
  for (size_t i = 0; i < n; ++i) index.emplace(whole_[i].name, i);
  std::vector<uint8_t> mine(n, 0), all(n * size_t(size), 0);
  for (size_t j = 0; j < held.size(); ++j) {
    const auto it = index.find(held[j]);
    MT_CHECK(it != index.end(), held[j], " is not a tensor of the whole model");
    const size_t i = it->second;
    held_index_[i] = int(j);
    mine[i] = 1;
  }
  if (n > 0) world.all_gather(mine.data(), all.data(), n, DType::u8).wait();
  owner_.assign(n, -1);
  for (size_t i = 0; i < n; ++i) {
    for (int r = 0; r < size && owner_[i] < 0; ++r)
      if (all[size_t(r) * n + i]) owner_[i] = r;
    // Every rank sees the same table, so every rank throws here, and nothing hangs.
    if (owner_[i] < 0)
      throw RuntimeError(str("rank ", me, ": no rank holds ", whole_[i].name,
                             ": cannot assemble the whole model"));
  }
}

GlobalTensors LeadGather::to_lead(GlobalTensors held) const {
  const int me = world_.rank();
  const int tag = lead_gather_tag();
  GlobalTensors out(me == 0 ? whole_.size() : 0);
  std::vector<Work> pending;
  for (size_t i = 0; i < whole_.size(); ++i) {
    const size_t n = whole_[i].numel;
    if (owner_[i] == me) {
      std::vector<float>& t = held[size_t(held_index_[i])];
      MT_CHECK(t.size() == n, whole_[i].name, ": ", t.size(), " elements, the model has ", n);
      if (me == 0)
        out[i] = std::move(t);
      else
        pending.push_back(world_.send(t.data(), n, DType::f32, 0, tag));
    } else if (me == 0) {
      out[i].resize(n);
      pending.push_back(world_.recv(out[i].data(), n, DType::f32, owner_[i], tag));
    }
  }
  // Sends read `held` until they complete; it lives until this returns.
  for (Work& w : pending) w.wait();
  return out;
}

GlobalView::GlobalView(const ModelConfig& cfg, const ParamTable& table,
                       const std::vector<MoeLayer*>& moe, Communicator& world)
    : whole_(whole_model_table(cfg)),
      moe_(moe),
      bias_names_(router_bias_names(whole_)),
      tensors_(table_tensors(whole_), table_names(table), world),
      biases_(bias_tensors(bias_names_, cfg.experts), router_bias_names(table), world) {
  MT_CHECK(router_bias_names(table).size() == moe_.size(), "the table holds ",
           router_bias_names(table).size(), " routers for ", moe_.size(), " MoE layers");
}

GlobalTensors GlobalView::gather(const ParamTable& table, const float* arena,
                                 Communicator* tp) const {
  return to_lead(assemble_global(table, arena, tp));
}

std::vector<NamedTensor> GlobalView::router_biases_to_lead() const {
  GlobalTensors held;
  for (MoeLayer* m : moe_) held.push_back(m->router_bias());
  GlobalTensors all = biases_.to_lead(std::move(held));
  std::vector<NamedTensor> out;
  for (size_t i = 0; i < all.size(); ++i) out.push_back({bias_names_[i], std::move(all[i])});
  return out;
}

}  // namespace mt
