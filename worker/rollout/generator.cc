#include "worker/rollout/generator.h"

#include <ATen/TensorIndexing.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <utility>
#include <vector>

#ifdef VERL_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include "worker/kernels/sampling.h"

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

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

namespace {

// The random stream of each output row (see SamplingOptions::prompt_keys).
std::vector<uint64_t> SampleStreams(size_t num_prompts, const SamplingOptions& options) {
  const uint64_t n = static_cast<uint64_t>(options.n);
  std::vector<uint64_t> streams(num_prompts * n);
  for (size_t i = 0; i < num_prompts; ++i) {
    const uint64_t key = options.prompt_keys.empty() ? static_cast<uint64_t>(i) : options.prompt_keys.at(i);
    for (uint64_t j = 0; j < n; ++j) streams[i * n + j] = key * n + j;
  }
  return streams;
}

// Host tensors [prompts * n, longest prompt]: row i * n + j holds prompt i left-padded with `pad`, and its mask.
std::pair<at::Tensor, at::Tensor> LeftPaddedPrompts(const std::vector<std::vector<int32_t>>& prompts, int64_t n,
                                                    int64_t pad) {
  int64_t P = 0;
  for (const auto& p : prompts) P = std::max<int64_t>(P, p.size());
  const int64_t N = static_cast<int64_t>(prompts.size()) * n;
  at::Tensor ids = at::full({N, P}, pad, at::TensorOptions().dtype(at::kLong));
  at::Tensor mask = at::zeros({N, P}, at::kBool);
  auto ids_a = ids.accessor<int64_t, 2>();
  auto mask_a = mask.accessor<bool, 2>();
  for (int64_t row = 0; row < N; ++row) {
    const std::vector<int32_t>& p = prompts[row / n];
    const int64_t len = p.size();
    for (int64_t t = 0; t < len; ++t) {
      ids_a[row][P - len + t] = p[t];
      mask_a[row][P - len + t] = true;
    }
  }
  return {ids, mask};
}

// SampleNextTokens' ATen composition over the rows of float32 `logits_f` (with their `uniforms`).
std::pair<at::Tensor, at::Tensor> SampleRows(const at::Tensor& logits_f, const SamplingOptions& options,
                                             const at::Tensor& uniforms, bool want_log_probs) {
  // Log-probs are always under logits / temperature (the trainer's quantity), greedy or not.
  at::Tensor scaled = options.temperature > 0 ? logits_f / options.temperature : logits_f;
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
      // Drop a token when the mass of the tokens of larger value already exceeds top_p (the largest are always kept).
      // Tokens of equal value are kept or dropped together, whatever order the sort gave them: each takes the mass
      // before the first of its ties, as the fused GPU sampler decides (sampling_kernel.h).
      const at::Tensor before = probs.cumsum(-1) - probs;
      const at::Tensor ascending = sorted.neg();
      const at::Tensor tie_start = at::searchsorted(ascending, ascending, /*out_int32=*/false, /*right=*/false);
      at::Tensor remove = before.gather(-1, tie_start).gt(options.top_p);
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
  at::Tensor lp;
  if (want_log_probs) lp = scaled.log_softmax(-1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1);
  return {tokens, lp};
}

}  // namespace

int64_t SamplerRowsPerPass(int64_t vocab) {
  return std::max<int64_t>(1, kSamplerWorkspaceBytes / (kSamplerBytesPerLogit * std::max<int64_t>(1, vocab)));
}

namespace {

// The ATen sampler's rows per pass: options.sampler_rows_per_pass where set, else SamplerRowsPerPass(vocab).
int64_t PassRows(const SamplingOptions& options, int64_t vocab) {
  return options.sampler_rows_per_pass > 0 ? options.sampler_rows_per_pass : SamplerRowsPerPass(vocab);
}

}  // namespace

at::Tensor SampleNextTokens(const at::Tensor& logits, const SamplingOptions& options, const at::Tensor& uniforms,
                            at::Tensor* log_probs) {
#ifdef VERL_WITH_CUDA
  if (kernels::SampleTokensSupported(logits)) {
    return kernels::SampleTokens(logits, options.temperature, !options.do_sample, options.top_k, options.top_p,
                                 uniforms, log_probs);
  }
#endif
  // ATen's composition runs in float32 (bf16/fp16 logits come only from the fused path's callers), over passes of
  // rows so that its temporaries (a sort's values and indices, float64 CDFs) stay within kSamplerWorkspaceBytes
  // whatever the batch: every operation is within a row, so the passes give the rows' results unchanged.
  const at::Tensor logits_f = logits.to(at::kFloat);
  const int64_t rows = logits_f.size(0);
  const int64_t step = PassRows(options, logits_f.size(-1));
  std::vector<at::Tensor> tokens, lps;
  int64_t begin = 0;
  do {  // at least one pass, so that no rows give empty results
    const int64_t n = std::min(step, rows - begin);
    // Greedy decoding may come without draws.
    const at::Tensor u = uniforms.defined() ? uniforms.narrow(0, begin, n) : uniforms;
    auto [t, lp] = SampleRows(logits_f.narrow(0, begin, n), options, u, log_probs != nullptr);
    tokens.push_back(t);
    if (log_probs) lps.push_back(lp);
    begin += n;
  } while (begin < rows);
  if (log_probs) *log_probs = lps.size() == 1 ? lps.front() : at::cat(lps);
  return tokens.size() == 1 ? tokens.front() : at::cat(tokens);
}

