#include "train/hf_export.h"

#include <algorithm>
#include <filesystem>
#include <set>
#include <vector>

#include "core/atomic_file.h"
#include "core/crc32c.h"
#include "core/error.h"
#include "core/file_checks.h"
#include "core/input_file.h"
#include "core/temp_marker.h"
#include "train/hf_config.h"
#include "train/hf_directory.h"
#include "train/safetensors.h"

namespace fs = std::filesystem;

namespace mt {

namespace {

// What an export writes, plus the marker a crash between the publishing rename and its
// removal may leave (inert, core/temp_marker.h).
const std::set<std::string>& export_entries() {
  static const std::set<std::string> names = {kHfConfigFile, kHfWeightsFile, kHfTokenizerFile,
                                              kTempMarkerFile};
  return names;
}

// The proof that a directory is an export of meshtrain's, in model.safetensors' header
// metadata: names alone are no proof, since a downloaded Hugging Face model directory holds
// the same config.json and model.safetensors, and an export replaces the directory whole.
constexpr const char* kExportMarkKey = "meshtrain";
constexpr const char* kExportMarkValue = "hf-export";

bool carries_export_mark(const std::string& weights) {
  try {
    const SafetensorsFile f(weights);
    const auto it = f.metadata().find(kExportMarkKey);
    return it != f.metadata().end() && it->second == kExportMarkValue;
  } catch (const std::exception&) {
    return false;  // unreadable or not safetensors: not provably ours
  }
}

// The bytes of the SentencePiece model the record names, checked against its CRC-32C (the
// ids the weights were trained on must be the ones the copied file gives); "" for bytes.
std::string tokenizer_bytes(const std::optional<TokenizerRecord>& r) {
  if (!r || r->file.empty()) return "";
  // The bytes the run carries (read and checked when it started), else the file's.
  const std::string bytes =
      r->model.empty() ? read_input_file("tokenizer file", r->file, kMaxModelFileBytes) : r->model;
  const uint32_t now = crc32c_update(0, bytes.data(), bytes.size());
  MT_REQUIRE(now == r->crc32c, "tokenizer file ", r->file, " has changed since the run started (",
             r->describe(), "); not exporting a directory whose tokenizer would not match");
  return bytes;
}

}  // namespace

std::string hf_export_conflict(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return "";  // nothing there (or not a directory: checked apart)
  std::vector<std::string> foreign;
  bool has_config = false, empty = true;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    empty = false;
    const std::string name = e.path().filename().string();
    if (name == kHfConfigFile) has_config = true;
    if (!export_entries().count(name) || e.is_symlink() || !e.is_regular_file())
      foreign.push_back(name);
  }
  if (ec) return str(dir, " cannot be listed (", ec.message(), ")");
  if (empty) return "";
  const std::string weights = (fs::path(dir) / kHfWeightsFile).string();
  if (foreign.empty() && has_config && !carries_export_mark(weights))
    return str(dir, " holds a Hugging Face model directory that meshtrain did not write (its ",
               kHfWeightsFile, " lacks the mark of an export); an export replaces the whole ",
               "directory, so give an empty or new directory (or one an export wrote)");
  if (foreign.empty() && has_config) return "";
  std::sort(foreign.begin(), foreign.end());
  std::string what;
  for (size_t i = 0; i < foreign.size() && i < 3; ++i) what += (i ? ", " : "") + foreign[i];
  if (foreign.size() > 3) what += str(" and ", foreign.size() - 3, " more");
  if (foreign.empty()) what = "export files without config.json";
  return str(dir, " holds ", what,
             ", not a meshtrain Hugging Face export; an export replaces the whole directory, so "
             "give an empty or new directory (or one an export wrote)");
}

void require_hf_output_dir(const std::string& flag, const std::string& dir) {
  require_output_dir(flag, dir);
  const std::string conflict = hf_export_conflict(dir);
  MT_REQUIRE(conflict.empty(), flag, " ", conflict);
}

void export_hf_directory(const std::string& dir, const ParamTable& table, const ModelConfig& cfg,
                         const GlobalTensors& params, bool as_bf16,
                         const std::optional<TokenizerRecord>& tokenizer,
                         const std::vector<NamedTensor>& extra_tensors) {
  const std::string config = hf_config_text(cfg, as_bf16);
  const std::string tokenizer_model = tokenizer_bytes(tokenizer);
  std::vector<std::string> names;
  std::vector<SafetensorsTensor> tensors = global_tensors(table, params, "", names);
  for (const NamedTensor& t : extra_tensors)
    tensors.push_back({t.name, {int64_t(t.data.size())}, t.data.data()});
  // The run checked DIR at its start; a user may have put a file there since.
  const std::string conflict = hf_export_conflict(dir);
  if (!conflict.empty()) throw RuntimeError(str("not exporting: ", conflict));
  publish_dir_atomic(dir, [&](const std::string& tmp) {
    write_file_atomic(tmp + "/" + kHfConfigFile, config);
    // transformers refuses a safetensors file whose metadata has no "format" of its own.
    write_safetensors(tmp + "/" + kHfWeightsFile, tensors,
                      {{"format", "pt"}, {kExportMarkKey, kExportMarkValue}}, as_bf16);
    if (!tokenizer_model.empty()) write_file_atomic(tmp + "/" + kHfTokenizerFile, tokenizer_model);
  });
}

}  // namespace mt
