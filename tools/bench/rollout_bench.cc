// verl-bench-rollout: BENCHMARKS.md B1 for our generation engine. Loads an HF model directory (e.g. bench-0.5b, made by
// verl-make-tiny-model), makes `--prompts` random prompts of `--prompt-len` token ids (seeded), and generates up to
// `--new-tokens` tokens for each at temperature 1, top-p 1. By default EOS is ignored (every sequence runs to the end,
// B1's shape); `--eos-every K` makes every token id divisible by K an EOS, so lengths spread out like real rollouts
// (a long tail). `--schedule continuous` (the engine's default) runs at most `--max-num-seqs` sequences at once and
// refills finished slots; `--schedule static` runs waves of `--max-num-seqs` sequences, each until its longest ends.
// Prints one JSON object: wall seconds from the first prompt in to the last token out (after `--warmup` untimed runs
// of the same batch), generated tokens per second, and the configuration.
//
//   verl-bench-rollout --model DIR [--prompts 512] [--prompt-len 256] [--new-tokens 512] [--device cuda]
//                      [--dtype bfloat16] [--warmup 1] [--repeats 1] [--seed 0] [--schedule continuous|static]
//                      [--max-num-seqs 1024] [--eos-every 0] [--enforce-eager 0] [--greedy 0] [--profile 0]
//                      [--n 1] [--share-prompts 1]
// --n N: N samples of each prompt (GRPO's rollout.n; --prompts x N sequences); --share-prompts 0 gives each sample its
// own copy of its prompt's KV cache (rollout.enable_prefix_caching=false) instead of reading it from one slot.
// --profile 1 adds one more run under the Kineto profiler: device time per kernel name (kernel_profile.h).
//
// tools/bench/b1_rollout.py runs it beside HF transformers' generate on the same files and shapes.

#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tools/bench/bench_util.h"
#include "tools/bench/kernel_profile.h"
#include "worker/model/decoder_model.h"
#include "worker/rollout/generator.h"

namespace {

void Usage() {
  std::cerr << "usage: verl-bench-rollout --model DIR [--prompts 512] [--prompt-len 256] [--new-tokens 512] "
               "[--device cpu|cuda] [--dtype float32|bfloat16] [--warmup 1] [--repeats 1] [--seed 0] "
               "[--schedule continuous|static] [--max-num-seqs 1024] [--eos-every 0] [--enforce-eager 0] [--greedy 0] "
               "[--profile 0] [--fold-norms 1] [--fold-post-norms 1] [--n 1] [--share-prompts 1]\n";
}

}  // namespace

