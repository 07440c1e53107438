#include "worker/train/ppo_critic.h"

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status/status_macros.h"
#include "worker/train/core_algos.h"
#include "worker/train/metric_accumulator.h"
#include "worker/train/policy_loss.h"

namespace verl {

at::Tensor ComputeValuesNoGrad(const ValueModel& model, const SequenceBatch& batch, int64_t micro_batch_size) {
  at::NoGradGuard no_grad;
  const int64_t R = batch.responses.size(1);
  std::vector<at::Tensor> parts;
  for (int64_t b = 0; b < batch.size(); b += micro_batch_size) {
    const int64_t count = std::min(micro_batch_size, batch.size() - b);
    parts.push_back(model.Values(batch.input_ids.narrow(0, b, count), batch.attention_mask.narrow(0, b, count), R));
  }
  return at::cat(parts, 0) * batch.response_mask.to(at::kFloat);
}

absl::StatusOr<std::map<std::string, double>> UpdateValue(ValueModel& model, AdamW& optimizer,
                                                          const SequenceBatch& batch, const at::Tensor& old_values,
                                                          const at::Tensor& returns,
                                                          const ValueUpdateOptions& options) {
  const int64_t N = batch.size();
  const int64_t R = batch.responses.size(1);
  if (options.mini_batch_size <= 0 || N % options.mini_batch_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat("batch of ", N, " sequences is not divisible into critic ",
                                                   "mini-batches of ", options.mini_batch_size));
  }
  at::Generator gen = at::detail::createCPUGenerator(options.seed);
  MetricAccumulator metrics;
  const std::vector<at::Tensor> params = model.parameters();
  auto long_opts = at::TensorOptions().dtype(at::kLong);
  for (int64_t epoch = 0; epoch < options.ppo_epochs; ++epoch) {
    at::Tensor order = options.shuffle ? at::randperm(N, gen, long_opts) : at::arange(N, long_opts);
    for (int64_t mb = 0; mb < N; mb += options.mini_batch_size) {
      at::Tensor idx = order.narrow(0, mb, options.mini_batch_size).to(batch.input_ids.device());
      at::Tensor ids = batch.input_ids.index_select(0, idx);
      at::Tensor valid = batch.attention_mask.index_select(0, idx);
      at::Tensor mask = batch.response_mask.index_select(0, idx).to(at::kFloat);
      at::Tensor vold = old_values.index_select(0, idx);
      at::Tensor ret = returns.index_select(0, idx);
      const AggNormalizer norm = GlobalAggNormalizer(mask, options.reduce_sum);
      double vf_loss = 0;
      optimizer.ZeroGrad();
      for (int64_t b = 0; b < options.mini_batch_size; b += options.micro_batch_size) {
        const int64_t count = std::min(options.micro_batch_size, options.mini_batch_size - b);
        at::Tensor m = mask.narrow(0, b, count);
        at::Tensor vpreds = model.Values(ids.narrow(0, b, count), valid.narrow(0, b, count), R);
        ASSIGN_OR_RETURN(ValueLossResult vl, ComputeValueLoss(vpreds, ret.narrow(0, b, count), vold.narrow(0, b, count),
                                                              m, options.cliprange_value, options.loss_agg_mode, norm));
        vl.vf_loss.backward();
        vf_loss += vl.vf_loss.item<double>();
        metrics.Add("critic/vf_clipfrac", vl.vf_clipfrac.item<double>());
        metrics.Add("critic/vpred_mean", MaskedMean(vpreds.detach(), m).item<double>());
      }
      ReduceGradients(params, options.reduce_sum);
      if (options.reduce_sum)
        vf_loss = ReduceSum(options.reduce_sum, at::tensor({vf_loss}, at::kDouble)).item<double>();
      metrics.Add("critic/vf_loss", vf_loss);
      const double grad_norm = ClipAndStep(optimizer, params, options.grad_clip, options.lr);
      if (!std::isfinite(grad_norm)) metrics.Add("critic/grad_norm_nonfinite", 1.0);
      metrics.Add("critic/grad_norm", grad_norm);
    }
  }
  auto out = metrics.Means();
  out["critic/lr"] = options.lr;
  return out;
}

}  // namespace verl
