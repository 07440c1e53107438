#include "worker/model/value_model.h"

#include <ATen/CPUGeneratorImpl.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status/status_macros.h"
#include "worker/model/safetensors_checkpoint.h"
#include "worker/rank/torch_util.h"

namespace verl {
namespace {


}  // namespace

absl::StatusOr<std::unique_ptr<ValueModel>> ValueModel::Load(const std::string& model_dir, at::ScalarType dtype,
                                                             uint64_t seed, at::Device device) {
  std::unique_ptr<ValueModel> vm(new ValueModel());
  ASSIGN_OR_RETURN(vm->decoder_, DecoderModel::Load(model_dir, dtype, device));
  const int64_t hidden = vm->decoder_->config().hidden_size;
  ASSIGN_OR_RETURN(SafetensorsCheckpoint ckpt, SafetensorsCheckpoint::Open(model_dir));
  const bool has_weight = ckpt.Contains("score.weight");
  const bool has_bias = ckpt.Contains("score.bias");
  if (has_weight) {
    ASSIGN_OR_RETURN(SafetensorsFile::TensorView weight, ckpt.Get("score.weight"));
    if (weight.shape != std::vector<int64_t>{1, hidden}) {
      return absl::InvalidArgumentError(absl::StrCat(model_dir, ": tensor 'score.weight' must be [1, ", hidden,
                                                     "] for a value head, got ", FormatShape(weight.shape)));
    }
    vm->head_weight_ = at::from_blob(const_cast<void*>(weight.data), weight.shape,
                                     at::TensorOptions().dtype(ToScalarType(weight.dtype)))
                           .to(dtype, false, true);
    if (has_bias) {
      ASSIGN_OR_RETURN(SafetensorsFile::TensorView bias, ckpt.Get("score.bias"));
      if (bias.shape != std::vector<int64_t>{1}) {
        return absl::InvalidArgumentError(absl::StrCat(model_dir, ": tensor 'score.bias' must be [1] for a value ",
                                                       "head, got ", FormatShape(bias.shape)));
      }
      vm->head_bias_ = at::from_blob(const_cast<void*>(bias.data), bias.shape,
                                     at::TensorOptions().dtype(ToScalarType(bias.dtype)))
                           .to(dtype, false, true);
    } else {
      vm->head_bias_ = at::zeros({1}, at::TensorOptions().dtype(dtype));
    }
  } else if (has_bias) {
    // Half a head is a broken checkpoint; starting the weight from random would silently discard the bias's training.
    return absl::InvalidArgumentError(
        absl::StrCat(model_dir, ": tensor 'score.bias' is present but 'score.weight' is missing"));
  } else {
    at::Generator gen = at::detail::createCPUGenerator(seed);
    vm->head_weight_ = at::normal(0.0, 0.02, {1, hidden}, gen, at::TensorOptions().dtype(at::kFloat)).to(dtype);
    vm->head_bias_ = at::zeros({1}, at::TensorOptions().dtype(dtype));
  }
  vm->head_weight_ = vm->head_weight_.to(device);
  vm->head_bias_ = vm->head_bias_.to(device);
  for (const auto& [name, t] : vm->decoder_->named_parameters()) {
    if (name != "lm_head.weight") vm->params_.emplace_back(name, t);
  }
  vm->params_.emplace_back("score.weight", vm->head_weight_);
  vm->params_.emplace_back("score.bias", vm->head_bias_);
  return vm;
}

at::Tensor ValueModel::Values(const at::Tensor& input_ids, const at::Tensor& attention_mask, int64_t response_length,
                              bool causal, const at::Tensor& host_valid) const {
  const int64_t S = input_ids.size(1);
  // As the actor's ForwardLogProbs: rows whose valid tokens form one run (checked) attend causally without a mask.
  // Values at padding positions then differ from the masked pass's; the critic masks them everywhere (ComputeValues,
  // the value loss).
  const at::Tensor h =
      decoder_->ForwardColumns(input_ids, attention_mask, S - response_length - 1, response_length, causal, host_valid);
  return at::linear(h, head_weight_, head_bias_).squeeze(-1).to(at::kFloat);
}

at::Tensor ValueModel::ValuesPacked(const at::Tensor& input_ids, const at::Tensor& attention_mask,
                                    const at::Tensor& response_mask, const HostCopies& host) const {
  const PackedBatch packed = PackBatch(input_ids, attention_mask, response_mask, /*share_prompts=*/false, host);
  at::Tensor hidden = decoder_->Forward(packed.input_ids, packed.position_ids, at::Tensor(), nullptr,
                                        &packed.sequences);
  at::Tensor flat = at::linear(hidden.index_select(1, packed.predicting), head_weight_, head_bias_)
                        .squeeze(-1)
                        .squeeze(0)
                        .to(at::kFloat);
  return at::zeros({response_mask.numel()}, flat.options())
      .index_copy(0, packed.response_tokens, flat)
      .view(response_mask.sizes());
}

std::vector<at::Tensor> ValueModel::parameters() const {
  std::vector<at::Tensor> out;
  for (const auto& [name, t] : params_) out.push_back(t);
  return out;
}

void ValueModel::SetRequiresGrad(bool requires_grad) {
  for (auto& [name, t] : params_) t.set_requires_grad(requires_grad);
}

}  // namespace verl
