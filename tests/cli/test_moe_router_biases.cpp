// A llama MoE's router selection biases (--router-bias-update, §9's
// model.layers.{i}.mlp.gate.e_score_correction_bias) travel with its weights wherever they
// go: the checkpoints (global and sharded) hold them, and sampling from a checkpoint or
// exporting one (export --from CKPT --to FILE, --to-hf DIR) must carry them, as train's own
// --export and --export-hf do. The reference for each is sample --init-from the run's
// --export file: the same weights, biases and seed give the same text. Sigmoid scores of a
// small model sit near 0.5, so a bias step of 0.2 per step decides many selections.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cli_fixture.h"
#include "train/safetensors.h"

namespace mt {
namespace {

using testing::Fixture;
using testing::run_meshtrain;
using testing::RunResult;

struct BiasedMoeRun : Fixture {
  std::string file = dir / "run.safetensors";
  std::string global = dir / "global", sharded = dir / "sharded";
  std::string moe =
      " --arch llama --kv-heads 1 --ffn-dim 32 --experts 4 --topk 2 --expert-ffn-dim 16 "
      "--router sigmoid --router-bias-update 0.2 --steps 6 --batch 4 --lr 1e-2 ";
  BiasedMoeRun() {
    RunResult r = run_meshtrain("train" + tiny + moe + "--export " + file + " --save " + global);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    r = run_meshtrain("train" + tiny + moe + "--checkpoint-format sharded --save " + sharded);
    EXPECT_EQ(r.exit_code, 0) << r.err;
  }
  std::string sample(const std::string& from) const {
    const RunResult r = run_meshtrain("sample --tokens 64 " + from);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.out;
  }
  // The run's sample; and a check that the biases decide it (else nothing here could fail):
  // the same file without them samples otherwise.
  std::string reference() const {
    const std::string want = sample("--init-from " + file), bare = dir / "bare.safetensors";
    const SafetensorsFile f(file);
    std::vector<std::vector<float>> data;
    std::vector<SafetensorsTensor> kept;
    for (const std::string& name : f.names())
      if (name.find("e_score_correction_bias") == std::string::npos)
        data.push_back(f.read(name)), kept.push_back({name, f.tensor(name).shape, nullptr});
    EXPECT_LT(kept.size(), f.names().size()) << "the export holds no selection biases";
    for (size_t i = 0; i < kept.size(); ++i) kept[i].data = data[i].data();
    write_safetensors(bare, kept, f.metadata());
    EXPECT_NE(sample("--init-from " + bare), want) << "the biases do not decide the sample";
    return want;
  }
};

TEST(MoeRouterBiases, SampleFromAShardedCheckpointSelectsWithThem) {
  BiasedMoeRun f;
  const std::string want = f.reference();
  EXPECT_EQ(f.sample("--load " + f.sharded), want);
  EXPECT_EQ(f.sample("--load " + f.global), want);
}

TEST(MoeRouterBiases, ExportFromACheckpointKeepsThem) {
  BiasedMoeRun f;
  const std::string want = f.reference();
  for (const std::string& ck : {f.sharded, f.global}) {
    SCOPED_TRACE(ck);
    const std::string hf = ck + "_hf", file = ck + ".safetensors";
    RunResult r = run_meshtrain("export --from " + ck + " --to-hf " + hf);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(f.sample("--init-from " + hf), want);
    r = run_meshtrain("export --from " + ck + " --to " + file);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(f.sample("--init-from " + file), want);
  }
}

}  // namespace
}  // namespace mt
