#ifndef VERL_WORKER_ROLLOUT_GENERATOR_H_
#define VERL_WORKER_ROLLOUT_GENERATOR_H_

// Autoregressive generation with a KV cache, one token per step for every running sequence (temperature, top-k,
// top-p, or greedy) until each has produced an EOS or max_new_tokens. Two schedules, with the same results:
// - continuous batching (the default): at most max_num_seqs sequences run at once, each in a slot of a KV cache
//   allocated once; waiting prompts are prefilled in groups of at most max_num_batched_tokens tokens (packed back to
//   back where flash attention runs, else padded; the n samples of a prompt share one prefill; a longer prompt alone,
//   in chunks of at most that many tokens with chunked_prefill), and a finished sequence's slot takes the next
//   waiting one at once, so a long tail does not leave the batch idle; on a GPU the host enqueues each decoding step
//   before it reads the previous one's tokens (an EOS is seen, and its slot freed, one step late; the extra token is
//   dropped);
// - static: every sequence prefilled together (left-padded) and decoded until the last one ends; used when ranks
//   must decode in lockstep (a model sharded layer by layer).
// Returns the rollout log-prob of every sampled token under the temperature-scaled distribution, the same quantity the
// trainer computes, so rollout and training log-probs are comparable. Sampling draws come from a counter-based
// generator keyed by (seed, sample, position), so a sequence's draws do not depend on the schedule or its batch; its
// tokens do up to the rounding of the logits, which the batch's shape (buckets, packed or padded prefill, shared
// prompts) can move, so that in bf16 a near tie can go the other way.

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

#include "worker/model/decoder_model.h"

