#include "worker/checkpoint/actor_checkpoint.h"

#include <filesystem>
#include <string>
#include <vector>

#include "tests/worker/torch_catch.h"
#include "tests/test_dir.h"
#include "tests/worker/tiny_model.h"

namespace verl {
namespace {

namespace fs = std::filesystem;
using testing::LoadModelOrDie;
using testing::LongTensor2d;
using testing::TestDir;

std::vector<at::Tensor> Snapshot(const std::vector<at::Tensor>& ts) {
  std::vector<at::Tensor> out;
  for (const at::Tensor& t : ts) out.push_back(t.detach().clone());
  return out;
}

std::vector<at::Tensor> Params(const DecoderModel& m) { return Snapshot(m.parameters()); }

bool AllEqual(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    if (!at::equal(a[i], b[i])) return false;
  }
  return true;
}

// One AdamW step from arbitrary gradients, so the moments and the step count are not trivial.
void TakeStep(DecoderModel& model, AdamW& opt, double scale) {
  for (const at::Tensor& p : model.parameters()) {
    p.mutable_grad() = at::full_like(p, scale).mul_(at::arange(p.numel(), at::kFloat).view(p.sizes()).sin());
  }
  opt.Step(1e-3);
  opt.ZeroGrad();
}

at::Tensor Logits(const DecoderModel& model) {
  at::Tensor ids = LongTensor2d({{1, 5, 9, 13, 17, 21}});
  at::Tensor valid = at::ones({1, 6}, at::kBool);
  return model.Logits(model.Forward(ids, PositionIdsFromMask(valid), BuildAttentionMask(valid, 0, 6), nullptr));
}

TEST_CASE("Actor checkpoint round trip restores weights, moments and step exactly", "[worker][checkpoint]") {
  TestDir dir("actor_ckpt");
  const std::string model_dir = dir.file("model");
  testing::WriteTinyModel(model_dir, testing::TinyDecoderConfig());
  auto model = LoadModelOrDie(model_dir);
  AdamW opt(model->named_parameters(), AdamWOptions{});
  TakeStep(*model, opt, 0.5);

  const std::string ckpt = dir.file("global_step_1/actor");
  absl::Status s = SaveActorCheckpoint(ckpt, *model, opt, /*global_step=*/1, /*world_size=*/1, /*rank=*/0);
  INFO(s.ToString());
  REQUIRE(s.ok());
  for (const char* f : {"model_world_size_1_rank_0.safetensors", "optim_world_size_1_rank_0.safetensors",
                        "extra_state_world_size_1_rank_0.json"}) {
    INFO(f);
    REQUIRE(fs::exists(fs::path(ckpt) / f));
  }
  REQUIRE(testing::ReadFile(ckpt + "/extra_state_world_size_1_rank_0.json").find("\"optimizer_step\": 1") !=
          std::string::npos);
  const std::vector<at::Tensor> saved_params = Params(*model);
  const std::vector<at::Tensor> saved_m = Snapshot(opt.exp_avg());
  const std::vector<at::Tensor> saved_v = Snapshot(opt.exp_avg_sq());

  // Move everything away: two more steps.
  TakeStep(*model, opt, -0.3);
  TakeStep(*model, opt, 0.7);
  REQUIRE(opt.step_count() == 3);
  REQUIRE_FALSE(AllEqual(Params(*model), saved_params));
  REQUIRE_FALSE(AllEqual(Snapshot(opt.exp_avg()), saved_m));

  s = LoadActorCheckpoint(ckpt, *model, opt, 1, 0);
  INFO(s.ToString());
  REQUIRE(s.ok());
  REQUIRE(AllEqual(Params(*model), saved_params));
  REQUIRE(AllEqual(Snapshot(opt.exp_avg()), saved_m));
  REQUIRE(AllEqual(Snapshot(opt.exp_avg_sq()), saved_v));
  REQUIRE(opt.step_count() == 1);

  SECTION("the update count (lr warmup position) travels with the checkpoint") {
    int64_t updates = 0;
    REQUIRE(LoadActorCheckpoint(ckpt, *model, opt, 1, 0, &updates).ok());
    REQUIRE(updates == -1);  // saved without a count
    const std::string counted = dir.file("global_step_2/actor");
    REQUIRE(SaveActorCheckpoint(counted, *model, opt, /*global_step=*/2, 1, 0, /*updates_done=*/7).ok());
    REQUIRE(LoadActorCheckpoint(counted, *model, opt, 1, 0, &updates).ok());
    REQUIRE(updates == 7);
  }
  SECTION("another rank's files are not there: the error names the file") {
    absl::Status bad = LoadActorCheckpoint(ckpt, *model, opt, 2, 1);
    REQUIRE_FALSE(bad.ok());
    INFO(bad.ToString());
    REQUIRE(std::string(bad.message()).find("model_world_size_2_rank_1.safetensors") != std::string::npos);
  }
  SECTION("a checkpoint of another model shape is refused, naming the tensor") {
    DecoderConfig other = testing::TinyDecoderConfig();
    other.intermediate_size = 48;
    const std::string other_dir = dir.file("other");
    testing::WriteTinyModel(other_dir, other);
    auto other_model = LoadModelOrDie(other_dir);
    AdamW other_opt(other_model->named_parameters(), AdamWOptions{});
    absl::Status bad = LoadActorCheckpoint(ckpt, *other_model, other_opt, 1, 0);
    REQUIRE(bad.code() == absl::StatusCode::kInvalidArgument);
    INFO(bad.ToString());
    REQUIRE(std::string(bad.message()).find("model.layers.0.mlp.gate_proj.weight") != std::string::npos);
  }
}

TEST_CASE("ExportHuggingFace writes a model directory that loads back identically", "[worker][checkpoint]") {
  TestDir dir("hf_export");
  const std::string model_dir = dir.file("model");
  testing::WriteTinyModel(model_dir, testing::TinyDecoderConfig());
  testing::WriteFile(model_dir + "/tokenizer.json", "{\"stand-in\": true}");
  auto model = LoadModelOrDie(model_dir);
  AdamW opt(model->named_parameters(), AdamWOptions{});
  TakeStep(*model, opt, 1.0);  // export the trained weights, not the ones on disk

  const std::string out = dir.file("huggingface");
  absl::Status s = ExportHuggingFace(out, *model, model_dir);
  INFO(s.ToString());
  REQUIRE(s.ok());
  REQUIRE(fs::exists(out + "/config.json"));
  REQUIRE(fs::exists(out + "/model.safetensors"));
  REQUIRE(testing::ReadFile(out + "/tokenizer.json") == "{\"stand-in\": true}");

  auto reloaded = LoadModelOrDie(out);
  REQUIRE(reloaded->config().vocab_size == model->config().vocab_size);
  REQUIRE(reloaded->config().tie_word_embeddings);
  REQUIRE(AllEqual(Params(*reloaded), Params(*model)));
  REQUIRE(at::equal(Logits(*reloaded), Logits(*model)));
  auto original = LoadModelOrDie(model_dir);
  REQUIRE_FALSE(at::equal(Logits(*original), Logits(*model)));
  // generation_config.json is copied from the source directory...
  REQUIRE(testing::ReadFile(out + "/generation_config.json") ==
          testing::ReadFile(model_dir + "/generation_config.json"));

  SECTION("...or written from the config when the source has none") {
    fs::remove(model_dir + "/generation_config.json");
    const std::string out2 = dir.file("huggingface2");
    REQUIRE(ExportHuggingFace(out2, *model, model_dir).ok());
    const std::string gen = testing::ReadFile(out2 + "/generation_config.json");
    INFO(gen);
    REQUIRE(gen.find("\"eos_token_id\": 49") != std::string::npos);
  }
}

}  // namespace
}  // namespace verl

