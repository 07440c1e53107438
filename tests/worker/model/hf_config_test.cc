#include "worker/model/hf_config.h"

#include <catch2/catch.hpp>

#include "nlohmann/json.hpp"
#include "tests/test_dir.h"

namespace verl {
namespace {

using testing::ReadFile;
using testing::TestDir;
using testing::WriteFile;

// config.json of Qwen/Qwen2.5-0.5B-Instruct as published on the Hub.
constexpr char kQwen25HalfBConfig[] = R"({
  "architectures": ["Qwen2ForCausalLM"],
  "attention_dropout": 0.0,
  "bos_token_id": 151643,
  "eos_token_id": 151645,
  "hidden_act": "silu",
  "hidden_size": 896,
  "initializer_range": 0.02,
  "intermediate_size": 4864,
  "max_position_embeddings": 32768,
  "max_window_layers": 21,
  "model_type": "qwen2",
  "num_attention_heads": 14,
  "num_hidden_layers": 24,
  "num_key_value_heads": 2,
  "rms_norm_eps": 1e-06,
  "rope_theta": 1000000.0,
  "sliding_window": 32768,
  "tie_word_embeddings": true,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.43.1",
  "use_cache": true,
  "use_sliding_window": false,
  "vocab_size": 151936
})";

constexpr char kQwen25GenerationConfig[] = R"({
  "bos_token_id": 151643,
  "pad_token_id": 151643,
  "do_sample": true,
  "eos_token_id": [151645, 151643],
  "repetition_penalty": 1.1,
  "temperature": 0.7,
  "top_p": 0.8,
  "top_k": 20,
  "transformers_version": "4.37.0"
})";

// A TinyLlama-1.1B style config.
constexpr char kLlamaConfig[] = R"({
  "architectures": ["LlamaForCausalLM"],
  "bos_token_id": 1,
  "eos_token_id": 2,
  "hidden_act": "silu",
  "hidden_size": 2048,
  "initializer_range": 0.02,
  "intermediate_size": 5632,
  "max_position_embeddings": 2048,
  "model_type": "llama",
  "num_attention_heads": 32,
  "num_hidden_layers": 22,
  "num_key_value_heads": 4,
  "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_scaling": null,
  "rope_theta": 10000.0,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "use_cache": true,
  "vocab_size": 32000
})";

// Writes config.json (and generation_config.json when given) into a fresh directory.
void WriteModelDir(const TestDir& dir, const std::string& config, const std::string& generation = "") {
  WriteFile(dir.file("config.json"), config);
  if (!generation.empty()) WriteFile(dir.file("generation_config.json"), generation);
}

// kQwen25HalfBConfig with `key` replaced by `value` (a JSON text), or removed when value is empty.
std::string QwenWith(const std::string& key, const std::string& value) {
  nlohmann::json j = nlohmann::json::parse(kQwen25HalfBConfig);
  if (value.empty()) {
    j.erase(key);
  } else {
    j[key] = nlohmann::json::parse(value);
  }
  return j.dump();
}

absl::Status LoadError(const std::string& config_text, const std::string& generation = "") {
  TestDir dir("hf_config_err");
  WriteModelDir(dir, config_text, generation);
  return LoadDecoderConfig(dir.path()).status();
}