namespace {

void CheckPromptsNotEmpty(const std::vector<std::vector<int32_t>>& prompts) {
  for (size_t i = 0; i < prompts.size(); ++i) {
    TORCH_CHECK(!prompts[i].empty(), "generation: prompt ", i, " has no tokens (its first token needs a position)");
  }
}

// One static pass over all of `prompts` (their n samples each, one batch from prefill to the last token).
RolloutBatch StaticPass(const DecoderModel& model, const std::vector<std::vector<int32_t>>& prompts,
                        const SamplingOptions& options) {
  const int64_t n = options.n;
  const int64_t R = options.max_new_tokens;
  auto long_opts = at::TensorOptions().dtype(at::kLong);
  // The batch is laid out on the host, then everything runs on the model's device.
  const at::Device device = model.device();
  auto dev_long = long_opts.device(device);

  RolloutBatch out;
  std::tie(out.prompts, out.prompt_mask) = LeftPaddedPrompts(prompts, n, options.pad_token_id);
  const int64_t N = out.prompts.size(0);
  const int64_t P = out.prompts.size(1);
  out.prompts = out.prompts.to(device);
  out.prompt_mask = out.prompt_mask.to(device);
  out.responses = at::full({N, R}, options.pad_token_id, dev_long);
  out.response_mask = at::zeros({N, R}, at::TensorOptions().dtype(at::kBool).device(device));
  out.log_probs = at::zeros({N, R}, at::TensorOptions().dtype(at::kFloat).device(device));

  const std::vector<uint64_t> streams = SampleStreams(prompts.size(), options);
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

}  // namespace

int64_t StaticPassPrompts(int32_t n, int32_t max_num_seqs) {
  return std::max<int64_t>(1, max_num_seqs / std::max(1, n));
}

int64_t StaticPasses(int64_t num_prompts, int32_t n, int32_t max_num_seqs) {
  const int64_t per_pass = StaticPassPrompts(n, max_num_seqs);
  return (num_prompts + per_pass - 1) / per_pass;
}

RolloutBatch ConcatRollouts(const std::vector<RolloutBatch>& parts, int64_t pad_token_id) {
  TORCH_CHECK(!parts.empty(), "ConcatRollouts: no parts");
  if (parts.size() == 1) return parts.front();
  int64_t P = 0;
  for (const RolloutBatch& b : parts) P = std::max(P, b.prompts.size(1));
  std::vector<at::Tensor> prompts, prompt_mask, responses, response_mask, log_probs;
  RolloutBatch out;
  for (const RolloutBatch& b : parts) {
    const int64_t left = P - b.prompts.size(1);  // more left padding, as one batch of every row would have
    prompts.push_back(at::constant_pad_nd(b.prompts, {left, 0}, static_cast<double>(pad_token_id)));
    prompt_mask.push_back(at::constant_pad_nd(b.prompt_mask, {left, 0}, 0));
    responses.push_back(b.responses);
    response_mask.push_back(b.response_mask);
    log_probs.push_back(b.log_probs);
  }
  out.prompts = at::cat(prompts);
  out.prompt_mask = at::cat(prompt_mask);
  out.responses = at::cat(responses);
  out.response_mask = at::cat(response_mask);
  out.log_probs = at::cat(log_probs);
  return out;
}

RolloutBatch GenerateStatic(const DecoderModel& model, const std::vector<std::vector<int32_t>>& prompts,
                            const SamplingOptions& options) {
  c10::InferenceMode guard;
  CheckPromptsNotEmpty(prompts);
  const int64_t per_pass = StaticPassPrompts(options.n, options.max_num_seqs);
  const int64_t real = StaticPasses(static_cast<int64_t>(prompts.size()), options.n, options.max_num_seqs);
  std::vector<RolloutBatch> parts;
  const int64_t passes = std::max(real, options.lockstep_passes);
  for (int64_t pass = 0; pass < passes; ++pass) {
    if (pass < real) {
      // Prompts [begin, end), keeping their random streams (their keys in the whole batch).
      const int64_t begin = pass * per_pass;
      const int64_t end = std::min<int64_t>(begin + per_pass, static_cast<int64_t>(prompts.size()));
      SamplingOptions o = options;
      o.prompt_keys.clear();
      for (int64_t i = begin; i < end; ++i) {
        o.prompt_keys.push_back(options.prompt_keys.empty() ? static_cast<uint64_t>(i) : options.prompt_keys.at(i));
      }
      parts.push_back(StaticPass(
          model, std::vector<std::vector<int32_t>>(prompts.begin() + begin, prompts.begin() + end), o));
    } else {
      // A pass the rank's peers make over their prompts: the same forward passes (and gathers) over a dummy prompt.
      SamplingOptions dummy = options;
      dummy.do_sample = false;
      dummy.n = 1;
      dummy.prompt_keys = {0};
      (void)StaticPass(model, {{options.pad_token_id}}, dummy);
    }
  }
  RolloutBatch out = parts.empty() ? RolloutBatch{} : ConcatRollouts(parts, options.pad_token_id);
  out.static_passes = passes;
  return out;
}

RolloutBatch Generate(const DecoderModel& model, const std::vector<std::vector<int32_t>>& prompts,
                      const SamplingOptions& options) {
  return options.lockstep ? GenerateStatic(model, prompts, options) : GenerateContinuous(model, prompts, options);
}

int64_t KvSlotBytes(const DecoderConfig& config, at::ScalarType dtype, int64_t capacity) {
  return 2 * config.num_hidden_layers * config.num_key_value_heads * config.head_dim * capacity *
         static_cast<int64_t>(c10::elementSize(dtype));
}

int64_t ForwardTokenBytes(const DecoderConfig& config, at::ScalarType dtype) {
  const int64_t H = config.hidden_size;
  const int64_t q = config.num_attention_heads * config.head_dim;
  const int64_t kv = config.num_key_value_heads * config.head_dim;
  // The residual stream, its norm and the attention's output projection (4 H), q/k/v, the keys and values repeated
  // for the query heads (2 q), the attention's output (q), gate/up and SwiGLU's output (3 I).
  const int64_t elements = 4 * H + q + 2 * kv + 2 * q + q + 3 * config.intermediate_size;
  return elements * static_cast<int64_t>(c10::elementSize(dtype));
}

int64_t RolloutOutputBytes(int64_t rows, int64_t prompt_len, int64_t max_new_tokens) {
  // int64 ids and a bool mask per position; a float32 log-prob per response position.
  return rows * (prompt_len * 9 + max_new_tokens * 13);
}

int64_t StaticRowBytes(const DecoderConfig& config, at::ScalarType dtype, int64_t prompt_len) {
  const int64_t e = static_cast<int64_t>(c10::elementSize(dtype));
  return prompt_len * ForwardTokenBytes(config, dtype) + prompt_len * prompt_len * (1 + e) + config.vocab_size * 4;
}

int64_t PrefillBytes(const DecoderConfig& config, at::ScalarType dtype, std::vector<int64_t> prompt_lengths, int32_t n,
                     int64_t max_num_batched_tokens, int64_t max_rows, bool chunked) {
  if (prompt_lengths.empty()) return 0;
  std::sort(prompt_lengths.begin(), prompt_lengths.end());
  // A pass admits prompts while its tokens stay within max_num_batched_tokens (packed: the prompts' own; padded: its
  // rows at the longest's width, so no more prompts than packed), or one prompt alone: at most the shortest prompts
  // that fit, and as many tokens as the budget, all the prompts at the longest's width, or the longest alone allow.
  int64_t total = 0, prompts = 0;
  for (const int64_t len : prompt_lengths) {
    if (prompts > 0 && total + len > max_num_batched_tokens) break;
    total += len;
    ++prompts;
  }
  const int64_t longest = prompt_lengths.back();
  const int64_t padded_all = longest * static_cast<int64_t>(prompt_lengths.size());
  const int64_t e = static_cast<int64_t>(c10::elementSize(dtype));
  // A chunk of the longest prompt: at most max_num_batched_tokens tokens, its attention reading a layer's keys and
  // values of all the prompt's positions so far as copies (FlashCausalAfterCache's, flash attention's layout).
  const bool chunks = chunked && longest > max_num_batched_tokens;
  const int64_t tokens =
      chunks ? max_num_batched_tokens : std::max(longest, std::min(padded_all, max_num_batched_tokens));
  const int64_t chunk_keys = chunks ? 2 * longest * config.num_key_value_heads * config.head_dim * e : 0;
  // Where flash attention does not run (float32), the chunk attends under a mask over the positions so far, kept for
  // the whole pass as a bool and as an additive one in `dtype` (DecoderModel::ForwardChunk).
  const bool flash = PackedAttentionIsFlash(at::kCUDA, dtype);  // the budget is a GPU's
  const int64_t chunk_mask = chunks && !flash ? max_num_batched_tokens * longest * (1 + e) : 0;
  // There a whole-prompt pass is padded (GenerateContinuous's automatic layout): its rows' keys and values go to a cache
  // of their own, every layer's, before they are copied to the slots, and it attends under a [rows, longest, longest]
  // mask kept as bool and as additive `dtype`, its rows at the longest's width being at most `tokens`.
  const bool padded = !chunks && !flash;
  const int64_t padded_cache = padded ? KvSlotBytes(config, dtype, tokens) : 0;
  const int64_t padded_mask = padded ? tokens * longest * (1 + e) : 0;
  const int64_t rows = std::min(max_rows, prompts * std::max(1, n));
  // The prompts' last positions' logits in `dtype` and in float32, and a float32 row for each sample drawn from them.
  const int64_t vocab = config.vocab_size;
  return tokens * ForwardTokenBytes(config, dtype) + chunk_keys + chunk_mask + padded_cache + padded_mask +
         prompts * vocab * (e + 4) + rows * vocab * 4;
}

int64_t LayerByLayerGatherBytes(const DecoderConfig& config, at::ScalarType dtype) {
  const int64_t H = config.hidden_size;
  const int64_t q = config.num_attention_heads * config.head_dim;
  const int64_t kv = config.num_key_value_heads * config.head_dim;
  const int64_t layer = (q + 2 * kv) * H + q * H + 3 * config.intermediate_size * H + 2 * H + q + 2 * kv;
  return std::max(config.vocab_size * H, layer) * static_cast<int64_t>(c10::elementSize(dtype));
}

int64_t FoldedQkvBytes(const DecoderConfig& config, at::ScalarType dtype) {
  if (!FoldsInputNorms(dtype)) return 0;
  return config.num_hidden_layers * (config.num_attention_heads + 2 * config.num_key_value_heads) * config.head_dim *
         config.hidden_size * static_cast<int64_t>(c10::elementSize(dtype));
}

int64_t FoldedGateUpBytes(const DecoderConfig& config, at::ScalarType dtype) {
  if (!FoldsInputNorms(dtype)) return 0;
  return config.num_hidden_layers * 2 * config.intermediate_size * config.hidden_size *
         static_cast<int64_t>(c10::elementSize(dtype));
}

bool FoldCostsNoSlots(double free_bytes, int64_t folded_bytes, int64_t copy_bytes, int64_t slot_bytes, int64_t wanted) {
  auto slots = [&](int64_t folded) {
    return std::min<double>(static_cast<double>(wanted),
                            std::floor((free_bytes - static_cast<double>(folded)) / static_cast<double>(slot_bytes)));
  };
  return slots(folded_bytes + copy_bytes) >= slots(folded_bytes);
}

namespace {

// Slots [0, B) of `slots`, for one decoding step (the caller sets slot_pos, and slot_len or attend).
KvCache SlotView(const KvCache& slots, int64_t B) {
  KvCache view;
  for (size_t i = 0; i < slots.k.size(); ++i) {
    view.k.push_back(slots.k[i].narrow(0, 0, B));
    view.v.push_back(slots.v[i].narrow(0, 0, B));
  }
  view.capacity = slots.capacity;
  view.qkv_folded = slots.qkv_folded;
  view.gate_up_folded = slots.gate_up_folded;
  return view;
}

// Sets a slot view's shared prompts from `prefix` (int32 [2, B] on the device: each slot's prefix slot and length,
// KvCache::slot_prefix and prefix_len; undefined: none shared).
void SetPrefix(KvCache* view, const at::Tensor& prefix) {
  if (!prefix.defined()) return;
  view->slot_prefix = prefix.select(0, 0);
  view->prefix_len = prefix.select(0, 1);
}

// One slot-mode decoding step in the decode kernel over slots [0, B) of `slots`: row b feeds tokens[b] at position
// pos[b] (int64 [B] on the model's device; its cache index too), its prompt shared as `prefix` says (SetPrefix).
// Returns logits [B, V], in the model's dtype when `keep_dtype` (for the fused sampler), float32 otherwise.
at::Tensor DecodeSlotLogits(const DecoderModel& model, const KvCache& slots, int64_t B, const at::Tensor& tokens,
                            const at::Tensor& pos, const at::Tensor& prefix, bool keep_dtype) {
  KvCache view = SlotView(slots, B);
  view.slot_pos = pos;
  view.slot_len = (pos + 1).to(at::kInt);
  SetPrefix(&view, prefix);
  at::Tensor hidden = model.Forward(tokens.unsqueeze(1), pos.unsqueeze(1), at::Tensor(), &view);
  return model.Logits(hidden.select(1, 0), keep_dtype);
}

// DecodeSlotLogits over slots [0, B) fed `tokens` at `pos` (int64 [B] each), then SampleNextTokens with `uniforms`
// (float64 [B]): the sampled token (int64 [B]) and its log-prob (float32 [B]) of every slot.
std::pair<at::Tensor, at::Tensor> DecodeAndSample(const DecoderModel& model, const KvCache& slots,
                                                  const SamplingOptions& options, int64_t B, const at::Tensor& tokens,
                                                  const at::Tensor& pos, const at::Tensor& prefix,
                                                  const at::Tensor& uniforms) {
  // The fused sampler reads bf16/fp16 logits itself (exactly their float32 values); ATen's composition wants float32.
  const bool fused = model.device().is_cuda();
  at::Tensor logits = DecodeSlotLogits(model, slots, B, tokens, pos, prefix, fused);
  at::Tensor lp;  // float32 on either sampling path
  at::Tensor tok = SampleNextTokens(logits, options, uniforms, &lp);
  return {tok, lp};
}

// The rows a decoding step in the decode kernel runs when slots [0, high) hold the running sequences: the smallest
// power of two >= high, at most the slot count. Eager steps and CUDA graphs run the same shapes, so their results are
// the same bit for bit.
int64_t DecodeBucket(int64_t high, int64_t num_slots) {
  int64_t b = 1;
  while (b < high) b *= 2;
  return std::min(b, num_slots);
}

#ifdef VERL_WITH_CUDA
// The side stream a rollout captures its decoding graphs on, leased for the rollout from streams kept for the process
// (per device, one per rollout running at once). ATen keeps workspaces per stream for the process (cuBLAS's, 32 MiB
// on Hopper, for every handle and stream a GEMM ran on), so a fresh stream of ATen's pool for each rollout left more
// allocated at each rollout (161 MiB a rollout in gpu_decode_test on an H100), until all 32 of the pool had theirs.
class CaptureStreamLease {
 public:
  explicit CaptureStreamLease(c10::DeviceIndex device) : device_(device), stream_(Acquire(device)) {}
  ~CaptureStreamLease() {
    std::lock_guard<std::mutex> lock(Registry().mu);
    Registry().idle[device_].push_back(stream_);
  }
  CaptureStreamLease(const CaptureStreamLease&) = delete;
  CaptureStreamLease& operator=(const CaptureStreamLease&) = delete;

