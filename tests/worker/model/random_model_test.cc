#include "worker/model/random_model.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "nlohmann/json.hpp"
#include "tests/test_dir.h"
#include "worker/model/dtype_convert.h"
#include "worker/model/safetensors_checkpoint.h"

namespace verl {
namespace {

using testing::ReadFile;
using testing::TestDir;

DecoderConfig TinyConfig(const std::string& model_type) {
  DecoderConfig c;
  c.model_type = model_type;
  c.vocab_size = 64;
  c.hidden_size = 32;
  c.intermediate_size = 48;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 8;
  c.max_position_embeddings = 128;
  c.rope_theta = 10000.0;
  c.rms_norm_eps = 1e-6;
  c.tie_word_embeddings = model_type == "qwen2";
  c.attention_bias = model_type == "qwen2";
  c.eos_token_ids = {1, 2};
  c.bos_token_id = 0;
  c.pad_token_id = 3;
  return c;
}

std::vector<float> AsFloats(const SafetensorsFile::TensorView& v) {
  std::vector<float> out(static_cast<size_t>(v.numel()));
  if (v.dtype == DType::kFloat32) {
    std::memcpy(out.data(), v.data, v.nbytes);
    return out;
  }
  std::vector<uint16_t> half(out.size());
  std::memcpy(half.data(), v.data, v.nbytes);
  if (v.dtype == DType::kBFloat16) {
    BFloat16ToFloat32(half.data(), out.data(), out.size());
  } else {
    Float16ToFloat32(half.data(), out.data(), out.size());
  }
  return out;
}

TEST_CASE("random decoder files are deterministic in the seed", "[random_model]") {
  TestDir a("rand_a"), b("rand_b"), c("rand_c");
  const DecoderConfig config = TinyConfig("qwen2");
  REQUIRE(WriteRandomDecoder(a.path(), config, 1, DType::kBFloat16).ok());
  REQUIRE(WriteRandomDecoder(b.path(), config, 1, DType::kBFloat16).ok());
  REQUIRE(WriteRandomDecoder(c.path(), config, 2, DType::kBFloat16).ok());
  CHECK(ReadFile(a.file("model.safetensors")) == ReadFile(b.file("model.safetensors")));
  CHECK(ReadFile(a.file("model.safetensors")) != ReadFile(c.file("model.safetensors")));
  CHECK(ReadFile(a.file("config.json")) == ReadFile(c.file("config.json")));

  // Pinned values: the generator must not drift between machines or versions (seed 0, float32).
  TestDir pinned("rand_pinned");
  REQUIRE(WriteRandomDecoder(pinned.path(), config, 0, DType::kFloat32, 1.0).ok());
  absl::StatusOr<SafetensorsCheckpoint> ckpt = SafetensorsCheckpoint::Open(pinned.path());
  REQUIRE(ckpt.ok());
  const std::vector<float> embed = AsFloats(ckpt->Get("model.embed_tokens.weight").value());
  INFO("first values " << embed[0] << " " << embed[1] << " " << embed[2] << " " << embed[3]);
  uint32_t bits[4];
  std::memcpy(bits, embed.data(), sizeof(bits));
  CHECK(bits[0] == 0x3fbdfe49u);
  CHECK(bits[1] == 0xbe865e30u);
  CHECK(bits[2] == 0xbf2975ceu);
  CHECK(bits[3] == 0xbedacb9bu);
}

TEST_CASE("random decoder reloads as a model directory", "[random_model]") {
  for (const std::string model_type : {"qwen2", "llama"}) {
    for (DType dtype : {DType::kBFloat16, DType::kFloat32, DType::kFloat16}) {
      INFO(model_type << " " << TorchDTypeName(dtype));
      TestDir dir("rand_reload");
      const DecoderConfig config = TinyConfig(model_type);
      REQUIRE(WriteRandomDecoder(dir.path(), config, 42, dtype, 0.02).ok());

      absl::StatusOr<DecoderConfig> loaded = LoadDecoderConfig(dir.path());
      REQUIRE(loaded.ok());
      CHECK(loaded->model_type == model_type);
      CHECK(loaded->hidden_size == 32);
      CHECK(loaded->num_key_value_heads == 2);
      CHECK(loaded->head_dim == 8);
      CHECK(loaded->tie_word_embeddings == config.tie_word_embeddings);
      CHECK(loaded->attention_bias == config.attention_bias);
      CHECK(loaded->torch_dtype == TorchDTypeName(dtype));
      CHECK(loaded->eos_token_ids == std::vector<int32_t>{1, 2});
      CHECK(loaded->bos_token_id == 0);
      CHECK(loaded->pad_token_id == 3);

      absl::StatusOr<SafetensorsCheckpoint> ckpt = SafetensorsCheckpoint::Open(dir.path());
      REQUIRE(ckpt.ok());
      const std::vector<ParamSpec> specs = DecoderParamSpecs(*loaded);
      CHECK(ckpt->size() == specs.size());
      CHECK(ckpt->files().front().metadata().at("format") == "pt");
      for (const ParamSpec& spec : specs) {
        INFO(spec.name);
        absl::StatusOr<SafetensorsFile::TensorView> v = ckpt->Get(spec.name);
        REQUIRE(v.ok());
        CHECK(v->dtype == dtype);
        CHECK(v->shape == spec.shape);
        const std::vector<float> values = AsFloats(*v);
        if (spec.init == ParamInit::kOnes) {
          CHECK(std::all_of(values.begin(), values.end(), [](float x) { return x == 1.0f; }));
        } else if (spec.init == ParamInit::kZeros) {
          CHECK(std::all_of(values.begin(), values.end(), [](float x) { return x == 0.0f; }));
        } else {
          double sum = 0, sum_sq = 0;
          for (float x : values) {
            sum += x;
            sum_sq += static_cast<double>(x) * x;
          }
          const double n = static_cast<double>(values.size());
          const double mean = sum / n, std = std::sqrt(sum_sq / n - mean * mean);
          CHECK(std::fabs(mean) < 4 * 0.02 / std::sqrt(n));
          CHECK(std == Approx(0.02).epsilon(0.12));
        }
      }
      CHECK(ckpt->Contains("lm_head.weight") == !config.tie_word_embeddings);
    }
  }
}

TEST_CASE("random decoder rejects bad arguments", "[random_model]") {
  TestDir dir("rand_bad");
  absl::Status s = WriteRandomDecoder(dir.path(), TinyConfig("qwen2"), 0, DType::kInt32);
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(s.message()), Catch::Contains("int32"));
  DecoderConfig bad = TinyConfig("llama");
  bad.hidden_size = 0;
  s = WriteRandomDecoder(dir.path(), bad, 0, DType::kFloat32);
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(s.message()), Catch::Contains("'hidden_size'"));
}

}  // namespace
}  // namespace verl