TEST_CASE("hf config loads Qwen2.5-0.5B", "[hf_config]") {
  TestDir dir("hf_qwen");
  WriteModelDir(dir, kQwen25HalfBConfig, kQwen25GenerationConfig);
  absl::StatusOr<DecoderConfig> c = LoadDecoderConfig(dir.path());
  REQUIRE(c.ok());
  CHECK(c->model_type == "qwen2");
  CHECK(c->vocab_size == 151936);
  CHECK(c->hidden_size == 896);
  CHECK(c->intermediate_size == 4864);
  CHECK(c->num_hidden_layers == 24);
  CHECK(c->num_attention_heads == 14);
  CHECK(c->num_key_value_heads == 2);
  CHECK(c->head_dim == 64);
  CHECK(c->max_position_embeddings == 32768);
  CHECK(c->rope_theta == 1e6);
  CHECK(c->rms_norm_eps == 1e-6);
  CHECK(c->tie_word_embeddings);
  CHECK(c->attention_bias);
  CHECK(c->torch_dtype == "bfloat16");
  CHECK(c->eos_token_ids == std::vector<int32_t>{151645, 151643});  // generation_config wins
  CHECK(c->bos_token_id == 151643);
  CHECK(c->pad_token_id == 151643);
  CHECK(c->raw["max_window_layers"] == 21);

  // Without generation_config.json the config's own ids are used.
  TestDir bare("hf_qwen_bare");
  WriteModelDir(bare, kQwen25HalfBConfig);
  c = LoadDecoderConfig(bare.path());
  REQUIRE(c.ok());
  CHECK(c->eos_token_ids == std::vector<int32_t>{151645});
  CHECK_FALSE(c->pad_token_id.has_value());
}

TEST_CASE("hf config parameter specs of Qwen2.5-0.5B", "[hf_config]") {
  TestDir dir("hf_qwen_specs");
  WriteModelDir(dir, kQwen25HalfBConfig);
  absl::StatusOr<DecoderConfig> c = LoadDecoderConfig(dir.path());
  REQUIRE(c.ok());
  const std::vector<ParamSpec> specs = DecoderParamSpecs(*c);
  // embed + 24 layers * (2 norms + q,k,v,o weights + q,k,v biases + 3 mlp) + final norm; lm_head tied.
  CHECK(specs.size() == 1 + 24 * 12 + 1);
  int64_t total = 0;
  for (const ParamSpec& s : specs) total += s.numel();
  // By hand: V*H + L*(q: H*H+H, k,v: 2*(128*H+128), o: H*H, mlp: 3*I*H, norms: 2H) + H.
  const int64_t v = 151936, h = 896, i = 4864, kv = 2 * 64;
  const int64_t per_layer = (h * h + h) + 2 * (kv * h + kv) + h * h + 3 * i * h + 2 * h;
  CHECK(v * h + 24 * per_layer + h == total);
  CHECK(total == 494032768);

  CHECK(specs.front().name == "model.embed_tokens.weight");
  CHECK(specs.front().shape == std::vector<int64_t>{151936, 896});
  CHECK(specs[1].name == "model.layers.0.input_layernorm.weight");
  CHECK(specs[1].init == ParamInit::kOnes);
  CHECK(specs[2].name == "model.layers.0.self_attn.q_proj.weight");
  CHECK(specs[2].shape == std::vector<int64_t>{896, 896});
  CHECK(specs[3].name == "model.layers.0.self_attn.q_proj.bias");
  CHECK(specs[3].init == ParamInit::kZeros);
  CHECK(specs[4].name == "model.layers.0.self_attn.k_proj.weight");
  CHECK(specs[4].shape == std::vector<int64_t>{128, 896});
  CHECK(specs[8].name == "model.layers.0.self_attn.o_proj.weight");
  CHECK(specs[12].name == "model.layers.0.mlp.down_proj.weight");
  CHECK(specs[12].shape == std::vector<int64_t>{896, 4864});
  CHECK(specs.back().name == "model.norm.weight");

  c->tie_word_embeddings = false;
  const std::vector<ParamSpec> untied = DecoderParamSpecs(*c);
  CHECK(untied.back().name == "lm_head.weight");
  CHECK(untied.back().shape == std::vector<int64_t>{151936, 896});
}