  c10::cuda::CUDAStream stream() const { return stream_; }

 private:
  struct Streams {
    std::mutex mu;
    std::map<c10::DeviceIndex, std::vector<c10::cuda::CUDAStream>> idle;
  };
  static Streams& Registry() {
    static Streams* streams = new Streams;  // never destroyed: leases may end during static destruction
    return *streams;
  }
  static c10::cuda::CUDAStream Acquire(c10::DeviceIndex device) {
    {
      std::lock_guard<std::mutex> lock(Registry().mu);
      std::vector<c10::cuda::CUDAStream>& idle = Registry().idle[device];
      if (!idle.empty()) {
        const c10::cuda::CUDAStream s = idle.back();
        idle.pop_back();
        return s;
      }
    }
    return c10::cuda::getStreamFromPool(false, device);
  }

  const c10::DeviceIndex device_;
  const c10::cuda::CUDAStream stream_;
};

// The decoding steps of continuous batching on a GPU (DecodeAndSample over a bucket of slots, DecodeBucket). Each
// slot's last token stays on the device (`last`, int64 [S]): a step feeds last[0, size) and writes its samples back
// there, so a step's input does not wait for the host to have read the previous step's output; the host sends only
// positions and draws, which it knows ahead. Step() only enqueues work on the current stream, copies included (from
// and to pinned host buffers), so the host prepares the next step while the device runs this one.
//
// Unless enforce_eager, each bucket's step is a CUDA graph captured at its first use, right after an eager run of
// the same step on the capturing stream (which computes that step's outputs). Slots of the bucket that hold no
// sequence feed whatever token they last held at position 0 (a free slot's position 0 is rewritten by its next
// prefill; its outputs are ignored). All buckets share one memory pool, and the graphs hold the cache's, `last`'s and
// the weights' addresses, so they live only as long as this rollout. They are captured on a leased side stream
// (CaptureStreamLease).
class DecodeSteps {
 public:
  DecodeSteps(const DecoderModel& model, const KvCache& slots, const SamplingOptions& options, at::Tensor last,
              bool graphs)
      : model_(model),
        slots_(slots),
        options_(options),
        last_(std::move(last)),
        use_graphs_(graphs),
        pool_(at::cuda::graph_pool_handle()),
        side_(model.device().index()) {}
  DecodeSteps(const DecodeSteps&) = delete;
  DecodeSteps& operator=(const DecodeSteps&) = delete;
  // The graphs' pool goes back to the device with them. The caching allocator releases a pool no graph uses any more
  // only when asked to empty its cache or when an allocation fails, and never lends it to other allocations, so each
  // rollout's stayed reserved until then (B3's reserved memory grew by about 0.3 GB a step).
  ~DecodeSteps() {
    graphs_.clear();
    try {
      c10::cuda::CUDACachingAllocator::emptyCache(pool_);
    } catch (const std::exception&) {  // a destructor must not throw; the pool then waits for the allocator's release
    }
  }

