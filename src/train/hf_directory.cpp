#include "train/hf_directory.h"

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "core/file_checks.h"
#include "core/input_file.h"
#include "core/json_depth.h"
#include "data/sentencepiece_tokenizer.h"
#include "train/global_view.h"
#include "train/hf_config.h"
#include "train/json_error.h"
#include "train/weights_file.h"

namespace fs = std::filesystem;

namespace mt {

namespace {

std::string in_dir(const std::string& dir, const std::string& name) {
  return strip_trailing_slashes(dir) + "/" + name;
}

bool exists(const std::string& path) {
  return file_id(path).has_value();
}

// A name the index may give a weight file: one plain entry of DIR, so that the index can
// never make the reader open something outside the directory.
bool plain_name(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\0') == std::string::npos;
}

// DIR's index: tensor name -> weight file (a plain name inside DIR).
std::map<std::string, std::string> read_weight_map(const std::string& dir) {
  const std::string path = in_dir(dir, kHfIndexFile);
  const std::string text = read_input_file("--init-from", path, kMaxJsonInputBytes);
  MT_REQUIRE(json_nesting_depth(text) <= kMaxJsonDepth, path, " nests deeper than ", kMaxJsonDepth,
             " levels");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception&) {
    throw UsageError(str(path, " is not valid JSON: ", json_syntax_error(text)));
  }
  MT_REQUIRE(j.is_object() && j.contains("weight_map") && j["weight_map"].is_object(), path,
             " has no \"weight_map\" object (tensor name -> file)");
  std::map<std::string, std::string> map;
  for (const auto& [tensor, file] : j["weight_map"].items()) {
    MT_REQUIRE(file.is_string(), path, ": weight_map entry ", tensor, " is ", file.dump(),
               ", not a file name");
    const std::string name = file.get<std::string>();
    MT_REQUIRE(plain_name(name), path, ": weight_map sends ", tensor, " to \"", name,
               "\", which is not a file inside ", dir, " (a plain name, no '/' or '..')");
    map[tensor] = name;
  }
  MT_REQUIRE(!map.empty(), path, " maps no tensors");
  return map;
}

// The weight files of DIR by name: the index's, else model.safetensors.
std::vector<std::string> weight_file_names(const std::string& dir) {
  const bool single = exists(in_dir(dir, kHfWeightsFile));
  const bool index = exists(in_dir(dir, kHfIndexFile));
  MT_REQUIRE(!(single && index), "--init-from ", dir, " holds both ", kHfWeightsFile, " and ",
             kHfIndexFile, "; keep the one that describes the weights");
  if (single) return {kHfWeightsFile};
  MT_REQUIRE(index, "--init-from ", dir, " has no ", kHfWeightsFile, " or ", kHfIndexFile,
             exists(in_dir(dir, "pytorch_model.bin"))
                 ? " (pytorch_model.bin is not read: save the model with safetensors)"
                 : " (a Hugging Face directory holds its weights in safetensors)");
  std::set<std::string> names;
  for (const auto& [tensor, file] : read_weight_map(dir)) names.insert(file);
  return {names.begin(), names.end()};
}

// transformers before 4.31 saved RoPE's frequencies as a buffer; they follow from
// config.json, so they are skipped rather than refused.
bool derived_buffer(const std::string& name) {
  return name.ends_with(".rotary_emb.inv_freq");
}

}  // namespace

bool is_hf_directory(const std::string& path) {
  std::error_code ec;
  return !path.empty() && fs::is_directory(path, ec);
}

std::vector<std::string> hf_input_files(const std::string& dir) {
  std::error_code ec;  // a dangling link is left to require_input_file, which says why
  MT_REQUIRE(exists(in_dir(dir, kHfConfigFile)) || fs::is_symlink(in_dir(dir, kHfConfigFile), ec),
             "--init-from ", dir,
             " is a directory without config.json; give a safetensors file or a Hugging Face "
             "model directory");
  std::vector<std::string> files = {in_dir(dir, kHfConfigFile)};
  if (exists(in_dir(dir, kHfIndexFile)) && !exists(in_dir(dir, kHfWeightsFile)))
    files.push_back(in_dir(dir, kHfIndexFile));
  for (const std::string& name : weight_file_names(dir)) files.push_back(in_dir(dir, name));
  if (exists(in_dir(dir, kHfTokenizerFile))) files.push_back(in_dir(dir, kHfTokenizerFile));
  return files;
}