TEST_CASE("hf config loads a Llama config with defaults", "[hf_config]") {
  TestDir dir("hf_llama");
  WriteModelDir(dir, kLlamaConfig);
  absl::StatusOr<DecoderConfig> c = LoadDecoderConfig(dir.path());
  REQUIRE(c.ok());
  CHECK(c->model_type == "llama");
  CHECK(c->head_dim == 64);
  CHECK(c->num_key_value_heads == 4);
  CHECK_FALSE(c->attention_bias);
  CHECK(c->rms_norm_eps == 1e-5);
  CHECK(c->eos_token_ids == std::vector<int32_t>{2});
  CHECK(c->bos_token_id == 1);
  const std::vector<ParamSpec> specs = DecoderParamSpecs(*c);
  CHECK(specs.size() == 1 + 22 * 9 + 2);  // no biases, untied lm_head
  int64_t total = 0;
  for (const ParamSpec& s : specs) total += s.numel();
  CHECK(total == 1100048384);  // TinyLlama-1.1B

  // head_dim and attention_bias given explicitly; kv heads and max positions defaulted.
  nlohmann::json j = nlohmann::json::parse(kLlamaConfig);
  j["head_dim"] = 128;
  j["attention_bias"] = true;
  j.erase("num_key_value_heads");
  j.erase("max_position_embeddings");
  j.erase("bos_token_id");
  j["eos_token_id"] = nullptr;
  TestDir dir2("hf_llama2");
  WriteModelDir(dir2, j.dump());
  c = LoadDecoderConfig(dir2.path());
  REQUIRE(c.ok());
  CHECK(c->head_dim == 128);
  CHECK(c->num_key_value_heads == 32);
  CHECK(c->max_position_embeddings == 2048);
  CHECK(c->attention_bias);
  CHECK(c->bos_token_id == 1);          // LlamaConfig default
  CHECK(c->eos_token_ids.empty());      // explicit null
  const std::vector<ParamSpec> biased = DecoderParamSpecs(*c);
  CHECK(biased[2].shape == std::vector<int64_t>{32 * 128, 2048});
  bool has_o_bias = false;
  for (const ParamSpec& s : biased) has_o_bias |= s.name == "model.layers.0.self_attn.o_proj.bias";
  CHECK(has_o_bias);
}

