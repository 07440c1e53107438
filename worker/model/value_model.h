#ifndef VERL_WORKER_MODEL_VALUE_MODEL_H_
#define VERL_WORKER_MODEL_VALUE_MODEL_H_

// The critic: a decoder with a scalar value head on its final hidden states, as verl's critic built from
// AutoModelForTokenClassification(num_labels=1): the head is `score.weight` [1, hidden] and `score.bias` [1]. When the
// model directory has no such tensors (a plain LM checkpoint), the head starts as transformers initialises it:
// weight ~ N(0, 0.02) from `seed`, bias 0.

#include <ATen/ATen.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/model/decoder_model.h"

namespace verl {

class ValueModel {
 public:
  // Loads the decoder of `model_dir` in `dtype` and its head (`score.bias` may be absent: zero). Errors: those of
  // DecoderModel::Load, and InvalidArgument naming the directory and tensor for a `score.weight` other than
  // [1, hidden], a `score.bias` other than [1], or a `score.bias` without `score.weight`.
  // On `device`, as DecoderModel::Load (the head is drawn on the host from `seed`, then moved).
  static absl::StatusOr<std::unique_ptr<ValueModel>> Load(const std::string& model_dir, at::ScalarType dtype,
                                                          uint64_t seed, at::Device device = at::kCPU);

  // Values of the last `response_length` tokens of every row: [N, R] float32, aligned like the log-probs
  // (the hidden state before each response token). Records autograd history when grad mode is on. `causal`: every
  // row's valid tokens form one run (OneValidRun; checked), so the decoder attends causally without a mask, each row
  // rolled past its leading padding (DecoderModel::ForwardColumns with causal): the same values at valid positions but
  // for the attention kernel's rounding, others at padding positions, which callers mask (as the critic does). The
  // critic decides it once per step's batch (CausalPasses). `host_valid`: attention_mask's CPU copy, if the caller has
  // one (nothing is then read back).
  at::Tensor Values(const at::Tensor& input_ids, const at::Tensor& attention_mask, int64_t response_length,
                    bool causal = false, const at::Tensor& host_valid = {}) const;
  // The same computed with the rows packed without padding (use_remove_padding); 0 outside `response_mask` [N, R].
  // `host`: the inputs' CPU copies, if the caller has them (PackBatch).
  at::Tensor ValuesPacked(const at::Tensor& input_ids, const at::Tensor& attention_mask,
                          const at::Tensor& response_mask, const HostCopies& host = {}) const;

  // Decoder parameters (HF names; lm_head excluded: it has no gradient here) plus score.weight and score.bias.
  const std::vector<std::pair<std::string, at::Tensor>>& named_parameters() const { return params_; }
  std::vector<at::Tensor> parameters() const;
  void SetRequiresGrad(bool requires_grad);
  void SetGradientCheckpointing(bool on, int64_t recompute_layers = -1, bool keep_projections = true) {
    decoder_->SetGradientCheckpointing(on, recompute_layers, keep_projections);
  }
  const DecoderModel& decoder() const { return *decoder_; }

 private:
  ValueModel() = default;
  std::unique_ptr<DecoderModel> decoder_;
  at::Tensor head_weight_;
  at::Tensor head_bias_;
  std::vector<std::pair<std::string, at::Tensor>> params_;
};

}  // namespace verl

#endif  // VERL_WORKER_MODEL_VALUE_MODEL_H_
