// A Hugging Face Llama directory, read (train --init-from DIR, sample --init-from DIR;
// docs/huggingface.md, docs/contracts.md §9a):
//   DIR/config.json                    the model's shape (train/hf_config.h)
//   DIR/model.safetensors              the weights in one file, or
//   DIR/model.safetensors.index.json   {"weight_map": {tensor: file}} and the files it names
//   DIR/tokenizer.model                optional: the SentencePiece model the ids belong to
// Tensors carry §9's names (Hugging Face's own) in F32, BF16 or F16, widened exactly to the
// fp32 master. Every file is opened through core/input_file.h (a FIFO is refused, never
// waited on; JSON bounded in size), and a file the index names must be a plain name inside
// DIR (no '/', no '..'): an index cannot send the reader elsewhere. Anything wrong with the
// directory is a UsageError (exit 2) naming the file and, where there is one, the tensor or
// key, found before any rank starts.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "model/config.h"
#include "model/param_table.h"
#include "train/safetensors.h"

namespace mt {

inline constexpr const char* kHfWeightsFile = "model.safetensors";
inline constexpr const char* kHfIndexFile = "model.safetensors.index.json";
inline constexpr const char* kHfTokenizerFile = "tokenizer.model";

// `path` names a directory (through symlinks): --init-from reads it as a Hugging Face one.
bool is_hf_directory(const std::string& path);

// Every file of DIR a run reads: config.json, the index and the weight files it names (or
// model.safetensors), and tokenizer.model when there is one. For the path checks.
std::vector<std::string> hf_input_files(const std::string& dir);

// The model DIR holds, over base's training settings: config.json's shape (hf_config.h),
// checked as a model (kv heads dividing heads, ...) and against the weights' headers (every
// tensor of the model present at its shape, in a dtype meshtrain reads, none it lacks).
ModelConfig hf_model_config(const std::string& dir, const ModelConfig& base);

// The weight files of DIR, headers read, and which file holds each tensor.
class HfWeights {
 public:
  explicit HfWeights(std::string dir);
  // The file holding `tensor`; UsageError naming DIR and the tensor when none does.
  const SafetensorsFile& file_of(const std::string& tensor) const;
  // Every tensor of cfg's whole model present at its global shape and readable dtype, and no
  // tensor the model does not have (transformers' old rotary_emb.inv_freq buffers aside).
  void check_model(const ModelConfig& cfg) const;

 private:
  void open_index();
  void add_file(const std::string& name, const std::vector<std::string>* mapped);

  std::string dir_;
  std::vector<SafetensorsFile> files_;
  std::map<std::string, size_t> holder_;  // tensor name -> index into files_
};

// Fills this rank's elements of every tensor of `table` (table layout) from DIR's weights.
void import_hf_weights(const std::string& dir, const ParamTable& table, float* params);

// The record of DIR/tokenizer.model (its kind found by loading it); nullopt without one.
std::optional<TokenizerRecord> hf_tokenizer(const std::string& dir);

}  // namespace mt