namespace verl {

// How continuous batching lays out a prefill pass: the distinct prompts packed back to back in one row (no padding;
// variable-length flash attention on a GPU, whose keys and values go straight into the sequences' slots), or right-
// padded to the longest. kAuto: packed where flash attention runs (CUDA, bfloat16 or float16), else padded (there
// packed attention is one call per prompt).
enum class PrefillLayout { kAuto, kPacked, kPadded };

// Whether continuous batching's samples of a prompt read its keys and values from one slot (the prefill writes them
// once, into the first sample's slot; when that sample ends first, the prompt's positions are copied to the next one
// still running) instead of a copy each. Decoding reads the same values either way, so the results are the same bit
// for bit; the prefill writes one copy of a prompt instead of n, and a decoding step's n reads of a prompt's cache go
// to the same memory (the samples' attention blocks run side by side, so all but the first mostly hit L2). The slots
// keep room for the prompt (no memory saved). kAuto: on where the decode kernel runs; on a CPU rank the shared reads
// are a gather per layer, dearer than the copies (kOn there is for tests).
enum class PromptSharing { kAuto, kOn, kOff };

struct SamplingOptions {
  double temperature = 1.0;
  int32_t top_k = -1;     // <= 0: off
  double top_p = 1.0;     // 1.0: off
  bool do_sample = true;  // false: greedy (argmax)
  int32_t n = 1;          // samples per prompt
  int32_t max_new_tokens = 16;
  std::vector<int32_t> eos_token_ids;
  int32_t pad_token_id = 0;
  uint64_t seed = 0;
  // The random stream of sample j of prompt i is keyed by (seed, prompt_keys[i] * n + j, token position), so a
  // prompt's samples' draws do not depend on which other prompts share the batch (data-parallel ranks split a step's
  // prompts and still draw what one rank would; the tokens are the same up to the logits' rounding). Empty: prompt
  // i's key is i.
  std::vector<uint64_t> prompt_keys;
  // Decode all max_new_tokens steps even when every row has finished: the ranks of a model sharded layer by layer
  // must make the same gathers (the extra steps only produce padding).
  bool lockstep = false;
  // Static batching (lockstep) runs its prompts in passes of max(1, max_num_seqs / n) whole prompts (StaticPasses: at
  // most max_num_seqs rows, unless one prompt's n samples are more), and at least lockstep_passes passes: those past
  // its own prompts decode a dummy one-token prompt, so that every rank of a group sharded layer by layer makes the
  // same gathers however its prompts fall.
  int64_t lockstep_passes = 0;
  // Sequences decoding at once (KV cache slots; the caller folds its memory budget in; static batching: rows a pass),
  // and for continuous batching the most prompt tokens prefilled in one forward pass (padded ones count where the
  // prefill pads; a longer prompt is prefilled alone).
  int32_t max_num_seqs = 1024;
  int64_t max_num_batched_tokens = 8192;
  // Continuous batching: a prompt longer than max_num_batched_tokens is prefilled in passes of at most that many of its
  // tokens, straight into its slot, each attending to the ones before it there (DecoderModel::ForwardChunk); false:
  // in one pass of its own (verl's rollout.enable_chunked_prefill). Static batching prefills whole prompts.
  bool chunked_prefill = true;
  PrefillLayout prefill_layout = PrefillLayout::kAuto;
  PromptSharing prompt_sharing = PromptSharing::kAuto;  // verl's rollout.enable_prefix_caching (false: kOff)
  // Continuous batching on a GPU with the decode kernel (DecoderModel::DecodeKernelAvailable): false replays each
  // decoding step (forward, LM head and sampling) as a CUDA graph captured once per batch size bucket (powers of two
  // up to the slot count) at its first use; true launches every kernel eagerly (verl's rollout.enforce_eager).
  bool enforce_eager = false;
  // Continuous batching's decoding steps in the decode kernel in bfloat16: each layer's input RMSNorm folded into its
  // q/k/v projection (a per-rollout copy of those weights, scaled by the norm's weight;
  // DecoderModel::FoldedQkvWeights), so no norm kernel runs before the projection. Rounds differently from the
  // unfolded composition (the trainer's), within bf16's rounding. Ignored in float32 / float16 and without the kernel.
  // The worker turns it off where the copy would cost KV cache slots (RolloutSlots).
  bool fold_input_norms = true;
  // With fold_input_norms, each layer's post-attention RMSNorm folded into its stacked gate/up projection as well (a
  // per-rollout copy of those weights, DecoderModel::FoldedGateUpWeights): the attention's output projection adds
  // into the residual in its GEMM and the SwiGLU kernel applies the norm's row scale, so no norm kernel runs in a
  // layer. Rounds differently from the unfolded composition, within bf16's rounding. The worker turns it off where
  // the copy would cost KV cache slots (RolloutSlots).
  bool fold_post_attention_norms = true;
  // Rows per pass of the ATen sampler (the CPU's): 0 for SamplerRowsPerPass(vocab).
  int64_t sampler_rows_per_pass = 0;
};

// All tensors on CPU. N = prompts * n; row i*n + j is sample j of prompt i. P = longest prompt, R = max_new_tokens.
struct RolloutBatch {
  at::Tensor prompts;        // [N, P] int64, left-padded with pad_token_id
  at::Tensor prompt_mask;    // [N, P] bool
  at::Tensor responses;      // [N, R] int64, right-padded with pad_token_id
  at::Tensor response_mask;  // [N, R] bool, true up to and including the EOS
  at::Tensor log_probs;      // [N, R] float32 rollout log-probs (0 where masked)
  int64_t decode_graphs = 0;  // CUDA graphs captured for decoding (continuous batching on a GPU, not enforce_eager)
  int64_t compactions = 0;    // continuous batching: times the running sequences moved into lower slots
  int64_t prompt_handoffs = 0;      // shared prompts: times a prompt's positions moved to a sample still running
  int64_t prompt_joins = 0;  // admissions of a prompt's waiting samples that joined a running sample, not a prefill
  int64_t prefill_chunks = 0;  // chunked prefill: the passes over parts of prompts longer than max_num_batched_tokens
  int64_t folded_weight_bytes = 0;  // the per-rollout copies of weights with norms folded in (decode kernel, bf16)
  int64_t static_passes = 0;  // static batching: the passes made (lockstep_passes' dummy ones included)
};

// A uniform draw in [0, 1) from a counter-based generator (SplitMix64 of seed, stream and counter): the same three
// numbers give the same draw on every rank and in every batch.
double CounterUniform(uint64_t seed, uint64_t stream, uint64_t counter);

// Samples the next token for each row of `logits` [N, V] (float32) by inverting the row's CDF at `uniforms` [N]
// (float64 draws in [0, 1)); a token outside top-k / top-p, or of probability 0, is never drawn. Writes the log-prob
// of each chosen token under softmax(logits / temperature) (greedy too; plain logits only when temperature <= 0) to
// *log_probs. Greedy (do_sample false) ignores `uniforms`. Returns int64 [N]. top-p keeps the tokens whose mass of
// strictly larger logits is at most top_p of the top-k mass, so tokens of equal logit are kept or dropped together.
// On a GPU the fused kernel samples (kernels::SampleTokens, filters included); elsewhere ATen's composition runs over
// passes of options.sampler_rows_per_pass rows, each row's result the same whatever the passes.
at::Tensor SampleNextTokens(const at::Tensor& logits, const SamplingOptions& options, const at::Tensor& uniforms,
                            at::Tensor* log_probs);

// The ATen sampler's temporaries (the CPU's; a GPU's rows go to the fused kernel, filters included): at most about
// kSamplerWorkspaceBytes a pass, taking kSamplerBytesPerLogit bytes per logit of a row (float32 copies, a sort's int64
// indices, top-p's ties' int64 first positions, float64 CDFs), so a pass has SamplerRowsPerPass(vocab) rows. The bound
// is wide (504 rows of Qwen2.5's vocabulary): on an H100, before the fused kernel took filters, B1's shape with top-p
// 0.9 took 7.68 s in one pass of 512 rows and 9.62 s in four of 147.
inline constexpr int64_t kSamplerWorkspaceBytes = int64_t{4} << 30;
inline constexpr int64_t kSamplerBytesPerLogit = 56;
int64_t SamplerRowsPerPass(int64_t vocab);

// A decoding step's sampling memory per running row, beside its KV cache: its row of logits in the model's dtype (on
// a GPU the fused sampler reads them in place, top-k / top-p included).
inline int64_t SamplingRowBytes(int64_t vocab, int64_t dtype_bytes) { return vocab * dtype_bytes; }

// Generates for every prompt: static batching when options.lockstep, continuous batching otherwise. Requires
// non-empty prompts (continuous batching: at least one; static batching makes its lockstep passes over none, and
// returns an empty batch). Runs under inference mode.
RolloutBatch Generate(const DecoderModel& model, const std::vector<std::vector<int32_t>>& prompts,
                      const SamplingOptions& options);
RolloutBatch GenerateStatic(const DecoderModel& model, const std::vector<std::vector<int32_t>>& prompts,
                            const SamplingOptions& options);
RolloutBatch GenerateContinuous(const DecoderModel& model, const std::vector<std::vector<int32_t>>& prompts,
                                const SamplingOptions& options);
// Static batching's prompts a pass (n samples each): as many as max_num_seqs rows hold, at least one.
int64_t StaticPassPrompts(int32_t n, int32_t max_num_seqs);
// Static batching's passes over `num_prompts` prompts of n samples each (StaticPassPrompts a pass).
int64_t StaticPasses(int64_t num_prompts, int32_t n, int32_t max_num_seqs);
// The rows of `parts` (static passes over consecutive prompts) as one batch: prompts left-padded with pad_token_id to
// the longest, as a single pass over them all lays them out. Only the tensors: the counters are continuous
// batching's.
RolloutBatch ConcatRollouts(const std::vector<RolloutBatch>& parts, int64_t pad_token_id);

// Bytes of KV cache one sequence slot of `capacity` positions takes in `model`'s dtype.
int64_t KvSlotBytes(const DecoderConfig& config, at::ScalarType dtype, int64_t capacity);
// An estimate of a forward's activations per token without gradients, in `dtype`: the residual stream and its norm,
// q/k/v, the keys and values repeated for the query heads, the attention's output and its projection, gate/up and
// SwiGLU's output (ATen's temporaries come and go; the attention is taken to run fused, never forming the scores).
int64_t ForwardTokenBytes(const DecoderConfig& config, at::ScalarType dtype);
// Continuous batching's largest prefill over prompts of `prompt_lengths` tokens (n samples each): the activations of a
// pass of at most max_num_batched_tokens tokens (or, unless `chunked`, of the longest prompt alone, where it is
// longer; chunked, a chunk's attention also takes a layer's cached keys and values, copied, and off flash attention,
// in float32, its mask over the prompt so far; whole prompts off flash attention, a padded pass, also its rows' own
// cache of keys and values and their mask), the logits of its prompts' last positions and a row of float32 logits
// for each of their samples it admits (at most max_rows). The worker's KV cache budget takes it off what
// gpu_memory_utilization leaves.
int64_t PrefillBytes(const DecoderConfig& config, at::ScalarType dtype, std::vector<int64_t> prompt_lengths, int32_t n,
                     int64_t max_num_batched_tokens, int64_t max_rows, bool chunked);
// The batch a rollout of `rows` rows returns on its device (RolloutBatch: prompts and responses with their masks, the
// responses' log-probs), made while its KV cache is still held.
int64_t RolloutOutputBytes(int64_t rows, int64_t prompt_len, int64_t max_new_tokens);
// Static batching's memory per row beside its KV cache slot (the worker's budget for passes layer by layer): its
// prefill's activations over `prompt_len` padded tokens (ForwardTokenBytes each), its attention masks ([P, P] bool and
// additive in `dtype`) and a step's float32 logits.
int64_t StaticRowBytes(const DecoderConfig& config, at::ScalarType dtype, int64_t prompt_len);
// The most a pass layer by layer holds gathered at once, in `dtype`: the embedding (or the LM head) or one layer.
int64_t LayerByLayerGatherBytes(const DecoderConfig& config, at::ScalarType dtype);
// Bytes of the per-rollout copy of the q/k/v projection weights that decoding with folded input norms makes
// (SamplingOptions::fold_input_norms; DecoderModel::FoldedQkvWeights) in `dtype`: 0 where it is not made
// (FoldsInputNorms).
int64_t FoldedQkvBytes(const DecoderConfig& config, at::ScalarType dtype);
// Bytes of the per-rollout copy of the gate and up projection weights that decoding with folded post-attention norms
// makes (SamplingOptions::fold_post_attention_norms; DecoderModel::FoldedGateUpWeights): 0 where it is not made.
int64_t FoldedGateUpBytes(const DecoderConfig& config, at::ScalarType dtype);
// Whether making a folded copy of `copy_bytes` (the q/k/v one, then the gate/up one) costs none of the KV cache slots a
// rollout would use: `free_bytes` left for the slots and the folded copies, `folded_bytes` of them already taken (the
// q/k/v copy, when asking for the gate/up one), slots of `slot_bytes`, `wanted` slots at most (the rollout's
// sequences, capped at max_num_seqs). The worker makes a copy only where this holds: a fold saves a norm kernel a
// layer, a slot fewer can cost a whole wave of decoding.
bool FoldCostsNoSlots(double free_bytes, int64_t folded_bytes, int64_t copy_bytes, int64_t slot_bytes, int64_t wanted);

}  // namespace verl

#endif  // VERL_WORKER_ROLLOUT_GENERATOR_H_
