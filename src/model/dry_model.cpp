#include "model/dry_model.h"

#include "core/error.h"

namespace mt {

namespace {

// The ep group of a dry run: the MoE layer asks only its rank and size; it never runs.
class DryExchange final : public TokenExchange {
 public:
  explicit DryExchange(int size) : size_(size) {}
  int rank() const override { return 0; }
  int size() const override { return size_; }
  void exchange_counts(const int32_t*, int32_t*, int) override { refuse(); }
  void dispatch(float*, const float*, float*, const ExchangeCounts&, int) override { refuse(); }
  void combine(float*, const float*, float*, const ExchangeCounts&, int) override { refuse(); }

 private:
  [[noreturn]] static void refuse() { MT_CHECK(false, "a dry run's model does not run"); }
  int size_;
};

}  // namespace

DryModel::DryModel(const ModelConfig& cfg, const DryModelShape& shape)
    : cfg_(cfg), shape_(shape), stand_ins_(shape.target, shape.profile) {
  cfg.validate();
  if (shape.ep > 1) exchange_ = std::make_unique<DryExchange>(shape.ep);
}

DryModel::~DryModel() = default;

RankFootprint DryModel::rank(const std::vector<ChunkSpec>& chunks) {
  const TensorParallelShard tp{0, shape_.tp, nullptr, shape_.tp > 1 && shape_.sequence_parallel};
  const ExpertParallelShard ep{.rank = 0,
                               .size = shape_.ep,
                               .exchange = exchange_.get(),
                               .overlap_parts = shape_.moe_overlap_parts};
  const uint64_t* bf16 = shape_.precision == Precision::bf16 ? &bf16_version_ : nullptr;
  ParamTable table;
  RankFootprint r;
  // The units GPT builds: stage 0 of a V shares one edge unit between its two chunks.
  std::vector<ChunkSpec> specs = chunks;
  share_tied_edge(cfg_, specs);
  for (const ChunkSpec& spec : specs) {
    const ModelChunk chunk(cfg_, spec, tp, shape_.max_b, table, ep, shape_.recompute, bf16,
                           &stand_ins_);
    r.chunks.push_back(chunk.footprint());
  }
  if (const ParamInfo* wte = table.find("transformer.wte.weight"))
    r.tied_embedding_numel = wte->numel;
  return r;
}

}  // namespace mt
