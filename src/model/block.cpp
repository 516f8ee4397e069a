#include "model/block.h"

#include "model/gpt_block.h"
#include "model/llama_block.h"

namespace mt {

std::unique_ptr<Block> make_block(int layer, const ModelConfig& cfg, const TensorParallelShard& tp,
                                  int max_b, ParamTable& table, SlotLayout& layout,
                                  const ExpertParallelShard& ep, Recompute recompute,
                                  const uint64_t* bf16_version, const BlockContext& context) {
  if (cfg.llama())
    return std::make_unique<LlamaBlock>(layer, cfg, tp, max_b, table, layout, ep, bf16_version,
                                        context);
  return std::make_unique<GptBlock>(layer, cfg, tp, max_b, table, layout, ep, recompute,
                                    bf16_version, context);
}

}  // namespace mt
