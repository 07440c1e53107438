#ifndef VERL_WORKER_TRAIN_SEQUENCE_BATCH_H_
#define VERL_WORKER_TRAIN_SEQUENCE_BATCH_H_

// A step's sequences as the trainer sees them, and how they are cut into micro-batches (one forward/backward pass
// each): a fixed number of rows (verl's *_micro_batch_size_per_gpu) or a token budget (verl's use_dynamic_bsz with
// *_max_token_len_per_gpu). Each pass runs on its rows with the padding columns none of them uses cut away (leading
// prompt padding, trailing response padding), so a budget counts the tokens a pass really computes:
// rows x (longest prompt + longest response among them).

#include <ATen/ATen.h>

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/train/core_algos.h"

namespace verl {

// Prompt (left-padded) followed by response (right-padded). S = P + R.
struct SequenceBatch {
  at::Tensor input_ids;       // [N, S] int64
  at::Tensor attention_mask;  // [N, S] bool
  at::Tensor responses;       // [N, R] int64
  at::Tensor response_mask;   // [N, R] bool
  // CPU copies of the above (WithHostCopies; undefined: none), from which the passes are planned (micro-batches, the
  // columns each keeps, packing) without reading the device back: every read-back makes the host wait for the device,
  // which then idles while the host plans and launches the next pass. Kept by SelectRows and SelectTrimmed.
  at::Tensor host_input_ids, host_attention_mask, host_response_mask;
  int64_t size() const { return input_ids.size(0); }
  bool has_host_copies() const { return host_attention_mask.defined(); }
  // What planning reads: the host copies where the batch has them, else the tensors themselves (read back).
  const at::Tensor& plan_input_ids() const { return has_host_copies() ? host_input_ids : input_ids; }
  const at::Tensor& plan_attention_mask() const { return has_host_copies() ? host_attention_mask : attention_mask; }
  const at::Tensor& plan_response_mask() const { return has_host_copies() ? host_response_mask : response_mask; }
};

// `b` with host copies (one read-back of the ids and masks; a CPU batch's are its own tensors). Kept if `b` has them.
SequenceBatch WithHostCopies(SequenceBatch b);

// Rows `idx` (int64, on the host or on the batch's device) of `b`, all columns. With host copies and a host `idx`, no
// read-back: the rows go to the device without waiting for it.
SequenceBatch SelectRows(const SequenceBatch& b, const at::Tensor& idx);

// Rows `idx` of `b` without the prompt columns no selected row uses and without the response columns past the
// longest selected response (at least one column stays). The result's R is the kept response width. The columns are
// found from the host copies where `b` has them (no read-back), else read back.
SequenceBatch SelectTrimmed(const SequenceBatch& b, const at::Tensor& idx);

// Whether the padded (not `packed`) passes over `batch` attend causally without a mask: every row's valid tokens form
// one run (OneValidRun of its mask, from the host copies or one flag read back: prompt left padding and response right
// padding; each row is rolled past its leading padding, DecoderModel::ForwardColumns with causal). Decided once per
// step's batch, not per micro-batch, so that every pass over a row (the no-grad one and the update, which group rows
// differently) takes the same attention path. VERL_CAUSAL_PASSES=0 in the environment makes every padded pass use the
// explicit mask (for A/B runs; before 148fe46 batches with left padding did, those without already attended causally).
bool CausalPasses(const SequenceBatch& batch, bool packed);

// `t` [n, r] widened with zeros to [n, R].
at::Tensor PadResponseColumns(const at::Tensor& t, int64_t R);

struct MicroBatching {
  int64_t rows = 1;           // fixed: rows per micro-batch, in order
  int64_t max_token_len = 0;  // > 0: by token budget (use_dynamic_bsz), `rows` unused
  std::string budget_key;     // the config key of max_token_len, for errors
  bool packed = false;        // each pass runs packed without padding (use_remove_padding)
  // With packed: rows with the same prompt share one run of it in a pass (PackBatch's share_prompts, verl's
  // use_prefix_grouper); by budget, such rows go to the same micro-batch, counted as the prompt's tokens once plus
  // their responses' (a group over the budget is cut into parts that each run the prompt).
  bool share_prompts = false;
  bool rolled = false;        // each pass rolls its rows past their left padding (CausalPasses), not packed
  // ComputeLogProbsNoGrad's attention path for a subset of a larger batch: that batch's CausalPasses, so the subset
  // attends as the whole would (a subset can form single runs where the whole does not). Unset: the batch's own.
  std::optional<bool> causal;
  // Ranks that must make the same number of passes (a sharded model gathers its layers in every pass): a sum over
  // them, to agree on the largest count any of them needs. Unset: each rank packs on its own.
  ReduceSumFn agree;
};

// Row index tensors (int64 on the host: UploadAsync them for the device), one per micro-batch, covering every row
// once; planned from the batch's host copies where it has them (else read back). By budget: rows longest
// first, each added to the current micro-batch while the tokens its pass computes stay within max_token_len: rows x
// (longest prompt + longest response, in the columns SelectTrimmed keeps) padded, rows x the longest row (valid
// tokens) rolled, the rows' valid tokens packed (as verl's use_dynamic_bsz counts; with share_prompts, groups of rows
// with one prompt, largest first, each prompt's tokens counted once); with `agree`, micro-batches with
// the most rows are halved until every rank has the same count.
// A single sequence longer than the budget is an error naming budget_key. With `agree`, a rank that cannot plan still
// takes part in the agreement, and the others then fail too (Aborted), instead of waiting for it in their passes.
absl::StatusOr<std::vector<at::Tensor>> SplitMicroBatches(const SequenceBatch& batch, const MicroBatching& how);

}  // namespace verl

#endif  // VERL_WORKER_TRAIN_SEQUENCE_BATCH_H_
