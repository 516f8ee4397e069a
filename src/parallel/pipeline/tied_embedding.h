// The tied token embedding under pipeline parallelism. transformer.wte.weight is used by
// the embedding (model chunk 0, first stage) and by the LM head (last model chunk, last
// stage); with pp > 1 both stages hold a copy. Each copy gets only its own part of the
// gradient, so the two parts are summed and both stages apply the same update: the copies
// start identical (init and checkpoints depend only on the name) and stay identical.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "parallel/data_parallel/data_parallel.h"

namespace mt {

// Exchanges `grad` (count floats) between pp ranks 0 and size-1 and leaves the sum in both
// (bitwise equal: a + b == b + a). Only those two ranks call it; no-op when pp has one rank.
// Call it after the last microbatch's backward, before clipping.
void sum_tied_embedding_grad(Communicator& pp, float* grad, size_t count);

// The same once data parallelism owns the gradients (any ZeRO stage; the two stages' flat
// layouts differ): reads this stage's dp-reduced wte gradient (DataParallel::read_grad,
// collective over dp unless ZeRO 0), sums it with the other stage's and writes the sum
// back into the pieces this rank updates, so both copies get the same update. full
// receives the summed tensor (this rank's wte, every element), e.g. to count it once in
// the gradient norm. Call after finish_gradients, on the first and the last stage only;
// tied_name is the tied token table's name (ModelConfig::token_table_name), empty for an
// untied model (llama's lm_head.weight is the last stage's own). Leaves full empty when
// there is no tied table.
void sum_tied_embedding_grad(Communicator& pp, DataParallel& dp, const ParamTable& table,
                             const std::string& tied_name, std::vector<float>& full);

// The part of `full` (the summed tensor above) that the gradient norm counts on another
// stage: all of it on the last stage, whose wte is a copy of the first stage's; nothing
// elsewhere (global_grad_sum_squares's counted_elsewhere).
std::span<const float> tied_embedding_copy(const Communicator& pp, const std::vector<float>& full);

}  // namespace mt