  // One step over slots [0, size): positions from `host_pos` (int64 [>= size]), draws from `host_uniforms`
  // (float64) and shared prompts from `host_prefix` (int32 [2, size] contiguous, SetPrefix; undefined when prompts are
  // not shared), all pinned; the sampled tokens and their log-prob land in the pinned `host_tok` (int64) and `host_lp`
  // (float32) once the current stream has reached the end of this call's work.
  void Step(int64_t size, const at::Tensor& host_pos, const at::Tensor& host_uniforms, const at::Tensor& host_prefix,
            const at::Tensor& host_tok, const at::Tensor& host_lp) {
    if (!use_graphs_) {
      const at::Device device = model_.device();
      auto [tok, lp] =
          Run(size, host_pos.narrow(0, 0, size).to(device, /*non_blocking=*/true),
              host_uniforms.narrow(0, 0, size).to(device, /*non_blocking=*/true),
              host_prefix.defined() ? host_prefix.to(device, /*non_blocking=*/true) : at::Tensor());
      host_tok.narrow(0, 0, size).copy_(tok, /*non_blocking=*/true);
      host_lp.narrow(0, 0, size).copy_(lp, /*non_blocking=*/true);
      return;
    }
    auto it = graphs_.find(size);
    if (it == graphs_.end()) {
      Capture(size, host_pos, host_uniforms, host_prefix, host_tok, host_lp);
      return;
    }
    Graph& g = it->second;
    g.pos.copy_(host_pos.narrow(0, 0, size), /*non_blocking=*/true);
    g.uniforms.copy_(host_uniforms.narrow(0, 0, size), /*non_blocking=*/true);
    if (g.prefix.defined()) g.prefix.copy_(host_prefix, /*non_blocking=*/true);
    g.graph->replay();
    host_tok.narrow(0, 0, size).copy_(g.tok, /*non_blocking=*/true);
    host_lp.narrow(0, 0, size).copy_(g.lp, /*non_blocking=*/true);
  }

  int64_t captured() const { return static_cast<int64_t>(graphs_.size()); }

 private:
  struct Graph {
    at::Tensor pos;       // int64 [size] on the device
    at::Tensor uniforms;  // float64 [size]
    at::Tensor prefix;    // int32 [2, size], or undefined (prompts not shared)
    at::Tensor tok, lp;   // the graph's outputs
    std::unique_ptr<at::cuda::CUDAGraph> graph;
  };

  // The step over slots [0, size) at device positions `pos` with draws `uniforms`: feeds last_, writes the samples
  // back to it, returns them with their log-probs.
  std::pair<at::Tensor, at::Tensor> Run(int64_t size, const at::Tensor& pos, const at::Tensor& uniforms,
                                        const at::Tensor& prefix) {
    at::Tensor tokens = last_.narrow(0, 0, size);
    auto out = DecodeAndSample(model_, slots_, options_, size, tokens, pos, prefix, uniforms);
    tokens.copy_(out.first);
    return out;
  }

  void Capture(int64_t size, const at::Tensor& host_pos, const at::Tensor& host_uniforms, const at::Tensor& host_prefix,
               const at::Tensor& host_tok, const at::Tensor& host_lp) {
    const at::Device device = model_.device();
    Graph g;
    g.pos = host_pos.narrow(0, 0, size).to(device).contiguous();
    g.uniforms = host_uniforms.narrow(0, 0, size).to(device).contiguous();
    if (host_prefix.defined()) g.prefix = host_prefix.to(device).contiguous();
    // Capture runs on a side stream, after everything queued on the current one.
    c10::cuda::getCurrentCUDAStream(device.index()).synchronize();
    const c10::cuda::CUDAStream side = side_.stream();
    {
      const c10::cuda::CUDAStreamGuard guard(side);
      // This step, eagerly (it updates last_; also warms up cuBLAS on this stream); the capture below runs nothing.
      auto [tok, lp] = Run(size, g.pos, g.uniforms, g.prefix);
      host_tok.narrow(0, 0, size).copy_(tok);
      host_lp.narrow(0, 0, size).copy_(lp);
      g.graph = std::make_unique<at::cuda::CUDAGraph>();
      // Thread-local capture: the daemon's other rank threads keep using their GPUs meanwhile.
      g.graph->capture_begin(pool_, cudaStreamCaptureModeThreadLocal);
      try {
        std::tie(g.tok, g.lp) = Run(size, g.pos, g.uniforms, g.prefix);
      } catch (...) {
        // End the capture so the pool stream and the allocator leave capture mode, then report the first error.
        try {
          g.graph->capture_end();
        } catch (...) {
        }
        throw;
      }
      g.graph->capture_end();
    }
    side.synchronize();
    graphs_.emplace(size, std::move(g));
  }