TEST_CASE("hf config errors name the file and the key", "[hf_config]") {
  SECTION("missing config.json") {
    TestDir dir("hf_none");
    absl::Status s = LoadDecoderConfig(dir.path()).status();
    CHECK(s.code() == absl::StatusCode::kNotFound);
    CHECK_THAT(std::string(s.message()), Catch::Contains("config.json"));
  }
  SECTION("missing required key") {
    absl::Status s = LoadError(QwenWith("hidden_size", ""));
    CHECK(s.code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(s.message()), Catch::Contains("config.json") && Catch::Contains("'hidden_size'"));
  }
  SECTION("wrong type") {
    absl::Status s = LoadError(QwenWith("num_hidden_layers", R"("24")"));
    CHECK(s.code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(s.message()),
               Catch::Contains("config.json") && Catch::Contains("'num_hidden_layers'") && Catch::Contains("integer"));
    s = LoadError(QwenWith("tie_word_embeddings", "1"));
    CHECK_THAT(std::string(s.message()), Catch::Contains("'tie_word_embeddings'"));
    s = LoadError(QwenWith("rope_theta", R"("big")"));
    CHECK_THAT(std::string(s.message()), Catch::Contains("'rope_theta'"));
    s = LoadError(QwenWith("hidden_size", "896.5"));
    CHECK_THAT(std::string(s.message()), Catch::Contains("'hidden_size'"));
  }
  SECTION("non-positive size") {
    absl::Status s = LoadError(QwenWith("vocab_size", "0"));
    CHECK_THAT(std::string(s.message()), Catch::Contains("'vocab_size'") && Catch::Contains("positive"));
  }
  SECTION("heads not divisible by kv heads") {
    absl::Status s = LoadError(QwenWith("num_key_value_heads", "3"));
    CHECK(s.code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(s.message()), Catch::Contains("'num_key_value_heads'"));
  }
  SECTION("unsupported model type lists the supported ones") {
    absl::Status s = LoadError(QwenWith("model_type", R"("mistral")"));
    CHECK(s.code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(s.message()), Catch::Contains("'mistral'") && Catch::Contains("qwen2") &&
                                             Catch::Contains("llama") && Catch::Contains("'model_type'"));
  }
  SECTION("rope_scaling types other than default, linear and llama3 are not supported yet") {
    absl::Status s = LoadError(QwenWith("rope_scaling", R"({"type": "yarn", "factor": 4.0})"));
    CHECK(s.code() == absl::StatusCode::kUnimplemented);
    CHECK_THAT(std::string(s.message()), Catch::Contains("'rope_scaling'") && Catch::Contains("config.json") &&
                                             Catch::Contains("yarn") && Catch::Contains("llama3"));
    CHECK(LoadError(QwenWith("rope_scaling", "null")).ok());
    CHECK(LoadError(QwenWith("rope_scaling", R"({"rope_type": "default"})")).ok());
  }
  SECTION("malformed llama3 / linear rope_scaling") {
    const std::string ok = R"({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                              "original_max_position_embeddings": 8192})";
    CHECK(LoadError(QwenWith("rope_scaling", ok)).ok());
    absl::Status s = LoadError(QwenWith("rope_scaling", R"({"rope_type": "llama3", "factor": 8.0})"));
    CHECK(s.code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(s.message()), Catch::Contains("'low_freq_factor'") && Catch::Contains("config.json"));
    s = LoadError(QwenWith("rope_scaling", R"({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 4.0,
                                               "high_freq_factor": 1.0, "original_max_position_embeddings": 8192})"));
    CHECK(s.code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(s.message()), Catch::Contains("'high_freq_factor'"));
    s = LoadError(QwenWith("rope_scaling", R"({"type": "linear", "factor": 0.5})"));
    CHECK(s.code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(s.message()), Catch::Contains("'factor'"));
    CHECK(LoadError(QwenWith("rope_scaling", R"({"factor": 2.0})")).code() == absl::StatusCode::kInvalidArgument);
    CHECK(LoadError(QwenWith("rope_scaling", "4")).code() == absl::StatusCode::kInvalidArgument);
  }
  SECTION("other unsupported features") {
    CHECK(LoadError(QwenWith("use_sliding_window", "true")).code() == absl::StatusCode::kUnimplemented);
    CHECK(LoadError(QwenWith("hidden_act", R"("gelu")")).code() == absl::StatusCode::kUnimplemented);
  }
  SECTION("malformed JSON") {
    absl::Status s = LoadError("{\"model_type\": ");
    CHECK(s.code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(s.message()), Catch::Contains("config.json"));
  }
  SECTION("bad generation_config") {
    absl::Status s = LoadError(kQwen25HalfBConfig, R"({"eos_token_id": ["x"]})");
    CHECK(s.code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(s.message()), Catch::Contains("generation_config.json") && Catch::Contains("'eos_token_id'"));
  }
}

TEST_CASE("hf config written by DecoderConfigToJson loads back identically", "[hf_config]") {
  for (const char* source : {kQwen25HalfBConfig, kLlamaConfig}) {
    TestDir in("hf_json_in");
    WriteModelDir(in, source, kQwen25GenerationConfig);
    absl::StatusOr<DecoderConfig> c = LoadDecoderConfig(in.path());
    REQUIRE(c.ok());

    TestDir out("hf_json_out");
    WriteFile(out.file("config.json"), DecoderConfigToJson(*c));
    WriteFile(out.file("generation_config.json"), GenerationConfigToJson(*c));
    absl::StatusOr<DecoderConfig> back = LoadDecoderConfig(out.path());
    REQUIRE(back.ok());
    INFO(c->model_type);
    CHECK(back->model_type == c->model_type);
    CHECK(back->vocab_size == c->vocab_size);
    CHECK(back->hidden_size == c->hidden_size);
    CHECK(back->intermediate_size == c->intermediate_size);
    CHECK(back->num_hidden_layers == c->num_hidden_layers);
    CHECK(back->num_attention_heads == c->num_attention_heads);
    CHECK(back->num_key_value_heads == c->num_key_value_heads);
    CHECK(back->head_dim == c->head_dim);
    CHECK(back->max_position_embeddings == c->max_position_embeddings);
    CHECK(back->rope_theta == c->rope_theta);
    CHECK(back->rms_norm_eps == c->rms_norm_eps);
    CHECK(back->tie_word_embeddings == c->tie_word_embeddings);
    CHECK(back->attention_bias == c->attention_bias);
    CHECK(back->torch_dtype == c->torch_dtype);
    CHECK(back->eos_token_ids == c->eos_token_ids);
    CHECK(back->bos_token_id == c->bos_token_id);
    CHECK(back->pad_token_id == c->pad_token_id);

    const nlohmann::json j = nlohmann::json::parse(ReadFile(out.file("config.json")));
    CHECK(j["architectures"][0] == (c->model_type == "qwen2" ? "Qwen2ForCausalLM" : "LlamaForCausalLM"));
    CHECK(j["transformers_version"] == "4.46.0");
    CHECK(j["hidden_act"] == "silu");
    CHECK(j["use_cache"] == true);
    CHECK(j["rope_scaling"].is_null());
  }

  // A config built in code (no raw JSON) gets the companions too.
  DecoderConfig c;
  c.model_type = "llama";
  c.vocab_size = 100;
  c.hidden_size = 64;
  c.intermediate_size = 128;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 16;
  c.max_position_embeddings = 256;
  c.eos_token_ids = {3};
  const nlohmann::json j = nlohmann::json::parse(DecoderConfigToJson(c));
  CHECK(j["architectures"][0] == "LlamaForCausalLM");
  CHECK(j["attention_bias"] == false);
  CHECK(j["eos_token_id"] == 3);
  CHECK(j["bos_token_id"].is_null());
  CHECK(j["pretraining_tp"] == 1);
}

