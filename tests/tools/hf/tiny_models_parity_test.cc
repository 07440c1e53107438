// Features of the decoder that SmolLM2 does not exercise, against transformers on tiny random models made by
// tools/hf/tiny_reference.py (run by tools/hf/setup_assets.sh): Llama with llama3 RoPE scaling (untied embeddings),
// Qwen2 with linear RoPE scaling (tied, q/k/v biases), Llama with attention_bias (q/k/v and o_proj biases).
// fp32 logits over 96 positions. Skips (WARN + return) without the assets.

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "worker/model/decoder_model.h"
#include "worker/model/safetensors.h"

namespace verl::testing {
namespace {

namespace fs = std::filesystem;

TEST_CASE("Tiny random models (llama3 / linear RoPE scaling, Llama attention_bias): fp32 logits match transformers",
          "[hf]") {
  const std::string dir = std::string(VERL_HF_ASSETS_DIR) + "/reference/tiny-models";
  if (!fs::is_regular_file(dir + "/reference.json")) {
    WARN("skipped: no tiny reference models under " << dir << " (run tools/hf/setup_assets.sh)");
    return;
  }
  std::ifstream in(dir + "/reference.json");
  const nlohmann::json ref = nlohmann::json::parse(in);
  auto logits_file = SafetensorsFile::Open(dir + "/logits.safetensors");
  INFO(logits_file.status().ToString());
  REQUIRE(logits_file.ok());
  REQUIRE(ref["models"].size() == 3);
  at::InferenceMode guard;
  for (const auto& m : ref["models"]) {
    const std::string name = m["name"];
    INFO(name);
    auto model = DecoderModel::Load(dir + "/" + name, at::kFloat);
    INFO(model.status().ToString());
    REQUIRE(model.ok());
    const DecoderConfig& config = (*model)->config();
    if (name == "llama3-rope") CHECK(config.rope_scaling.rope_type == "llama3");
    if (name == "qwen2-linear") CHECK(config.rope_scaling.rope_type == "linear");
    if (name == "llama-bias") CHECK(config.attention_bias);

    const auto ids = m["ids"].get<std::vector<int64_t>>();
    const auto T = static_cast<int64_t>(ids.size());
    auto view = logits_file->Get(m["tensor"].get<std::string>());
    REQUIRE(view.ok());
    at::Tensor expected = at::from_blob(const_cast<void*>(view->data), view->shape, at::kFloat);
    at::Tensor valid = at::ones({1, T}, at::kBool);
    at::Tensor hidden = (*model)->Forward(at::tensor(ids, at::kLong).view({1, T}), PositionIdsFromMask(valid),
                                          BuildAttentionMask(valid, 0, T), nullptr);
    at::Tensor ours = (*model)->Logits(hidden)[0];
    REQUIRE(ours.sizes() == expected.sizes());
    const double scale = m["max_abs"].get<double>();
    const double max_diff = (ours - expected).abs().max().item<double>();
    const double effect = m["feature_effect"].get<double>();
    INFO("max |ours - transformers| = " << max_diff << ", logit scale " << scale << "; without "
                                        << m["feature"].get<std::string>() << " the logits move by " << effect);
    REQUIRE(effect > 100 * 1e-4 * scale);  // the tolerance is far below the effect of the feature under test
    CHECK(max_diff <= 1e-4 * scale);
  }
}

}  // namespace
}  // namespace verl::testing
