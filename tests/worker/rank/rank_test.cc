// The rank through its torch-free interface only: this file sees no LibTorch header, as worker/service does not.

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/text/bpe_trainer.h"
#include "common/text/tokenizer.h"
#include "tests/test_dir.h"
#include "tests/worker/rank/rank_fixtures.h"
#include "tests/worker/tiny_model.h"
#include "worker/rank/rank_interface.h"

namespace verl {
namespace {

using namespace rank_testing;  // NOLINT: the shared fixtures

using testing::ReadFile;
using testing::TestDir;

// repeat_letter's documented rule, for ground truth "a": mean over the first 8 bytes of 1 ('a') / 0.25 (b, c, d).
double RepeatLetterA(const std::string& text) {
  double sum = 0;
  for (size_t i = 0; i < 8 && i < text.size(); ++i) {
    if (text[i] == 'a') sum += 1.0;
    else if (text[i] == 'b' || text[i] == 'c' || text[i] == 'd') sum += 0.25;
  }
  return sum / 8;
}

void ExpectError(const absl::Status& s, absl::StatusCode code, const std::vector<std::string>& parts) {
  INFO(s.ToString());
  REQUIRE(s.code() == code);
  for (const std::string& p : parts) REQUIRE(std::string(s.message()).find(p) != std::string::npos);
}

TEST_CASE("CpuRank runs a GRPO step through the torch-free interface", "[worker][rank]") {
  TinyRankModel m;
  TestDir ckpt("rank_ckpt");
  auto rank = CreateCpuRank(3);
  REQUIRE(rank->Configure(Config(m.dir.path())).ok());
  auto loaded = rank->LoadModel();
  INFO(loaded.status().ToString());
  REQUIRE(loaded.ok());
  REQUIRE(loaded->vocab_size == m.vocab_size);
  REQUIRE(loaded->num_parameters > m.vocab_size * 32);

  // A sampling seed whose first step has a learning signal: within some prompt's group the two scores differ (else
  // every GRPO advantage is 0 and the update below could not move the actor).
  SamplingSettings sampling = Sampling(m);
  for (bool signal = false; !signal; ++sampling.seed) {
    REQUIRE(sampling.seed < 200);
    REQUIRE(rank->Generate("probe", Prompts(m), sampling, false).ok());
    auto probe = rank->Score("probe");
    REQUIRE(probe.ok());
    signal = probe->scores[0] != probe->scores[1] || probe->scores[2] != probe->scores[3];
    REQUIRE(rank->ReleaseBatch("probe").ok());
    if (signal) break;
  }

  auto gen = rank->Generate("step-1", Prompts(m), sampling, false);
  INFO(gen.status().ToString());
  REQUIRE(gen.ok());
  REQUIRE(gen->responses.dtype == DType::kInt32);
  REQUIRE(gen->responses.shape == std::vector<int64_t>{4, 6});
  REQUIRE(gen->responses.bytes.size() == 4 * 6 * 4);
  REQUIRE(gen->prompt_lengths == std::vector<int32_t>{int32_t(m.prompt_a.size()), int32_t(m.prompt_a.size()),
                                                      int32_t(m.prompt_b.size()), int32_t(m.prompt_b.size())});
  std::vector<int32_t> ids(24);
  std::memcpy(ids.data(), gen->responses.bytes.data(), gen->responses.bytes.size());
  for (int i = 0; i < 4; ++i) {
    const int32_t len = gen->response_lengths[i];
    REQUIRE(len >= 1);
    REQUIRE(len <= 6);
    for (int t = 0; t < 6; ++t) {
      REQUIRE(ids[i * 6 + t] >= 0);
      REQUIRE(ids[i * 6 + t] < m.vocab_size);
      if (t < len - 1) REQUIRE(ids[i * 6 + t] != m.eos_id);  // an EOS ends the response
      if (t >= len) REQUIRE(ids[i * 6 + t] == m.eos_id);     // padding
    }
  }
  REQUIRE(gen->metrics.count("rollout/log_prob/mean") == 1);
  // The KV cache of the rollout: one slot per sequence (4 < max_num_seqs), each of the longest prompt + 6 tokens.
  REQUIRE(gen->metrics.at("perf/rollout_kv_cache_slots") == 4.0);
  const int64_t longest = std::max(m.prompt_a.size(), m.prompt_b.size());
  REQUIRE(gen->metrics.at("perf/rollout_kv_cache_gb") * (1 << 30) ==
          Approx(4.0 * 2 * 2 * 2 * 8 * (longest + 6) * 4));  // K and V x 2 layers x 2 kv heads x 8 dims, float32
  // Idempotent: the same step id returns the stored rollout, even with other settings.
  SamplingSettings other = Sampling(m);
  other.seed = 999;
  auto again = rank->Generate("step-1", Prompts(m), other, false);
  REQUIRE(again.ok());
  REQUIRE(again->responses.bytes == gen->responses.bytes);

  auto score = rank->Score("step-1");
  INFO(score.status().ToString());
  REQUIRE(score.ok());
  REQUIRE(score->scores.size() == 4);
  for (int i = 0; i < 4; ++i) {
    INFO("'" << score->response_texts[i] << "'");
    REQUIRE(score->scores[i] == Approx(RepeatLetterA(score->response_texts[i])));
    REQUIRE(score->response_texts[i].find(kEos) == std::string::npos);  // special tokens are skipped
  }

  auto actor_lp = rank->ComputeLogProbs("step-1", "actor", 1.0);
  INFO(actor_lp.status().ToString());
  REQUIRE(actor_lp.ok());
  // Rollout and trainer log-probs come from the same kernels.
  REQUIRE(actor_lp->at("training/rollout_probs_diff_max") < 1e-5);
  REQUIRE(actor_lp->at("training/rollout_log_probs_diff_max") < 1e-5);
  {
    // At another temperature they differ: verl's metric compares probabilities (smaller than the log-probs' gap
    // wherever p < 1), ours the log-probs. A step of its own: a step's log-probs are computed once.
    REQUIRE(rank->Generate("hot", Prompts(m), sampling, false).ok());
    auto hot = rank->ComputeLogProbs("hot", "actor", 3.0);
    REQUIRE(hot.ok());
    const double log_max = hot->at("training/rollout_log_probs_diff_max");
    const double log_mean = hot->at("training/rollout_log_probs_diff_mean");
    CHECK(log_max > 0.1);
    CHECK(hot->at("training/rollout_probs_diff_max") < log_max);
    CHECK(hot->at("training/rollout_probs_diff_mean") < log_mean);
    CHECK(hot->at("training/rollout_probs_diff_mean") > 0);
    CHECK(hot->at("training/rollout_probs_diff_std") > 0);
    REQUIRE(rank->ReleaseBatch("hot").ok());
  }
  // The trainer divides the logits by the temperature: 0 is refused by name before anything runs.
  ExpectError(rank->ComputeLogProbs("step-1", "ref", 0.0).status(), absl::StatusCode::kInvalidArgument,
              {"rank 3", "ComputeLogProbs", "temperature 0", "> 0"});
  REQUIRE(rank->ComputeLogProbs("step-1", "ref", 1.0).ok());

  auto adv = rank->ComputeAdvantage("step-1", Grpo());
  INFO(adv.status().ToString());
  REQUIRE(adv.ok());
  // Per-sequence scores summed into critic/rewards.
  double max_score = 0;
  for (double s : score->scores) max_score = std::max(max_score, s);
  REQUIRE(adv->at("critic/rewards/max") == Approx(max_score));
  // A uid group of two scores x != y: mean (x + y) / 2, unbiased std |x - y| / sqrt(2), so the advantages are
  // +-1/sqrt(2) (0 when x == y).
  REQUIRE(adv->at("critic/advantages/max") <= 0.7072);
  REQUIRE(adv->at("critic/advantages/min") >= -0.7072);

  REQUIRE(rank->SaveCheckpoint(ckpt.file("before"), 0, false).ok());
  ExpectError(rank->UpdateActor("step-1", 0.0, 0).status(), absl::StatusCode::kInvalidArgument,
              {"rank 3", "UpdateActor", "temperature 0"});
  auto upd = rank->UpdateActor("step-1", 1.0, 0);
  INFO(upd.status().ToString());
  REQUIRE(upd.ok());
  for (const char* key : {"actor/pg_loss", "actor/grad_norm", "actor/kl_loss", "actor/entropy", "actor/lr"}) {
    INFO(key);
    REQUIRE(upd->count(key) == 1);
  }
  REQUIRE(upd->at("actor/kl_loss") == Approx(0.0).margin(1e-6));  // actor == ref before the first update
  REQUIRE(rank->SaveCheckpoint(ckpt.file("after1"), 1, true).ok());

  // A retried UpdateActor returns the same metrics and does not touch the weights again.
  auto upd2 = rank->UpdateActor("step-1", 1.0, 0);
  REQUIRE(upd2.ok());
  REQUIRE(*upd2 == *upd);
  REQUIRE(rank->SaveCheckpoint(ckpt.file("after2"), 1, false).ok());
  const std::string model_file = "/actor/model_world_size_1_rank_0.safetensors";
  const std::string optim_file = "/actor/optim_world_size_1_rank_0.safetensors";
  REQUIRE(ReadFile(ckpt.file("after1") + model_file).size() > 1000);
  REQUIRE(ReadFile(ckpt.file("after1") + model_file) != ReadFile(ckpt.file("before") + model_file));
  REQUIRE(ReadFile(ckpt.file("after1") + model_file) == ReadFile(ckpt.file("after2") + model_file));
  REQUIRE(ReadFile(ckpt.file("after1") + optim_file) == ReadFile(ckpt.file("after2") + optim_file));
  REQUIRE(ReadFile(ckpt.file("after1") + "/actor/huggingface/tokenizer.json") == ReadFile(m.dir.file("tokenizer.json")));

  // The next step sees the updated actor and the unchanged reference: the KL term is now non-zero.
  REQUIRE(rank->Generate("step-2", Prompts(m), Sampling(m), false).ok());
  REQUIRE(rank->Score("step-2").ok());
  REQUIRE(rank->ComputeLogProbs("step-2", "actor", 1.0).ok());
  REQUIRE(rank->ComputeLogProbs("step-2", "ref", 1.0).ok());
  REQUIRE(rank->ComputeAdvantage("step-2", Grpo()).ok());
  auto upd3 = rank->UpdateActor("step-2", 1.0, 0);
  REQUIRE(upd3.ok());
  REQUIRE(upd3->at("actor/kl_loss") > 0.0);  // exactly 0 while actor == ref

  SECTION("LoadCheckpoint restores the saved weights") {
    REQUIRE(rank->LoadCheckpoint(ckpt.file("after1"), 1).ok());
    REQUIRE(rank->SaveCheckpoint(ckpt.file("restored"), 1, false).ok());
    REQUIRE(ReadFile(ckpt.file("restored") + model_file) == ReadFile(ckpt.file("after1") + model_file));
    // Batches are dropped on restore.
    ExpectError(rank->Score("step-2").status(), absl::StatusCode::kNotFound, {"rank 3", "Score", "step-2"});
  }
  SECTION("ReleaseBatch forgets the step") {
    REQUIRE(rank->ReleaseBatch("step-1").ok());
    ExpectError(rank->ComputeLogProbs("step-1", "actor", 1.0).status(), absl::StatusCode::kNotFound,
                {"rank 3", "ComputeLogProbs", "step-1"});
  }
}

// A sampling seed whose step has a learning signal on `rank`: within some prompt's group the two scores differ.
SamplingSettings SamplingWithSignal(RankInterface& rank, const TinyRankModel& m) {
  SamplingSettings sampling = Sampling(m);
  for (;; ++sampling.seed) {
    REQUIRE(sampling.seed < 200);
    REQUIRE(rank.Generate("probe", Prompts(m), sampling, false).ok());
    auto probe = rank.Score("probe");
    REQUIRE(probe.ok());
    REQUIRE(rank.ReleaseBatch("probe").ok());
    if (probe->scores[0] != probe->scores[1] || probe->scores[2] != probe->scores[3]) return sampling;
  }
}

// The float32 tensors of a safetensors file, concatenated in the file's order.
std::vector<float> SafetensorsFloats(const std::string& path) {
  const std::string bytes = ReadFile(path);
  REQUIRE(bytes.size() > 8);
  uint64_t header = 0;
  std::memcpy(&header, bytes.data(), 8);
  REQUIRE(bytes.size() >= 8 + header);
  std::vector<float> out((bytes.size() - 8 - header) / sizeof(float));
  std::memcpy(out.data(), bytes.data() + 8 + header, out.size() * sizeof(float));
  return out;
}

TEST_CASE("deferring the first mini-batch's old log-probs to the update takes the same update", "[worker][rank]") {
  TinyRankModel m;
  TestDir ckpt("rank_defer_ckpt");
  // Two mini-batches (shuffled, and over two epochs unshuffled, where the second epoch reads the old log-probs the
  // first wrote) and one mini-batch (the old log-prob pass computes nothing); two mini-batches again with passes cut
  // by a token budget of 12 (use_dynamic_bsz: about a row each), padded and packed (use_remove_padding); and the
  // samples of a prompt sharing its run (use_prefix_grouper), with fixed micro-batches and with the budget.
  struct Case {
    int64_t mini_prompts, epochs;
    bool shuffle;
    int64_t budget = 0;
    bool packed = false;
    bool share = false;
  };
  for (const Case& c : {Case{1, 1, true}, Case{1, 2, false}, Case{2, 1, true}, Case{1, 1, true, 12, false},
                        Case{1, 1, true, 12, true}, Case{1, 1, true, 0, false, true},
                        Case{1, 1, true, 12, false, true}}) {
    INFO("mini-batch " << c.mini_prompts << " prompts, " << c.epochs << " epochs, shuffle " << c.shuffle
                       << ", token budget " << c.budget << ", packed " << c.packed << ", shared prompts " << c.share);
    RankConfig config = Config(m.dir.path());
    config.actor.ppo_mini_batch_size = c.mini_prompts;
    config.actor.ppo_epochs = c.epochs;
    config.actor.shuffle = c.shuffle;
    config.actor.ppo_max_token_len = c.budget;
    config.actor.log_prob_max_token_len = c.budget;
    config.actor.ref_log_prob_max_token_len = c.budget;
    config.actor.remove_padding = c.packed;
    config.actor.prefix_grouper = c.share;
    auto plain = LoadedRank(0, config);
    auto deferring = LoadedRank(1, config);
    const SamplingSettings sampling = SamplingWithSignal(*plain, m);
    const uint64_t seed = 7;
    for (RankInterface* r : {plain.get(), deferring.get()}) {
      REQUIRE(r->Generate("s", Prompts(m), sampling, false).ok());
      REQUIRE(r->Score("s").ok());
    }
    std::map<std::string, double> unshared_update;
    if (c.share) {
      // The shared passes give the unshared passes' log-probs (actor and ref) and update on the same samples.
      RankConfig unshared_config = config;
      unshared_config.actor.prefix_grouper = false;
      unshared_config.actor.remove_padding = true;  // packed, each sample's prompt its own
      auto unshared = LoadedRank(2, unshared_config);
      REQUIRE(unshared->Generate("s", Prompts(m), sampling, false).ok());
      REQUIRE(unshared->Score("s").ok());
      for (const char* role : {"actor", "ref"}) {
        INFO(role);
        auto shared_lp = plain->ComputeLogProbs("s", role, 1.0);
        auto unshared_lp = unshared->ComputeLogProbs("s", role, 1.0);
        REQUIRE(shared_lp.ok());
        REQUIRE(unshared_lp.ok());
        if (std::string(role) == "actor") {
          CHECK(shared_lp->at("training/rollout_probs_diff_max") < 1e-5);
          CHECK(shared_lp->at("training/rollout_probs_diff_mean") ==
                Approx(unshared_lp->at("training/rollout_probs_diff_mean")).margin(1e-7));
        }
      }
      REQUIRE(unshared->ComputeAdvantage("s", Grpo()).ok());
      auto up = unshared->UpdateActor("s", 1.0, seed);
      REQUIRE(up.ok());
      unshared_update = *up;
    }
    auto lp_plain = plain->ComputeLogProbs("s", "actor", 1.0);
    auto lp_deferred = deferring->ComputeLogProbs("s", "actor", 1.0, {true, seed});
    INFO(lp_deferred.status().ToString());
    REQUIRE(lp_plain.ok());
    REQUIRE(lp_deferred.ok());
    CHECK(lp_plain->count("perf/old_log_prob_deferred_rows") == 0);
    CHECK(lp_deferred->at("perf/old_log_prob_deferred_rows") == 2.0 * c.mini_prompts);  // n = 2
    for (RankInterface* r : {plain.get(), deferring.get()}) {
      REQUIRE(r->ComputeLogProbs("s", "ref", 1.0).ok());
      REQUIRE(r->ComputeAdvantage("s", Grpo()).ok());
    }
    REQUIRE(plain->SaveCheckpoint(ckpt.file("before"), 0, false).ok());
    auto up_plain = plain->UpdateActor("s", 1.0, seed);
    auto up_deferred = deferring->UpdateActor("s", 1.0, seed);
    INFO(up_deferred.status().ToString());
    REQUIRE(up_plain.ok());
    REQUIRE(up_deferred.ok());
    for (const char* key : {"actor/pg_loss", "actor/grad_norm", "actor/kl_loss", "actor/entropy", "actor/ppo_kl"}) {
      INFO(key << ": " << up_deferred->at(key) << " against " << up_plain->at(key));
      CHECK(up_deferred->at(key) == Approx(up_plain->at(key)).margin(1e-6));
    }
    CHECK(up_plain->at("actor/grad_norm") > 0);  // the step has a signal
    if (c.share && c.budget == 0) {
      // Fewer tokens per pass: each prompt once (a pass's mean over the same fixed micro-batches).
      INFO("packed tokens " << up_plain->at("perf/actor_packed_tokens") << " against "
                            << unshared_update.at("perf/actor_packed_tokens"));
      CHECK(up_plain->at("perf/actor_packed_tokens") < unshared_update.at("perf/actor_packed_tokens"));
    }
    for (const auto& [key, value] : unshared_update) {
      if (key.rfind("actor/", 0) != 0) continue;
      INFO(key << " shared " << up_plain->at(key) << " against unshared " << value);
      CHECK(up_plain->at(key) == Approx(value).margin(1e-6));
    }
    // The deferred rows' old log-probs are real ones: the update reports the rollout comparison over every row, as
    // the plain pass did (rollout and trainer share the kernels on the CPU: within 1e-5).
    CHECK(up_plain->count("training/rollout_probs_diff_max") == 0);
    CHECK(up_deferred->at("training/rollout_probs_diff_max") < 1e-5);
    CHECK(up_deferred->at("training/rollout_probs_diff_mean") ==
          Approx(lp_plain->at("training/rollout_probs_diff_mean")).margin(1e-7));
    // The same weights after the step, up to rounding; and they moved.
    const std::string file = "/actor/model_world_size_1_rank_0.safetensors";
    REQUIRE(plain->SaveCheckpoint(ckpt.file("plain"), 1, false).ok());
    REQUIRE(deferring->SaveCheckpoint(ckpt.file("deferred"), 1, false).ok());
    const std::vector<float> before = SafetensorsFloats(ckpt.file("before") + file);
    const std::vector<float> a = SafetensorsFloats(ckpt.file("plain") + file);
    const std::vector<float> b = SafetensorsFloats(ckpt.file("deferred") + file);
    REQUIRE(a.size() == b.size());
    REQUIRE(a.size() == before.size());
    double diff = 0, moved = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      diff = std::max(diff, static_cast<double>(std::abs(a[i] - b[i])));
      moved = std::max(moved, static_cast<double>(std::abs(a[i] - before[i])));
    }
    CAPTURE(diff, moved);
    CHECK(moved > 1e-5);  // lr 1e-4
    CHECK(diff <= 1e-6);
  }
  // The update must come with the seed that chose the deferred rows.
  auto rank = LoadedRank(2, Config(m.dir.path()));
  REQUIRE(rank->Generate("t", Prompts(m), Sampling(m), false).ok());
  REQUIRE(rank->Score("t").ok());
  REQUIRE(rank->ComputeLogProbs("t", "actor", 1.0, {true, 5}).ok());
  REQUIRE(rank->ComputeLogProbs("t", "ref", 1.0).ok());
  REQUIRE(rank->ComputeAdvantage("t", Grpo()).ok());
  ExpectError(rank->UpdateActor("t", 1.0, 6).status(), absl::StatusCode::kFailedPrecondition,
              {"rank 2", "UpdateActor", "seed 5", "seed 6"});
}

TEST_CASE("CpuRank: recompute_num_layers checkpoints only the first layers and takes the same update",
          "[worker][rank]") {
  TinyRankModel m;
  const int64_t layers = testing::TinyDecoderConfig().num_hidden_layers;
  std::vector<std::map<std::string, double>> updates;
  // Every layer recomputed (verl's behaviour), the first one only, none; the same samples and seed each time.
  for (int64_t n : {int64_t{-1}, int64_t{1}, int64_t{0}}) {
    CAPTURE(n);
    RankConfig config = Config(m.dir.path());
    config.actor.gradient_checkpointing = true;
    config.actor.recompute_num_layers = n;
    auto rank = LoadedRank(0, config);
    REQUIRE(rank->Generate("s", Prompts(m), SamplingWithSignal(*rank, m), false).ok());
    REQUIRE(rank->Score("s").ok());
    REQUIRE(rank->ComputeLogProbs("s", "actor", 1.0).ok());
    REQUIRE(rank->ComputeLogProbs("s", "ref", 1.0).ok());
    REQUIRE(rank->ComputeAdvantage("s", Grpo()).ok());
    auto up = rank->UpdateActor("s", 1.0, 7);
    INFO(up.status().ToString());
    REQUIRE(up.ok());
    CHECK(up->at("perf/actor_recomputed_layers") == static_cast<double>(n < 0 ? layers : n));
    updates.push_back(*up);
  }
  CHECK(updates[0].at("actor/grad_norm") > 0);
  for (const char* key : {"actor/pg_loss", "actor/grad_norm", "actor/kl_loss", "actor/entropy"}) {
    INFO(key);
    CHECK(updates[1].at(key) == Approx(updates[0].at(key)).margin(1e-6));
    CHECK(updates[2].at(key) == Approx(updates[0].at(key)).margin(1e-6));
  }
}

TEST_CASE("CpuRank: calls out of order fail with the rank and stage", "[worker][rank]") {
  TinyRankModel m;
  auto rank = CreateCpuRank(5);
  ExpectError(rank->LoadModel().status(), absl::StatusCode::kFailedPrecondition, {"rank 5", "LoadModel"});
  ExpectError(rank->Generate("s", Prompts(m), Sampling(m), false).status(), absl::StatusCode::kFailedPrecondition,
              {"rank 5", "Generate", "LoadModel first"});
  ExpectError(rank->Configure(Config(m.dir.path(), {"actor", "reward_model"})), absl::StatusCode::kInvalidArgument,
              {"rank 5", "'reward_model'"});

  REQUIRE(rank->Configure(Config(m.dir.path(), {"actor", "rollout"})).ok());
  ExpectError(rank->Score("s").status(), absl::StatusCode::kFailedPrecondition, {"rank 5", "Score"});
  REQUIRE(rank->LoadModel().ok());
  ExpectError(rank->Score("nope").status(), absl::StatusCode::kNotFound, {"rank 5", "Score", "'nope'"});
  ExpectError(rank->UpdateActor("nope", 1.0, 0).status(), absl::StatusCode::kNotFound, {"rank 5", "UpdateActor"});

  std::vector<PromptInput> bad = Prompts(m);
  bad[1].token_ids.clear();
  ExpectError(rank->Generate("s", bad, Sampling(m), false).status(), absl::StatusCode::kInvalidArgument,
              {"rank 5", "Generate", "prompt 1"});
  // Token ids outside the model's vocabulary are refused before they reach the embedding (on a GPU an
  // out-of-range index is a device-side assert that breaks the CUDA context), naming prompt and position.
  bad = Prompts(m);
  bad[0].token_ids.push_back(m.vocab_size + 5);
  ExpectError(rank->Generate("s", bad, Sampling(m), false).status(), absl::StatusCode::kInvalidArgument,
              {"rank 5", "Generate", "prompt 0", "token id " + std::to_string(m.vocab_size + 5),
               "outside the vocabulary"});
  bad = Prompts(m);
  bad[1].token_ids[1] = -3;
  ExpectError(rank->Generate("s", bad, Sampling(m), false).status(), absl::StatusCode::kInvalidArgument,
              {"rank 5", "prompt 1", "token id -3 at position 1"});
  SamplingSettings bad_pad = Sampling(m);
  bad_pad.pad_token_id = static_cast<int32_t>(m.vocab_size);
  ExpectError(rank->Generate("s", Prompts(m), bad_pad, false).status(), absl::StatusCode::kInvalidArgument,
              {"rank 5", "pad_token_id"});
  SamplingSettings bad_p = Sampling(m);
  bad_p.top_p = 1.5;
  ExpectError(rank->Generate("s", Prompts(m), bad_p, false).status(), absl::StatusCode::kInvalidArgument,
              {"rank 5", "top_p must lie in (0, 1]", "got 1.5"});
  // 0, what a request without top_p carries, would have decoded greedily unasked.
  bad_p.top_p = 0;
  ExpectError(rank->Generate("s", Prompts(m), bad_p, false).status(), absl::StatusCode::kInvalidArgument,
              {"rank 5", "top_p must lie in (0, 1]", "got 0"});
  SamplingSettings cold = Sampling(m);
  cold.do_sample = true;
  cold.temperature = 0;
  ExpectError(rank->Generate("s", Prompts(m), cold, false).status(), absl::StatusCode::kInvalidArgument,
              {"rank 5", "temperature 0 with do_sample"});
  cold.temperature = std::numeric_limits<double>::quiet_NaN();
  ExpectError(rank->Generate("s", Prompts(m), cold, false).status(), absl::StatusCode::kInvalidArgument,
              {"rank 5", "bad sampling settings", "temperature nan"});
  cold.temperature = -0.5;
  ExpectError(rank->Generate("s", Prompts(m), cold, false).status(), absl::StatusCode::kInvalidArgument,
              {"rank 5", "bad sampling settings", "temperature -0.5"});

  REQUIRE(rank->Generate("s", Prompts(m), Sampling(m), false).ok());
  ExpectError(rank->ComputeAdvantage("s", Grpo()).status(), absl::StatusCode::kFailedPrecondition,
              {"rank 5", "ComputeAdvantage", "scored"});
  REQUIRE(rank->Score("s").ok());
  ExpectError(rank->ComputeAdvantage("s", Estimator("gae")).status(), absl::StatusCode::kFailedPrecondition,
              {"rank 5", "ComputeAdvantage", "values"});
  ExpectError(rank->ComputeAdvantage("s", Estimator("nope")).status(), absl::StatusCode::kInvalidArgument,
              {"rank 5", "ComputeAdvantage", "rloo"});
  REQUIRE(rank->ComputeAdvantage("s", Grpo()).ok());
  ExpectError(rank->UpdateActor("s", 1.0, 0).status(), absl::StatusCode::kFailedPrecondition,
              {"rank 5", "UpdateActor", "old log-probs"});
  ExpectError(rank->ComputeLogProbs("s", "ref", 1.0).status(), absl::StatusCode::kFailedPrecondition,
              {"rank 5", "ComputeLogProbs", "'ref'"});
  ExpectError(rank->ComputeLogProbs("s", "critic", 1.0).status(), absl::StatusCode::kFailedPrecondition,
              {"rank 5", "ComputeLogProbs", "'critic'"});
  REQUIRE(rank->ComputeLogProbs("s", "actor", 1.0).ok());
  // use_kl_loss is on but this rank has no ref role, so no ref log-probs: the update says so.
  ExpectError(rank->UpdateActor("s", 1.0, 0).status(), absl::StatusCode::kFailedPrecondition,
              {"rank 5", "UpdateActor", "ref log-probs"});
}

// A PPO rank: actor, rollout, ref and a critic started from the same tiny model.
RankConfig PpoConfig(const std::string& model_path) {
  RankConfig c = Config(model_path, {"actor", "rollout", "ref", "critic"});
  c.actor.use_kl_loss = false;
  c.seed = 17;
  c.critic.model_path = model_path;
  c.critic.lr = 1e-3;
  c.critic.weight_decay = 0.0;
  c.critic.ppo_mini_batch_size = 1;  // prompts: two optimizer steps over the 4 sequences
  c.critic.ppo_micro_batch_size_per_gpu = 2;
  c.critic.forward_micro_batch_size_per_gpu = 3;
  return c;
}

// GAE with gamma = lam = 1 and the k1 KL penalty in the reward.
AdvantageSettings GaeWithKl() {
  AdvantageSettings a;
  a.estimator = "gae";
  a.gamma = 1.0;
  a.lam = 1.0;
  a.use_kl_in_reward = true;
  a.kl_coef = 0.1;
  a.kl_penalty = "kl";
  return a;
}

// Generate, Score, actor and ref log-probs, values and GAE advantages for `step`; returns the advantage metrics.
Metrics PpoPrepare(RankInterface& rank, const TinyRankModel& m, const std::string& step, GenerateOutput* gen_out,
                   ScoreOutput* score_out) {
  auto gen = rank.Generate(step, Prompts(m), Sampling(m), false);
  INFO(gen.status().ToString());
  REQUIRE(gen.ok());
  auto score = rank.Score(step);
  INFO(score.status().ToString());
  REQUIRE(score.ok());
  REQUIRE(rank.ComputeLogProbs(step, "actor", 1.0).ok());
  REQUIRE(rank.ComputeLogProbs(step, "ref", 1.0).ok());
  auto values = rank.ComputeValues(step);
  INFO(values.status().ToString());
  REQUIRE(values.ok());
  auto adv = rank.ComputeAdvantage(step, GaeWithKl());
  INFO(adv.status().ToString());
  REQUIRE(adv.ok());
  if (gen_out != nullptr) *gen_out = *gen;
  if (score_out != nullptr) *score_out = *score;
  return *adv;
}

TEST_CASE("CpuRank runs a PPO step with a critic through the torch-free interface", "[worker][rank]") {
  TinyRankModel m;
  TestDir ckpt("rank_ppo_ckpt");
  const RankConfig config = PpoConfig(m.dir.path());
  auto rank = LoadedRank(0, config);

  REQUIRE(rank->Generate("ppo-1", Prompts(m), Sampling(m), false).ok());
  auto score = rank->Score("ppo-1");
  REQUIRE(score.ok());
  REQUIRE(rank->ComputeLogProbs("ppo-1", "actor", 1.0).ok());
  REQUIRE(rank->ComputeLogProbs("ppo-1", "ref", 1.0).ok());
  // The critic update needs the values (and the returns) first.
  ExpectError(rank->UpdateCritic("ppo-1", 0).status(), absl::StatusCode::kFailedPrecondition,
              {"rank 0", "UpdateCritic", "values"});
  auto values = rank->ComputeValues("ppo-1");
  INFO(values.status().ToString());
  REQUIRE(values.ok());
  // Values but no returns yet.
  ExpectError(rank->UpdateCritic("ppo-1", 0).status(), absl::StatusCode::kFailedPrecondition,
              {"rank 0", "UpdateCritic", "returns"});

  auto adv = rank->ComputeAdvantage("ppo-1", GaeWithKl());
  INFO(adv.status().ToString());
  REQUIRE(adv.ok());
  for (const auto& [k, v] : *adv) UNSCOPED_INFO(k << " = " << v);
  for (const char* key : {"actor/reward_kl_penalty", "actor/reward_kl_penalty_coeff", "critic/values/mean",
                          "critic/values/max", "critic/values/min", "critic/vf_explained_var",
                          "critic/advantages/mean", "critic/returns/max", "critic/returns/min"}) {
    INFO(key);
    REQUIRE(adv->count(key) == 1);
  }
  // Actor and ref are the same weights before the first update: no KL, so the rewards are the scores.
  REQUIRE(adv->at("actor/reward_kl_penalty") == Approx(0.0).margin(1e-7));
  REQUIRE(adv->at("actor/reward_kl_penalty_coeff") == 0.1);
  // gamma = lam = 1 and a single reward on the last token: every token's return is its sequence's score.
  const auto [min_score, max_score] = std::minmax_element(score->scores.begin(), score->scores.end());
  REQUIRE(adv->at("critic/returns/max") == Approx(*max_score).margin(1e-6));
  REQUIRE(adv->at("critic/returns/min") == Approx(*min_score).margin(1e-6));
  // GAE advantages are whitened over the valid tokens.
  REQUIRE(adv->at("critic/advantages/mean") == Approx(0.0).margin(1e-5));
  // A freshly initialised head (N(0, 0.02) over 32 unit-scale features) gives small values that vary by token.
  REQUIRE(std::abs(adv->at("critic/values/mean")) < 0.5);
  REQUIRE(adv->at("critic/values/max") > adv->at("critic/values/min"));
  REQUIRE(adv->at("critic/vf_explained_var") <= 1.0);

  REQUIRE(rank->SaveCheckpoint(ckpt.file("before"), 0, false).ok());
  auto crit = rank->UpdateCritic("ppo-1", 0);
  INFO(crit.status().ToString());
  REQUIRE(crit.ok());
  for (const char* key : {"critic/vf_loss", "critic/vf_clipfrac", "critic/vpred_mean", "critic/grad_norm",
                          "critic/lr"}) {
    INFO(key);
    REQUIRE(crit->count(key) == 1);
  }
  REQUIRE(crit->at("critic/vf_loss") > 0.0);
  REQUIRE(crit->at("critic/lr") == 1e-3);
  auto upd = rank->UpdateActor("ppo-1", 1.0, 0);
  INFO(upd.status().ToString());
  REQUIRE(upd.ok());
  REQUIRE(upd->count("actor/pg_loss") == 1);
  REQUIRE(rank->SaveCheckpoint(ckpt.file("after"), 1, false).ok());

  // A retried UpdateCritic returns the stored metrics and leaves the critic alone.
  auto crit2 = rank->UpdateCritic("ppo-1", 0);
  REQUIRE(crit2.ok());
  REQUIRE(*crit2 == *crit);
  REQUIRE(rank->SaveCheckpoint(ckpt.file("after2"), 1, false).ok());
  const std::string model_file = "/critic/model_world_size_1_rank_0.safetensors";
  const std::string optim_file = "/critic/optim_world_size_1_rank_0.safetensors";
  const std::string extra_file = "/critic/extra_state_world_size_1_rank_0.json";
  REQUIRE(ReadFile(ckpt.file("after") + model_file).size() > 1000);
  REQUIRE(ReadFile(ckpt.file("after") + optim_file).size() > 1000);
  REQUIRE_FALSE(ReadFile(ckpt.file("after") + extra_file).empty());
  REQUIRE(ReadFile(ckpt.file("after") + model_file) != ReadFile(ckpt.file("before") + model_file));
  REQUIRE(ReadFile(ckpt.file("after") + model_file) == ReadFile(ckpt.file("after2") + model_file));
  REQUIRE(ReadFile(ckpt.file("after") + optim_file) == ReadFile(ckpt.file("after2") + optim_file));
  // The critic is saved beside the actor, not instead of it.
  REQUIRE(ReadFile(ckpt.file("after") + "/actor/model_world_size_1_rank_0.safetensors").size() > 1000);

  // The next step on the trained rank: the actor has moved away from the reference, so the KL penalty is non-zero.
  GenerateOutput gen2;
  const Metrics adv2 = PpoPrepare(*rank, m, "ppo-2", &gen2, nullptr);
  REQUIRE(std::abs(adv2.at("actor/reward_kl_penalty")) > 1e-7);

  // A fresh rank restored from the checkpoint generates the same responses and computes the same values.
  auto restored = LoadedRank(0, config);
  REQUIRE(restored->LoadCheckpoint(ckpt.file("after"), 1).ok());
  REQUIRE(restored->SaveCheckpoint(ckpt.file("restored"), 1, false).ok());
  REQUIRE(ReadFile(ckpt.file("restored") + model_file) == ReadFile(ckpt.file("after") + model_file));
  REQUIRE(ReadFile(ckpt.file("restored") + optim_file) == ReadFile(ckpt.file("after") + optim_file));
  GenerateOutput gen2_restored;
  const Metrics adv2_restored = PpoPrepare(*restored, m, "ppo-2", &gen2_restored, nullptr);
  REQUIRE(gen2_restored.responses.bytes == gen2.responses.bytes);
  for (const char* key : {"critic/values/mean", "critic/values/max", "critic/values/min", "critic/vf_explained_var",
                          "critic/advantages/max"}) {
    INFO(key << ": " << adv2.at(key) << " vs " << adv2_restored.at(key));
    REQUIRE(adv2_restored.at(key) == Approx(adv2.at(key)).epsilon(1e-6).margin(1e-7));
  }
  // Both critics then take the same update.
  auto crit_a = rank->UpdateCritic("ppo-2", 3);
  auto crit_b = restored->UpdateCritic("ppo-2", 3);
  REQUIRE(crit_a.ok());
  REQUIRE(crit_b.ok());
  REQUIRE(crit_b->at("critic/vf_loss") == Approx(crit_a->at("critic/vf_loss")).epsilon(1e-6));
  REQUIRE(crit_b->at("critic/grad_norm") == Approx(crit_a->at("critic/grad_norm")).epsilon(1e-5));
}

TEST_CASE("CpuRank: critic calls without a critic fail with the rank and stage", "[worker][rank]") {
  TinyRankModel m;
  auto rank = LoadedRank(6, Config(m.dir.path(), {"actor", "rollout"}));
  ExpectError(rank->ComputeValues("s").status(), absl::StatusCode::kNotFound, {"rank 6", "ComputeValues", "'s'"});
  REQUIRE(rank->Generate("s", Prompts(m), Sampling(m), false).ok());
  REQUIRE(rank->Score("s").ok());
  ExpectError(rank->ComputeValues("s").status(), absl::StatusCode::kFailedPrecondition,
              {"rank 6", "ComputeValues", "critic"});
  REQUIRE(rank->ComputeAdvantage("s", Grpo()).ok());
  ExpectError(rank->UpdateCritic("s", 0).status(), absl::StatusCode::kFailedPrecondition,
              {"rank 6", "UpdateCritic", "critic"});
  // A critic whose model directory does not exist fails LoadModel, naming the directory.
  RankConfig bad = PpoConfig(m.dir.path());
  bad.critic.model_path = m.dir.file("no_such_critic");
  auto other = CreateCpuRank(7);
  REQUIRE(other->Configure(bad).ok());
  ExpectError(other->LoadModel().status(), absl::StatusCode::kNotFound, {"rank 7", "LoadModel/critic", "no_such_critic"});
}

TEST_CASE("CpuRank: ReMax scores a greedy baseline per prompt", "[worker][rank]") {
  TinyRankModel m;
  auto rank = LoadedRank(2, Config(m.dir.path(), {"actor", "rollout"}));
  // The greedy responses and their scores, by hand: one greedy sample per prompt.
  SamplingSettings greedy = Sampling(m);
  greedy.do_sample = false;
  greedy.n = 1;
  REQUIRE(rank->Generate("greedy", Prompts(m), greedy, false).ok());
  auto base = rank->Score("greedy");
  REQUIRE(base.ok());
  REQUIRE(base->scores.size() == 2);

  auto gen = rank->Generate("remax", Prompts(m), Sampling(m), /*greedy_baseline=*/true);
  INFO(gen.status().ToString());
  REQUIRE(gen.ok());
  auto score = rank->Score("remax");
  INFO(score.status().ToString());
  REQUIRE(score.ok());
  REQUIRE(score->scores.size() == 4);  // the baseline is scored too, but not returned as a sample
  auto adv = rank->ComputeAdvantage("remax", Estimator("remax"));
  INFO(adv.status().ToString());
  REQUIRE(adv.ok());
  // Every token of sample i gets its return (the score) minus its prompt's greedy score.
  double max_adv = -1e9, min_adv = 1e9;
  for (int i = 0; i < 4; ++i) {
    const double a = score->scores[i] - base->scores[i / 2];
    UNSCOPED_INFO("sample " << i << ": score " << score->scores[i] << ", baseline " << base->scores[i / 2]);
    max_adv = std::max(max_adv, a);
    min_adv = std::min(min_adv, a);
  }
  REQUIRE(adv->at("critic/advantages/max") == Approx(max_adv).margin(1e-6));
  REQUIRE(adv->at("critic/advantages/min") == Approx(min_adv).margin(1e-6));

  // The baseline does not disturb the sampled rollout.
  auto plain = rank->Generate("plain", Prompts(m), Sampling(m), false);
  REQUIRE(plain.ok());
  REQUIRE(plain->responses.bytes == gen->responses.bytes);
  REQUIRE(rank->Score("plain").ok());
  ExpectError(rank->ComputeAdvantage("plain", Estimator("remax")).status(), absl::StatusCode::kFailedPrecondition,
              {"rank 2", "ComputeAdvantage", "baseline"});
}

}  // namespace
}  // namespace verl
