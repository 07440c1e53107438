// A rank on a GPU against the same rank on the CPU: the same GRPO step (greedy rollout so the responses are
// comparable, then log-probs, advantages and an update) must agree within float tolerance. Tagged [gpu]: skips with
// a warning where the build has no CUDA or no GPU is visible.

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#ifdef VERL_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

#include "absl/strings/str_cat.h"
#include "tests/worker/rank/host_group.h"
#include "tests/worker/rank/rank_fixtures.h"
#include "worker/model/hf_config.h"
#include "worker/rank/rank_interface.h"

namespace verl {
namespace {

using namespace rank_testing;  // NOLINT: the shared fixtures

// A no-grad forward's activations per token in bf16, as the rank's budget estimates them (ForwardTokenBytes): the
// residual stream and its norm, q/k/v, the keys and values repeated, the attention's output and projection, gate/up
// and SwiGLU's output.
int64_t ForwardTokenBytes(const DecoderConfig& c) {
  const int64_t q = c.num_attention_heads * c.head_dim;
  const int64_t kv = c.num_key_value_heads * c.head_dim;
  return 2 * (4 * c.hidden_size + q + 2 * kv + 2 * q + q + 3 * c.intermediate_size);
}

struct StepOutput {
  std::vector<int32_t> responses;
  Metrics log_probs, advantage, update;
};

// A configured, loaded rank on `device`; null (and *skipped set) when that device is not available here.
std::unique_ptr<RankInterface> RankOn(const std::string& device, const RankConfig& base, absl::Status* skipped) {
  RankConfig config = base;
  config.device = device;
  auto rank = CreateCpuRank(0);
  absl::Status s = rank->Configure(config);
  // Before anything is on the device (the worker asks after every call, ConfigureRoles included): zeros, no throw.
  if (s.ok()) CHECK(rank->Memory().allocated >= 0);
  if (absl::IsFailedPrecondition(s)) {
    *skipped = s;
    return nullptr;
  }
  INFO(s.ToString());
  REQUIRE(s.ok());
  auto loaded = rank->LoadModel();
  INFO(loaded.status().ToString());
  REQUIRE(loaded.ok());
  return rank;
}

// The share of cuda:0 that leaves `room` bytes beside what a rank of `config` has allocated once a rollout has run in
// this process (its capture stream's GEMM workspace then allocated too); -1, and *skipped set, without the device.
double ShareLeaving(const RankConfig& config, const TinyRankModel& m, double room, absl::Status* skipped) {
  auto probe = RankOn("cuda:0", config, skipped);
  if (probe == nullptr) return -1.0;
  REQUIRE(probe->Generate("warm", Prompts(m), Sampling(m), false).ok());
  const DeviceMemory mem = probe->Memory();
  REQUIRE(mem.total > 0);
  return (static_cast<double>(mem.allocated) + room) / static_cast<double>(mem.total);
}

StepOutput Step(RankInterface& rank, const TinyRankModel& m, const std::string& g = "g") {
  SamplingSettings greedy = Sampling(m);
  greedy.do_sample = false;
  StepOutput out;
  auto gen = rank.Generate(g, Prompts(m), greedy, false);
  INFO(gen.status().ToString());
  REQUIRE(gen.ok());
  out.responses.resize(gen->responses.bytes.size() / 4);
  std::memcpy(out.responses.data(), gen->responses.bytes.data(), gen->responses.bytes.size());
  REQUIRE(rank.Score(g).ok());
  auto lp = rank.ComputeLogProbs(g, "actor", 1.0);
  REQUIRE(lp.ok());
  out.log_probs = *lp;
  REQUIRE(rank.ComputeLogProbs(g, "ref", 1.0).ok());
  // RLOO-free of group-size pitfalls: REINFORCE++ whitens over the batch, so greedy ties still give a signal.
  auto adv = rank.ComputeAdvantage(g, Estimator("reinforce_plus_plus"));
  INFO(adv.status().ToString());
  REQUIRE(adv.ok());
  out.advantage = *adv;
  auto upd = rank.UpdateActor(g, 1.0, 3);
  INFO(upd.status().ToString());
  REQUIRE(upd.ok());
  out.update = *upd;
  return out;
}

TEST_CASE("a rank on cuda:0 takes the same GRPO step as on the CPU", "[worker][rank][gpu]") {
  TinyRankModel m;
  RankConfig config = Config(m.dir.path());
  absl::Status skipped;
  auto gpu = RankOn("cuda:0", config, &skipped);
  if (gpu == nullptr) {
    WARN("skipped: " << skipped.ToString());
    return;
  }
  auto cpu = RankOn("cpu", config, &skipped);
  REQUIRE(cpu != nullptr);
  const StepOutput on_gpu = Step(*gpu, m);
  const StepOutput on_cpu = Step(*cpu, m);
  REQUIRE(on_gpu.responses == on_cpu.responses);
  REQUIRE(on_gpu.log_probs.at("training/rollout_probs_diff_max") < 1e-4);
  for (const char* key : {"critic/advantages/mean", "critic/advantages/max", "critic/rewards/mean"}) {
    INFO(key);
    REQUIRE(on_gpu.advantage.at(key) == Approx(on_cpu.advantage.at(key)).margin(1e-4));
  }
  for (const char* key : {"actor/pg_loss", "actor/grad_norm", "actor/entropy", "actor/kl_loss"}) {
    INFO(key);
    REQUIRE(on_gpu.update.at(key) == Approx(on_cpu.update.at(key)).epsilon(1e-3).margin(1e-5));
  }
  // verl's perf/mfu/actor on a GPU it knows (the H200 machine), none on the CPU; a tiny model is far from the peak.
  CHECK(on_cpu.update.count("perf/mfu/actor") == 0);
  if (on_gpu.update.count("perf/mfu/actor") == 1) {
    CHECK(on_gpu.update.at("perf/mfu/actor") > 0);
    CHECK(on_gpu.update.at("perf/mfu/actor") < 1);
  } else {
    WARN("this GPU is not in verl's peak table: no perf/mfu/actor");
  }
  // Memory as the caching allocator sees it (the worker's verl_gpu_memory_* gauges, verl's perf/max_memory_*).
  const DeviceMemory mem = gpu->Memory();
  CHECK(mem.on_gpu);
  CHECK(mem.allocated > 0);  // the weights, at least
  CHECK(mem.reserved >= mem.allocated);
  CHECK(mem.peak_allocated >= mem.allocated);
  CHECK(on_gpu.update.at("perf/max_memory_allocated_gb") * (1 << 30) == Approx(mem.peak_allocated).epsilon(0.5));
  CHECK_FALSE(cpu->Memory().on_gpu);
  CHECK(on_cpu.update.count("perf/max_memory_allocated_gb") == 0);
  // A checkpoint written from the GPU loads back on the CPU rank (host copies on the way out).
  TestDir dir("gpu_rank_ckpt");
  REQUIRE(gpu->SaveCheckpoint(dir.file("s1"), 1, false).ok());
  REQUIRE(cpu->LoadCheckpoint(dir.file("s1"), 1).ok());
}

// Two steps on a rank made with `config`, then two on one made with `config` after `change`, one rank at a time (ranks
// in one process share the device allocator's statistics), with lr 1e-2 so that the second step's log-probs and
// losses see the first update's weights. The two runs must give the same responses and the same figures (within a
// margin for backward kernels that sum with atomics). Returns the device memory allocated by each run's rank after
// loading and after its steps; nullopt (skipped set) where no GPU is visible.
struct AllocatedBytes {
  int64_t loaded[2] = {0, 0};  // [config, changed]
  int64_t after_steps[2] = {0, 0};
  StepOutput last[2];  // each run's second step
};
std::optional<AllocatedBytes> SameStepsWithChange(const TinyRankModel& m, RankConfig config,
                                                  const std::function<void(RankConfig&)>& change,
                                                  absl::Status* skipped) {
  config.actor.lr = 1e-2;
  AllocatedBytes out;
  StepOutput steps[2][2];
  for (int run = 0; run < 2; ++run) {
    if (run == 1) change(config);
    auto rank = RankOn("cuda:0", config, skipped);
    if (rank == nullptr) {
      REQUIRE(run == 0);
      return std::nullopt;
    }
    out.loaded[run] = rank->Memory().allocated;
    steps[run][0] = Step(*rank, m, "g1");
    steps[run][1] = Step(*rank, m, "g2");
    out.after_steps[run] = rank->Memory().allocated;
  }
  for (int k = 0; k < 2; ++k) {
    REQUIRE(steps[1][k].responses == steps[0][k].responses);
    for (const char* key : {"actor/pg_loss", "actor/grad_norm", "actor/entropy", "actor/kl_loss"}) {
      INFO("step " << k + 1 << ": " << key);
      REQUIRE(steps[1][k].update.at(key) == Approx(steps[0][k].update.at(key)).epsilon(1e-4).margin(1e-6));
    }
  }
  out.last[0] = steps[0][1];
  out.last[1] = steps[1][1];
  return out;
}

TEST_CASE("optimizer offload on cuda:0: the same steps with the AdamW state in host memory", "[worker][rank][gpu]") {
  TinyRankModel m;
  absl::Status skipped;
  const auto runs = SameStepsWithChange(
      m, Config(m.dir.path()), [](RankConfig& c) { c.actor.optimizer_offload = true; }, &skipped);
  if (!runs) {
    WARN("skipped: " << skipped.ToString());
    return;
  }
  REQUIRE(runs->last[1].log_probs.at("training/rollout_probs_diff_max") < 1e-4);
  // The moments live in host memory: what the second rank kept on the GPU after its steps is less than the first's
  // (which holds the same weights plus two float32 moments per parameter on the device).
  INFO("allocated after two steps: plain " << runs->after_steps[0] << " B, offloaded " << runs->after_steps[1] << " B");
  CHECK(runs->after_steps[1] < runs->after_steps[0]);
}

TEST_CASE("ref param offload on cuda:0: the same steps with the ref's weights in host memory between its passes",
          "[worker][rank][gpu]") {
  TinyRankModel m;
  absl::Status skipped;
  const auto runs = SameStepsWithChange(
      m, Config(m.dir.path()), [](RankConfig& c) { c.actor.ref_param_offload = true; }, &skipped);
  if (!runs) {
    WARN("skipped: " << skipped.ToString());
    return;
  }
  // The second step's KL loss compares the updated actor with the ref brought back from host memory.
  REQUIRE(runs->last[0].update.at("actor/kl_loss") != 0);
  // The ref's weights are not on the GPU after loading nor between steps: 4 bytes a parameter of the float32 tiny
  // model less (the tokenizer and the actor's state the same on both ranks).
  int64_t ref_bytes = 0;
  for (const ParamSpec& p : DecoderParamSpecs(m.config)) ref_bytes += p.numel() * 4;
  INFO("allocated: loaded " << runs->loaded[0] << " / " << runs->loaded[1] << " B, after two steps "
                            << runs->after_steps[0] << " / " << runs->after_steps[1] << " B, the ref " << ref_bytes
                            << " B");
  CHECK(runs->loaded[0] - runs->loaded[1] >= ref_bytes);
  CHECK(runs->after_steps[0] - runs->after_steps[1] >= ref_bytes);
}

TEST_CASE("rollout memory on cuda:0: the KV cache budget, and peaks per phase", "[worker][rank][gpu]") {
  TinyRankModel m;
  RankConfig config = Config(m.dir.path());
  // A share of the device smaller than what is allocated already leaves nothing for the KV cache: an error with the
  // numbers, not a fall-back.
  config.actor.rollout_gpu_memory_utilization = 1e-9;
  absl::Status skipped;
  auto starved = RankOn("cuda:0", config, &skipped);
  if (starved == nullptr) {
    WARN("skipped: " << skipped.ToString());
    return;
  }
  auto refused = starved->Generate("g", Prompts(m), Sampling(m), false);
  REQUIRE_FALSE(refused.ok());
  REQUIRE(absl::IsResourceExhausted(refused.status()));
  REQUIRE_THAT(std::string(refused.status().message()),
               Catch::Contains("actor_rollout_ref.rollout.gpu_memory_utilization 1e-09 of") &&
                   Catch::Contains("one sequence of"));
  starved.reset();
  config.actor.rollout_gpu_memory_utilization = 0.5;
  auto rank = RankOn("cuda:0", config, &skipped);
  REQUIRE(rank != nullptr);
  const StepOutput out = Step(*rank, m, "g");
  auto gen = rank->Generate("g2", Prompts(m), Sampling(m), false);
  REQUIRE(gen.ok());
  REQUIRE(gen->metrics.at("perf/rollout_kv_cache_slots") == 4.0);
  // The rollout's own peak covers at least its KV cache, and stays below the rank's lifetime peak.
  REQUIRE(gen->metrics.at("perf/rollout_max_memory_allocated_gb") >= gen->metrics.at("perf/rollout_kv_cache_gb"));
  DeviceMemory mem = rank->Memory();
  REQUIRE(mem.total > 0);
  REQUIRE(gen->metrics.at("perf/rollout_max_memory_allocated_gb") * (1 << 30) <= static_cast<double>(mem.peak_allocated));
  // The log-prob passes report their own peaks too: at least what is allocated when each returns (the weights and
  // the log-probs it keeps), at most the rank's lifetime peak (which the first step's update and rollout set).
  for (const auto& [role, key] : {std::pair{"actor", "perf/old_log_prob_max_memory_allocated_gb"},
                                   std::pair{"ref", "perf/ref_max_memory_allocated_gb"}}) {
    auto lp = rank->ComputeLogProbs("g2", role, 1.0);
    INFO(role << ": " << lp.status().ToString());
    REQUIRE(lp.ok());
    mem = rank->Memory();
    REQUIRE(lp->count(key) == 1);
    const double peak = lp->at(key) * (1 << 30);
    CHECK(peak >= static_cast<double>(mem.allocated));
    CHECK(peak <= static_cast<double>(mem.peak_allocated));
  }
  CHECK(out.update.at("perf/update_max_memory_allocated_gb") > 0);
}

TEST_CASE("a PPO rank on cuda:0 reports the critic's phases' peaks", "[worker][rank][gpu]") {
  TinyRankModel m;
  RankConfig config = Config(m.dir.path(), {"actor", "rollout", "ref", "critic"});
  config.critic.model_path = m.dir.path();
  config.critic.lr = 1e-3;
  absl::Status skipped;
  auto rank = RankOn("cuda:0", config, &skipped);
  if (rank == nullptr) {
    WARN("skipped: " << skipped.ToString());
    return;
  }
  REQUIRE(rank->Generate("p", Prompts(m), Sampling(m), false).ok());
  REQUIRE(rank->Score("p").ok());
  REQUIRE(rank->ComputeLogProbs("p", "actor", 1.0).ok());
  REQUIRE(rank->ComputeLogProbs("p", "ref", 1.0).ok());
  auto values = rank->ComputeValues("p");
  INFO(values.status().ToString());
  REQUIRE(values.ok());
  const DeviceMemory after_values = rank->Memory();
  REQUIRE(rank->ComputeAdvantage("p", Estimator("gae")).ok());
  auto crit = rank->UpdateCritic("p", 0);
  INFO(crit.status().ToString());
  REQUIRE(crit.ok());
  const DeviceMemory after_update = rank->Memory();
  // Each phase's peak: at least what is allocated when it returns (the values it keeps; the critic's gradients and
  // AdamW state), at most the rank's lifetime peak. The critic's update holds more than its no-grad pass.
  const double values_peak = values->at("perf/values_max_memory_allocated_gb") * (1 << 30);
  const double update_peak = crit->at("perf/update_critic_max_memory_allocated_gb") * (1 << 30);
  CHECK(values_peak >= static_cast<double>(after_values.allocated));
  CHECK(update_peak >= static_cast<double>(after_update.allocated));
  CHECK(update_peak > values_peak);
  CHECK(update_peak <= static_cast<double>(after_update.peak_allocated));
}

#ifdef VERL_WITH_CUDA
// Queues a few hundred milliseconds of work (memsets of 1 GiB) on the device's legacy default stream, which the rank's
// passes run on (behind it); the buffer is freed when it goes out of scope.
struct QueuedDeviceWork {
  void* buffer = nullptr;
  QueuedDeviceWork() {
    constexpr size_t kBytes = size_t{1} << 30;
    REQUIRE(cudaMalloc(&buffer, kBytes) == cudaSuccess);
    cudaError_t queued = cudaSuccess;
    for (int i = 0; i < 800 && queued == cudaSuccess; ++i) queued = cudaMemsetAsync(buffer, i & 0xff, kBytes, nullptr);
    REQUIRE(queued == cudaSuccess);
    REQUIRE(cudaStreamQuery(nullptr) == cudaErrorNotReady);  // still queued: the check below can fail
  }
  ~QueuedDeviceWork() { (void)cudaFree(buffer); }
};

TEST_CASE("no-grad passes on cuda:0 return once their work is done on the device", "[worker][rank][gpu]") {
  // A phase's timing_s/ key must count its own kernels: a pass that returned with its queue still running would hand
  // its tail to the next phase's clock (the ref pass's to the advantage's, about 0.1 s of a B3 step on an H100).
  TinyRankModel m;
  RankConfig config = Config(m.dir.path(), {"actor", "rollout", "ref", "critic"});
  config.critic.model_path = m.dir.path();
  absl::Status skipped;
  auto rank = RankOn("cuda:0", config, &skipped);
  if (rank == nullptr) {
    WARN("skipped: " << skipped.ToString());
    return;
  }
  REQUIRE(rank->Generate("s", Prompts(m), Sampling(m), false).ok());
  REQUIRE(rank->Score("s").ok());
  const std::vector<std::pair<const char*, std::function<absl::Status()>>> passes = {
      {"old log-probs", [&] { return rank->ComputeLogProbs("s", "actor", 1.0).status(); }},
      {"ref log-probs", [&] { return rank->ComputeLogProbs("s", "ref", 1.0).status(); }},
      {"values", [&] { return rank->ComputeValues("s").status(); }}};
  for (const auto& [name, pass] : passes) {
    INFO(name);
    QueuedDeviceWork queued;
    const absl::Status s = pass();
    INFO(s.ToString());
    REQUIRE(s.ok());
    CHECK(cudaStreamQuery(nullptr) == cudaSuccess);
  }
}
#endif

TEST_CASE("rollout on cuda:0 in bf16 makes the folded q/k/v and gate/up copies only where they cost no KV slot",
          "[worker][rank][gpu]") {
  // A model the decode kernel takes (head_dim 64) with a gate/up copy of 8 MiB (intermediate 4096), so the budget
  // below has 4 MiB of room either side.
  TinyRankModel m(/*head_dim=*/64, /*inter=*/4096);
  RankConfig config = Config(m.dir.path());
  config.dtype = "bfloat16";
  config.actor.rollout_gpu_memory_utilization = 0.5;
  absl::Status skipped;
  auto roomy = RankOn("cuda:0", config, &skipped);
  if (roomy == nullptr) {
    WARN("skipped: " << skipped.ToString());
    return;
  }
  // The copies' and a slot's bytes in bf16 (2 bytes an element), as the rank budgets them (FoldedQkvBytes,
  // FoldedGateUpBytes, KvSlotBytes).
  const DecoderConfig& c = m.config;
  const int64_t qkv =
      2 * c.num_hidden_layers * (c.num_attention_heads + 2 * c.num_key_value_heads) * c.head_dim * c.hidden_size;
  const int64_t gate_up = 2 * c.num_hidden_layers * 2 * c.intermediate_size * c.hidden_size;
  REQUIRE(gate_up == 2 * 2 * 2 * 4096 * 256);
  const SamplingSettings sampling = Sampling(m);
  const int64_t longest = static_cast<int64_t>(std::max(m.prompt_a.size(), m.prompt_b.size()));
  const int64_t kv_slot =
      2 * 2 * c.num_hidden_layers * c.num_key_value_heads * c.head_dim * (longest + sampling.max_new_tokens);
  // Beside its cache a slot costs a row of a decoding step's logits and the step's activations (ForwardTokenBytes);
  // once, the rollout holds its largest prefill (PrefillBytes: here both prompts in one pass, counted at the longest's
  // width, with the 4 samples' float32 rows) and the batch it returns (RolloutOutputBytes).
  const int64_t token = ForwardTokenBytes(c);
  const int64_t slot = kv_slot + 2 * c.vocab_size + token;
  const int64_t fixed = 2 * longest * token + 2 * c.vocab_size * (2 + 4) + 4 * c.vocab_size * 4 +
                        4 * (longest * 9 + sampling.max_new_tokens * 13);
  // Room to spare: both copies are made.
  auto gen = roomy->Generate("g", Prompts(m), sampling, false);
  INFO(gen.status().ToString());
  REQUIRE(gen.ok());
  REQUIRE(gen->metrics.at("perf/rollout_kv_cache_slots") == 4.0);
  CHECK(gen->metrics.at("perf/rollout_folded_weights_gb") * (1 << 30) == Approx(static_cast<double>(qkv + gate_up)));
  roomy.reset();
  // The share of the device that leaves `room` bytes beside what a freshly loaded rank has allocated (its weights, and
  // the workspaces of the stream the roomy rollout captured its graphs on, which the next rollout's lease reuses).
  auto share_leaving = [&](double room) {
    auto probe = RankOn("cuda:0", config, &skipped);
    REQUIRE(probe != nullptr);
    const DeviceMemory mem = probe->Memory();
    REQUIRE(mem.total > 0);
    return (static_cast<double>(mem.allocated) + room) / static_cast<double>(mem.total);
  };
  // A budget of the q/k/v copy, the 4 slots and half the gate/up copy: the 4 slots fit without the gate/up copy, 3
  // with it, so the rollout decodes without it (the unfolded post-attention norm) and keeps its 4 slots.
  config.actor.rollout_gpu_memory_utilization =
      share_leaving(static_cast<double>(fixed + qkv + 4 * slot) + gate_up / 2.0);
  auto tight = RankOn("cuda:0", config, &skipped);
  REQUIRE(tight != nullptr);
  gen = tight->Generate("g", Prompts(m), sampling, false);
  INFO(gen.status().ToString());
  REQUIRE(gen.ok());
  CHECK(gen->metrics.at("perf/rollout_kv_cache_slots") == 4.0);
  CHECK(gen->metrics.at("perf/rollout_folded_weights_gb") * (1 << 30) == Approx(static_cast<double>(qkv)));
  tight.reset();
  // A budget of the 4 slots and half the q/k/v copy: that copy would leave 3 slots, so neither copy is made (the
  // gate/up one needs the q/k/v one) and the rollout keeps its 4 slots, decoding with both norms unfolded.
  config.actor.rollout_gpu_memory_utilization = share_leaving(static_cast<double>(fixed + 4 * slot) + qkv / 2.0);
  auto tighter = RankOn("cuda:0", config, &skipped);
  REQUIRE(tighter != nullptr);
  gen = tighter->Generate("g", Prompts(m), sampling, false);
  INFO(gen.status().ToString());
  REQUIRE(gen.ok());
  CHECK(gen->metrics.at("perf/rollout_kv_cache_slots") == 4.0);
  CHECK(gen->metrics.at("perf/rollout_folded_weights_gb") == 0.0);
}

TEST_CASE("a rollout on cuda:0 stays within gpu_memory_utilization, its prefill included", "[worker][rank][gpu]") {
  // 256 prompts of 1,000 tokens, 2 samples each, through a model with a wide MLP (intermediate 4096) in bf16: a
  // prefill pass of max_num_batched_tokens (8,192 tokens) holds far more than a slot's KV cache (about 1 MiB), so a
  // share leaving 256 MiB binds. A budget that left the prefill out filled the share with slots and went past it by
  // the prefill's activations (gate/up alone: 128 MiB).
  TinyRankModel m(/*head_dim=*/64, /*inter=*/4096);
  RankConfig config = Config(m.dir.path());
  config.dtype = "bfloat16";
  config.actor.rollout_gpu_memory_utilization = 0.5;
  std::vector<PromptInput> prompts;
  for (int i = 0; i < 256; ++i) {
    PromptInput p{{}, absl::StrCat("uid-", i), "verl_cpp/repeat_letter", "a", "{}"};
    for (int t = 0; t < 1000; ++t) p.token_ids.push_back((i * 7 + t * 13) % (m.vocab_size - 1));
    prompts.push_back(std::move(p));
  }
  SamplingSettings sampling = Sampling(m);
  sampling.ignore_eos = true;
  sampling.max_new_tokens = 4;
  absl::Status skipped;
  const double share = ShareLeaving(config, m, 256.0 * (1 << 20), &skipped);
  if (share < 0) {
    WARN("skipped: " << skipped.ToString());
    return;
  }
  config.actor.rollout_gpu_memory_utilization = share;
  auto rank = RankOn("cuda:0", config, &skipped);
  REQUIRE(rank != nullptr);
  auto gen = rank->Generate("g", prompts, sampling, false);
  INFO(gen.status().ToString());
  REQUIRE(gen.ok());
  const DeviceMemory mem = rank->Memory();
  const double slots = gen->metrics.at("perf/rollout_kv_cache_slots");
  const double peak = gen->metrics.at("perf/rollout_max_memory_allocated_gb") * (1 << 30);
  INFO("slots " << slots << ", the rollout's peak " << peak / (1 << 20) << " MiB, the share "
                << share * static_cast<double>(mem.total) / (1 << 20) << " MiB");
  CHECK(slots >= 1);
  CHECK(slots < 512);  // the budget binds
  CHECK(peak <= share * static_cast<double>(mem.total));
}

TEST_CASE("a rollout on cuda:0 prefills prompts longer than max_num_batched_tokens in chunks, within the share",
          "[worker][rank][gpu]") {
  // 8 prompts of 20,000 tokens, 2 samples each, through the wide-MLP model in bf16: a pass over a whole prompt holds
  // about 557 MiB of activations (ForwardTokenBytes a token), a chunk of max_num_batched_tokens (8,192) about 228 MiB.
  // With a share leaving 512 MiB, chunked prefill fits slots beside a chunk; whole prompts do not fit at all, and the
  // error says so.
  TinyRankModel m(/*head_dim=*/64, /*inter=*/4096);
  RankConfig config = Config(m.dir.path());
  config.dtype = "bfloat16";
  constexpr int64_t kLen = 20000;
  REQUIRE(kLen * ForwardTokenBytes(m.config) > 512 * (int64_t{1} << 20));
  std::vector<PromptInput> prompts;
  for (int i = 0; i < 8; ++i) {
    PromptInput p{{}, absl::StrCat("uid-", i), "verl_cpp/repeat_letter", "a", "{}"};
    for (int64_t t = 0; t < kLen; ++t) {
      p.token_ids.push_back(static_cast<int32_t>((i * 7 + t * 13) % (m.vocab_size - 1)));
    }
    prompts.push_back(std::move(p));
  }
  SamplingSettings sampling = Sampling(m);
  sampling.ignore_eos = true;
  sampling.max_new_tokens = 4;
  absl::Status skipped;
  const double share = ShareLeaving(config, m, 512.0 * (1 << 20), &skipped);
  if (share < 0) {
    WARN("skipped: " << skipped.ToString());
    return;
  }
  config.actor.rollout_gpu_memory_utilization = share;
  {
    auto rank = RankOn("cuda:0", config, &skipped);
    REQUIRE(rank != nullptr);
    auto gen = rank->Generate("g", prompts, sampling, false);
    INFO(gen.status().ToString());
    REQUIRE(gen.ok());
    const DeviceMemory mem = rank->Memory();
    const double slots = gen->metrics.at("perf/rollout_kv_cache_slots");
    const double peak = gen->metrics.at("perf/rollout_max_memory_allocated_gb") * (1 << 30);
    INFO("slots " << slots << ", the rollout's peak " << peak / (1 << 20) << " MiB, the share "
                  << share * static_cast<double>(mem.total) / (1 << 20) << " MiB");
    CHECK(slots >= 2);
    CHECK(slots < 16);  // the budget binds
    CHECK(peak <= share * static_cast<double>(mem.total));
    // Three chunks (8,192 + 8,192 + 3,616 tokens) for each prompt's prefill; a prompt whose second sample waits for a
    // slot until the first has ended is prefilled again.
    CHECK(gen->metrics.at("perf/rollout_prefill_chunks") >= 24.0);
    CHECK(static_cast<int64_t>(gen->metrics.at("perf/rollout_prefill_chunks")) % 3 == 0);
    // The samples of a prompt continue the same prefill: one response each, full length.
    CHECK(gen->response_lengths == std::vector<int32_t>(16, 4));
  }
  config.actor.rollout_chunked_prefill = false;
  auto whole = RankOn("cuda:0", config, &skipped);
  REQUIRE(whole != nullptr);
  auto refused = whole->Generate("g", prompts, sampling, false);
  REQUIRE_FALSE(refused.ok());
  CHECK_THAT(refused.status().ToString(), Catch::Contains("prefill"));
}

TEST_CASE("ZeRO-3 layer by layer on cuda:0: static passes within the budget, as many on both ranks",
          "[worker][rank][gpu]") {
  // Two ranks share cuda:0 over a host group. Rank 0 has two prompts, rank 1 one; passes of one prompt's two samples
  // (max_num_seqs 2), so rank 1 makes a dummy pass beside rank 0's second. Greedy: the tokens of one unsharded rank.
  TinyRankModel m;
  RankConfig config = Config(m.dir.path());
  SamplingSettings greedy = Sampling(m);
  greedy.do_sample = false;
  const std::vector<std::vector<PromptInput>> mine = {Prompts(m), {Prompts(m)[1]}};
  absl::Status skipped;
  auto plain = RankOn("cuda:0", config, &skipped);
  if (plain == nullptr) {
    WARN("skipped: " << skipped.ToString());
    return;
  }
  std::vector<absl::StatusOr<GenerateOutput>> expected;
  for (int r = 0; r < 2; ++r) expected.push_back(plain->Generate(absl::StrCat("ref", r), mine[r], greedy, false));
  plain.reset();
  config.actor.shard_parameters = true;
  config.actor.rollout_gather_layer_by_layer = true;
  config.actor.rollout_max_num_seqs = 2;
  auto generate = [&](double utilization) {
    config.actor.rollout_gpu_memory_utilization = utilization;
    std::vector<std::unique_ptr<RankInterface>> ranks;
    for (int r = 0; r < 2; ++r) ranks.push_back(RankOn("cuda:0", config, &skipped));
    JoinGroup(ranks, absl::Seconds(20));
    return GenerateOnEveryRank(ranks, "g", mine, greedy, false);
  };
  auto out = generate(0.5);
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r);
    RequireSameTokens(out[r], expected[r]);
    CHECK(out[r]->metrics.at("perf/rollout_kv_cache_slots") == 2.0);
  }
  // No room: both ranks refuse before their first gather, naming the keys (no rank waits for a peer).
  out = generate(1e-9);
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r);
    REQUIRE_FALSE(out[r].ok());
    CHECK(absl::IsResourceExhausted(out[r].status()));
    CHECK_THAT(std::string(out[r].status().message()),
               Catch::Contains("actor_rollout_ref.rollout.gpu_memory_utilization 1e-09 of") &&
                   Catch::Contains("actor_rollout_ref.rollout.gather_layer_by_layer") &&
                   Catch::Contains("a pass of one prompt's 2 samples"));
  }
}