  const DecoderModel& model_;
  const KvCache& slots_;
  const SamplingOptions options_;
  at::Tensor last_;
  const bool use_graphs_;
  at::cuda::MempoolId_t pool_;
  CaptureStreamLease side_;
  std::map<int64_t, Graph> graphs_;  // destroyed before the lease ends
};
#endif  // VERL_WITH_CUDA

}  // namespace

// The slot schedule. The host keeps the bookkeeping (which row each slot holds, how many tokens it has) and the
// outputs; each decoding step moves one token and one log-prob per running sequence from device to host. With the
// decode kernel (a GPU) the steps run one ahead of the host, which reads step k - 1's tokens while step k runs (so
// an EOS frees its slot a step late); elsewhere each step waits for its tokens, the one synchronisation per step
// that the EOS check of static batching makes.
RolloutBatch GenerateContinuous(const DecoderModel& model, const std::vector<std::vector<int32_t>>& prompts,
                                const SamplingOptions& options) {
  c10::InferenceMode guard;
  CheckPromptsNotEmpty(prompts);
  TORCH_CHECK(options.max_num_batched_tokens > 0, "generation: max_num_batched_tokens ",
              options.max_num_batched_tokens, " (a prefill pass's tokens) must be positive");
  const int64_t n = options.n;
  const int64_t R = options.max_new_tokens;
  const at::Device device = model.device();
  auto long_opts = at::TensorOptions().dtype(at::kLong);
  auto dev_long = long_opts.device(device);

  // Outputs on the host, laid out as GenerateStatic's (prompts left-padded to P).
  RolloutBatch out;
  std::tie(out.prompts, out.prompt_mask) = LeftPaddedPrompts(prompts, n, options.pad_token_id);
  const int64_t N = out.prompts.size(0);
  const int64_t P = out.prompts.size(1);
  out.responses = at::full({N, R}, options.pad_token_id, long_opts);
  out.response_mask = at::zeros({N, R}, at::kBool);
  out.log_probs = at::zeros({N, R}, at::kFloat);
  auto responses = out.responses.accessor<int64_t, 2>();
  auto response_valid = out.response_mask.accessor<bool, 2>();
  auto log_probs = out.log_probs.accessor<float, 2>();
  std::vector<const std::vector<int32_t>*> row_prompt(N);
  for (int64_t row = 0; row < N; ++row) row_prompt[row] = &prompts[row / n];
  auto finish = [&]() {
    for (at::Tensor* t : {&out.prompts, &out.prompt_mask, &out.responses, &out.response_mask, &out.log_probs}) {
      *t = t->to(device);
    }
    return std::move(out);
  };
  if (N == 0 || R == 0) return finish();

  const std::vector<uint64_t> streams = SampleStreams(prompts.size(), options);
  auto is_eos = [&](int64_t token) {
    return std::find(options.eos_token_ids.begin(), options.eos_token_ids.end(), token) != options.eos_token_ids.end();
  };

  const int64_t S = std::min<int64_t>(N, std::max<int32_t>(1, options.max_num_seqs));
  KvCache slots = model.NewCache(S, P + R);
  // Decoding steps run in the CUDA decode kernel where the model allows (each row attends over its own length), and
  // then, unless enforce_eager, as CUDA graphs; otherwise under a mask over the longest running length.
  const bool decode_kernel = model.DecodeKernelAvailable();
  // The samples of a prompt admitted together read its positions from one slot (PromptSharing).
  const bool share = n > 1 && (options.prompt_sharing == PromptSharing::kOn ||
                               (options.prompt_sharing == PromptSharing::kAuto && decode_kernel));
  std::vector<int64_t> slot_row(S, -1);  // -1: free
  std::vector<int64_t> slot_len(S, 0);   // prompt length
  std::vector<int64_t> slot_made(S, 0);  // response tokens sampled so far
  std::vector<int64_t> slot_last(S, 0);  // the last sampled token, fed at the next step (CPU ranks)
  // The slot whose cache holds positions [0, slot_len) of this slot's sequence: itself, or (sharing) the slot of the
  // sample of its prompt that holds the prompt. A running slot's prefix slot is always running too (handoff below).
  std::vector<int64_t> slot_prefix(S);
  for (int64_t s = 0; s < S; ++s) slot_prefix[s] = s;
  std::vector<int64_t> freed_holders;     // slots freed while holding a prompt, to hand off before the next step
  std::vector<int64_t> row_slot(N, -1);   // the slot a row runs in; -1 before and after
  std::vector<bool> row_ended(N, false);  // an EOS recorded
  int64_t running = 0;
  // Frees the slot of `row` (if it still holds one).
  auto release = [&](int64_t row) {
    const int64_t s = row_slot[row];
    if (s < 0) return;
    slot_row[s] = -1;
    row_slot[row] = -1;
    --running;
    if (share) freed_holders.push_back(s);
  };
  // A freed slot that holds the prompt of samples still running hands it to the first of them: the prompt's positions
  // are copied into that sample's slot (where it left them unwritten), and its siblings read them from there. Runs
  // before anything can reuse or overwrite the freed slots (the next admission, step or compaction), after every
  // release since the last step, so samples that end together hand nothing to each other. The copies queue behind the
  // steps that still read the freed slot.
  // Copies positions [0, len) of slot `from`'s keys and values, every layer, into slot `to` (a hand-off, or an
  // unshared join).
  auto copy_prompt = [&](int64_t from, int64_t to, int64_t len) {
    for (size_t i = 0; i < slots.k.size(); ++i) {
      slots.k[i][to].narrow(1, 0, len).copy_(slots.k[i][from].narrow(1, 0, len));
      slots.v[i][to].narrow(1, 0, len).copy_(slots.v[i][from].narrow(1, 0, len));
    }
  };
  auto hand_off = [&]() {
    for (const int64_t from : freed_holders) {
      int64_t to = -1;
      for (int64_t r = 0; r < S; ++r) {
        if (slot_row[r] < 0 || r == from || slot_prefix[r] != from) continue;
        if (to < 0) {
          to = r;
          copy_prompt(from, to, slot_len[from]);
          ++out.prompt_handoffs;
        }
        slot_prefix[r] = to;
      }
      slot_prefix[from] = from;
    }
    freed_holders.clear();
  };

  // The draw for slot s's next token.
  auto uniform = [&](int64_t s) {
    return options.do_sample ? CounterUniform(options.seed, streams[slot_row[s]], slot_made[s]) : 0.0;
  };
  // Records token t of `row`; an EOS ends the row (its slot freed, if it still holds one). A token after the row's
  // EOS is dropped: a GPU step runs one ahead of the host's reading of the previous one (see below).
  auto record_token = [&](int64_t row, int64_t t, int64_t token, float lp) {
    if (row_ended[row]) return;
    responses[row][t] = token;
    log_probs[row][t] = lp;
    response_valid[row][t] = true;
    if (is_eos(token)) {
      row_ended[row] = true;
      release(row);
    }
  };
  // Records slot s's next token at once (the host has it); frees the slot when its sequence ends.
  auto record = [&](int64_t s, int64_t token, float lp) {
    const int64_t row = slot_row[s];
    const int64_t t = slot_made[s]++;
    slot_last[s] = token;
    record_token(row, t, token, lp);
    if (t + 1 == R) release(row);
  };
  // Samples the next token of each slot in `active` from `logits` [active, V] and records it; returns the tokens on
  // the device.
  auto sample_and_record = [&](const std::vector<int64_t>& active, const at::Tensor& logits) {
    const int64_t k = active.size();
    at::Tensor uniforms = at::empty({k}, at::kDouble);
    for (int64_t j = 0; j < k; ++j) uniforms.data_ptr<double>()[j] = uniform(active[j]);
    at::Tensor lp;
    const at::Tensor tok = SampleNextTokens(logits, options, uniforms.to(device), &lp);
    const at::Tensor host_tok = tok.to(at::kCPU);
    lp = lp.to(at::kCPU, at::kFloat);
    for (int64_t j = 0; j < k; ++j) record(active[j], host_tok.data_ptr<int64_t>()[j], lp.data_ptr<float>()[j]);
    return tok;
  };

  const bool packed_prefill =
      options.prefill_layout == PrefillLayout::kPacked ||
      (options.prefill_layout == PrefillLayout::kAuto && PackedAttentionIsFlash(device, slots.k.front().scalar_type()));
  int64_t out_graphs = 0;
  at::Tensor host_in = at::empty({2, S}, long_opts);  // per slot: the token fed, its position (CPU ranks)
  at::Tensor host_uniforms = at::zeros({S}, at::kDouble);
  // Shared prompts: a step's prefix slots and prompt lengths (SetPrefix), int32; where nothing is shared, the steps
  // take no prefix (undefined).
  at::Tensor host_prefix = share ? at::zeros({2 * S}, at::kInt) : at::Tensor();
  // Writes slots [0, size)'s prefix slots and prompt lengths into the first 2 * size entries of `buffer` (int32 [2 * S];
  // free slots read only their own positions) and returns them as [2, size], contiguous; undefined without a buffer.
  auto fill_prefix = [&](const at::Tensor& buffer, int64_t size) {
    if (!buffer.defined()) return at::Tensor();
    const at::Tensor prefix = buffer.narrow(0, 0, 2 * size).view({2, size});
    int32_t* from = prefix.data_ptr<int32_t>();
    int32_t* len = from + size;
    for (int64_t s = 0; s < size; ++s) {
      const bool runs = slot_row[s] >= 0;
      // A running slot reads its prompt from a running slot of the step (hand_off and compaction keep it so): the
      // kernel reads whatever the cache holds there.
      TORCH_CHECK(!runs || (slot_prefix[s] < size && slot_row[slot_prefix[s]] >= 0), "generation: slot ", s,
                  " reads its prompt from slot ", slot_prefix[s], ", which holds no running sequence of the step");
      from[s] = static_cast<int32_t>(runs ? slot_prefix[s] : s);
      len[s] = static_cast<int32_t>(runs ? slot_len[s] : 0);
    }
    return prefix;
  };
#ifdef VERL_WITH_CUDA
  // The decode kernel's steps run one ahead of the host: step k is enqueued (its positions and draws are known
  // without its input tokens, which stay on the device), and then the host reads step k - 1's tokens, which the device
  // finished meanwhile. So a row's EOS is seen one step late: its slot computes one more token, dropped, and is freed
  // then (a free slot's cache beyond its next prompt is rewritten before it is read). Ends by max_new_tokens are known
  // when the step is enqueued, and free the slot at once. Two sets of pinned buffers alternate between the step being
  // enqueued and the one being read.
  at::Tensor dev_last;  // int64 [S]: each slot's last token
  std::unique_ptr<DecodeSteps> steps;
  struct Inflight {
    bool valid = false;
    int buffers = 0;  // which set of pinned buffers
    std::vector<std::array<int64_t, 3>> entries;  // (slot, row, token index) of each running slot
    at::cuda::CUDAEvent done;
  };
  Inflight inflight;
  at::Tensor pinned_pos[2], pinned_uniforms[2], pinned_prefix[2], pinned_tok[2], pinned_lp[2];
  int64_t decode_steps = 0;
  if (decode_kernel) {
    // The folded weights are made from the weights as they are now (they change between rollouts) and live as long
    // as this rollout's graphs, which hold their addresses.
    if (options.fold_input_norms) slots.qkv_folded = model.FoldedQkvWeights();
    if (!slots.qkv_folded.empty() && options.fold_post_attention_norms) {
      slots.gate_up_folded = model.FoldedGateUpWeights();
    }
    dev_last = at::zeros({S}, dev_long);
    steps = std::make_unique<DecodeSteps>(model, slots, options, dev_last, !options.enforce_eager);
    for (int i = 0; i < 2; ++i) {
      pinned_pos[i] = at::zeros({S}, long_opts.pinned_memory(true));
      pinned_uniforms[i] = at::zeros({S}, at::TensorOptions().dtype(at::kDouble).pinned_memory(true));
      if (share) pinned_prefix[i] = at::zeros({2 * S}, at::TensorOptions().dtype(at::kInt).pinned_memory(true));
      pinned_tok[i] = at::zeros({S}, long_opts.pinned_memory(true));
      pinned_lp[i] = at::zeros({S}, at::TensorOptions().dtype(at::kFloat).pinned_memory(true));
    }
  }
  // Records the tokens of the step in flight, once the device has copied them out.
  auto drain = [&]() {
    if (!inflight.valid) return;
    inflight.done.synchronize();
    const int64_t* tok = pinned_tok[inflight.buffers].data_ptr<int64_t>();
    const float* lp = pinned_lp[inflight.buffers].data_ptr<float>();
    for (const auto& [s, row, t] : inflight.entries) record_token(row, t, tok[s], lp[s]);
    inflight.valid = false;
  };
#endif

  // Rows are admitted in order, so at most one prompt has samples admitted and samples waiting (when free slots ran
  // out in the middle of its samples): `pending_prompt`, with the first-token logits its prefill left ([1, V]).
  int64_t pending_prompt = -1;
  at::Tensor pending_logits;
  int64_t next_row = 0;
  // After a prefill whose last prompt still has samples waiting: keeps that prompt's logits (row u - 1 of `logits`).
  auto keep_pending = [&](const std::vector<int64_t>& distinct, const at::Tensor& logits) {
    if (n == 1 || next_row >= N || next_row / n != distinct.back()) return;
    pending_prompt = distinct.back();
    pending_logits = logits.narrow(0, logits.size(0) - 1, 1).clone();
  };

  while (next_row < N || running > 0) {
    hand_off();
    // Admit waiting rows into free slots, a prefill group at a time: right-padded to the group's longest prompt, so
    // each row's keys land at positions [0, len) and move into its slot with one copy per layer. The n samples of a
    // prompt (adjacent rows) share one prefill: its keys and values are copied into each of their slots, or with
    // shared prompts into the first one's only (`holders`), the others reading them from there.
    std::vector<int64_t> free_slots;
    for (int64_t s = 0; s < S; ++s) {
      if (slot_row[s] < 0) free_slots.push_back(s);
    }
    size_t used = 0;
    while (next_row < N && used < free_slots.size()) {
      // The waiting samples of the pending prompt join a running sample of it instead of prefilling the prompt again:
      // they read its positions from the slot holding them (shared prompts) or copy them from there, and draw their
      // first token from the logits its prefill left - the same values a prefill in another pass would give but for
      // rounding. Where none of its samples runs any more, it is prefilled again below.
      if (pending_prompt >= 0 && next_row / n == pending_prompt) {
        int64_t source = -1;  // the slot holding the prompt's positions
        for (int64_t r = 0; r < S && source < 0; ++r) {
          if (slot_row[r] >= 0 && slot_row[r] / n == pending_prompt) source = slot_prefix[r];
        }
        if (source >= 0) {
          const int64_t len = row_prompt[next_row]->size();
          std::vector<int64_t> joined;
          while (next_row < N && used < free_slots.size() && next_row / n == pending_prompt) {
            const int64_t s = free_slots[used++];
            row_slot[next_row] = s;
            slot_row[s] = next_row++;
            slot_len[s] = len;
            slot_made[s] = 0;
            slot_prefix[s] = share ? source : s;
            if (!share) copy_prompt(source, s, len);
            joined.push_back(s);
          }
          ++out.prompt_joins;
          running += static_cast<int64_t>(joined.size());
          const at::Tensor logits = pending_logits.expand({static_cast<int64_t>(joined.size()), -1}).contiguous();
          if (next_row >= N || next_row / n != pending_prompt) {
            pending_prompt = -1;
            pending_logits = at::Tensor();
          }
          const at::Tensor first = sample_and_record(joined, logits);
#ifdef VERL_WITH_CUDA
          if (decode_kernel) dev_last.index_copy_(0, at::tensor(joined, long_opts).to(device), first);
#endif
          continue;
        }
        pending_prompt = -1;
        pending_logits = at::Tensor();
      }
      std::vector<int64_t> group;       // slots
      std::vector<int64_t> distinct;    // the prompts prefilled, in order
      std::vector<int64_t> prompt_of;   // per slot of the group: its prompt's index in `distinct`
      int64_t longest = 0;
      int64_t total = 0;  // the distinct prompts' tokens
      while (next_row < N && used < free_slots.size()) {
        const int64_t prompt = next_row / n;
        const bool fresh = distinct.empty() || distinct.back() != prompt;
        const int64_t len = row_prompt[next_row]->size();
        const int64_t wider = std::max(longest, len);
        // The pass's tokens: packed, the prompts' own; padded, the group's rows at the longest prompt's width.
        const int64_t pass_tokens = packed_prefill ? total + len : wider * static_cast<int64_t>(distinct.size() + 1);
        if (fresh && !distinct.empty() && pass_tokens > options.max_num_batched_tokens) break;
        const int64_t s = free_slots[used++];
        row_slot[next_row] = s;
        slot_row[s] = next_row++;
        slot_len[s] = len;
        slot_made[s] = 0;
        longest = wider;
        if (fresh) {
          distinct.push_back(prompt);
          total += len;
        }
        prompt_of.push_back(static_cast<int64_t>(distinct.size()) - 1);
        group.push_back(s);
      }
      const int64_t u = distinct.size();
      const at::Tensor dev_group = at::tensor(group, long_opts).to(device);
      // A prompt per slot (n = 1): the prefill's rows are the group's, in order, with no gather.
      const bool one_each = static_cast<int64_t>(group.size()) == u;
      const at::Tensor dev_prompt_of = one_each ? at::Tensor() : at::tensor(prompt_of, long_opts).to(device);
      auto rows = [&](const at::Tensor& t) { return one_each ? t : t.index_select(0, dev_prompt_of); };
      // The slot that holds each distinct prompt's positions: its first sample's where prompts are shared.
      std::vector<int64_t> holders(u, -1);
      for (size_t g = 0; g < group.size(); ++g) {
        if (holders[prompt_of[g]] < 0) holders[prompt_of[g]] = group[g];
        slot_prefix[group[g]] = share ? holders[prompt_of[g]] : group[g];
      }
      // Whether the prefill writes one slot per distinct prompt, in the prefill's order (no gather).
      const bool held_once = share || one_each;
      // Once the prefill has filled their slots, the group's sequences run: each draws its first token from its
      // prompt's row of `logits` (the prompts' last positions, [u, V]).
      auto start_group = [&](const at::Tensor& logits) {
        running += static_cast<int64_t>(group.size());
        keep_pending(distinct, logits);
        const at::Tensor first = sample_and_record(group, rows(logits));
#ifdef VERL_WITH_CUDA
        if (decode_kernel) dev_last.index_copy_(0, dev_group, first);
#endif
      };
      // A prompt longer than max_num_batched_tokens (admitted alone, with its samples) is prefilled in chunks of at
      // most that many tokens straight into its first sample's slot, each attending to the chunks before it there; its
      // other samples read the prompt from that slot (shared prompts) or copy it.
      const std::vector<int32_t>& first_prompt = prompts[distinct.front()];
      const int64_t first_len = static_cast<int64_t>(first_prompt.size());
      if (options.chunked_prefill && u == 1 && first_len > options.max_num_batched_tokens) {
        const int64_t holder = holders.front();
        KvCache part;  // the holder's slot as a cache of one sequence
        for (size_t i = 0; i < slots.k.size(); ++i) {
          part.k.push_back(slots.k[i].narrow(0, holder, 1));
          part.v.push_back(slots.v[i].narrow(0, holder, 1));
        }
        at::Tensor hidden;
        for (int64_t begin = 0; begin < first_len; begin += options.max_num_batched_tokens) {
          const int64_t len = std::min(options.max_num_batched_tokens, first_len - begin);
          const std::vector<int64_t> ids(first_prompt.begin() + begin, first_prompt.begin() + begin + len);
          hidden = at::Tensor();  // the last chunk's output goes before this one's pass, not after
          hidden = model.ForwardChunk(at::tensor(ids, long_opts).to(device).unsqueeze(0), &part);
          ++out.prefill_chunks;
        }
        if (!share) {
          for (size_t g = 1; g < group.size(); ++g) copy_prompt(holder, group[g], first_len);
        }
        start_group(model.Logits(hidden.select(0, 0).narrow(0, hidden.size(1) - 1, 1)));
        continue;
      }
      if (packed_prefill) {
        // The distinct prompts back to back in one row; each layer's keys and values go straight into the group's
        // slots (KvCache::packed_rows), and the LM head reads each prompt's last position.
        std::vector<int64_t> lengths;
        for (const int64_t prompt : distinct) lengths.push_back(static_cast<int64_t>(prompts[prompt].size()));
        const PackedSequences packed = PackLengths(lengths, device);
        const std::vector<int64_t>& offsets = packed.offsets;
        std::vector<int64_t> ids_h, pos_h, last_h;
        ids_h.reserve(total);
        pos_h.reserve(total);
        for (int64_t j = 0; j < u; ++j) {
          const std::vector<int32_t>& p = prompts[distinct[j]];
          ids_h.insert(ids_h.end(), p.begin(), p.end());
          for (int64_t t = 0; t < lengths[j]; ++t) pos_h.push_back(t);
          last_h.push_back(offsets[j + 1] - 1);
        }
        // Row (slot * kv_heads + head) * C + t of a layer's cache viewed as [-1, D] takes row head * total + offset + t
        // of the pass's keys ([kv_heads, total, D]), for every slot of the group (samples of a prompt share its rows);
        // where every slot has its own prompt, that is every row of the pass in order (no packed_sources).
        const int64_t kv_heads = model.config().num_key_value_heads;
        const int64_t C = slots.k.front().size(2);
        std::vector<int64_t> dst_h, src_h;
        for (int64_t h = 0; h < kv_heads; ++h) {
          if (held_once) {  // each prompt's rows into its holder's slot: every row of the pass in order
            for (int64_t j = 0; j < u; ++j) {
              for (int64_t t = 0; t < lengths[j]; ++t) dst_h.push_back((holders[j] * kv_heads + h) * C + t);
            }
            continue;
          }
          for (size_t g = 0; g < group.size(); ++g) {
            const int64_t j = prompt_of[g];
            for (int64_t t = 0; t < lengths[j]; ++t) {
              dst_h.push_back((group[g] * kv_heads + h) * C + t);
              src_h.push_back(h * total + offsets[j] + t);
            }
          }
        }
        KvCache into{slots.k, slots.v};
        into.packed_rows = at::tensor(dst_h, long_opts).to(device);
        if (!held_once) into.packed_sources = at::tensor(src_h, long_opts).to(device);
        const at::Tensor hidden =
            model.Forward(at::tensor(ids_h, long_opts).to(device).unsqueeze(0),
                          at::tensor(pos_h, long_opts).to(device).unsqueeze(0), at::Tensor(), &into, &packed);
        const at::Tensor last = at::tensor(last_h, long_opts).to(device);
        start_group(model.Logits(hidden.select(0, 0).index_select(0, last)));
        continue;
      }
      at::Tensor ids = at::full({u, longest}, options.pad_token_id, long_opts);
      at::Tensor valid = at::zeros({u, longest}, at::kBool);
      at::Tensor last = at::empty({u}, long_opts);
      {
        auto ids_a = ids.accessor<int64_t, 2>();
        auto valid_a = valid.accessor<bool, 2>();
        for (int64_t j = 0; j < u; ++j) {
          const std::vector<int32_t>& p = prompts[distinct[j]];
          for (size_t t = 0; t < p.size(); ++t) {
            ids_a[j][t] = p[t];
            valid_a[j][t] = true;
          }
          last.data_ptr<int64_t>()[j] = static_cast<int64_t>(p.size()) - 1;
        }
      }
      valid = valid.to(device);
      // The prefill writes all `longest` positions of its cache before it reads them: no zero fill.
      KvCache prefill = model.NewCache(u, longest, /*zeroed=*/false);
      at::Tensor hidden = model.Forward(ids.to(device), PositionIdsFromMask(valid),
                                        BuildAttentionMask(valid, 0, longest), &prefill);
      const at::Tensor dev_holders = held_once ? at::tensor(holders, long_opts).to(device) : at::Tensor();
      for (size_t i = 0; i < slots.k.size(); ++i) {
        if (held_once) {
          slots.k[i].narrow(2, 0, longest).index_copy_(0, dev_holders, prefill.k[i]);
          slots.v[i].narrow(2, 0, longest).index_copy_(0, dev_holders, prefill.v[i]);
        } else {
          slots.k[i].narrow(2, 0, longest).index_copy_(0, dev_group, rows(prefill.k[i]));
          slots.v[i].narrow(2, 0, longest).index_copy_(0, dev_group, rows(prefill.v[i]));
        }
      }
      start_group(model.Logits(hidden.index({at::arange(u, dev_long), last.to(device)})));
    }
    hand_off();  // a prompt's holder may have ended at its first token
    if (running == 0) continue;

    // Compaction: when the running sequences would fit a smaller bucket than their highest slot asks for (the long
    // tail, once no prompt is waiting), the sequences in slots >= running move into the free slots below it (one KV
    // copy per layer), so the steps run fewer rows. Happens at most once per bucket size.
    {
      int64_t high = 0;
      for (int64_t s = 0; s < S; ++s) {
        if (slot_row[s] >= 0) high = s + 1;
      }
      if (next_row == N && DecodeBucket(running, S) < DecodeBucket(high, S)) {
        std::vector<int64_t> from, to;
        int64_t free_slot = 0;
        for (int64_t s = running; s < high; ++s) {
          if (slot_row[s] < 0) continue;
          while (slot_row[free_slot] >= 0) ++free_slot;  // as many free slots below `running` as sequences above
          from.push_back(s);
          to.push_back(free_slot);
          slot_row[free_slot] = slot_row[s];
          slot_len[free_slot] = slot_len[s];
          slot_made[free_slot] = slot_made[s];
          slot_last[free_slot] = slot_last[s];
          slot_prefix[free_slot] = slot_prefix[s];
          row_slot[slot_row[s]] = free_slot;
          slot_row[s] = -1;
          slot_prefix[s] = s;
        }
        // A moved slot's whole cache moves, a held prompt with it: its samples follow.
        for (int64_t r = 0; r < S; ++r) {
          if (slot_row[r] < 0) continue;
          const auto moved = std::find(from.begin(), from.end(), slot_prefix[r]);
          if (moved != from.end()) slot_prefix[r] = to[moved - from.begin()];
        }
        const at::Tensor dev_from = at::tensor(from, long_opts).to(device);
        const at::Tensor dev_to = at::tensor(to, long_opts).to(device);
        for (size_t i = 0; i < slots.k.size(); ++i) {
          slots.k[i].index_copy_(0, dev_to, slots.k[i].index_select(0, dev_from));
          slots.v[i].index_copy_(0, dev_to, slots.v[i].index_select(0, dev_from));
        }
#ifdef VERL_WITH_CUDA
        if (decode_kernel) dev_last.index_copy_(0, dev_to, dev_last.index_select(0, dev_from));
#endif
        ++out.compactions;
      }
    }

#ifdef VERL_WITH_CUDA
    if (decode_kernel) {
      // One decoding step over the bucket of slots [0, high): each running slot feeds its last token (on the device)
      // at position len + made - 1 (its cache index too); a free slot below high feeds position 0, output ignored.
      const int buffers = static_cast<int>(decode_steps++ % 2);
      int64_t* pos = pinned_pos[buffers].data_ptr<int64_t>();
      double* uniforms = pinned_uniforms[buffers].data_ptr<double>();
      Inflight next;
      next.valid = true;
      next.buffers = buffers;
      int64_t high = 0;
      for (int64_t s = 0; s < S; ++s) {
        pos[s] = 0;
        uniforms[s] = 0.0;
        if (slot_row[s] < 0) continue;
        high = s + 1;
        pos[s] = slot_len[s] + slot_made[s] - 1;
        uniforms[s] = uniform(s);
        next.entries.push_back({s, slot_row[s], slot_made[s]});
      }
      const int64_t bucket = DecodeBucket(high, S);
      const at::Tensor prefix = fill_prefix(pinned_prefix[buffers], bucket);
      for (const auto& [s, row, t] : next.entries) {
        ++slot_made[s];
        if (t + 1 == R) release(row);
      }
      steps->Step(bucket, pinned_pos[buffers], pinned_uniforms[buffers], prefix, pinned_tok[buffers],
                  pinned_lp[buffers]);
      next.done.record(c10::cuda::getCurrentCUDAStream(device.index()));
      drain();  // the previous step, finished while this one was being enqueued (or soon)
      inflight = std::move(next);
      out_graphs = steps->captured();
      continue;
    }
#endif
    // One decoding step over slots [0, high): each running slot feeds its last token at position len + made - 1 (its
    // cache index too); a free slot below high feeds padding at position 0 and its output is ignored.
    std::vector<int64_t> active;
    int64_t high = 0;
    int64_t attend = 0;
    int64_t* tokens = host_in[0].data_ptr<int64_t>();
    int64_t* pos = host_in[1].data_ptr<int64_t>();
    double* uniforms = host_uniforms.data_ptr<double>();
    for (int64_t s = 0; s < S; ++s) {
      tokens[s] = options.pad_token_id;
      pos[s] = 0;
      uniforms[s] = 0.0;
      if (slot_row[s] < 0) continue;
      active.push_back(s);
      high = s + 1;
      tokens[s] = slot_last[s];
      pos[s] = slot_len[s] + slot_made[s] - 1;
      uniforms[s] = uniform(s);
      attend = std::max(attend, slot_len[s] + slot_made[s]);
    }
    // Elsewhere (CPU ranks): attention under a mask over the longest running length, logits of the running slots.
    at::Tensor dev_tokens = host_in[0].narrow(0, 0, high).to(device);
    at::Tensor dev_pos = host_in[1].narrow(0, 0, high).to(device);
    at::Tensor mask = at::arange(attend, dev_long).view({1, attend}).le(dev_pos.view({high, 1}));
    KvCache view = SlotView(slots, high);
    view.slot_pos = dev_pos;
    view.attend = attend;
    const at::Tensor prefix = fill_prefix(host_prefix, high);
    if (prefix.defined()) SetPrefix(&view, prefix.to(device));
    at::Tensor hidden =
        model.Forward(dev_tokens.unsqueeze(1), dev_pos.unsqueeze(1), mask.view({high, 1, 1, attend}), &view);
    at::Tensor h = hidden.select(1, 0);
    if (static_cast<int64_t>(active.size()) < high) h = h.index_select(0, at::tensor(active, long_opts).to(device));
    at::Tensor logits = model.Logits(h);
    sample_and_record(active, logits);
  }
#ifdef VERL_WITH_CUDA
  drain();
#endif
  out.decode_graphs = out_graphs;
  for (const std::vector<at::Tensor>* copies : {&slots.qkv_folded, &slots.gate_up_folded}) {
    for (const at::Tensor& w : *copies) out.folded_weight_bytes += w.numel() * static_cast<int64_t>(w.element_size());
  }
  return finish();
}

}  // namespace verl
