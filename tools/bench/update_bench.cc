// verl-bench-update: BENCHMARKS.md B2 for our training engine. Loads an HF model directory (e.g. bench-0.5b), makes
// `--sequences` random sequences of `--prompt-len` + `--response-len` token ids (seeded; every token valid), random
// advantages and stored old / ref log-probs, and times actor updates: one optimizer step over all sequences
// (PPO clip loss + low_var_kl KL loss, token-mean, grad clip 1.0, AdamW with float32 master weights for bf16), in
// micro-batches of `--micro` sequences. Prints one JSON object: seconds per update (after `--warmup` untimed ones),
// tokens per second, the peak device memory, and the configuration. tools/bench/b2_update.py runs it beside the same
// update in PyTorch eager with the HF model and computes MFU.
//
//   verl-bench-update --model DIR [--sequences 512] [--prompt-len 256] [--response-len 512] [--micro 8]
//                     [--device cuda] [--dtype bfloat16] [--warmup 1] [--repeats 2] [--seed 0] [--checkpointing 0]
//                     [--max-token-len 0] [--remove-padding 0] [--profile 0] [--log-probs 0]
//                     [--min-prompt-len P] [--min-response-len R] [--sdpa default|flash|cudnn|efficient]
//                     [--n 1] [--prefix-grouper 0]
// --profile 1 adds one more update under the Kineto profiler: device time per kernel name and per (host op, its input
// shapes, the spans around it, kernel) (kernel_profile.h), the --profile-top largest of each (30).
// --log-probs 1 times the no-grad log-prob pass over the same sequences instead (a GRPO step's old and reference
// log-probs: ComputeLogProbsNoGrad, micro-batches as the update's), e.g. B3's 1,024 x 768 tokens at a 24,576 budget.
// --min-prompt-len / --min-response-len draw each row's prompt and response lengths uniformly from [min, max] (seeded):
// prompts left-padded, responses right-padded, as a rollout's batch; `tokens` then counts the valid ones
// (`padded_tokens` all). VERL_CAUSAL_PASSES=0 in the environment runs the padded passes with the explicit mask.
//
// --n G: each run of G consecutive rows has one prompt (its first row's tokens and length), as GRPO's rollout.n
// samples; --prefix-grouper 1 runs the passes with use_prefix_grouper (each prompt once per pass; packed).
//
// --sdpa picks the one backend ATen's scaled_dot_product_attention may use in the padded passes (math too is off, so
// a backend that cannot run the call fails rather than falls back); `default` leaves ATen's choice (cuDNN's on an
// H200). The packed passes call flash attention directly either way; with --prefix-grouper 1 they run SDPA over
// gathered rows.
//
// --checkpointing 1 recomputes each layer in backward (enable_gradient_checkpointing); with --recompute-layers N only
// the first N (recompute_num_layers); --keep-projections 0 recomputes their q/k/v and output projections too
// (recompute_keep_projections=false). The peak resident set of the process is reported too (the CPU's memory measure).
//
// --overlap-log-probs R (an experiment, GPU): besides the update, a no-grad log-prob pass over the batch's first R rows
// by a second copy of the model (a frozen reference), timed one after the other on one stream and at once on two
// streams (each from its own host thread), alternating, `--repeats` times each: whether a GRPO step's reference pass
// of one mini-batch could hide in the update of another (the update's memory-bound kernels beside the pass's GEMMs).
// Adds `overlap`: both ways' seconds and figures (the pass's mean log-prob must be equal both ways).

#include <ATen/ATen.h>

#include <sys/resource.h>

#include <c10/core/StreamGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <chrono>
#include <cstdint>
#include <iostream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "tools/bench/bench_util.h"
#include "tools/bench/kernel_profile.h"
#include "worker/model/decoder_model.h"
#include "worker/train/adamw.h"
#include "worker/train/ppo_actor.h"

namespace {

// The process's peak resident set (Linux reports ru_maxrss in KiB).
double PeakRssGb() {
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / (1 << 20);
}

void Usage() {
  std::cerr << "usage: verl-bench-update --model DIR [--sequences 512] [--prompt-len 256] [--response-len 512] "
               "[--micro 8] [--device cpu|cuda] [--dtype float32|bfloat16] [--warmup 1] [--repeats 2] [--seed 0] "
               "[--checkpointing 0|1] [--max-token-len 0] [--remove-padding 0|1] [--prefix-grouper 0|1] [--n 1] "
               "[--fuse-lm-head 1|0] [--mini-batch 0] [--log-probs 0|1] [--profile 0|1] [--profile-top 30] "
               "[--overlap-log-probs 0]\n";
}

}  // namespace

