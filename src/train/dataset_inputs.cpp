#include "train/dataset_inputs.h"

#include <filesystem>

#include "core/error.h"
#include "data/prepare.h"
#include "train/checkpoint/checkpoint_paths.h"
#include "train/checkpoint/manifest.h"
#include "train/tokenizer.h"

namespace fs = std::filesystem;

namespace mt {

namespace {

bool is_directory(const std::string& p) {
  std::error_code ec;
  return !p.empty() && fs::is_directory(p, ec);
}

Dataset dataset_of(const char* flag, const std::string& dir) {
  MT_REQUIRE(is_dataset_dir(dir), flag, " ", dir,
             " is a directory but not a dataset (no manifest.json of meshtrain prepare): give a "
             "token shard file, "
             "or make a dataset with 'meshtrain prepare TEXT --out ",
             dir, "'");
  return read_dataset(dir);
}

}  // namespace

void resolve_dataset_inputs(TrainOptions& o) {
  IoOptions& io = o.io;
  std::optional<Dataset> data;
  if (is_directory(io.data)) {
    data = dataset_of("--data", io.data);
    io.data_shards = data->train.shards;
    io.data = data->train.shards.front();
    io.data_bytes_per_token = data->train.bytes_per_token();
    io.tokenizer = data->tokenizer;
    if (io.val_data.empty() && !data->val.shards.empty()) {
      io.val_shards = data->val.shards;
      io.val_data = data->val.shards.front();
      io.val_bytes_per_token = data->val.bytes_per_token();
    }
  }
  if (is_directory(io.val_data)) {
    const Dataset val = dataset_of("--val-data", io.val_data);
    MT_REQUIRE(!val.val.shards.empty(), "--val-data ", io.val_data,
               " has no validation split (it was prepared with --val-fraction 0)");
    MT_REQUIRE(!io.tokenizer || same_tokenizer(*io.tokenizer, val.tokenizer), "--val-data ",
               io.val_data, " was tokenized with ", val.tokenizer.describe(), " but --data with ",
               io.tokenizer ? io.tokenizer->describe() : "", "; their ids mean different text");
    io.val_shards = val.val.shards;
    io.val_data = val.val.shards.front();
    io.val_bytes_per_token = val.val.bytes_per_token();
    if (!io.tokenizer) io.tokenizer = val.tokenizer;
  }
  if (!io.tokenizer) return;
  // The model file must still be the one the ids were made with (its checksum); its bytes
  // then travel with the run's weights (train/tokenizer.h).
  io.tokenizer = with_model_bytes(*io.tokenizer);
  const auto tok = load_tokenizer(*io.tokenizer);
  if (!o.vocab_given && data) {
    // The tokenizer's vocabulary, not the largest id seen: sampling may produce any piece.
    o.model.vocab = tok->vocab_size();
    o.vocab_given = true;
  }
}

void check_weights_tokenizer(const TrainOptions& o) {
  if (!o.io.tokenizer) return;
  auto check = [&](const char* flag, const std::string& path, const std::string& weights) {
    const std::optional<TokenizerRecord> w =
        weights.empty()
            ? metadata_tokenizer(read_manifest(path).metadata, path + "/" + kManifestFile)
            : weights_tokenizer(weights);
    MT_REQUIRE(!w || same_tokenizer(*w, *o.io.tokenizer), flag, " ", path,
               " was trained on ids of tokenizer ", w ? w->describe() : "", " but the data is ",
               o.io.tokenizer->describe(), "; the ids would mean different text");
  };
  if (!o.io.init_from.empty()) check("--init-from", o.io.init_from, o.io.init_from);
  if (!o.io.load.empty())  // a sharded checkpoint records it in its manifest
    check("--load", o.io.load, loads_sharded(o.io.load) ? "" : o.io.load + "/model.safetensors");
}

}  // namespace mt
