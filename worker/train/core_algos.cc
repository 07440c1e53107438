#include "worker/train/core_algos.h"

#include "absl/strings/str_cat.h"

namespace verl {

at::Tensor MaskedMean(const at::Tensor& x, const at::Tensor& mask) {
  at::Tensor m = mask.to(x.scalar_type());
  return (x * m).sum() / (m.sum() + 1e-8);
}

absl::StatusOr<at::Tensor> KlPenalty(const at::Tensor& log_prob, const at::Tensor& ref_log_prob,
                                     const std::string& kl_type) {
  if (kl_type == "kl" || kl_type == "k1") return log_prob - ref_log_prob;
  if (kl_type == "abs") return (log_prob - ref_log_prob).abs();
  if (kl_type == "mse" || kl_type == "k2") return 0.5 * (log_prob - ref_log_prob).square();
  if (kl_type == "low_var_kl" || kl_type == "k3") {
    at::Tensor kl = (ref_log_prob - log_prob).clamp(-20, 20);
    at::Tensor kld = kl.exp() - kl - 1;
    return kld.clamp(-10, 10);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown kl_loss_type '", kl_type, "' (expected kl, k1, abs, mse, k2, low_var_kl or k3)"));
}

at::Tensor EntropyFromLogits(const at::Tensor& logits) {
  at::Tensor pd = logits.softmax(-1);
  return logits.logsumexp(-1) - (pd * logits).sum(-1);
}

}  // namespace verl