ModelConfig hf_model_config(const std::string& dir, const ModelConfig& base) {
  const std::string path = in_dir(dir, kHfConfigFile);
  ModelConfig c =
      parse_hf_config(read_input_file("--init-from", path, kMaxJsonInputBytes), path, base);
  try {
    c.validate();
  } catch (const UsageError& e) {
    // The rule is stated for the flags; the values came from the file.
    throw UsageError(str(path, " describes a model meshtrain cannot build: ", e.what()));
  }
  HfWeights(dir).check_model(c);
  return c;
}

HfWeights::HfWeights(std::string dir) : dir_(strip_trailing_slashes(std::move(dir))) {
  if (exists(in_dir(dir_, kHfIndexFile)) && !exists(in_dir(dir_, kHfWeightsFile))) {
    open_index();
    return;
  }
  for (const std::string& name : weight_file_names(dir_)) add_file(name, nullptr);
}

void HfWeights::open_index() {
  const std::map<std::string, std::string> map = read_weight_map(dir_);
  std::map<std::string, std::vector<std::string>> by_file;
  for (const auto& [tensor, file] : map) by_file[file].push_back(tensor);
  for (const auto& [file, tensors] : by_file) add_file(file, &tensors);
}

// Opens DIR/name and records its tensors; `mapped`: the tensors the index says it holds.
void HfWeights::add_file(const std::string& name, const std::vector<std::string>* mapped) {
  files_.emplace_back(in_dir(dir_, name));
  const SafetensorsFile& f = files_.back();
  const std::string index = in_dir(dir_, kHfIndexFile);
  for (const std::string& tensor : f.names()) {
    MT_REQUIRE(!holder_.count(tensor), dir_, ": tensor ", tensor, " is in both ",
               files_[holder_[tensor]].path(), " and ", f.path());
    MT_REQUIRE(!mapped || std::find(mapped->begin(), mapped->end(), tensor) != mapped->end(),
               f.path(), " holds tensor ", tensor, ", which ", index, " does not map to it");
    holder_[tensor] = files_.size() - 1;
  }
  if (mapped)
    for (const std::string& tensor : *mapped)
      MT_REQUIRE(f.contains(tensor), index, " maps tensor ", tensor, " to ", name,
                 ", which does not hold it");
}

const SafetensorsFile& HfWeights::file_of(const std::string& tensor) const {
  const auto it = holder_.find(tensor);
  MT_REQUIRE(it != holder_.end(), "--init-from ", dir_, ": tensor ", tensor,
             " is missing (config.json describes a model that has it)");
  return files_[it->second];
}

void HfWeights::check_model(const ModelConfig& cfg) const {
  const ParamTable table = whole_model_table(cfg);
  std::set<std::string> wanted;
  for (const ParamInfo& p : table.entries()) {
    file_of(p.name).expect_shape(p.name, p.global_shape);
    wanted.insert(p.name);
  }
  // An MoE directory's selection biases (§9: only with --router-bias-update), read apart.
  for (const std::string& bias : router_bias_names(table)) wanted.insert(bias);
  for (const auto& [tensor, file] : holder_) {
    const bool head_of_tied = cfg.tied() && tensor == "lm_head.weight";
    MT_REQUIRE(wanted.count(tensor) || derived_buffer(tensor), files_[file].path(),
               " holds tensor ", tensor, ", which the model of ", dir_, "/", kHfConfigFile,
               head_of_tied ? " does not have (tie_word_embeddings is true: the head is the "
                              "embedding)"
                            : " does not have");
  }
}

void import_hf_weights(const std::string& dir, const ParamTable& table, float* params) {
  const HfWeights weights(dir);
  read_local_elements(
      [&](const std::string& name) -> const SafetensorsFile& { return weights.file_of(name); },
      table, params, "");
}

std::optional<TokenizerRecord> hf_tokenizer(const std::string& dir) {
  const std::string path = in_dir(dir, kHfTokenizerFile);
  if (!exists(path)) return std::nullopt;
  const std::string what = "--init-from " + dir + "'s tokenizer";
  return record_tokenizer_file(load_sentencepiece_tokenizer(path, what)->kind(), path, what);
}

}  // namespace mt
