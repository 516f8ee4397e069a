// Hugging Face Llama directories on disk (train/hf_directory.h, train/hf_export.h): the
// engine's weights go out and come back bit for bit (fp32; bf16 as the rounded values), a
// sharded directory with an index reads the same, and every damaged or hostile directory is
// one UsageError naming the file.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "kernels/bf16.h"
#include "test_util/temp_dir.h"
#include "test_util/usage_error.h"
#include "train/global_view.h"
#include "train/hf_config.h"
#include "train/hf_directory.h"
#include "train/hf_export.h"

namespace fs = std::filesystem;

namespace mt {
namespace {

using test_util::TempDir;

ModelConfig tiny_llama(bool tied = false) {
  ModelConfig c;
  c.arch = Arch::llama;
  c.layers = 2;
  c.dim = 16;
  c.heads = 4;
  c.kv_heads = 2;
  c.ffn_dim = 24;
  c.vocab = 40;
  c.seq = 8;
  c.tie_embeddings = tied;
  return c;
}

// Values whose bf16 rounding differs from truncation, and no two tensors alike.
GlobalTensors values(const ParamTable& table) {
  GlobalTensors g;
  int t = 0;
  for (const ParamInfo& p : table.entries()) {
    g.emplace_back(size_t(p.global_numel()));
    for (size_t i = 0; i < g.back().size(); ++i)
      g.back()[i] = 0.02f * std::sin(float(i) * 0.37f + float(t)) + 1e-9f * float(i % 7);
    ++t;
  }
  return g;
}

// The whole model read back from `dir`, tensor by tensor in table order.
GlobalTensors read_back(const std::string& dir, const ParamTable& table) {
  std::vector<float> arena(table.total());
  import_hf_weights(dir, table, arena.data());
  GlobalTensors g;
  for (const ParamInfo& p : table.entries())
    g.emplace_back(arena.begin() + long(p.offset), arena.begin() + long(p.offset + p.numel));
  return g;
}

using test_util::refusal_of;

TEST(HfDirectory, RoundTripIsBitExact) {
  for (bool tied : {false, true}) {
    TempDir tmp;
    const std::string dir = tmp / "hf";
    const ModelConfig cfg = tiny_llama(tied);
    const ParamTable table = whole_model_table(cfg);
    const GlobalTensors g = values(table);
    export_hf_directory(dir, table, cfg, g, false, std::nullopt);
    EXPECT_TRUE(fs::exists(dir + "/config.json"));
    EXPECT_FALSE(fs::exists(dir + "/tokenizer.model"));  // bytes: no tokenizer file
    const ModelConfig back = hf_model_config(dir, ModelConfig{});
    EXPECT_EQ(back.describe(), cfg.describe());
    EXPECT_EQ(back.tied(), tied);
    const GlobalTensors r = read_back(dir, whole_model_table(back));
    ASSERT_EQ(r.size(), g.size());
    for (size_t i = 0; i < g.size(); ++i)
      EXPECT_EQ(0, std::memcmp(r[i].data(), g[i].data(), g[i].size() * 4))
          << table.entries()[i].name;
    // transformers refuses a safetensors file without "format" in its metadata.
    EXPECT_EQ(SafetensorsFile(dir + "/model.safetensors").metadata().at("format"), "pt");
  }
}

TEST(HfDirectory, Bf16ExportHoldsTheRoundedValues) {
  TempDir tmp;
  const ModelConfig cfg = tiny_llama();
  const ParamTable table = whole_model_table(cfg);
  const GlobalTensors g = values(table);
  export_hf_directory(tmp / "hf", table, cfg, g, true, std::nullopt);
  EXPECT_EQ(nlohmann::json::parse(std::ifstream(tmp / "hf/config.json"))["torch_dtype"],
            "bfloat16");
  const GlobalTensors r = read_back(tmp / "hf", table);
  bool any_rounded_up = false;
  for (size_t i = 0; i < g.size(); ++i)
    for (size_t k = 0; k < g[i].size(); ++k) {
      ASSERT_EQ(r[i][k], bf16_to_float(float_to_bf16(g[i][k]))) << table.entries()[i].name;
      any_rounded_up |= std::abs(r[i][k]) > std::abs(g[i][k]);
    }
  EXPECT_TRUE(any_rounded_up);  // nearest-even rounding, not truncation
}

// A directory as transformers shards one: two files and an index, BF16.
TEST(HfDirectory, ReadsAShardedDirectoryThroughItsIndex) {
  TempDir tmp;
  const std::string dir = tmp / "hf";
  const ModelConfig cfg = tiny_llama();
  const ParamTable table = whole_model_table(cfg);
  const GlobalTensors g = values(table);
  export_hf_directory(dir, table, cfg, g, false, std::nullopt);
  fs::remove(dir + "/model.safetensors");
  std::vector<std::string> names;
  const std::vector<SafetensorsTensor> all = global_tensors(table, g, "", names);
  const size_t half = all.size() / 2;
  nlohmann::json map;
  for (size_t i = 0; i < all.size(); ++i)
    map[all[i].name] =
        i < half ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
  write_safetensors(dir + "/model-00001-of-00002.safetensors", {all.data(), half}, {}, true);
  write_safetensors(dir + "/model-00002-of-00002.safetensors",
                    {all.data() + half, all.size() - half}, {}, true);
  std::ofstream(dir + "/model.safetensors.index.json")
      << nlohmann::json{{"metadata", {{"total_size", 1}}}, {"weight_map", map}}.dump();
  EXPECT_EQ(hf_input_files(dir).size(), 4u);  // config, index, two shards
  hf_model_config(dir, ModelConfig{});
  const GlobalTensors r = read_back(dir, table);
  for (size_t i = 0; i < g.size(); ++i)
    for (size_t k = 0; k < g[i].size(); ++k)
      ASSERT_EQ(r[i][k], bf16_to_float(float_to_bf16(g[i][k])));

  // An index cannot send the reader outside the directory.
  for (const char* bad : {"../model-00001-of-00002.safetensors", "sub/x.safetensors", ".."}) {
    nlohmann::json m = map;
    m[all[0].name] = bad;
    std::ofstream(dir + "/model.safetensors.index.json")
        << nlohmann::json{{"weight_map", m}}.dump();
    EXPECT_NE(refusal_of([&] { hf_input_files(dir); }).find("which is not a file inside"),
              std::string::npos)
        << bad;
  }
  // A tensor mapped to a file that does not hold it.
  nlohmann::json m = map;
  m[all[0].name] = "model-00002-of-00002.safetensors";
  std::ofstream(dir + "/model.safetensors.index.json") << nlohmann::json{{"weight_map", m}}.dump();
  EXPECT_NE(refusal_of([&] { HfWeights w(dir); }).find("does not map to it"), std::string::npos);
}

// Edits of a good directory and the words their refusal names.
TEST(HfDirectory, RefusesDamagedDirectoriesByName) {
  TempDir tmp;
  const ModelConfig cfg = tiny_llama();
  const ParamTable table = whole_model_table(cfg);
  const GlobalTensors g = values(table);
  auto fresh = [&](const std::string& name) {
    const std::string dir = tmp / name;
    export_hf_directory(dir, table, cfg, g, false, std::nullopt);
    return dir;
  };
  auto rewrite_weights = [&](const std::string& dir, const std::string& drop,
                             const SafetensorsTensor* extra) {
    std::vector<std::string> names;
    std::vector<SafetensorsTensor> ts;
    for (const SafetensorsTensor& t : global_tensors(table, g, "", names))
      if (t.name != drop) ts.push_back(t);
    if (extra) ts.push_back(*extra);
    write_safetensors(dir + "/model.safetensors", ts);
  };
  const std::string missing = fresh("missing");
  rewrite_weights(missing, "model.layers.1.mlp.up_proj.weight", nullptr);
  EXPECT_NE(refusal_of([&] {
              hf_model_config(missing, {});
            }).find("tensor model.layers.1.mlp.up_proj.weight is missing"),
            std::string::npos);

  const std::string shape = fresh("shape");
  const std::vector<float> wrong(16 * 3, 0.f);
  const SafetensorsTensor bad_q{"model.layers.0.self_attn.q_proj.weight", {3, 16}, wrong.data()};
  rewrite_weights(shape, bad_q.name, &bad_q);
  EXPECT_NE(
      refusal_of([&] { hf_model_config(shape, {}); }).find("has shape [3, 16] but the model needs"),
      std::string::npos);

  const std::string extra = fresh("extra");
  const SafetensorsTensor bias{"model.layers.0.self_attn.q_proj.bias", {3}, wrong.data()};
  rewrite_weights(extra, "", &bias);
  EXPECT_NE(refusal_of([&] {
              hf_model_config(extra, {});
            }).find("holds tensor model.layers.0.self_attn.q_proj.bias, which the model"),
            std::string::npos);
  // transformers before 4.31 saved RoPE's frequencies: skipped, not refused.
  const SafetensorsTensor inv{"model.layers.0.self_attn.rotary_emb.inv_freq", {3}, wrong.data()};
  rewrite_weights(extra, "", &inv);
  EXPECT_NO_THROW(hf_model_config(extra, {}));

  const std::string both = fresh("both");
  std::ofstream(both + "/model.safetensors.index.json") << "{}";
  EXPECT_NE(refusal_of([&] { hf_input_files(both); }).find("holds both"), std::string::npos);
  const std::string none = fresh("none");
  fs::rename(none + "/model.safetensors", none + "/pytorch_model.bin");
  EXPECT_NE(refusal_of([&] { hf_input_files(none); }).find("pytorch_model.bin is not read"),
            std::string::npos);

  const std::string keyless = fresh("keyless");
  nlohmann::json c = nlohmann::json::parse(std::ifstream(keyless + "/config.json"));
  c.erase("num_hidden_layers");
  std::ofstream(keyless + "/config.json") << c.dump();
  EXPECT_NE(refusal_of([&] { hf_model_config(keyless, {}); }).find("has no num_hidden_layers"),
            std::string::npos);
}

// A FIFO named config.json is refused at once: opening it for reading would wait forever.
TEST(HfDirectory, AFifoForConfigJsonIsRefusedNotWaitedOn) {
  TempDir tmp;
  const ModelConfig cfg = tiny_llama();
  const ParamTable table = whole_model_table(cfg);
  const std::string dir = tmp / "hf";
  export_hf_directory(dir, table, cfg, values(table), false, std::nullopt);
  fs::remove(dir + "/config.json");
  ASSERT_EQ(::mkfifo((dir + "/config.json").c_str(), 0600), 0);
  EXPECT_NE(refusal_of([&] { hf_model_config(dir, {}); }).find("is a FIFO"), std::string::npos);
}

TEST(HfExport, ReplacesOnlyWhatAnExportWrote) {
  TempDir tmp;
  const ModelConfig cfg = tiny_llama();
  const ParamTable table = whole_model_table(cfg);
  GlobalTensors g = values(table);
  const std::string dir = tmp / "hf";
  EXPECT_EQ(hf_export_conflict(dir), "");  // nothing there
  export_hf_directory(dir, table, cfg, g, false, std::nullopt);
  EXPECT_EQ(hf_export_conflict(dir), "");  // an export: replaceable
  std::ofstream(dir + "/notes.txt") << "mine";
  EXPECT_NE(hf_export_conflict(dir).find("holds notes.txt"), std::string::npos);
  EXPECT_THROW(export_hf_directory(dir, table, cfg, g, false, std::nullopt), RuntimeError);
  EXPECT_TRUE(fs::exists(dir + "/notes.txt"));
  fs::remove(dir + "/notes.txt");
  // A NaN is refused by the one finiteness gate, and the directory there stays as it was.
  const std::string before = SafetensorsFile(dir + "/model.safetensors").names().front();
  g[3][1] = std::nanf("");
  EXPECT_THROW(export_hf_directory(dir, table, cfg, g, false, std::nullopt), RuntimeError);
  EXPECT_EQ(read_back(dir, table)[3][1], values(table)[3][1]);
  for (const auto& e : fs::directory_iterator(tmp.path))
    EXPECT_EQ(e.path().filename(), "hf") << "a temporary was left: " << e.path();
}

}  // namespace
}  // namespace mt