TEST_CASE("packed passes on cuda:0 in bf16 (flash attention, variable length) agree with padded ones",
          "[worker][rank][gpu]") {
  TinyRankModel m;
  RankConfig config = Config(m.dir.path());
  config.dtype = "bfloat16";
  absl::Status skipped;
  auto padded = RankOn("cuda:0", config, &skipped);
  if (padded == nullptr) {
    WARN("skipped: " << skipped.ToString());
    return;
  }
  const StepOutput a = Step(*padded, m, "g");
  padded.reset();
  config.actor.remove_padding = true;
  auto packed = RankOn("cuda:0", config, &skipped);
  REQUIRE(packed != nullptr);
  const StepOutput b = Step(*packed, m, "g");
  REQUIRE(a.responses == b.responses);  // the same greedy rollout (generation does not pack)
  // bf16 kernels differ (flash attention against the padded path): agreement within bf16 rounding.
  for (const char* key : {"actor/pg_loss", "actor/grad_norm", "actor/entropy", "actor/kl_loss"}) {
    INFO(key);
    REQUIRE(b.update.at(key) == Approx(a.update.at(key)).epsilon(3e-2).margin(1e-3));
  }
  REQUIRE(b.log_probs.at("training/rollout_probs_diff_max") < 0.1);
}

}  // namespace
}  // namespace verl
