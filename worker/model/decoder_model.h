#ifndef VERL_WORKER_MODEL_DECODER_MODEL_H_
#define VERL_WORKER_MODEL_DECODER_MODEL_H_

// The Qwen2 / Llama decoder in LibTorch (ATen ops + autograd): token embedding, N blocks of
// RMSNorm -> GQA attention with RoPE (optional q/k/v bias) -> residual -> RMSNorm -> SwiGLU MLP -> residual,
// final RMSNorm, LM head (optionally tied to the embedding). Parameters keep HuggingFace names so checkpoints load
// and export unchanged.
//
// Thread-safety: a DecoderModel is used by one rank thread at a time.

#include <ATen/ATen.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/model/hf_config.h"

namespace verl {

// Per-layer key/value cache for incremental decoding: k[i], v[i] are [batch, kv_heads, capacity, head_dim];
// positions [0, length) are filled.
struct KvCache {
  std::vector<at::Tensor> k;
  std::vector<at::Tensor> v;
  int64_t length = 0;
  int64_t capacity = 0;
};

class DecoderModel {
 public:
  // Loads config.json and the safetensors weights of an HF model directory. Weights are converted to `dtype` and
  // placed on `device`; Forward's inputs must be on that device too.
  // Errors name the directory and the tensor (missing, wrong shape).
  static absl::StatusOr<std::unique_ptr<DecoderModel>> Load(const std::string& model_dir, at::ScalarType dtype,
                                                            at::Device device = at::kCPU);

  DecoderModel(const DecoderModel&) = delete;
  DecoderModel& operator=(const DecoderModel&) = delete;

  // Runs the decoder over `input_ids` [B, T] at `position_ids` [B, T].
  // `attn_mask` is bool [B, 1, T, S] (true = may attend), where S = T without a cache, or cache->length + T with one.
  // With a cache, the new keys/values are written at [cache->length, cache->length + T) and length advances.
  // Returns the final-norm hidden states [B, T, hidden].
  at::Tensor Forward(const at::Tensor& input_ids, const at::Tensor& position_ids, const at::Tensor& attn_mask,
                     KvCache* cache) const;

  // hidden [..., H] -> logits [..., vocab] in float32.
  at::Tensor Logits(const at::Tensor& hidden) const;

  // A cache for `batch` sequences of up to `capacity` positions, zero-filled.
  KvCache NewCache(int64_t batch, int64_t capacity) const;

  // Every parameter with its HF name, in a fixed order. With tied embeddings lm_head is not listed.
  const std::vector<std::pair<std::string, at::Tensor>>& named_parameters() const { return params_; }
  std::vector<at::Tensor> parameters() const;
  int64_t num_parameters() const;
  void SetRequiresGrad(bool requires_grad);

  const DecoderConfig& config() const { return config_; }

 private:
  struct Layer {
    // Biases (q_b, k_b, v_b, o_b) are undefined when the model has none; o_b exists only for Llama attention_bias.
    at::Tensor input_norm, q_w, q_b, k_w, k_b, v_w, v_b, o_w, o_b, post_norm, gate_w, up_w, down_w;
  };

  explicit DecoderModel(DecoderConfig config) : config_(std::move(config)) {}
  at::Tensor RmsNorm(const at::Tensor& x, const at::Tensor& weight) const;
  std::pair<at::Tensor, at::Tensor> RopeCosSin(const at::Tensor& position_ids, at::ScalarType dtype) const;

  DecoderConfig config_;
  at::Tensor embed_;
  at::Tensor final_norm_;
  at::Tensor lm_head_;  // aliases embed_ when tied
  at::Tensor inv_freq_;  // [head_dim / 2] float32
  std::vector<Layer> layers_;
  std::vector<std::pair<std::string, at::Tensor>> params_;
};

}  // namespace verl

namespace verl {

// The RoPE inverse frequencies [head_dim / 2], float32, for `config` (rope_theta and rope_scaling), computed with the
// same float32 operations as transformers' rope init functions, so the rotations match bit for bit.
at::Tensor RopeInverseFrequencies(const DecoderConfig& config);

// The attention mask for queries at positions [start, start + T) over keys [0, S) where `key_valid` is bool [B, S]:
// a query attends to valid keys at or before its own position, and always to itself (so rows of padding never
// become all -inf, which would turn into NaN). Returns bool [B, 1, T, S].
at::Tensor BuildAttentionMask(const at::Tensor& key_valid, int64_t start, int64_t T);

// Position ids from a validity mask [B, S]: the count of valid tokens before each position (left padding -> 0).
at::Tensor PositionIdsFromMask(const at::Tensor& valid);

}  // namespace verl

#endif  // VERL_WORKER_MODEL_DECODER_MODEL_H_
