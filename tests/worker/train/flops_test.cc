#include "worker/train/flops.h"

#include <catch2/catch.hpp>

namespace verl {
namespace {

TEST_CASE("EstimateTrainingFlops is verl's FlopsCounter for Qwen2", "[train][flops]") {
  DecoderConfig c;  // Qwen2.5-0.5B's shape (bench-0.5b)
  c.model_type = "qwen2";
  c.vocab_size = 151936;
  c.hidden_size = 896;
  c.intermediate_size = 4864;
  c.num_hidden_layers = 24;
  c.num_attention_heads = 14;
  c.num_key_value_heads = 2;
  // By hand (tools/bench/b2_update.py's flops()): dense 630,095,872 parameters as verl counts them;
  // 6 * dense * 1,280 tokens + 12 * (768^2 + 512^2) * 64 * 14 * 24.
  CHECK(EstimateTrainingFlops(c, {768, 512}) == Approx(5058984935424.0).epsilon(1e-12));
  CHECK(EstimateTrainingFlops(c, {}) == 0.0);
  // head_dim is hidden / heads, as in verl, even where the config names another.
  DecoderConfig other = c;
  other.head_dim = 128;
  CHECK(EstimateTrainingFlops(other, {768, 512}) == EstimateTrainingFlops(c, {768, 512}));
}

TEST_CASE("PromisedFlops knows verl's devices by name", "[train][flops]") {
  CHECK(PromisedFlops("NVIDIA H200") == 989e12);
  CHECK(PromisedFlops("NVIDIA H100 80GB HBM3") == 989e12);
  CHECK(PromisedFlops("NVIDIA H20") == 148e12);
  CHECK(PromisedFlops("NVIDIA A100-SXM4-80GB") == 312e12);
  CHECK_FALSE(PromisedFlops("Intel(R) Xeon(R) Processor").has_value());
  CHECK_FALSE(PromisedFlops("").has_value());
}

}  // namespace
}  // namespace verl