TEST_CASE("hf config: llama3 and linear rope_scaling load and write back", "[hf_config]") {
  for (const std::string scaling :
       {std::string(R"({"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                        "original_max_position_embeddings": 8192})"),
        std::string(R"({"type": "linear", "factor": 2})")}) {
    INFO(scaling);
    TestDir dir("hf_config_rope");
    WriteModelDir(dir, QwenWith("rope_scaling", scaling));
    absl::StatusOr<DecoderConfig> c = LoadDecoderConfig(dir.path());
    INFO(c.status().ToString());
    REQUIRE(c.ok());
    const bool llama3 = scaling.find("llama3") != std::string::npos;
    CHECK(c->rope_scaling.rope_type == (llama3 ? "llama3" : "linear"));
    CHECK(c->rope_scaling.factor == (llama3 ? 32.0 : 2.0));
    if (llama3) {
      CHECK(c->rope_scaling.low_freq_factor == 1.0);
      CHECK(c->rope_scaling.high_freq_factor == 4.0);
      CHECK(c->rope_scaling.original_max_position_embeddings == 8192);
    }
    TestDir out("hf_config_rope_out");
    WriteFile(out.file("config.json"), DecoderConfigToJson(*c));
    absl::StatusOr<DecoderConfig> back = LoadDecoderConfig(out.path());
    REQUIRE(back.ok());
    CHECK(back->rope_scaling.rope_type == c->rope_scaling.rope_type);
    CHECK(back->rope_scaling.factor == c->rope_scaling.factor);
    CHECK(back->rope_scaling.low_freq_factor == c->rope_scaling.low_freq_factor);
    CHECK(back->rope_scaling.high_freq_factor == c->rope_scaling.high_freq_factor);
    CHECK(back->rope_scaling.original_max_position_embeddings == c->rope_scaling.original_max_position_embeddings);
    const nlohmann::json j = nlohmann::json::parse(ReadFile(out.file("config.json")));
    CHECK(j["rope_scaling"]["rope_type"] == c->rope_scaling.rope_type);
  }
}

