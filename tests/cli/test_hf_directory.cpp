// Hugging Face Llama directories through the binary (docs/huggingface.md): train
// --export-hf, train and sample --init-from DIR, export --from CHECKPOINT --to-hf. The round
// trip engine -> directory -> engine is bit-exact; the directory sets the shape and a flag
// that contradicts it is refused; a bad directory or output is one error line, exit 2.
#include <sys/stat.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "cli_fixture.h"
#include "kernels/bf16.h"
#include "train/safetensors.h"

namespace fs = std::filesystem;

namespace mt::testing {
namespace {

const std::string kLlama =
    " --arch llama --layers 2 --dim 16 --heads 2 --kv-heads 1 --ffn-dim 32 --seq 8 --batch 2 "
    "--quiet ";

struct HfFixture : Fixture {
  std::string train(const std::string& args) const {
    return "train" + kLlama + "--data " + data + " " + args;
  }
  // train from `init` for 0 steps (the flags come from the directory): its weights back out.
  std::string reload(const std::string& init, const std::string& args) const {
    return "train --steps 0 --batch 2 --quiet --data " + data + " --init-from " + init + " " + args;
  }
};

// Every tensor of two safetensors files, bit for bit (f: applied to a's values first).
void expect_same_tensors(
    const std::string& a, const std::string& b, float (*f)(float) = [](float x) { return x; }) {
  const SafetensorsFile fa(a), fb(b);
  ASSERT_EQ(fa.names().size(), fb.names().size());
  for (const std::string& name : fa.names()) {
    std::vector<float> va = fa.read(name);
    const std::vector<float> vb = fb.read(name);
    for (float& x : va) x = f(x);
    ASSERT_EQ(va.size(), vb.size()) << name;
    EXPECT_EQ(0, std::memcmp(va.data(), vb.data(), va.size() * 4)) << name;
  }
}

TEST(HfDirectoryCli, EngineToDirectoryToEngineIsBitExact) {
  HfFixture f;
  const std::string w = f.dir / "w.safetensors", hf = f.dir / "hf";
  ASSERT_EQ(run_meshtrain(f.train("--steps 2 --export " + w + " --export-hf " + hf)).exit_code, 0);
  EXPECT_TRUE(fs::exists(hf + "/config.json"));
  EXPECT_FALSE(fs::exists(hf + "/tokenizer.model"));  // byte-level data: no tokenizer file
  const RunResult back = run_meshtrain(f.reload(hf, "--export " + (f.dir / "back.safetensors")));
  ASSERT_EQ(back.exit_code, 0) << back.err;
  expect_same_tensors(w, f.dir / "back.safetensors");
  expect_same_tensors(w, hf + "/model.safetensors");
  // bf16: the directory holds the rounded values, and they come back as such.
  const std::string hf16 = f.dir / "hf16";
  ASSERT_EQ(run_meshtrain(f.reload(hf, "--export-dtype bf16 --export-hf " + hf16)).exit_code, 0);
  EXPECT_EQ(SafetensorsFile(hf16 + "/model.safetensors").tensor("lm_head.weight").dtype, "BF16");
  ASSERT_EQ(run_meshtrain(f.reload(hf16, "--export " + (f.dir / "back16.safetensors"))).exit_code,
            0);
  expect_same_tensors(w, f.dir / "back16.safetensors",
                      [](float x) { return bf16_to_float(float_to_bf16(x)); });
}

TEST(HfDirectoryCli, TheDirectorySetsTheShapeAndContradictingFlagsAreRefused) {
  HfFixture f;
  const std::string hf = f.dir / "hf";
  ASSERT_EQ(run_meshtrain(f.train("--steps 1 --export-hf " + hf)).exit_code, 0);
  const std::string from = f.reload(hf, "") + " --steps 1";
  expect_usage_error(run_meshtrain(from + " --layers 3"),
                     "--layers 3 contradicts " + hf + "/config.json (num_hidden_layers 2)");
  expect_usage_error(run_meshtrain(from + " --arch gpt2"), "(model_type llama)");
  expect_usage_error(run_meshtrain(from + " --kv-heads 2"), "(num_key_value_heads 1)");
  expect_usage_error(run_meshtrain(from + " --tie-embeddings"), "(tie_word_embeddings false)");
  // Repeating the shape is fine; training flags stay free (--seq too: RoPE has no table).
  const RunResult ok =
      run_meshtrain(from + " --arch llama --layers 2 --heads 2 --seq 16 --lr 1e-4 --batch 4");
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
}

TEST(HfDirectoryCli, BadDirectoriesAreOneErrorLine) {
  HfFixture f;
  const std::string hf = f.dir / "hf";
  ASSERT_EQ(run_meshtrain(f.train("--steps 1 --export-hf " + hf)).exit_code, 0);
  auto variant = [&](const std::string& name) {
    const std::string d = f.dir / name;
    fs::copy(hf, d);
    return d;
  };
  const std::string keyless = variant("keyless");
  nlohmann::json c = nlohmann::json::parse(slurp(keyless + "/config.json"));
  c.erase("hidden_size");
  std::ofstream(keyless + "/config.json") << c.dump();
  expect_usage_error(run_meshtrain(f.reload(keyless, "")), "has no hidden_size");
  const std::string biased = variant("biased");
  c = nlohmann::json::parse(slurp(biased + "/config.json"));
  c["attention_bias"] = true;
  std::ofstream(biased + "/config.json") << c.dump();
  expect_usage_error(run_meshtrain(f.reload(biased, "")), "attention_bias is true");
  const std::string fifo = variant("fifo");
  fs::remove(fifo + "/config.json");
  ASSERT_EQ(::mkfifo((fifo + "/config.json").c_str(), 0600), 0);
  expect_usage_error(
      run_command("timeout 20 " + std::string(MESHTRAIN_BIN) + " " + f.reload(fifo, "")),
      "is a FIFO");
  const std::string outside = variant("outside");
  fs::rename(outside + "/model.safetensors", f.dir / "elsewhere.safetensors");
  std::ofstream(outside + "/model.safetensors.index.json")
      << R"({"weight_map": {"model.norm.weight": "../elsewhere.safetensors"}})";
  expect_usage_error(run_meshtrain(f.reload(outside, "")), "which is not a file inside");
  // Weights of another model under the same names: the shape is named.
  const std::string other = f.dir / "other";
  ASSERT_EQ(run_meshtrain(f.train("--steps 1 --ffn-dim 48 --export-hf " + other)).exit_code, 0);
  const std::string reshaped = variant("reshaped");
  fs::copy_file(other + "/model.safetensors", reshaped + "/model.safetensors",
                fs::copy_options::overwrite_existing);
  expect_usage_error(run_meshtrain(f.reload(reshaped, "")), "has shape [48, 16] but the model");
  // sample reads the same directories with the same checks.
  expect_usage_error(run_meshtrain("sample --tokens 2 --init-from " + keyless),
                     "has no hidden_size");
}

// A config.json announcing a dtype meshtrain cannot load was accepted, and one holding NaN
// printed the JSON library's message with the file's text in it.
TEST(HfDirectoryCli, AConfigItCannotReadIsOneLineNamingTheKey) {
  HfFixture f;
  const std::string hf = f.dir / "hf";
  ASSERT_EQ(run_meshtrain(f.train("--steps 1 --export-hf " + hf)).exit_code, 0);
  nlohmann::json c = nlohmann::json::parse(slurp(hf + "/config.json"));
  c["torch_dtype"] = "float8_e4m3fn";
  std::ofstream(hf + "/config.json") << c.dump(2);
  expect_usage_error(run_meshtrain(f.reload(hf, "")),
                     hf + "/config.json: torch_dtype \"float8_e4m3fn\" is not a dtype meshtrain "
                          "loads (float32, bfloat16 or float16)");
  c["torch_dtype"] = "float32";
  std::string text = c.dump(2);
  const size_t eps = text.find("\"rms_norm_eps\": ") + 16;
  text.replace(eps, text.find(',', eps) - eps, "NaN");
  std::ofstream(hf + "/config.json") << text;
  for (const std::string& command : {f.reload(hf, ""), "sample --tokens 2 --init-from " + hf}) {
    const RunResult r = run_meshtrain(command);
    expect_usage_error(r, hf + "/config.json is not valid JSON: the value of \"rms_norm_eps\"");
    EXPECT_EQ(r.err.find("json.exception"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("last read"), std::string::npos) << r.err;
  }
}

TEST(HfDirectoryCli, SampleReadsADirectory) {
  HfFixture f;
  const std::string hf = f.dir / "hf";
  ASSERT_EQ(run_meshtrain(f.train("--steps 1 --export-hf " + hf)).exit_code, 0);
  const RunResult r = run_meshtrain("sample --tokens 5 --prompt ab --init-from " + hf);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("ab", 0), 0u) << r.out;
}

// export --to-hf from a global and a sharded checkpoint writes the directory the run's own
// --export-hf wrote, byte for byte.
TEST(HfDirectoryCli, ExportFromCheckpointsEqualsTheRunsExport) {
  HfFixture f;
  const std::string g = f.dir / "g", s = f.dir / "s", hf = f.dir / "hf";
  ASSERT_EQ(run_meshtrain(f.train("--steps 2 --save " + g + " --export-hf " + hf)).exit_code, 0);
  const RunResult eg = run_meshtrain("export --from " + g + " --to-hf " + (f.dir / "from_g"));
  ASSERT_EQ(eg.exit_code, 0) << eg.err;
  EXPECT_EQ(slurp(f.dir / "from_g/model.safetensors"), slurp(hf + "/model.safetensors"));
  EXPECT_EQ(slurp(f.dir / "from_g/config.json"), slurp(hf + "/config.json"));
  const std::string hfs = f.dir / "hfs";
  ASSERT_EQ(run_meshtrain(f.train("--steps 2 --dp 2 --checkpoint-format sharded --save " + s +
                                  " --export-hf " + hfs))
                .exit_code,
            0);
  const RunResult es =
      run_meshtrain("export --from " + s + "/step_000002 --to-hf " + (f.dir / "from_s"));
  ASSERT_EQ(es.exit_code, 0) << es.err;
  EXPECT_EQ(slurp(f.dir / "from_s/model.safetensors"), slurp(hfs + "/model.safetensors"));
  EXPECT_EQ(slurp(f.dir / "from_s/config.json"), slurp(hfs + "/config.json"));
  // The output may not overlap the checkpoint, nor replace a directory of someone else's.
  expect_usage_error(run_meshtrain("export --from " + g + " --to-hf " + g + "/hf"),
                     "overlaps the checkpoint");
  expect_usage_error(run_meshtrain("export --from " + g + " --to-hf " + s),
                     "not a meshtrain Hugging Face export");
  expect_usage_error(run_meshtrain("export --from " + g), "give exactly one of --to");
}

TEST(HfDirectoryCli, OutputDirectoryIsCheckedBeforeTheRun) {
  HfFixture f;
  const std::string hf = f.dir / "hf";
  fs::create_directory(hf);
  std::ofstream(hf + "/notes.txt") << "mine";
  expect_usage_error(run_meshtrain(f.train("--steps 1 --export-hf " + hf)),
                     "holds notes.txt, not a meshtrain Hugging Face export");
  EXPECT_EQ(slurp(hf + "/notes.txt"), "mine");
  fs::remove(hf + "/notes.txt");
  ASSERT_EQ(run_meshtrain(f.train("--steps 1 --export-hf " + hf)).exit_code, 0);
  expect_usage_error(run_meshtrain(f.reload(hf, "--export-hf " + hf)),
                     "the export replaces the whole directory");
  expect_usage_error(
      run_meshtrain(f.train("--steps 1 --export-hf " + hf + " --metrics " + hf + "/m.jsonl")),
      "is inside --export-hf");
  expect_usage_error(run_meshtrain(f.base() + " --export-hf " + (f.dir / "g2")),
                     "this is a --arch gpt2 model");
  // --export-dtype serves --export-hf as well as --export.
  EXPECT_EQ(run_meshtrain(f.train("--steps 1 --export-dtype bf16 --export-hf " + hf)).exit_code, 0);
}

// A user's own Hugging Face directory (a downloaded model: config.json and model.safetensors,
// the names an export writes) is not an export to replace: --export-hf onto it replaced both
// files with exit 0. Issue #26 audit.
TEST(HfDirectoryCli, AUsersHuggingFaceDirectoryIsNotReplaced) {
  HfFixture f;
  const std::string made = f.dir / "made";
  ASSERT_EQ(run_meshtrain(f.train("--steps 1 --export-hf " + made)).exit_code, 0);
  const std::string mine = f.dir / "mine";
  fs::create_directory(mine);
  std::ofstream(mine + "/config.json") << R"({"model_type": "llama", "note": "downloaded"})";
  // Weights meshtrain did not write: the same tensors, under the metadata of another writer.
  const SafetensorsFile src(made + "/model.safetensors");
  std::vector<std::vector<float>> values;
  std::vector<SafetensorsTensor> tensors;
  for (const std::string& name : src.names()) values.push_back(src.read(name));
  for (size_t i = 0; i < values.size(); ++i)
    tensors.push_back({src.names()[i], src.tensor(src.names()[i]).shape, values[i].data()});
  write_safetensors(mine + "/model.safetensors", tensors, {{"format", "pt"}});
  const std::string config = slurp(mine + "/config.json");
  const std::string weights = slurp(mine + "/model.safetensors");
  expect_usage_error(run_meshtrain(f.train("--steps 1 --export-hf " + mine)),
                     "that meshtrain did not write");
  EXPECT_EQ(slurp(mine + "/config.json"), config);
  EXPECT_EQ(slurp(mine + "/model.safetensors"), weights);
  // An export is still replaced by the next one.
  EXPECT_EQ(run_meshtrain(f.train("--steps 1 --export-hf " + made)).exit_code, 0);
}

// Llama 3.1's rope_scaling comes only from a config.json: it must survive what the run writes
// (a checkpoint it resumes from, global or sharded; an --export file; the next directory).
TEST(HfDirectoryCli, RopeScalingSurvivesCheckpointsAndExports) {
  HfFixture f;
  const std::string hf = f.dir / "hf";
  ASSERT_EQ(run_meshtrain(f.train("--steps 1 --export-hf " + hf)).exit_code, 0);
  nlohmann::json c = nlohmann::json::parse(slurp(hf + "/config.json"));
  c["rope_scaling"] = {{"rope_type", "llama3"},
                       {"factor", 8.0},
                       {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0},
                       {"original_max_position_embeddings", 4}};
  std::ofstream(hf + "/config.json") << c.dump();
  const std::string straight = f.dir / "straight.safetensors";
  const std::string lr = " --lr-schedule constant --min-lr 0 ";  // 2 + 2 steps = 4 steps
  ASSERT_EQ(run_meshtrain(f.reload(hf, lr + "--steps 4 --export " + straight)).exit_code, 0);
  for (const std::string format : {"global", "sharded"}) {
    const std::string ck = f.dir / ("ck_" + format), out = f.dir / (format + ".safetensors");
    const std::string save = " --checkpoint-format " + format + " --save " + ck;
    ASSERT_EQ(run_meshtrain(f.reload(hf, lr + "--steps 2" + save)).exit_code, 0);
    const std::string load = format == "global" ? ck : ck + "/step_000002";
    const RunResult r =
        run_meshtrain(f.train(lr + "--steps 4 --load " + load + " --export " + out));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    expect_same_tensors(straight, out);  // resumed with the scaling, not without it
  }
  const std::string again = f.dir / "again";
  ASSERT_EQ(run_meshtrain(f.reload(straight, "--export-hf " + again)).exit_code, 0);
  EXPECT_EQ(nlohmann::json::parse(slurp(again + "/config.json"))["rope_scaling"],
            c["rope_scaling"]);
}

// A run on a dataset of meshtrain prepare carries its SentencePiece model into the directory,
// which a run on the same data then accepts and sample decodes with.
TEST(HfDirectoryCli, TheTokenizerTravelsWithTheDirectory) {
  HfFixture f;
  std::string text;
  for (int i = 0; i < 80; ++i)
    text += "Fortune " + std::to_string(i) + ": the quick brown fox jumps over the lazy dog\n%\n";
  std::ofstream(f.dir / "corpus.txt") << text;
  const std::string ds = f.dir / "ds", hf = f.dir / "hf";
  ASSERT_EQ(run_meshtrain("prepare " + (f.dir / "corpus.txt") + " --out " + ds +
                          " --documents separator --tokenizer bpe --vocab-size 300 --quiet")
                .exit_code,
            0);
  const std::string on_ds = "train" + kLlama + "--steps 1 --data " + ds;
  const RunResult r = run_meshtrain(on_ds + " --export-hf " + hf);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(slurp(hf + "/tokenizer.model"), slurp(ds + "/tokenizer.model"));
  const RunResult s = run_meshtrain("sample --tokens 4 --prompt fox --init-from " + hf);
  EXPECT_EQ(s.exit_code, 0) << s.err;
  const RunResult again =
      run_meshtrain("train --steps 1 --batch 2 --quiet --data " + ds + " --init-from " + hf);
  EXPECT_EQ(again.exit_code, 0) << again.err;
  // The embedded corpus is byte-level ids: refused, naming the tokenizer.
  expect_usage_error(run_meshtrain("train --steps 1 --batch 2 --quiet --init-from " + hf),
                     "was trained on ids of tokenizer bpe");
}

}  // namespace
}  // namespace mt::testing
