// The largest values the numeric train options accept, shared by the flag registry (which
// refuses a flag beyond them by name, cli/flag_set.h) and by validate_train_options (which
// checks what the products of several flags imply).
//
// Each bound is what the engine can honour, not what is sensible: well beyond any real run,
// small enough that what the engine computes from it cannot overflow (an int row count,
// an int64 element count, a float hyper-parameter, a time in nanoseconds) and that a typo
// (--layers 2000000000, --timeout 1e30) is an error before anything is allocated or waited.
#pragma once

#include <cfloat>
#include <cstdint>

#include "model/config.h"

namespace mt::limits {

constexpr int kMaxLayers = 4096;           // blocks (also --virtual-stages, --moe-every)
constexpr int kMaxDim = 65536;             // model width (and heads)
constexpr int kMaxFfnDim = 1 << 20;        // llama's SwiGLU width
constexpr int kMaxSeq = 1 << 20;           // context length
constexpr int kMaxVocab = 2147483647;      // int32 ids (version-2 token shards)
constexpr int kMaxExperts = 4096;          // experts per MoE layer (and --topk)
constexpr int kMaxRanks = 1 << 20;         // one of --dp --tp --pp --ep, and their product
constexpr int kMaxBatch = 1 << 20;         // global batch in sequences (and --microbatches)
constexpr int kMaxOverlapParts = 1024;     // --moe-overlap-parts (parts of a microbatch)
constexpr int kMaxSteps = 1000000000;      // steps and every "every N steps" flag
constexpr int kMaxEvalBatches = 1000000;   // batches per evaluation
constexpr int kMaxSampleTokens = 1000000;  // tokens of the final sample
constexpr int kMaxKeepCheckpoints = 1000000;
constexpr int kMaxRestarts = 1000;
constexpr double kMaxTimeoutS = 1e6;      // about 11.6 days
constexpr double kMaxBucketMb = 1 << 20;  // 1 TiB
constexpr double kMaxPeakGflops = 1e6;    // per thread
// Hyper-parameters the kernels take as float: beyond this they become inf.
constexpr double kMaxFloat = FLT_MAX;
// Tokens of one microbatch of one replica (b x T rows): row counts are ints in the kernels.
constexpr int64_t kMaxMicrobatchTokens = (int64_t(1) << 31) - 1;
// Elements of a model, or of one microbatch's activations of one block: counted in int64,
// then multiplied by bytes, buffers and layers (2^50 is about 10^15, and leaves 2^13).
constexpr double kMaxElements = double(int64_t(1) << 50);
// The pipeline's message tags (comm/communicator.h, make_p2p_tag): 8 bits of chunk with
// two tags per chunk, 16 bits of microbatch.
constexpr int kMaxModelChunks = 128;
constexpr int kMaxPipelineMicrobatches = 65536;

static_assert(kMaxVocab == ModelConfig::kMaxVocab, "--vocab's flag range is the model's");

}  // namespace mt::limits
