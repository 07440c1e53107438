#ifndef VERL_TESTS_WORKER_RANK_RANK_FIXTURES_H_
#define VERL_TESTS_WORKER_RANK_RANK_FIXTURES_H_

// Shared by the rank tests: a tiny model directory whose tokenizer and vocabulary agree, and the settings of a small
// GRPO step. Torch-free, like the tests that include it.

#include <catch2/catch.hpp>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/text/bpe_trainer.h"
#include "common/text/tokenizer.h"
#include "tests/test_dir.h"
#include "tests/worker/tiny_model.h"
#include "worker/rank/rank_interface.h"

namespace verl {
namespace rank_testing {

using testing::TestDir;

inline AdvantageSettings Grpo() {
  AdvantageSettings a;
  a.estimator = "grpo";
  a.norm_adv_by_std_in_grpo = true;
  return a;
}

inline AdvantageSettings Estimator(const std::string& name) {
  AdvantageSettings a = Grpo();
  a.estimator = name;
  return a;
}

constexpr char kEos[] = "<|endoftext|>";

// A model directory whose tokenizer.json and model vocabulary agree: a byte-level BPE trained on a few letter strings.
struct TinyRankModel {
  TestDir dir{"rank_model"};
  int32_t vocab_size = 0;
  int32_t eos_id = 0;
  std::vector<int32_t> prompt_a, prompt_b;
  DecoderConfig config;

  // head_dim 8 by default; 64 for a model the CUDA decode kernel takes (hidden 4 x head_dim, intermediate `inter`).
  explicit TinyRankModel(int64_t head_dim = 8, int64_t inter = 0) {
    auto json = TrainByteLevelBpeTokenizerJson({"aaaa aaaa bbbb", "abab cdcd", "repeat a", "repeat b"}, 8, {kEos});
    REQUIRE(json.ok());
    auto tok = Tokenizer::FromJson(*json, "tokenizer.json");
    REQUIRE(tok.ok());
    vocab_size = tok->vocab_size();
    REQUIRE(vocab_size > 256);
    eos_id = *tok->TokenToId(kEos);
    prompt_a = tok->Encode("repeat a");
    prompt_b = tok->Encode("say aaaa");
    config = testing::TinyDecoderConfig(vocab_size);
    if (head_dim != config.head_dim) {
      config.head_dim = head_dim;
      config.hidden_size = config.num_attention_heads * head_dim;
      config.intermediate_size = 2 * config.hidden_size;
    }
    if (inter > 0) config.intermediate_size = inter;
    config.eos_token_ids = {eos_id};
    config.pad_token_id = eos_id;
    testing::WriteTinyModel(dir.path(), config);
    testing::WriteFile(dir.file("tokenizer.json"), *json);
  }
};

inline RankConfig Config(const std::string& model_path, std::vector<std::string> roles = {"actor", "rollout", "ref"}) {
  RankConfig c;
  c.roles = std::move(roles);
  c.model_path = model_path;
  c.actor.lr = 1e-4;
  c.actor.ppo_mini_batch_size = 2;  // prompts: one optimizer step over all 4 sequences
  c.actor.ppo_micro_batch_size_per_gpu = 2;
  c.actor.log_prob_micro_batch_size_per_gpu = 3;
  c.actor.use_kl_loss = true;
  return c;
}

inline std::vector<PromptInput> Prompts(const TinyRankModel& m) {
  return {{m.prompt_a, "uid-a", "verl_cpp/repeat_letter", "a", "{}"},
          {m.prompt_b, "uid-b", "verl_cpp/repeat_letter", "a", "{}"}};
}

inline SamplingSettings Sampling(const TinyRankModel& m) {
  SamplingSettings s;
  s.n = 2;
  s.max_new_tokens = 6;
  s.eos_token_ids = {m.eos_id};
  s.pad_token_id = m.eos_id;
  s.seed = 11;
  return s;
}

inline std::unique_ptr<RankInterface> LoadedRank(int32_t id, const RankConfig& config) {
  auto rank = CreateCpuRank(id);
  REQUIRE(rank->Configure(config).ok());
  auto loaded = rank->LoadModel();
  INFO(loaded.status().ToString());
  REQUIRE(loaded.ok());
  return rank;
}

}  // namespace rank_testing
}  // namespace verl

#endif  // VERL_TESTS_WORKER_RANK_RANK_FIXTURES_H_
