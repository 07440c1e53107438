// Data parallelism at the rank level: 1, 2 and 4 CpuRanks joined by the host communicator on loopback run the same
// global step (the same prompts, split as the controller splits them) and must agree on the gradient (its norm), the
// losses and the updated weights within float tolerance; a rank that stops answering turns into an error naming it.

#include <catch2/catch.hpp>
#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/worker/rank/host_group.h"
#include "tests/worker/rank/rank_fixtures.h"
#include "worker/model/safetensors.h"
#include "worker/rank/rank_interface.h"

namespace verl {
namespace {

using namespace rank_testing;  // NOLINT: the shared fixtures

constexpr int kPrompts = 8;
constexpr int kMiniPrompts = 4;  // two optimizer steps per update

// Eight prompts of equal length (so every split pads alike), with distinct ground truths.
std::vector<PromptInput> GlobalPrompts(const TinyRankModel& m) {
  std::vector<PromptInput> out;
  for (int i = 0; i < kPrompts; ++i) {
    const bool a = i % 2 == 0;
    out.push_back(
        {a ? m.prompt_a : m.prompt_b, absl::StrCat("p", i), "verl_cpp/repeat_letter", a ? "a" : "b", "{}", i});
  }
  return out;
}

// The controller's assignment (job_runner.cc, AssignPrompts): each mini-batch of kMiniPrompts prompts is split evenly
// over the ranks.
std::vector<int> PromptsOfRank(int rank, int world) {
  std::vector<int> out;
  const int share = kMiniPrompts / world;
  for (int i = 0; i < kPrompts; ++i) {
    if ((i % kMiniPrompts) / share == rank) out.push_back(i);
  }
  return out;
}

struct StepResult {
  Metrics advantage, critic, actor;
  std::map<std::string, std::vector<float>> weights;  // the actor after the update, from group rank 0's checkpoint
  std::map<std::string, std::vector<float>> moments;  // its AdamW moments (gathered to rank 0 when sharded)
  std::vector<int64_t> response_tokens;               // each rank's generated response tokens
};

std::map<std::string, std::vector<float>> ReadWeights(const std::string& path) {
  auto file = SafetensorsFile::Open(path);
  INFO(file.status().ToString());
  REQUIRE(file.ok());
  std::map<std::string, std::vector<float>> out;
  for (const std::string& name : file->names()) {
    auto view = file->Get(name);
    REQUIRE(view.ok());
    std::vector<float>& values = out[name];
    if (view->dtype == DType::kBFloat16) {  // bf16 training's weights: the upper halves of float32s
      const uint16_t* data = static_cast<const uint16_t*>(view->data);
      for (int64_t i = 0; i < view->numel(); ++i) values.push_back(std::bit_cast<float>(uint32_t{data[i]} << 16));
      continue;
    }
    REQUIRE(view->dtype == DType::kFloat32);
    const float* data = static_cast<const float*>(view->data);
    values.assign(data, data + view->numel());
  }
  return out;
}

// One PPO/GRPO step of the global batch on `world` ranks.
// With `resume`, every rank first loads that checkpoint directory; the result is saved under "<tag>w<world>".
// `sampling` replaces Sampling(m).
StepResult RunStep(const TinyRankModel& m, int world, const RankConfig& config, const AdvantageSettings& adv,
                   const TestDir& out, const std::string& resume = "", const std::string& tag = "",
                   const std::optional<SamplingSettings>& sampling = std::nullopt) {
  std::vector<std::unique_ptr<RankInterface>> ranks;
  for (int r = 0; r < world; ++r) ranks.push_back(LoadedRank(r, config));
  auto comms = MakeGroup(world, absl::Seconds(30));
  for (int r = 0; r < world && world > 1; ++r) {
    REQUIRE(ranks[r]->SetCommunicator(std::move(comms[r]), absl::Seconds(30)).ok());
  }
  const std::vector<PromptInput> all = GlobalPrompts(m);
  const bool critic = adv.estimator == "gae";
  std::vector<StepResult> results(world);
  std::vector<absl::Status> errors(world);
  std::vector<int64_t> tokens(world, 0);
  OnEveryRank(world, [&](int r) {
    RankInterface& rank = *ranks[r];
    std::vector<PromptInput> mine;
    for (int i : PromptsOfRank(r, world)) mine.push_back(all[i]);
    auto fail = [&](const absl::Status& s) {
      errors[r] = s;
      rank.AbortCommunicator();  // as the worker service does: peers stop waiting
    };
    const std::string step = "dp-1";
    if (!resume.empty()) {
      if (auto s = rank.LoadCheckpoint(resume, 1); !s.ok()) return fail(s);
    }
    auto g = rank.Generate(step, mine, sampling.value_or(Sampling(m)), false);
    if (!g.ok()) return fail(g.status());
    for (const int32_t len : g->response_lengths) tokens[r] += len;
    if (auto s = rank.Score(step).status(); !s.ok()) return fail(s);
    if (auto s = rank.ComputeLogProbs(step, "actor", 1.0).status(); !s.ok()) return fail(s);
    if (auto s = rank.ComputeLogProbs(step, "ref", 1.0).status(); !s.ok()) return fail(s);
    if (critic) {
      if (auto s = rank.ComputeValues(step).status(); !s.ok()) return fail(s);
    }
    auto a = rank.ComputeAdvantage(step, adv);
    if (!a.ok()) return fail(a.status());
    results[r].advantage = *a;
    if (critic) {
      auto c = rank.UpdateCritic(step, 5);
      if (!c.ok()) return fail(c.status());
      results[r].critic = *c;
    }
    auto u = rank.UpdateActor(step, 1.0, 5);
    if (!u.ok()) return fail(u.status());
    results[r].actor = *u;
    if (auto s = rank.SaveCheckpoint(out.file(absl::StrCat(tag, "w", world)), 1, false); !s.ok()) return fail(s);
  });
  for (const absl::Status& s : errors) {
    INFO(s.ToString());
    REQUIRE(s.ok());
  }
  // Every rank reports the same batch-wide numbers.
  for (int r = 1; r < world; ++r) {
    for (const auto& [key, value] : results[0].actor) {
      if (key.find("clipfrac") != std::string::npos || key == "actor/ppo_kl") continue;  // micro-batch means
      if (key.rfind("perf/", 0) == 0) continue;  // this rank's own memory
      INFO(key);
      REQUIRE(results[r].actor.at(key) == Approx(value).epsilon(1e-6));
    }
  }
  const std::string saved = out.file(absl::StrCat(tag, "w", world)) + "/actor/";
  results[0].weights = ReadWeights(saved + "model_world_size_1_rank_0.safetensors");
  results[0].moments = ReadWeights(saved + "optim_world_size_1_rank_0.safetensors");
  results[0].response_tokens = tokens;
  return results[0];
}

// With `sharded_state`, `many` must also hold about 1/world of `one`'s optimizer state (ZeRO-1).
void RequireSameStep(const StepResult& one, const StepResult& many, int world, bool sharded_state = true) {
  INFO("world size " << world);
  for (const char* key : {"critic/advantages/mean", "critic/advantages/max", "critic/advantages/min",
                          "critic/returns/mean", "critic/rewards/mean"}) {
    INFO(key);
    REQUIRE(many.advantage.at(key) == Approx(one.advantage.at(key)).epsilon(1e-5).margin(1e-6));
  }
  // The norm of the summed gradient (before clipping) and the mini-batch losses: gradients reduced over the ranks
  // with globally normalised losses equal the one-rank gradients.
  for (const char* key : {"actor/grad_norm", "actor/pg_loss", "actor/entropy", "actor/kl_loss"}) {
    INFO(key);
    REQUIRE(many.actor.at(key) == Approx(one.actor.at(key)).epsilon(1e-4).margin(1e-7));
  }
  for (const auto& [key, value] : one.critic) {
    if (key == "critic/vf_clipfrac" || key == "critic/vpred_mean") continue;  // micro-batch means
    if (key.rfind("perf/", 0) == 0) continue;                                  // this rank's own passes
    INFO(key);
    REQUIRE(many.critic.at(key) == Approx(value).epsilon(1e-4).margin(1e-7));
  }
  auto max_diff = [](const std::map<std::string, std::vector<float>>& a,
                     const std::map<std::string, std::vector<float>>& b) {
    REQUIRE(a.size() == b.size());
    double diff = 0;
    for (const auto& [name, w] : a) {
      const std::vector<float>& v = b.at(name);
      REQUIRE(v.size() == w.size());
      for (size_t i = 0; i < w.size(); ++i) diff = std::max(diff, std::abs(double(v[i]) - double(w[i])));
    }
    return diff;
  };
  REQUIRE(max_diff(one.weights, many.weights) < 1e-5);
  // The optimizer state (sharded over the ranks by default, gathered for the checkpoint) is the same too.
  REQUIRE(max_diff(one.moments, many.moments) < 1e-5);
  if (!sharded_state) return;
  // ZeRO-1: each rank holds about 1/world of the moments.
  const double state_one = one.actor.at("perf/actor_optimizer_state_gb");
  REQUIRE(state_one > 0);
  REQUIRE(many.actor.at("perf/actor_optimizer_state_gb") < state_one * (1.0 / world + 0.15));
}

// Places a critic beside the actor (PPO), with the same optimizer settings the actor's comparisons use.
void AddCritic(RankConfig& config, const TinyRankModel& m) {
  config.roles = {"actor", "rollout", "ref", "critic"};
  config.critic.model_path = m.dir.path();
  config.critic.lr = 1e-2;
  config.critic.eps = 1e-3;
  config.critic.ppo_mini_batch_size = kMiniPrompts;
  config.critic.ppo_micro_batch_size_per_gpu = 1;
  config.seed = 3;
}

TEST_CASE("data parallel: 1, 2 and 4 ranks take the same update", "[worker][rank][dp]") {
  TinyRankModel m;
  REQUIRE(m.prompt_a.size() == m.prompt_b.size());
  TestDir out("dp_rank");
  RankConfig config = Config(m.dir.path());
  config.actor.lr = 1e-2;
  // Adam divides by sqrt(v) + eps: with the default 1e-8 a gradient element that is ~0 (and so differs between
  // summation orders only in its sign) moves its weight by a full lr either way. A larger eps keeps the weights'
  // difference proportional to the gradients' difference, which is what this test compares.
  config.actor.eps = 1e-3;
  config.actor.ppo_mini_batch_size = kMiniPrompts;
  config.actor.ppo_micro_batch_size_per_gpu = 1;
  config.actor.entropy_coeff = 0.01;
  config.actor.loss_agg_mode = "seq-mean-token-mean";

  SECTION("GRPO with a KL loss") {
    const StepResult one = RunStep(m, 1, config, Grpo(), out);
    REQUIRE(one.actor.at("actor/grad_norm") > 0);
    for (int world : {2, 4}) RequireSameStep(one, RunStep(m, world, config, Grpo(), out), world);
  }
  SECTION("GRPO with parameters, gradients and optimizer state sharded (ZeRO-3)") {
    const StepResult one = RunStep(m, 1, config, Grpo(), out);
    config.actor.shard_parameters = true;
    for (int world : {2, 4}) {
      const StepResult many = RunStep(m, world, config, Grpo(), out);
      RequireSameStep(one, many, world);
      // Each rank holds about 1/world of the parameters (units padded to a multiple of world).
      INFO("world " << world);
      REQUIRE(many.actor.at("perf/actor_parameters_gb") < one.actor.at("perf/actor_parameters_gb") * (1.0 / world + 0.05));
    }
    // The rollout gathering one layer per decoding step instead of the whole actor: the same tokens and update.
    config.actor.rollout_gather_layer_by_layer = true;
    RequireSameStep(one, RunStep(m, 2, config, Grpo(), out, "", "layered"), 2);
    config.actor.rollout_gather_layer_by_layer = false;
    // A checkpoint (one-rank layout, whatever the sharding) resumes into sharded ranks: each takes its slices of the
    // parameters and of the moments, and the next step matches the unsharded one.
    config.actor.shard_parameters = false;
    const StepResult next_one = RunStep(m, 1, config, Grpo(), out, out.file("w1"), "next");
    config.actor.shard_parameters = true;
    RequireSameStep(next_one, RunStep(m, 2, config, Grpo(), out, out.file("w1"), "next"), 2);
  }
  SECTION("token-budget passes (use_dynamic_bsz) under ZeRO-3, with a critic") {
    // Each rank cuts its rows into passes by tokens; their responses differ in length, so the ranks would make
    // different numbers of passes, but every pass of a sharded model gathers its layers: they agree on the largest
    // count first. The critic cuts its passes by tokens too. Same step as one rank with fixed micro-batches.
    AddCritic(config, m);
    const AdvantageSettings adv = Estimator("gae");
    // Many EOS ids, so that responses end at different lengths.
    SamplingSettings sampling = Sampling(m);
    for (int32_t id = 3; id < m.vocab_size; id += 5) sampling.eos_token_ids.push_back(id);
    const StepResult one = RunStep(m, 1, config, adv, out, "", "", sampling);
    config.actor.shard_parameters = true;
    // Budgets of two prompts plus 6 response tokens: two sequences share a pass only when both responses are short
    // (at most 3 tokens), so the ranks' pass counts follow their responses' lengths.
    const int64_t prompt = static_cast<int64_t>(m.prompt_a.size());
    config.actor.ppo_max_token_len = 2 * prompt + 6;
    config.actor.log_prob_max_token_len = 2 * prompt + 6;
    config.actor.ref_log_prob_max_token_len = 2 * prompt + 8;
    config.critic.ppo_max_token_len = 2 * prompt + 6;
    config.critic.forward_max_token_len = 3 * prompt + 9;
    RequireSameStep(one, RunStep(m, 2, config, adv, out, "", "dynamic", sampling), 2);
  }
  SECTION("shared prompts (use_prefix_grouper) by token budget under ZeRO-3") {
    // Each rank's actor and ref passes run a prompt once for its samples, its rows in one pass with the prompt counted
    // once; the ranks' responses end at different lengths, so they make different numbers of passes and, every pass
    // of a sharded model gathering its layers, first agree on the largest count. Same step as one rank with fixed
    // micro-batches and nothing shared.
    SamplingSettings sampling = Sampling(m);
    for (int32_t id = 3; id < m.vocab_size; id += 5) sampling.eos_token_ids.push_back(id);
    const StepResult one = RunStep(m, 1, config, Grpo(), out, "", "", sampling);
    config.actor.prefix_grouper = true;
    config.actor.shard_parameters = true;
    // One prompt and its two samples' responses (up to 6 tokens each) fit a pass; two prompts only when their
    // responses are short.
    const int64_t prompt = static_cast<int64_t>(m.prompt_a.size());
    config.actor.ppo_max_token_len = prompt + 16;
    config.actor.log_prob_max_token_len = prompt + 16;
    config.actor.ref_log_prob_max_token_len = prompt + 16;
    const StepResult shared = RunStep(m, 2, config, Grpo(), out, "", "grouped", sampling);
    RequireSameStep(one, shared, 2);
    // The packed passes ran (their mean token count is reported).
    REQUIRE(shared.actor.count("perf/actor_packed_tokens") == 1);
    REQUIRE(shared.actor.at("perf/actor_packed_tokens") > 0);
  }
  SECTION("REINFORCE++ (advantages whitened over the whole batch), token-mean") {
    // Responses of different lengths, so that the ranks hold different token counts: a loss normalised by a rank's
    // own count, not the batch's, would differ from one rank's.
    config.actor.loss_agg_mode = "token-mean";
    const AdvantageSettings adv = Estimator("reinforce_plus_plus");
    SamplingSettings sampling = Sampling(m);
    for (int32_t id = 3; id < m.vocab_size; id += 5) sampling.eos_token_ids.push_back(id);
    const StepResult one = RunStep(m, 1, config, adv, out, "", "", sampling);
    for (int world : {2, 4}) {
      const StepResult many = RunStep(m, world, config, adv, out, "", "", sampling);
      INFO("world " << world);
      REQUIRE(std::adjacent_find(many.response_tokens.begin(), many.response_tokens.end(), std::not_equal_to<>()) !=
              many.response_tokens.end());
      RequireSameStep(one, many, world);
    }
  }
  SECTION("PPO with a critic (GAE whitened over the batch, critic gradients reduced)") {
    AddCritic(config, m);
    AdvantageSettings adv = Estimator("gae");
    adv.use_kl_in_reward = true;
    adv.kl_coef = 0.05;
    const StepResult one = RunStep(m, 1, config, adv, out);
    REQUIRE(one.critic.at("critic/grad_norm") > 0);
    for (int world : {2, 4}) RequireSameStep(one, RunStep(m, world, config, adv, out), world);
  }
}

TEST_CASE("data parallel in bf16 with sharded optimizer state: the checkpoint keeps every float32 master",
          "[worker][rank][dp]") {
  // ZeRO-1 leaves each rank the masters of the parameters it owns; group rank 0 writes the checkpoint, so it gathers
  // them with the moments. A checkpoint without them would resume the other ranks' parameters from their bf16
  // rounding instead of where the optimizer left them.
  TinyRankModel m;
  TestDir out("dp_bf16");
  RankConfig config = Config(m.dir.path());
  config.dtype = "bfloat16";
  config.actor.lr = 1e-2;
  config.actor.eps = 1e-3;
  config.actor.ppo_mini_batch_size = kMiniPrompts;
  config.actor.ppo_micro_batch_size_per_gpu = 1;
  const StepResult one = RunStep(m, 1, config, Grpo(), out);
  const StepResult two = RunStep(m, 2, config, Grpo(), out);
  REQUIRE(two.actor.at("perf/actor_optimizer_state_gb") < one.actor.at("perf/actor_optimizer_state_gb") * 0.65);
  for (const StepResult* r : {&one, &two}) {
    int64_t finer = 0;  // elements whose master holds more than the bf16 weight does
    for (const auto& [name, w] : r->weights) {
      INFO(name);
      REQUIRE(r->moments.count("master." + name) == 1);
      const std::vector<float>& master = r->moments.at("master." + name);
      REQUIRE(master.size() == w.size());
      // The saved weight is its master rounded to bf16 (8 significant bits).
      for (size_t i = 0; i < w.size(); ++i) {
        REQUIRE(std::abs(master[i] - w[i]) <= std::abs(w[i]) * 0x1p-8f);
        finer += master[i] != w[i];
      }
    }
    REQUIRE(finer > 0);
  }
  REQUIRE(one.moments.size() == two.moments.size());
}

TEST_CASE("ZeRO-3: a rank without prompts still joins its peers' gathers when they generate", "[worker][rank][dp]") {
  TinyRankModel m;
  RankConfig config = Config(m.dir.path());
  const std::vector<PromptInput> all = GlobalPrompts(m);
  SamplingSettings greedy = Sampling(m);
  greedy.do_sample = false;
  auto plain = LoadedRank(2, config);  // unsharded, for the expected tokens
  auto expected = plain->Generate("ref", {all[0]}, greedy, false);
  REQUIRE(expected.ok());
  config.actor.shard_parameters = true;
  for (bool per_layer : {false, true}) {
    INFO("gather layer by layer: " << per_layer);
    config.actor.rollout_gather_layer_by_layer = per_layer;
    std::vector<std::unique_ptr<RankInterface>> ranks;
    ranks.push_back(LoadedRank(0, config));
    ranks.push_back(LoadedRank(1, config));
    JoinGroup(ranks, absl::Seconds(20));
    // Rank 1 has no prompts in this (validation-like) round.
    const auto out = GenerateOnEveryRank(ranks, "val", {{all[0]}, {}}, greedy, false);
    for (int r = 0; r < 2; ++r) {
      INFO("rank " << r << ": " << out[r].status().ToString());
      REQUIRE(out[r].ok());
    }
    CHECK(out[0]->responses.bytes == expected->responses.bytes);
    CHECK(out[0]->response_lengths == expected->response_lengths);
    CHECK(out[1]->response_lengths.empty());
  }
}

TEST_CASE("ZeRO-3 layer by layer: static passes of max_num_seqs rows, as many on every rank", "[worker][rank][dp]") {
  // Layer by layer a rank decodes its prompts in static passes of whole prompts (here one prompt's two samples a
  // pass). Rank 0 has three prompts, rank 1 one: rank 1 makes two more passes over a dummy prompt, as it must, since
  // every pass gathers the layers from both. The tokens are those of one unsharded rank decoding everything at once.
  TinyRankModel m;
  RankConfig config = Config(m.dir.path());
  const std::vector<PromptInput> all = GlobalPrompts(m);
  const std::vector<std::vector<PromptInput>> mine = {{all[0], all[1], all[2]}, {all[3]}};
  const SamplingSettings sampling = Sampling(m);  // n = 2, sampled
  auto plain = LoadedRank(2, config);
  std::vector<absl::StatusOr<GenerateOutput>> expected;
  for (int r = 0; r < 2; ++r) expected.push_back(plain->Generate(absl::StrCat("ref", r), mine[r], sampling, false));
  config.actor.shard_parameters = true;
  config.actor.rollout_gather_layer_by_layer = true;
  config.actor.rollout_max_num_seqs = 2;
  std::vector<std::unique_ptr<RankInterface>> ranks;
  ranks.push_back(LoadedRank(0, config));
  ranks.push_back(LoadedRank(1, config));
  JoinGroup(ranks, absl::Seconds(20));
  for (bool greedy_baseline : {false, true}) {  // ReMax's greedy rollout: passes of two prompts, 2 against 1
    INFO("greedy baseline: " << greedy_baseline);
    const auto out = GenerateOnEveryRank(ranks, absl::StrCat("gen", greedy_baseline), mine, sampling, greedy_baseline);
    for (int r = 0; r < 2; ++r) {
      INFO("rank " << r);
      RequireSameTokens(out[r], expected[r]);
      CHECK(out[r]->metrics.at("perf/rollout_kv_cache_slots") == 2.0);
      CHECK(out[r]->metrics.at("perf/rollout_static_passes") == 3.0);  // rank 1: its prompt's and two dummy ones
    }
  }
  // A rank whose prompts are refused says so where the ranks agree on their passes: its peer returns at once too
  // (without the agreement it would wait for the passes' gathers until the collective timeout).
  std::vector<PromptInput> bad = mine[0];
  bad[1].token_ids[0] = m.vocab_size;  // outside the vocabulary
  const auto out = GenerateOnEveryRank(ranks, "bad", {bad, mine[1]}, sampling, false);
  INFO(out[0].status().ToString() << " / " << out[1].status().ToString());
  CHECK(absl::IsInvalidArgument(out[0].status()));
  CHECK_THAT(std::string(out[0].status().message()), Catch::Contains("prompt 1: token id"));
  CHECK(absl::IsFailedPrecondition(out[1].status()));
  CHECK_THAT(std::string(out[1].status().message()),
             Catch::Contains("a peer rank of the sharded group cannot generate"));
}

TEST_CASE("split placement: a rollout rank generates, its rows go to two training ranks, the weights come back",
          "[worker][rank][placement]") {
  TinyRankModel m;
  TestDir out("placement_rank");
  RankConfig config = Config(m.dir.path());
  config.actor.lr = 1e-2;
  config.actor.eps = 1e-3;  // as in the data-parallel test: weights compared within float tolerance
  config.actor.ppo_mini_batch_size = kMiniPrompts;
  config.actor.ppo_micro_batch_size_per_gpu = 1;
  config.actor.entropy_coeff = 0.01;
  config.actor.loss_agg_mode = "seq-mean-token-mean";
  const StepResult colocated = RunStep(m, 2, config, Grpo(), out, "", "colocated");

  // Transfer ranks 0 and 1 train (a data-parallel group of two), transfer rank 2 only generates.
  RankConfig train = config;
  train.roles = {"actor", "ref"};
  RankConfig rollout = config;
  rollout.roles = {"rollout"};
  std::vector<std::unique_ptr<RankInterface>> ranks;
  ranks.push_back(LoadedRank(0, train));
  ranks.push_back(LoadedRank(1, train));
  ranks.push_back(LoadedRank(2, rollout));
  auto dp = MakeGroup(2, absl::Seconds(30));
  auto transfer = MakeGroup(3, absl::Seconds(30));
  for (int r = 0; r < 2; ++r) REQUIRE(ranks[r]->SetCommunicator(std::move(dp[r]), absl::Seconds(30)).ok());
  for (int r = 0; r < 3; ++r) REQUIRE(ranks[r]->SetTransferCommunicator(std::move(transfer[r]), absl::Seconds(30)).ok());
  const std::vector<PromptInput> all = GlobalPrompts(m);
  SamplingSettings greedy = Sampling(m);
  greedy.do_sample = false;
  StepResult split;
  std::vector<absl::Status> errors(3);
  std::vector<double> probe_before(3), probe_after(3);
  Metrics sync;
  OnEveryRank(3, [&](int r) {
    RankInterface& rank = *ranks[r];
    auto fail = [&](const absl::Status& s) {
      errors[r] = s;
      rank.AbortCommunicator();
    };
    const std::string step = "split-1";
    TransferPlan plan;
    plan.n = Sampling(m).n;
    plan.pad_token_id = m.eos_id;
    if (r == 2) {
      if (auto s = rank.Generate(step, all, Sampling(m), false).status(); !s.ok()) return fail(s);
      if (auto s = rank.Score(step).status(); !s.ok()) return fail(s);
      for (int t = 0; t < 2; ++t) {
        std::vector<int64_t> local;
        for (int i : PromptsOfRank(t, 2)) local.push_back(i);  // the rollout rank holds every prompt, in order
        plan.sends.emplace_back(t, local);
      }
    } else {
      for (int i : PromptsOfRank(r, 2)) {
        plan.prompts.push_back(all[i]);
        plan.sources.push_back(2);
      }
    }
    auto moved = rank.TransferBatch(step, plan);
    if (!moved.ok()) return fail(moved.status());
    if (r < 2) {
      if (auto s = rank.ComputeLogProbs(step, "actor", 1.0).status(); !s.ok()) return fail(s);
      if (auto s = rank.ComputeLogProbs(step, "ref", 1.0).status(); !s.ok()) return fail(s);
      auto a = rank.ComputeAdvantage(step, Grpo());
      if (!a.ok()) return fail(a.status());
      auto u = rank.UpdateActor(step, 1.0, 5);
      if (!u.ok()) return fail(u.status());
      if (auto s = rank.SaveCheckpoint(out.file("split"), 1, false); !s.ok()) return fail(s);
      if (r == 0) {
        split.advantage = *a;
        split.actor = *u;
      }
    }
    // The same greedy probe on a trainer and on the rollout rank: the rollout log-probs tell whose weights they have.
    auto before = rank.Generate("probe-before", {all[0]}, greedy, false);
    if (!before.ok()) return fail(before.status());
    probe_before[r] = before->metrics.at("rollout/log_prob/mean");
    auto synced = rank.SyncWeights(/*bucket_bytes=*/4096);  // small buckets: tensors span several
    if (!synced.ok()) return fail(synced.status());
    if (r == 2) sync = *synced;
    auto after = rank.Generate("probe-after", {all[0]}, greedy, false);
    if (!after.ok()) return fail(after.status());
    probe_after[r] = after->metrics.at("rollout/log_prob/mean");
  });
  for (const absl::Status& s : errors) {
    INFO(s.ToString());
    REQUIRE(s.ok());
  }
  split.weights = ReadWeights(out.file("split") + "/actor/model_world_size_1_rank_0.safetensors");
  split.moments = ReadWeights(out.file("split") + "/actor/optim_world_size_1_rank_0.safetensors");
  // The rows moved rank to rank train exactly as if the training ranks had generated them.
  RequireSameStep(colocated, split, 2, /*sharded_state=*/false);
  // Before the sync the rollout rank still has the initial weights; after it, the updated ones, bit for bit.
  REQUIRE(probe_before[0] == probe_before[1]);
  REQUIRE(probe_before[2] != probe_before[0]);
  REQUIRE(probe_after[2] == probe_after[0]);
  REQUIRE(probe_after[0] == probe_before[0]);
  REQUIRE(sync.at("perf/weight_sync_buckets") > 10);
}

TEST_CASE("data parallel: a rank that stops answering is named within the timeout", "[worker][rank][dp]") {
  TinyRankModel m;
  RankConfig config = Config(m.dir.path());
  config.actor.ppo_mini_batch_size = 1;
  std::vector<std::unique_ptr<RankInterface>> ranks;
  for (int r = 0; r < 2; ++r) ranks.push_back(LoadedRank(r, config));
  auto comms = MakeGroup(2, absl::Seconds(30));
  for (int r = 0; r < 2; ++r) REQUIRE(ranks[r]->SetCommunicator(std::move(comms[r]), absl::Seconds(1)).ok());
  const std::vector<PromptInput> all = GlobalPrompts(m);
  OnEveryRank(2, [&](int r) {
    const std::vector<PromptInput> mine = {all[r]};
    REQUIRE(ranks[r]->Generate("s", mine, Sampling(m), false).ok());
    REQUIRE(ranks[r]->Score("s").ok());
    REQUIRE(ranks[r]->ComputeLogProbs("s", "actor", 1.0).ok());
    REQUIRE(ranks[r]->ComputeLogProbs("s", "ref", 1.0).ok());
    REQUIRE(ranks[r]->ComputeAdvantage("s", Grpo()).ok());
  });

  SECTION("silent: a deadline naming the peer and the collective") {
    // Rank 1 never joins the update: rank 0's first collective waits at most the 1 s timeout.
    const auto start = std::chrono::steady_clock::now();
    auto updated = ranks[0]->UpdateActor("s", 1.0, 0);
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    INFO(updated.status().ToString());
    REQUIRE(absl::IsDeadlineExceeded(updated.status()));
    const std::string message(updated.status().message());
    REQUIRE(message.find("rank 1") != std::string::npos);
    REQUIRE(message.find("AllReduce") != std::string::npos);
    REQUIRE(message.find("UpdateActor") != std::string::npos);
    REQUIRE(waited < 10);
  }
  SECTION("failed: its abort reaches the peer at once") {
    std::thread aborter([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      ranks[1]->AbortCommunicator();
    });
    auto updated = ranks[0]->UpdateActor("s", 1.0, 0);
    aborter.join();
    INFO(updated.status().ToString());
    REQUIRE(absl::IsUnavailable(updated.status()));
    REQUIRE(std::string(updated.status().message()).find("rank 1") != std::string::npos);
  }
}

}  // namespace
}  // namespace verl
