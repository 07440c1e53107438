// bf16 parity on a real model: our SmolLM2-135M-Instruct in bfloat16 (DecoderModel::Load(dir, kBFloat16)) against
// transformers' bfloat16 run, on six inputs of the SmolLM2 reference (tools/hf/bf16_reference.py, run by
// tools/hf/setup_assets.sh). bf16 rounding makes an exact match impossible; the yardstick is how far transformers'
// own bf16 run is from its fp32 run on the same input: ours must stay within twice that, from transformers' bf16
// logits and from its fp32 logits. Skips (WARN + return) without the assets.

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

at::Tensor View(const SafetensorsFile& file, const std::string& name) {
  auto view = file.Get(name);
  INFO(name << ": " << view.status().ToString());
  REQUIRE(view.ok());
  const at::ScalarType type = view->dtype == DType::kBFloat16 ? at::kBFloat16 : at::kFloat;
  return at::from_blob(const_cast<void*>(view->data), view->shape, type).to(at::kFloat);
}

TEST_CASE("SmolLM2 in bf16: our logits are within 2x of transformers' own bf16-vs-fp32 difference", "[hf]") {
  const std::string dir = std::string(VERL_HF_ASSETS_DIR) + "/reference/smollm2-bf16";
  const std::string model_dir = std::string(VERL_HF_ASSETS_DIR) + "/models/smollm2-135m-instruct";
  if (!fs::is_regular_file(dir + "/reference.json")) {
    WARN("skipped: no bf16 reference under " << dir << " (run tools/hf/setup_assets.sh)");
    return;
  }
  std::ifstream in(dir + "/reference.json");
  const nlohmann::json ref = nlohmann::json::parse(in);
  auto file = SafetensorsFile::Open(dir + "/logits.safetensors");
  REQUIRE(file.ok());
  auto model = DecoderModel::Load(model_dir, at::kBFloat16);
  INFO(model.status().ToString());
  REQUIRE(model.ok());
  REQUIRE((*model)->named_parameters().front().second.scalar_type() == at::kBFloat16);
  at::InferenceMode guard;
  double worst_ratio = 0;
  for (size_t i = 0; i < ref["sequences"].size(); ++i) {
    const auto ids = ref["sequences"][i].get<std::vector<int64_t>>();
    const auto T = static_cast<int64_t>(ids.size());
    at::Tensor valid = at::ones({1, T}, at::kBool);
    at::Tensor hidden = (*model)->Forward(at::tensor(ids, at::kLong).view({1, T}), PositionIdsFromMask(valid),
                                          BuildAttentionMask(valid, 0, T), nullptr);
    REQUIRE(hidden.scalar_type() == at::kBFloat16);
    // Logits multiplies in bf16 and returns float32, the values of transformers' bf16 logits .float().
    at::Tensor ours = (*model)->Logits(hidden)[0];
    const at::Tensor hf_bf16 = View(*file, "bf16." + std::to_string(i));
    const at::Tensor hf_fp32 = View(*file, "fp32." + std::to_string(i));
    REQUIRE(ours.sizes() == hf_bf16.sizes());
    const double hf_own = (hf_bf16 - hf_fp32).abs().max().item<double>();
    const double vs_bf16 = (ours - hf_bf16).abs().max().item<double>();
    const double vs_fp32 = (ours - hf_fp32).abs().max().item<double>();
    const double argmax_agree = ours.argmax(-1).eq(hf_bf16.argmax(-1)).to(at::kFloat).mean().item<double>();
    INFO("sequence " << i << " (" << T << " tokens): transformers bf16 vs fp32 " << hf_own << "; ours bf16 vs "
                     << "transformers bf16 " << vs_bf16 << ", vs transformers fp32 " << vs_fp32
                     << "; argmax agreement with transformers bf16 " << argmax_agree);
    CHECK(hf_own > 0);
    CHECK(vs_bf16 <= 2 * hf_own);
    CHECK(vs_fp32 <= 2 * hf_own);
    worst_ratio = std::max(worst_ratio, vs_bf16 / hf_own);
    WARN("bf16 sequence " << i << " (" << T << " tokens): max |transformers bf16 - fp32| = " << hf_own
                          << ", max |ours bf16 - transformers bf16| = " << vs_bf16
                          << ", max |ours bf16 - transformers fp32| = " << vs_fp32 << ", argmax agreement "
                          << argmax_agree);
  }
  WARN("worst ratio (ours bf16 vs transformers bf16) / (transformers bf16 vs fp32): " << worst_ratio);
}

}  // namespace
}  // namespace verl::testing
