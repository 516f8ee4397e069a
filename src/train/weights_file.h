// Weights in single safetensors files (--export FILE, --init-from FILE, sample's input; a
// directory given to --init-from is a Hugging Face one, train/hf_directory.h):
// fp32 tensors under nanoGPT's names at their global shapes, with the model config as
// metadata (layers, dim, heads, seq, vocab; experts, topk, moe_every, capacity_factor for a
// mixture-of-experts model), so weights move to and from PyTorch. Also the pieces a global
// checkpoint (checkpoint/global_checkpoint.h) writes and reads its tensor files with.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/atomic_file.h"
#include "model/config.h"
#include "model/gpt.h"
#include "train/safetensors.h"

namespace mt {

// One arena in the global view: tensor i of the table (table order) at its global shape,
// without any padding. This is what files hold.
using GlobalTensors = std::vector<std::vector<float>>;

// State outside the parameter table, written under its own name as a 1-D tensor.
struct NamedTensor {
  std::string name;
  std::vector<float> data;
};

// Reads the model shape recorded in a weights file so the CLI can take defaults from it:
// vocab, seq, dim and layers from the tensors; experts and moe_every from the tensors of a
// mixture-of-experts file (0 experts for a dense one); heads, topk and capacity_factor from
// the metadata when present, else base's. Everything else is base's. Throws UsageError for
// metadata that is not a positive number, or for a mixture-of-experts file without top-k
// in its metadata when base.topk is not positive ("give --topk K").
ModelConfig model_config_from_file(const std::string& path, const ModelConfig& base);

// Assembles the global tensors from the local pieces of a table-layout arena. Tensors split
// over tensor parallelism are summed over the tp group from the pieces each rank holds
// (each element has one owner, so the sum is exact): collective over tp, every rank gets
// the result. tp null or of one rank: every tensor must be whole on this rank.
GlobalTensors assemble_global(const ParamTable& table, const float* arena, Communicator* tp);

// Writes the whole model's global tensors (table: the whole model's, GlobalView::whole()),
// in F32, or with as_bf16 (--export-dtype bf16) rounded to BF16: half the file, for inference
// or PyTorch users; checkpoints (--save) stay fp32 whatever this says.
// extra_metadata: more metadata entries (the tokenizer record, train/tokenizer.h).
void export_weights(const std::string& path, const ParamTable& table, const ModelConfig& cfg,
                    const GlobalTensors& params, bool as_bf16 = false,
                    const std::map<std::string, std::string>& extra_metadata = {});
// Loads every parameter this rank holds from the file; names and global shapes must match.
void import_weights(const std::string& path, GPT& model);
void import_weights(const std::string& path, const ParamTable& table, float* params);

// The model config as safetensors metadata (and as a checkpoint's state.json "model").
std::map<std::string, std::string> config_metadata(const ModelConfig& c);

// The global tensors g of `table` under their global names plus `suffix` (names: their
// storage, which the result points into).
std::vector<SafetensorsTensor> global_tensors(const ParamTable& table, const GlobalTensors& g,
                                              const std::string& suffix,
                                              std::vector<std::string>& names);
// Fills this rank's local elements of every tensor of `table` (in table layout, arena) from
// the file's global tensors named with `suffix`. Throws UsageError naming the file and
// tensor for a missing tensor, a wrong shape, or a NaN or Inf value.
void read_local_elements(const SafetensorsFile& f, const ParamTable& table, float* arena,
                         const std::string& suffix);
// The same over several files (a Hugging Face directory's shards): tensor NAME + suffix is
// read from file_of(NAME + suffix), which throws UsageError when no file holds it.
using TensorFileOf = std::function<const SafetensorsFile&(const std::string& name)>;
void read_local_elements(const TensorFileOf& file_of, const ParamTable& table, float* arena,
                         const std::string& suffix);

}  // namespace mt
