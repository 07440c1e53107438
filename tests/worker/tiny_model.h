#ifndef VERL_TESTS_WORKER_TINY_MODEL_H_
#define VERL_TESTS_WORKER_TINY_MODEL_H_

// The tiny random decoder the worker tests run on (torch-free: written with WriteRandomDecoder). LibTorch tests
// include tests/worker/torch_catch.h before this header (it includes Catch2, whose CHECK must come after c10's).

#include <catch2/catch.hpp>

#include <cstdint>
#include <string>

#include "worker/model/hf_config.h"
#include "worker/model/random_model.h"

namespace verl::testing {

// Qwen2, vocab 50, hidden 32, 2 layers, 4 heads / 2 kv heads (head_dim 8), intermediate 64, tied embeddings.
inline DecoderConfig TinyDecoderConfig(int64_t vocab_size = 50) {
  DecoderConfig c;
  c.model_type = "qwen2";
  c.vocab_size = vocab_size;
  c.hidden_size = 32;
  c.intermediate_size = 64;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 8;
  c.max_position_embeddings = 256;
  c.rope_theta = 10000.0;
  c.rms_norm_eps = 1e-6;
  c.tie_word_embeddings = true;
  c.attention_bias = true;
  c.eos_token_ids = {static_cast<int32_t>(vocab_size - 1)};
  c.pad_token_id = static_cast<int32_t>(vocab_size - 1);
  return c;
}

// Writes the model into `dir`. init_std 0.2 (not HF's 0.02) so that logits spread over several units: attention is
// peaked and sampling is far from uniform, which makes masking, caching and sampling mistakes visible in the numbers.
inline void WriteTinyModel(const std::string& dir, const DecoderConfig& config, uint64_t seed = 7,
                           double init_std = 0.2) {
  absl::Status s = WriteRandomDecoder(dir, config, seed, DType::kFloat32, init_std);
  INFO(s.ToString());
  REQUIRE(s.ok());
}

}  // namespace verl::testing

#endif  // VERL_TESTS_WORKER_TINY_MODEL_H_