int main(int argc, char** argv) {
  std::map<std::string, std::string> flags = {{"model", ""},
                                              {"prompts", "512"},
                                              {"prompt-len", "256"},
                                              {"new-tokens", "512"},
                                              {"device", "cuda"},
                                              {"dtype", "bfloat16"},
                                              {"warmup", "1"},
                                              {"repeats", "1"},
                                              {"seed", "0"},
                                              {"schedule", "continuous"},
                                              {"max-num-seqs", "1024"},
                                              {"eos-every", "0"},
                                              {"enforce-eager", "0"},
                                              {"greedy", "0"},
                                              {"profile", "0"},
                                              {"fold-norms", "1"},
                                              {"fold-post-norms", "1"},
                                              {"n", "1"},
                                              {"share-prompts", "1"}};
  auto parsed = verl::bench::ParseFlags(argc, argv, flags, "model");
  if (!parsed) {
    Usage();
    return 2;
  }
  flags = *parsed;
  const int prompts = std::stoi(flags["prompts"]), prompt_len = std::stoi(flags["prompt-len"]);
  const int new_tokens = std::stoi(flags["new-tokens"]), warmup = std::stoi(flags["warmup"]);
  const int repeats = std::stoi(flags["repeats"]);
  const int max_seqs = std::stoi(flags["max-num-seqs"]), eos_every = std::stoi(flags["eos-every"]);
  const bool continuous = flags["schedule"] == "continuous";
  if (!continuous && flags["schedule"] != "static") {
    Usage();
    return 2;
  }
  const at::ScalarType dtype = flags["dtype"] == "bfloat16" ? at::kBFloat16 : at::kFloat;
  const at::Device device(flags["device"] == "cuda" ? "cuda:0" : "cpu");
  try {
    auto model = verl::DecoderModel::Load(flags["model"], dtype, device);
    if (!model.ok()) {
      std::cerr << "verl-bench-rollout: " << model.status().message() << "\n";
      return 1;
    }
    const int64_t vocab = (*model)->config().vocab_size;
    std::mt19937_64 rng(std::stoull(flags["seed"]));
    std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(vocab - 1));
    std::vector<std::vector<int32_t>> batch(prompts, std::vector<int32_t>(prompt_len));
    for (auto& p : batch) {
      for (int32_t& t : p) t = token(rng);
    }
    verl::SamplingOptions opts;
    opts.temperature = 1.0;
    opts.top_p = 1.0;
    opts.do_sample = flags["greedy"] != "1";  // --greedy 1: argmax, to see what sampling costs
    opts.max_new_tokens = new_tokens;  // without eos_token_ids every sequence generates all of them
    opts.seed = std::stoull(flags["seed"]);
    opts.max_num_seqs = max_seqs;
    opts.enforce_eager = flags["enforce-eager"] == "1";
    opts.fold_input_norms = flags["fold-norms"] != "0";  // --fold-norms 0: each layer's input RMSNorm as a kernel
    // --fold-post-norms 0: each layer's post-attention RMSNorm (with the residual add) as a kernel
    opts.fold_post_attention_norms = flags["fold-post-norms"] != "0";
    opts.n = std::max(1, std::stoi(flags["n"]));
    opts.prompt_sharing = flags["share-prompts"] == "0" ? verl::PromptSharing::kOff : verl::PromptSharing::kAuto;
    for (int64_t id = eos_every; eos_every > 0 && id < vocab; id += eos_every) {
      opts.eos_token_ids.push_back(static_cast<int32_t>(id));
    }
    // Static waves: max_num_seqs sequences (their prompts' n samples each) at a time, each wave decoded until its last
    // sequence ends.
    const size_t wave_prompts = static_cast<size_t>(std::max(1, max_seqs / opts.n));
    auto run = [&]() {
      if (continuous) return verl::GenerateContinuous(**model, batch, opts);
      std::vector<verl::RolloutBatch> waves;
      for (size_t b = 0; b < batch.size(); b += wave_prompts) {
        verl::SamplingOptions wave = opts;
        std::vector<std::vector<int32_t>> part(
            batch.begin() + static_cast<std::ptrdiff_t>(b),
            batch.begin() + static_cast<std::ptrdiff_t>(std::min(batch.size(), b + wave_prompts)));
        for (size_t i = 0; i < part.size(); ++i) wave.prompt_keys.push_back(b + i);
        waves.push_back(verl::GenerateStatic(**model, part, wave));
      }
      verl::RolloutBatch all;
      std::vector<at::Tensor> masks;
      for (const auto& w : waves) masks.push_back(w.response_mask.cpu());
      all.response_mask = at::cat(masks, 0);
      return all;
    };
    auto sync = [&] { verl::bench::SyncDevice(device); };
    for (int i = 0; i < warmup; ++i) (void)run();
    sync();
    std::vector<double> seconds;
    int64_t generated = 0;
    int64_t graphs = 0;
    int64_t handoffs = 0, joins = 0;
    for (int i = 0; i < repeats; ++i) {
      const auto start = std::chrono::steady_clock::now();
      verl::RolloutBatch out = run();
      sync();
      seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      generated = out.response_mask.sum().item<int64_t>();
      graphs = out.decode_graphs;
      handoffs = out.prompt_handoffs;
      joins = out.prompt_joins;
    }
    const double peak_gb = verl::bench::PeakAllocatedGb(device);
    double best = seconds.front();
    for (double s : seconds) best = std::min(best, s);
    nlohmann::json result = {
        {"engine", "verl-cpp"},
        {"model", flags["model"]},
        {"prompts", prompts},
        {"prompt_len", prompt_len},
        {"new_tokens", new_tokens},
        {"device", flags["device"]},
        {"dtype", flags["dtype"]},
        {"schedule", flags["schedule"]},
        {"max_num_seqs", max_seqs},
        {"enforce_eager", opts.enforce_eager},
        {"fold_input_norms", opts.fold_input_norms},
        {"fold_post_attention_norms", opts.fold_post_attention_norms},
        {"do_sample", opts.do_sample},
        {"n", opts.n},
        {"prompt_sharing",
         opts.prompt_sharing == verl::PromptSharing::kOff ? "off" : "auto (on with the decode kernel)"},
        {"prompt_handoffs", handoffs},
        {"prompt_joins", joins},
        {"decode_graphs", graphs},
        {"max_memory_allocated_gb", peak_gb},
        {"eos_ids", opts.eos_token_ids.size()},
        {"warmup", warmup},
        {"seconds", seconds},
        {"best_seconds", best},
        {"generated_tokens", generated},
        {"tokens_per_s", static_cast<double>(generated) / best}};
    if (flags["profile"] == "1") {
      result["profile"] = verl::bench::ProfileKernels([&] {
        (void)run();
        sync();
      });
    }
    std::cout << result.dump() << "\n";
  } catch (const std::exception& e) {
    std::cerr << "verl-bench-rollout: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
