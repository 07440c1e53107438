#include "worker/rollout/generator.h"

#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <limits>

namespace verl {

double CounterUniform(uint64_t seed, uint64_t stream, uint64_t counter) {
  auto mix = [](uint64_t z) {
    z += 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  };
  const uint64_t bits = mix(mix(mix(seed) ^ stream) ^ counter);
  return static_cast<double>(bits >> 11) * 0x1.0p-53;  // 53 random bits: [0, 1)
}

at::Tensor SampleNextTokens(const at::Tensor& logits, const SamplingOptions& options, const at::Tensor& uniforms,
                            at::Tensor* log_probs) {
  // Log-probs are always under logits / temperature (the trainer's quantity), greedy or not.
  at::Tensor scaled = options.temperature > 0 ? logits / options.temperature : logits;
  at::Tensor tokens;
  if (!options.do_sample) {
    tokens = scaled.argmax(-1);
  } else {
    const float neg_inf = -std::numeric_limits<float>::infinity();
    at::Tensor filtered = scaled;
    if (options.top_k > 0 && options.top_k < scaled.size(-1)) {
      at::Tensor kth = std::get<0>(scaled.topk(options.top_k, -1)).narrow(-1, options.top_k - 1, 1);
      filtered = filtered.masked_fill(filtered.lt(kth), neg_inf);
    }
    if (options.top_p < 1.0) {
      auto [sorted, order] = filtered.sort(-1, /*descending=*/true);
      at::Tensor probs = sorted.softmax(-1);
      // Drop a token when the mass of the tokens before it already exceeds top_p (the first is always kept).
      at::Tensor remove = (probs.cumsum(-1) - probs).gt(options.top_p);
      sorted = sorted.masked_fill(remove, neg_inf);
      filtered = at::empty_like(sorted).scatter_(-1, order, sorted);
    }
    // Inverse CDF in float64: the first token whose cumulative mass exceeds u * total. Tokens of probability 0 add
    // nothing to the CDF, so they are never the first to exceed it; the clamp to the last token of positive mass
    // covers u * total rounding up to the total.
    at::Tensor cdf = filtered.softmax(-1).to(at::kDouble).cumsum(-1);
    at::Tensor total = cdf.narrow(-1, cdf.size(-1) - 1, 1).contiguous();
    at::Tensor target = uniforms.to(at::kDouble).view({-1, 1}) * total;
    at::Tensor drawn = at::searchsorted(cdf, target, /*out_int32=*/false, /*right=*/true);
    at::Tensor last = at::searchsorted(cdf, total, /*out_int32=*/false, /*right=*/false);
    tokens = at::minimum(drawn, last).squeeze(-1);
  }
  if (log_probs) *log_probs = scaled.log_softmax(-1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1);
  return tokens;
}

RolloutBatch Generate(const DecoderModel& model, const std::vector<std::vector<int32_t>>& prompts,
                      const SamplingOptions& options) {
  c10::InferenceMode guard;
  const int64_t n = options.n;
  const int64_t N = static_cast<int64_t>(prompts.size()) * n;
  int64_t P = 0;
  for (const auto& p : prompts) P = std::max<int64_t>(P, p.size());
  const int64_t R = options.max_new_tokens;
  auto long_opts = at::TensorOptions().dtype(at::kLong);
  // The batch is laid out on the host, then everything runs on the model's device.
  const at::Device device = model.device();
  auto dev_long = long_opts.device(device);

  RolloutBatch out;
  out.prompts = at::full({N, P}, options.pad_token_id, long_opts);
  out.prompt_mask = at::zeros({N, P}, at::kBool);
  {
    auto ids = out.prompts.accessor<int64_t, 2>();
    auto mask = out.prompt_mask.accessor<bool, 2>();
    for (size_t i = 0; i < prompts.size(); ++i) {
      const int64_t len = prompts[i].size();
      for (int64_t j = 0; j < n; ++j) {
        const int64_t row = i * n + j;
        for (int64_t t = 0; t < len; ++t) {
          ids[row][P - len + t] = prompts[i][t];
          mask[row][P - len + t] = true;
        }
      }
    }
  }
  out.prompts = out.prompts.to(device);
  out.prompt_mask = out.prompt_mask.to(device);
  out.responses = at::full({N, R}, options.pad_token_id, dev_long);
  out.response_mask = at::zeros({N, R}, at::TensorOptions().dtype(at::kBool).device(device));
  out.log_probs = at::zeros({N, R}, at::TensorOptions().dtype(at::kFloat).device(device));

  std::vector<uint64_t> streams(N);
  for (int64_t i = 0; i < static_cast<int64_t>(prompts.size()); ++i) {
    const uint64_t key = options.prompt_keys.empty() ? static_cast<uint64_t>(i) : options.prompt_keys.at(i);
    for (int64_t j = 0; j < n; ++j) streams[i * n + j] = key * static_cast<uint64_t>(n) + static_cast<uint64_t>(j);
  }
  at::Tensor uniforms = at::empty({N}, at::kDouble);  // host; copied to the device each step
  at::Tensor eos =
      at::tensor(std::vector<int64_t>(options.eos_token_ids.begin(), options.eos_token_ids.end()), long_opts)
          .to(device);
  at::Tensor key_valid = at::zeros({N, P + R}, at::TensorOptions().dtype(at::kBool).device(device));
  key_valid.narrow(1, 0, P).copy_(out.prompt_mask);

  KvCache cache = model.NewCache(N, P + R);
  at::Tensor hidden = model.Forward(out.prompts, PositionIdsFromMask(out.prompt_mask),
                                    BuildAttentionMask(out.prompt_mask, 0, P), &cache);
  at::Tensor logits = model.Logits(hidden.select(1, P - 1));
  at::Tensor next_pos = out.prompt_mask.sum(1);  // position of the first response token
  at::Tensor done = at::zeros({N}, at::TensorOptions().dtype(at::kBool).device(device));
  at::Tensor pad = at::full({N}, options.pad_token_id, dev_long);
  for (int64_t t = 0; t < R; ++t) {
    at::Tensor lp;
    if (options.do_sample) {
      double* u = uniforms.data_ptr<double>();
      for (int64_t row = 0; row < N; ++row) u[row] = CounterUniform(options.seed, streams[row], t);
    }
    at::Tensor tok = SampleNextTokens(logits, options, uniforms.to(device), &lp);
    tok = at::where(done, pad, tok);
    out.responses.select(1, t).copy_(tok);
    out.log_probs.select(1, t).copy_(lp.masked_fill(done, 0.0));
    out.response_mask.select(1, t).copy_(done.logical_not());
    if (eos.numel() > 0) done = done.logical_or(at::isin(tok, eos));
    if (t + 1 == R || (!options.lockstep && done.all().item<bool>())) break;
    key_valid.select(1, P + t).fill_(true);
    at::Tensor mask = key_valid.narrow(1, 0, P + t + 1).view({N, 1, 1, P + t + 1});
    hidden = model.Forward(tok.unsqueeze(1), (next_pos + t).unsqueeze(1), mask, &cache);
    logits = model.Logits(hidden.select(1, 0));
  }
  return out;
}

}  // namespace verl