namespace verl {
namespace {

TEST_CASE("SaveTrainableState writes strided, offset, bf16 and empty tensors as their values", "[worker][checkpoint]") {
  TestDir dir("ckpt_layouts");
  at::Tensor backing = at::arange(40, at::kFloat);
  TrainableState saved;
  saved.params = {
      {"transposed", at::arange(12, at::kFloat).reshape({3, 4}).t()},  // strided: staged through the fetch
      {"offset_view", backing.narrow(0, 5, 6)},                       // contiguous view at an offset: written in place
      {"bf16", at::linspace(-2, 2, 7, at::kFloat).to(at::kBFloat16)},
      {"empty", at::empty({0, 3}, at::kFloat)},
      {"every_other", backing.slice(0, 0, 40, 2)},  // strided, one dimension
  };
  saved.moments = {{"bf16", at::full({7}, 0.5f), at::full({7}, 0.25f).t(), at::Tensor()}};
  saved.optimizer_step = 3;
  REQUIRE(SaveTrainableState(dir.path(), saved, 1, 1, 0).ok());

  TrainableState loaded;
  for (const auto& [name, t] : saved.params) loaded.params.emplace_back(name, at::zeros(t.sizes(), t.options()));
  loaded.moments = {{"bf16", at::zeros({7}), at::zeros({7}), at::Tensor()}};
  const absl::Status s = LoadTrainableState(dir.path(), loaded, 1, 0);
  INFO(s.ToString());
  REQUIRE(s.ok());
  for (size_t i = 0; i < saved.params.size(); ++i) {
    INFO(saved.params[i].first);
    CHECK(loaded.params[i].second.scalar_type() == saved.params[i].second.scalar_type());
    CHECK(at::equal(loaded.params[i].second, saved.params[i].second));
  }
  CHECK(at::equal(loaded.moments[0].exp_avg, saved.moments[0].exp_avg));
  CHECK(at::equal(loaded.moments[0].exp_avg_sq, saved.moments[0].exp_avg_sq));
  CHECK(loaded.optimizer_step == 3);
}

}  // namespace
}  // namespace verl