int main(int argc, char** argv) {
  std::map<std::string, std::string> flags = {{"model", ""},
                                              {"sequences", "512"},
                                              {"prompt-len", "256"},
                                              {"response-len", "512"},
                                              {"micro", "8"},
                                              {"device", "cuda"},
                                              {"dtype", "bfloat16"},
                                              {"warmup", "1"},
                                              {"repeats", "2"},
                                              {"seed", "0"},
                                              {"checkpointing", "0"},
                                              {"recompute-layers", "-1"},
                                              {"keep-projections", "1"},
                                              {"max-token-len", "0"},
                                              {"remove-padding", "0"},
                                              {"profile", "0"},
                                              {"profile-top", "30"},
                                              {"log-probs", "0"},
                                              {"min-prompt-len", ""},
                                              {"min-response-len", ""},
                                              {"sdpa", "default"},
                                              {"n", "1"},
                                              {"prefix-grouper", "0"},
                                              {"fuse-lm-head", "1"}, {"mini-batch", "0"},
                                              {"overlap-log-probs", "0"}};
  auto parsed = verl::bench::ParseFlags(argc, argv, flags, "model");
  if (!parsed) {
    Usage();
    return 2;
  }
  flags = *parsed;
  const int64_t N = std::stoll(flags["sequences"]), P = std::stoll(flags["prompt-len"]);
  const int64_t R = std::stoll(flags["response-len"]), micro = std::stoll(flags["micro"]);
  const int warmup = std::stoi(flags["warmup"]), repeats = std::stoi(flags["repeats"]);
  const int profile_top = std::stoi(flags["profile-top"]);
  if (profile_top < 1) {
    std::cerr << "verl-bench-update: --profile-top must be at least 1, got " << profile_top << "\n";
    return 2;
  }
  const at::ScalarType dtype = flags["dtype"] == "bfloat16" ? at::kBFloat16 : at::kFloat;
  const at::Device device(flags["device"] == "cuda" ? "cuda:0" : "cpu");
  if (const std::string& sdpa = flags["sdpa"]; sdpa != "default") {
    if (sdpa != "flash" && sdpa != "cudnn" && sdpa != "efficient") {
      std::cerr << "verl-bench-update: --sdpa must be default, flash, cudnn or efficient, got '" << sdpa << "'\n";
      return 2;
    }
    at::Context& ctx = at::globalContext();
    ctx.setSDPUseFlash(sdpa == "flash");
    ctx.setSDPUseCuDNN(sdpa == "cudnn");
    ctx.setSDPUseMemEfficient(sdpa == "efficient");
    ctx.setSDPUseMath(false);
  }
  try {
    auto model = verl::DecoderModel::Load(flags["model"], dtype, device);
    if (!model.ok()) {
      std::cerr << "verl-bench-update: " << model.status().message() << "\n";
      return 1;
    }
    verl::DecoderModel& m = **model;
    m.SetGradientCheckpointing(flags["checkpointing"] == "1", std::stoll(flags["recompute-layers"]),
                               flags["keep-projections"] == "1");
    at::manual_seed(std::stoull(flags["seed"]));
    const auto long_on = at::TensorOptions(at::kLong).device(device);
    verl::SequenceBatch batch;
    batch.input_ids = at::randint(0, m.config().vocab_size, {N, P + R}, long_on);
    // Each row's prompt and response lengths, uniform in [min, max] (all of them at max by default).
    const int64_t min_p = flags["min-prompt-len"].empty() ? P : std::stoll(flags["min-prompt-len"]);
    const int64_t min_r = flags["min-response-len"].empty() ? R : std::stoll(flags["min-response-len"]);
    if (min_p < 1 || min_p > P || min_r < 1 || min_r > R) {
      std::cerr << "verl-bench-update: --min-prompt-len must be in [1, " << P << "] and --min-response-len in [1, " << R
                << "]\n";
      return 2;
    }
    const int64_t n = std::stoll(flags["n"]);
    if (n < 1 || N % n != 0) {
      std::cerr << "verl-bench-update: --n must be >= 1 and divide --sequences\n";
      return 2;
    }
    at::Tensor prompt_len = at::randint(min_p, P + 1, {N, 1}, long_on);
    if (n > 1) {  // every row takes its group's first row's prompt
      const at::Tensor first = at::arange(N, long_on).div(n, "floor").mul(n);
      batch.input_ids.narrow(1, 0, P).copy_(batch.input_ids.narrow(1, 0, P).index_select(0, first));
      prompt_len = prompt_len.index_select(0, first);
    }
    const at::Tensor response_len = at::randint(min_r, R + 1, {N, 1}, long_on);
    const at::Tensor column = at::arange(P + R, long_on).view({1, P + R});
    batch.attention_mask = column.ge(P - prompt_len).logical_and(column.lt(P + response_len));
    batch.responses = batch.input_ids.narrow(1, P, R).contiguous();
    batch.response_mask = batch.attention_mask.narrow(1, P, R).contiguous();
    const auto float_on = at::TensorOptions(at::kFloat).device(device);
    // Stored log-probs near a uniform distribution's (the random model's), so ratios and KL stay moderate.
    const double uniform = -std::log(static_cast<double>(m.config().vocab_size));
    verl::PolicyUpdateInputs inputs;
    inputs.old_log_probs = at::randn({N, R}, float_on) * 0.1 + uniform;
    inputs.ref_log_probs = at::randn({N, R}, float_on) * 0.1 + uniform;
    inputs.advantages = at::randn({N, R}, float_on);
    verl::PolicyUpdateOptions o;
    o.lr = 1e-6;
    o.grad_clip = 1.0;
    o.use_kl_loss = true;
    o.kl_loss_coef = 0.001;
    o.kl_loss_type = "low_var_kl";
    o.loss.loss_agg_mode = "token-mean";
    // One optimizer step per update by default; --mini-batch M: N / M steps (B3 takes two of 512 rows each).
    o.mini_batch_size = std::stoll(flags["mini-batch"]) > 0 ? std::stoll(flags["mini-batch"]) : N;
    o.micro_batch_size = micro;
    o.max_token_len = std::stoll(flags["max-token-len"]);
    o.remove_padding = flags["remove-padding"] == "1";
    o.share_prompts = flags["prefix-grouper"] == "1";
    o.fuse_lm_head_grad = flags["fuse-lm-head"] == "1";
    verl::AdamW optimizer(m.named_parameters(), verl::AdamWOptions{1e-6, 0.01, 0.9, 0.999, 1e-8});
    verl::GradScope<verl::DecoderModel> grads(m);
    auto sync = [&] { verl::bench::SyncDevice(device); };
    const bool log_probs_only = flags["log-probs"] == "1";
    verl::MicroBatching micro_batching;
    micro_batching.rows = micro;
    micro_batching.max_token_len = o.max_token_len;
    micro_batching.budget_key = "--max-token-len";
    micro_batching.packed = o.remove_padding || o.share_prompts;
    micro_batching.share_prompts = o.share_prompts;
    auto update = [&]() -> std::map<std::string, double> {
      if (log_probs_only) {
        auto lp = verl::ComputeLogProbsNoGrad(m, batch, 1.0, micro_batching);
        if (!lp.ok()) throw std::runtime_error(std::string(lp.status().message()));
        return {{"log_prob_mean", lp->mean().item<double>()}};  // reads back: synchronised
      }
      auto metrics = verl::UpdatePolicy(m, optimizer, batch, inputs, o);
      if (!metrics.ok()) throw std::runtime_error(std::string(metrics.status().message()));
      return *metrics;
    };
    for (int i = 0; i < warmup; ++i) (void)update();
    sync();
    std::vector<double> seconds;
    std::map<std::string, double> last;
    for (int i = 0; i < repeats; ++i) {
      const auto start = std::chrono::steady_clock::now();
      last = update();  // reads the metrics back: synchronised
      sync();
      seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    double best = seconds.front();
    for (double s : seconds) best = std::min(best, s);
    const double peak_gb = verl::bench::PeakAllocatedGb(device);
    const int64_t tokens = batch.attention_mask.sum().item<int64_t>();
    nlohmann::json result = {{"engine", "verl-cpp"},
                             {"pass", log_probs_only ? "log-probs (no grad)" : "update"},
                             {"model", flags["model"]},
                             {"sequences", N},
                             {"prompt_len", P},
                             {"response_len", R},
                             {"min_prompt_len", min_p},
                             {"min_response_len", min_r},
                             {"causal_passes", verl::CausalPasses(batch, o.remove_padding || o.share_prompts)},
                             {"padded_tokens", N * (P + R)},
                             {"micro_batch", micro},
                             {"max_token_len", o.max_token_len},
                             {"remove_padding", o.remove_padding},
                             {"n", n},
                             {"prefix_grouper", o.share_prompts},
                             {"fuse_lm_head_grad", o.fuse_lm_head_grad},
                             {"mini_batch", o.mini_batch_size},
                             {"sdpa", flags["sdpa"]},
                             {"checkpointing", m.gradient_checkpointing()},
                             {"recomputed_layers", m.recomputed_layers()},
                             {"keep_projections", m.keep_projections()},
                             {"device", flags["device"]},
                             {"dtype", flags["dtype"]},
                             {"warmup", warmup},
                             {"seconds", seconds},
                             {"best_seconds", best},
                             {"tokens", tokens},
                             {"tokens_per_s", static_cast<double>(tokens) / best},
                             {"peak_memory_allocated_gb", peak_gb},
                             {"gradient_checkpointing", m.gradient_checkpointing()},
                             {"peak_rss_gb", PeakRssGb()}};
    // The figures of the pass timed: the update's grad norm and loss, or the log-probs' mean.
    for (const char* key : {"actor/grad_norm", "actor/pg_loss", "log_prob_mean", "perf/actor_packed_tokens"}) {
      if (auto it = last.find(key); it != last.end()) {
        const std::string name = key;
        result[name.substr(name.find('/') + 1)] = it->second;
      }
    }
    if (const int64_t overlap_rows = std::stoll(flags["overlap-log-probs"]); overlap_rows > 0) {
      if (log_probs_only || overlap_rows > N) {
        throw std::runtime_error("--overlap-log-probs R needs --log-probs 0 and R <= --sequences");
      }
      auto ref = verl::DecoderModel::Load(flags["model"], dtype, device);
      if (!ref.ok()) throw std::runtime_error(std::string(ref.status().message()));
      const verl::SequenceBatch ref_batch = verl::SelectRows(batch, at::arange(overlap_rows, long_on));
      const auto* guard_impl = c10::impl::getDeviceGuardImpl(device.type());
      // (On the CPU, for a smoke test, both on its one stream.)
      const bool cuda = device.is_cuda();
      const c10::Stream update_stream =
          cuda ? guard_impl->getStreamFromGlobalPool(device) : guard_impl->getStream(device);
      const c10::Stream pass_stream = cuda ? guard_impl->getStreamFromGlobalPool(device) : update_stream;
      double pass_mean = 0.0;
      auto pass = [&](const c10::Stream& stream) {
        c10::StreamGuard on(stream);
        auto lp = verl::ComputeLogProbsNoGrad(**ref, ref_batch, 1.0, micro_batching);
        if (!lp.ok()) throw std::runtime_error(std::string(lp.status().message()));
        pass_mean = lp->mean().item<double>();
        if (cuda) guard_impl->synchronizeStream(stream);
      };
      auto run_update = [&](const c10::Stream& stream) {
        c10::StreamGuard on(stream);
        last = update();
        if (cuda) guard_impl->synchronizeStream(stream);
      };
      sync();
      nlohmann::json overlap = {{"rows", overlap_rows}};
      for (int i = 0; i < repeats + 1; ++i) {  // the first round of each way untimed (the streams' warm-up)
        auto start = std::chrono::steady_clock::now();
        run_update(update_stream);
        pass(update_stream);
        sync();
        const double serial = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        const double serial_mean = pass_mean;
        start = std::chrono::steady_clock::now();
        std::exception_ptr pass_error;
        std::thread side([&] {
          try {
            pass(pass_stream);
          } catch (...) {
            pass_error = std::current_exception();
          }
        });
        run_update(update_stream);
        side.join();
        if (pass_error) std::rethrow_exception(pass_error);
        sync();
        const double concurrent = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        if (i == 0) continue;
        overlap["serial_seconds"].push_back(serial);
        overlap["concurrent_seconds"].push_back(concurrent);
        overlap["serial_log_prob_mean"].push_back(serial_mean);
        overlap["concurrent_log_prob_mean"].push_back(pass_mean);
        if (auto it = last.find("actor/grad_norm"); it != last.end()) overlap["grad_norm"].push_back(it->second);
      }
      overlap["peak_memory_allocated_gb"] = verl::bench::PeakAllocatedGb(device);
      result["overlap"] = overlap;
    }
    if (flags["profile"] == "1") {
      result["profile"] = verl::bench::ProfileKernels(
          [&] {
            (void)update();
            sync();
          },
          profile_top);
    }
    std::cout << result.dump() << "\n";
  } catch (const std::exception& e) {
    std::cerr << "verl-bench-update: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