TEST_CASE("hf config: transformers 5's rope_parameters load, and write back in that form", "[hf_config]") {
  // transformers >= 5 moves rope_theta and rope_scaling into one object.
  for (const std::string params :
       {std::string(R"({"rope_type": "default", "rope_theta": 1000000.0})"),
        std::string(R"({"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                        "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})")}) {
    INFO(params);
    nlohmann::json j = nlohmann::json::parse(kQwen25HalfBConfig);
    j.erase("rope_theta");
    j["rope_parameters"] = nlohmann::json::parse(params);
    TestDir dir("hf_config_rope5");
    WriteModelDir(dir, j.dump());
    absl::StatusOr<DecoderConfig> c = LoadDecoderConfig(dir.path());
    INFO(c.status().ToString());
    REQUIRE(c.ok());
    const bool llama3 = params.find("llama3") != std::string::npos;
    CHECK(c->rope_theta == (llama3 ? 500000.0 : 1000000.0));
    CHECK(c->rope_scaling.rope_type == (llama3 ? "llama3" : ""));
    if (llama3) {
      CHECK(c->rope_scaling.factor == 8.0);
      CHECK(c->rope_scaling.original_max_position_embeddings == 8192);
    }
    // Written back as the source wrote it: rope_parameters, no top-level rope_theta or rope_scaling beside it.
    TestDir out("hf_config_rope5_out");
    WriteFile(out.file("config.json"), DecoderConfigToJson(*c));
    const nlohmann::json w = nlohmann::json::parse(ReadFile(out.file("config.json")));
    CHECK_FALSE(w.contains("rope_theta"));
    CHECK_FALSE(w.contains("rope_scaling"));
    CHECK(w["rope_parameters"]["rope_theta"] == c->rope_theta);
    CHECK(w["rope_parameters"]["rope_type"] == (llama3 ? "llama3" : "default"));
    absl::StatusOr<DecoderConfig> back = LoadDecoderConfig(out.path());
    REQUIRE(back.ok());
    CHECK(back->rope_theta == c->rope_theta);
    CHECK(back->rope_scaling.rope_type == c->rope_scaling.rope_type);
    CHECK(back->rope_scaling.factor == c->rope_scaling.factor);
  }
  // Both forms at once must agree; an unsupported type in the new form is named as such.
  nlohmann::json both = nlohmann::json::parse(kQwen25HalfBConfig);
  both["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 10000.0}};
  absl::Status s = LoadError(both.dump());
  CHECK(absl::IsInvalidArgument(s));
  CHECK(s.message().find("rope_parameters") != std::string::npos);
  CHECK(s.message().find("1000000") != std::string::npos);
  nlohmann::json yarn = nlohmann::json::parse(kQwen25HalfBConfig);
  yarn.erase("rope_theta");
  yarn["rope_parameters"] = {{"rope_type", "yarn"}, {"rope_theta", 1e6}, {"factor", 4.0}};
  s = LoadError(yarn.dump());
  CHECK(absl::IsUnimplemented(s));
  CHECK(s.message().find("key 'rope_parameters' has rope_type 'yarn'") != std::string::npos);
}

TEST_CASE("hf config: pad_token_id -1 (early Llama conversions) means no pad token", "[hf_config]") {
  nlohmann::json j = nlohmann::json::parse(kLlamaConfig);
  j["pad_token_id"] = -1;
  TestDir dir("hf_config_pad");
  WriteModelDir(dir, j.dump(), R"({"pad_token_id": -1, "eos_token_id": 2})");
  absl::StatusOr<DecoderConfig> c = LoadDecoderConfig(dir.path());
  INFO(c.status().ToString());
  REQUIRE(c.ok());
  CHECK_FALSE(c->pad_token_id.has_value());
  // Other negative ids stay errors.
  j["pad_token_id"] = -2;
  CHECK(absl::IsInvalidArgument(LoadError(j.dump())));
  j["pad_token_id"] = nullptr;
  j["bos_token_id"] = -1;
  CHECK(absl::IsInvalidArgument(LoadError(j.dump())));
}

TEST_CASE("torch dtype names", "[hf_config]") {
  CHECK(ParseTorchDType("bfloat16") == DType::kBFloat16);
  CHECK(ParseTorchDType("torch.float16") == DType::kFloat16);
  CHECK(ParseTorchDType("float32") == DType::kFloat32);
  CHECK_FALSE(ParseTorchDType("float64").has_value());
  CHECK(TorchDTypeName(DType::kBFloat16) == "bfloat16");
}

}  // namespace
}  // namespace verl
