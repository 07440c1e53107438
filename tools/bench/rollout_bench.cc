// verl-bench-rollout: BENCHMARKS.md B1 for our generation engine. Loads an HF model directory (e.g. bench-0.5b, made by
// verl-make-tiny-model), makes `--prompts` random prompts of `--prompt-len` token ids (seeded), and generates
// `--new-tokens` tokens for each with EOS ignored (no EOS ids: every sequence runs to the end), temperature 1, top-p 1.
// Prints one JSON object: wall seconds from the first prompt in to the last token out (after `--warmup` untimed runs
// of the same batch), generated tokens per second, and the configuration.
//
//   verl-bench-rollout --model DIR [--prompts 512] [--prompt-len 256] [--new-tokens 512] [--device cuda]
//                      [--dtype bfloat16] [--warmup 1] [--repeats 1] [--seed 0]
//
// tools/bench/b1_rollout.py runs it beside HF transformers' generate on the same files and shapes.

#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tools/bench/bench_util.h"
#include "worker/model/decoder_model.h"
#include "worker/rollout/generator.h"

namespace {

void Usage() {
  std::cerr << "usage: verl-bench-rollout --model DIR [--prompts 512] [--prompt-len 256] [--new-tokens 512] "
               "[--device cpu|cuda] [--dtype float32|bfloat16] [--warmup 1] [--repeats 1] [--seed 0]\n";
}

}  // namespace

int main(int argc, char** argv) {
  std::map<std::string, std::string> flags = {{"model", ""},       {"prompts", "512"}, {"prompt-len", "256"},
                                              {"new-tokens", "512"}, {"device", "cuda"}, {"dtype", "bfloat16"},
                                              {"warmup", "1"},     {"repeats", "1"},   {"seed", "0"}};
  auto parsed = verl::bench::ParseFlags(argc, argv, flags, "model");
  if (!parsed) {
    Usage();
    return 2;
  }
  flags = *parsed;
  const int prompts = std::stoi(flags["prompts"]), prompt_len = std::stoi(flags["prompt-len"]);
  const int new_tokens = std::stoi(flags["new-tokens"]), warmup = std::stoi(flags["warmup"]);
  const int repeats = std::stoi(flags["repeats"]);
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
    opts.do_sample = true;
    opts.max_new_tokens = new_tokens;  // no eos_token_ids: every sequence generates all of them
    opts.seed = std::stoull(flags["seed"]);
    auto sync = [&] { verl::bench::SyncDevice(device); };
    for (int i = 0; i < warmup; ++i) (void)verl::Generate(**model, batch, opts);
    sync();
    std::vector<double> seconds;
    int64_t generated = 0;
    for (int i = 0; i < repeats; ++i) {
      const auto start = std::chrono::steady_clock::now();
      verl::RolloutBatch out = verl::Generate(**model, batch, opts);  // returns CPU tensors: synchronised
      sync();
      seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      generated = out.response_mask.sum().item<int64_t>();
    }
    double best = seconds.front();
    for (double s : seconds) best = std::min(best, s);
    nlohmann::json result = {{"engine", "verl-cpp"},
                             {"model", flags["model"]},
                             {"prompts", prompts},
                             {"prompt_len", prompt_len},
                             {"new_tokens", new_tokens},
                             {"device", flags["device"]},
                             {"dtype", flags["dtype"]},
                             {"warmup", warmup},
                             {"seconds", seconds},
                             {"best_seconds", best},
                             {"generated_tokens", generated},
                             {"tokens_per_s", static_cast<double>(generated) / best}};
    std::cout << result.dump() << "\n";
  } catch (const std::exception& e) {
    std::cerr << "verl-bench-rollout: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
