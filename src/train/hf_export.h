// A Hugging Face Llama directory, written (train --export-hf DIR, export --from CHECKPOINT
// --to-hf DIR; docs/huggingface.md): DIR/config.json (train/hf_config.h), DIR/model.safetensors
// (§9 names, F32 or with --export-dtype bf16 BF16, header metadata {"format": "pt"} as
// transformers requires) and, when the model's ids come from a SentencePiece model of
// `meshtrain prepare`, a copy of it as DIR/tokenizer.model.
//
// The directory is published whole (core/atomic_file.h, publish_dir_atomic: a marked
// temporary sibling, then one swap), so a reader sees the old directory or the new one,
// never a mix; the weights pass the one finiteness gate (train/finite_gate.h) inside
// write_safetensors, and a refusal leaves DIR as it was. An existing DIR is replaced only
// when it holds nothing but what an export writes and its model.safetensors carries the
// export's mark in its header metadata ({"meshtrain": "hf-export"}): a downloaded Hugging
// Face directory has the same file names (hf_export_conflict).
#pragma once

#include <optional>
#include <string>

#include "data/tokenizer.h"
#include "model/config.h"
#include "model/param_table.h"
#include "train/weights_file.h"

namespace mt {

// Empty when DIR may be replaced by an export: missing, empty, or holding only the files an
// export writes. Otherwise one sentence naming what is in the way.
std::string hf_export_conflict(const std::string& dir);

// The checks of an output directory before anything runs (flag: "--export-hf", "--to-hf"):
// require_output_dir, then hf_export_conflict. Throws UsageError.
void require_hf_output_dir(const std::string& flag, const std::string& dir);

// Writes the directory from the whole model's global tensors (table: whole_model_table's
// order). tokenizer: the run's record; a SentencePiece model is copied after its CRC-32C is
// checked against the record (UsageError when the file changed). RuntimeError when a value is
// not finite or DIR became unreplaceable since the checks (nothing is written then).
void export_hf_directory(const std::string& dir, const ParamTable& table, const ModelConfig& cfg,
                         const GlobalTensors& params, bool as_bf16,
                         const std::optional<TokenizerRecord>& tokenizer);

}  // namespace mt
