#ifndef VERL_WORKER_MODEL_HF_CONFIG_H_
#define VERL_WORKER_MODEL_HF_CONFIG_H_

// The HuggingFace config of a decoder-only causal LM (Qwen2/Qwen2.5 and Llama families), read from and written to a
// model directory's config.json / generation_config.json, and the names and shapes of the model's parameters.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "worker/rank/host_tensor.h"

namespace verl {

// Model types LoadDecoderConfig accepts.
inline constexpr std::string_view kSupportedDecoderModelTypes[] = {"qwen2", "llama"};

// config.json's "rope_scaling" (transformers' modeling_rope_utils). rope_type "" means none (null or "default").
// Supported: "linear" (inv_freq / factor) and "llama3" (Llama 3.1's frequency-dependent scaling with smoothing,
// transformers' _compute_llama3_parameters); both keep the attention scaling at 1.
struct RopeScaling {
  std::string rope_type;                          // "", "linear" or "llama3" ("rope_type", or the older "type")
  double factor = 1.0;                            // linear, llama3: required, >= 1
  double low_freq_factor = 1.0;                   // llama3: required
  double high_freq_factor = 4.0;                  // llama3: required, > low_freq_factor
  int64_t original_max_position_embeddings = 0;   // llama3: required, positive
};

struct DecoderConfig {
  std::string model_type;                // "qwen2" or "llama"
  int64_t vocab_size = 0;                // required
  int64_t hidden_size = 0;               // required
  int64_t intermediate_size = 0;         // required
  int64_t num_hidden_layers = 0;         // required
  int64_t num_attention_heads = 0;       // required
  int64_t num_key_value_heads = 0;       // default: num_attention_heads
  int64_t head_dim = 0;                  // default: hidden_size / num_attention_heads
  int64_t max_position_embeddings = 0;   // default: 32768 (qwen2), 2048 (llama), as transformers
  double rope_theta = 10000.0;           // default 10000
  RopeScaling rope_scaling;              // default: none
  double rms_norm_eps = 1e-6;            // default 1e-6
  bool tie_word_embeddings = false;      // default false; true: lm_head shares model.embed_tokens.weight
  bool attention_bias = false;           // qwen2: always true (q/k/v biases); llama: key "attention_bias", default false
  std::string torch_dtype = "float32";   // "torch_dtype" (or newer "dtype"); default float32
  std::vector<int32_t> eos_token_ids;    // generation_config.json's eos_token_id wins over config.json's
  std::optional<int32_t> bos_token_id;   // likewise; llama defaults to 1 (and eos to 2) as transformers does
  std::optional<int32_t> pad_token_id;   // likewise
  nlohmann::json raw;                    // config.json as read (an empty object for configs built in code)
};

// Reads `model_dir`/config.json and, when present, `model_dir`/generation_config.json. Errors, each naming the file
// and the key: NotFound when config.json is missing; InvalidArgument for malformed JSON, a missing required key, a
// value of the wrong type or out of range, an unsupported model_type (listing the supported ones) or inconsistent
// sizes (heads not divisible by kv heads, hidden_size not divisible by heads without head_dim); Unimplemented for
// features not supported yet: a rope_scaling type other than default, linear and llama3 (yarn, dynamic, longrope,
// ...), hidden_act other than silu, qwen2 use_sliding_window true, llama mlp_bias true. A linear or llama3
// rope_scaling missing a required key, or with a value of the wrong type or out of range, is InvalidArgument.
absl::StatusOr<DecoderConfig> LoadDecoderConfig(const std::string& model_dir);

// A config.json that transformers (>= 4.46) loads into Qwen2ForCausalLM / LlamaForCausalLM with the same
// architecture: keys of `config.raw` are kept, the modelled fields and the usual companions (architectures,
// hidden_act "silu", use_cache true, rope_scaling (null, or the supported scaling with its keys),
// transformers_version "4.46.0", ...) are (over)written.
// For qwen2, attention_bias is implied by the architecture and not written.
std::string DecoderConfigToJson(const DecoderConfig& config);

// A generation_config.json with the bos/eos/pad token ids of `config`.
std::string GenerationConfigToJson(const DecoderConfig& config);

// torch dtype names ("float32", "bfloat16", "float16", "int64", "int32", "uint8", "bool") <-> DType.
std::string TorchDTypeName(DType dtype);
std::optional<DType> ParseTorchDType(std::string_view name);

// How a freshly initialized parameter is filled (transformers' _init_weights for these models).
enum class ParamInit { kNormal, kOnes, kZeros };

struct ParamSpec {
  std::string name;            // HF tensor name, e.g. "model.layers.0.self_attn.q_proj.weight"
  std::vector<int64_t> shape;  // HF (PyTorch) shape: Linear weights are [out_features, in_features]
  ParamInit init = ParamInit::kNormal;

  int64_t numel() const;
};

// Every parameter tensor of the model, in module order: model.embed_tokens.weight [V, H]; per layer i
// model.layers.{i}.{input_layernorm.weight [H], self_attn.{q,k,v}_proj.weight/.bias (biases if attention_bias),
// self_attn.o_proj.weight [H, heads*hd], post_attention_layernorm.weight [H], mlp.{gate,up}_proj.weight [I, H],
// mlp.down_proj.weight [H, I]}; model.norm.weight [H]; lm_head.weight [V, H] unless tie_word_embeddings.
std::vector<ParamSpec> DecoderParamSpecs(const DecoderConfig& config);

}  // namespace verl

#endif  // VERL_WORKER_MODEL_HF_CONFIG_H_
