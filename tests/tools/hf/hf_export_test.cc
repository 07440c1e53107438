// HF export of a checkpoint trained by us, loaded by transformers unchanged. The real verl-controller runs a few
// GRPO steps of the CPU quickstart (tiny random Qwen2, real verl-worker processes) and saves global_step_N with
// actor/huggingface; tools/hf/export_logits.py (through the Python of tools/hf/setup_assets.sh) loads that directory
// with AutoModelForCausalLM.from_pretrained and AutoTokenizer.from_pretrained and writes its logits; ours, from the
// same directory, must equal them within 1e-5 (fp32). Skips (WARN + return) without that Python.

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/text/tokenizer.h"
#include "tests/test_dir.h"
#include "tests/tools/run_command.h"
#include "worker/model/decoder_model.h"
#include "worker/model/safetensors.h"

namespace verl::testing {
namespace {

namespace fs = std::filesystem;

const std::string kBin = std::string(VERL_BINARY_DIR) + "/bin/";
const std::string kPython = std::string(VERL_HF_ASSETS_DIR) + "/python";

at::Tensor OurLogits(const DecoderModel& model, const std::vector<int32_t>& ids) {
  const auto T = static_cast<int64_t>(ids.size());
  at::Tensor input = at::tensor(std::vector<int64_t>(ids.begin(), ids.end()), at::kLong).view({1, T});
  at::Tensor valid = at::ones({1, T}, at::kBool);
  return model.Logits(model.Forward(input, PositionIdsFromMask(valid), BuildAttentionMask(valid, 0, T), nullptr))[0];
}

TEST_CASE("a checkpoint trained by GRPO exports to an HF directory that transformers loads unchanged, same logits",
          "[hf]") {
  if (!fs::exists(kPython)) {
    WARN("skipped: no " << kPython << " (run tools/hf/setup_assets.sh)");
    return;
  }
  TestDir dir("hf_export");
  const std::string model_dir = dir.file("model"), data_dir = dir.file("data"), ckpt = dir.file("ckpt");
  RunResult r = RunCommand(kBin + "verl-make-tiny-model", {"--out-dir", model_dir}, dir);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  r = RunCommand(kBin + "verl-make-dataset", {"--task", "repeat_letter", "--out-dir", data_dir}, dir);
  REQUIRE(r.exit_code == 0);

  // Three GRPO steps (rollout, rewards, old/ref log-probs, advantages, two actor mini-batch updates per step), then
  // the final checkpoint with its HF export.
  constexpr int kSteps = 3;
  r = RunCommand(kBin + "verl-controller",
                 {"--config", std::string(VERL_SOURCE_DIR) + "/configs/quickstart.yaml",
                  "actor_rollout_ref.model.path=" + model_dir, "data.train_files=" + data_dir + "/train.parquet",
                  "data.val_files=" + data_dir + "/test.parquet", "trainer.default_local_dir=" + ckpt,
                  "trainer.log_dir=" + dir.file("out"), "trainer.total_training_steps=" + std::to_string(kSteps),
                  "trainer.save_freq=" + std::to_string(kSteps), "trainer.test_freq=-1",
                  "trainer.val_before_train=false"},
                 dir);
  INFO(r.out.substr(r.out.size() > 3000 ? r.out.size() - 3000 : 0) << r.err);
  REQUIRE(r.exit_code == 0);
  const std::string hf_dir = ckpt + "/global_step_" + std::to_string(kSteps) + "/actor/huggingface";
  REQUIRE(fs::exists(hf_dir + "/model.safetensors"));

  // Inputs: the tokenizer's ids of a prompt, and a run over the whole id range.
  const std::string text = "Repeat the letter q five times: q q q q q";
  auto tokenizer = Tokenizer::FromFile(hf_dir + "/tokenizer.json");
  REQUIRE(tokenizer.ok());
  auto trained = DecoderModel::Load(hf_dir, at::kFloat);
  INFO(trained.status().ToString());
  REQUIRE(trained.ok());
  const int64_t vocab = (*trained)->config().vocab_size;
  std::vector<std::vector<int32_t>> sequences = {tokenizer->Encode(text), {}};
  for (int32_t i = 0; i < 48; ++i) sequences[1].push_back(static_cast<int32_t>((i * 7919) % vocab));
  const std::string input_path = dir.Write("input.json", nlohmann::json{{"sequences", sequences}, {"text", text}}.dump());

  r = RunCommand(kPython, {std::string(VERL_SOURCE_DIR) + "/tools/hf/export_logits.py", hf_dir, input_path,
                           dir.file("hf_out")},
                 dir);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  std::ifstream info_in(dir.file("hf_out/info.json"));
  const nlohmann::json info = nlohmann::json::parse(info_in);
  INFO(info.dump(1));
  // Loaded as saved: the right class, float32, no missing, unexpected or mismatched weights.
  CHECK(info["model_class"] == "Qwen2ForCausalLM");
  CHECK(info["parameter_dtype"] == "torch.float32");
  REQUIRE(info["loading_info"].contains("missing_keys"));
  REQUIRE(info["loading_info"].contains("unexpected_keys"));
  for (const auto& [key, names] : info["loading_info"].items()) {
    if (key != "error_msgs") CHECK(names.empty());
  }
  CHECK(info["text_ids"].get<std::vector<int32_t>>() == sequences[0]);

  auto logits_file = SafetensorsFile::Open(dir.file("hf_out/logits.safetensors"));
  REQUIRE(logits_file.ok());
  auto initial = DecoderModel::Load(model_dir, at::kFloat);
  REQUIRE(initial.ok());
  at::InferenceMode guard;
  for (size_t i = 0; i < sequences.size(); ++i) {
    auto view = logits_file->Get("logits." + std::to_string(i));
    REQUIRE(view.ok());
    at::Tensor expected = at::from_blob(const_cast<void*>(view->data), view->shape, at::kFloat);
    at::Tensor ours = OurLogits(**trained, sequences[i]);
    REQUIRE(ours.sizes() == expected.sizes());
    const double max_diff = (ours - expected).abs().max().item<double>();
    // The training moved the logits far more than the tolerance: the export is of trained weights.
    const double trained_vs_initial = (OurLogits(**initial, sequences[i]) - expected).abs().max().item<double>();
    INFO("sequence " << i << ": max |ours - transformers| = " << max_diff
                     << ", max |initial - trained (transformers)| = " << trained_vs_initial);
    CHECK(max_diff <= 1e-5);
    CHECK(trained_vs_initial > 1000 * 1e-5);
    WARN("HF export, sequence " << i << " (" << sequences[i].size() << " tokens): max |ours - transformers| = "
                                << max_diff << "; the 3 GRPO steps moved the logits by up to " << trained_vs_initial);
  }
}

}  // namespace
}  // namespace verl::testing
