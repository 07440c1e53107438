#include "worker/train/ppo_critic.h"

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status/status_macros.h"
#include "worker/model/host_upload.h"
#include "worker/train/core_algos.h"
#include "worker/train/metric_accumulator.h"
#include "worker/train/policy_loss.h"

namespace verl {

namespace {

// The critic's pass over `sub` (SelectTrimmed's rows), from its host copies where it has them.
at::Tensor Values(const ValueModel& model, const SequenceBatch& sub, bool packed, bool causal) {
  return packed
             ? model.ValuesPacked(sub.input_ids, sub.attention_mask, sub.response_mask,
                                  {sub.host_input_ids, sub.host_attention_mask, sub.host_response_mask})
             : model.Values(sub.input_ids, sub.attention_mask, sub.responses.size(1), causal, sub.host_attention_mask);
}

}  // namespace

absl::StatusOr<at::Tensor> ComputeValuesNoGrad(const ValueModel& model, const SequenceBatch& whole,
                                               const MicroBatching& micro) {
  at::NoGradGuard no_grad;
  const SequenceBatch batch = WithHostCopies(whole);  // planned on the host (UpdatePolicy's note)
  const bool causal = CausalPasses(batch, micro.packed);
  MicroBatching how = micro;
  how.rolled = causal;  // the passes compute rows x the longest row
  ASSIGN_OR_RETURN(std::vector<at::Tensor> parts, SplitMicroBatches(batch, how));
  const int64_t R = batch.responses.size(1);
  at::Tensor out = at::zeros({batch.size(), R}, at::TensorOptions().dtype(at::kFloat).device(batch.input_ids.device()));
  for (const at::Tensor& rows : parts) {
    const SequenceBatch sub = SelectTrimmed(batch, rows);
    at::Tensor values = Values(model, sub, micro.packed, causal);
    out.index_copy_(0, UploadAsync(rows, batch.input_ids.device()),
                    PadResponseColumns(values * sub.response_mask.to(at::kFloat), R));
  }
  return out;
}

at::Tensor ComputeValuesNoGrad(const ValueModel& model, const SequenceBatch& batch, int64_t micro_batch_size) {
  MicroBatching micro;
  micro.rows = micro_batch_size;
  return ComputeValuesNoGrad(model, batch, micro).value();  // fixed micro-batches cannot fail
}

absl::StatusOr<std::map<std::string, double>> UpdateValue(ValueModel& model, AdamW& optimizer,
                                                          const SequenceBatch& whole, const at::Tensor& old_values,
                                                          const at::Tensor& returns,
                                                          const ValueUpdateOptions& options) {
  const SequenceBatch batch = WithHostCopies(whole);  // planned on the host (UpdatePolicy's note)
  const at::Device device = batch.input_ids.device();
  const int64_t N = batch.size();
  if (options.mini_batch_size <= 0 || N % options.mini_batch_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat("batch of ", N, " sequences is not divisible into critic ",
                                                   "mini-batches of ", options.mini_batch_size));
  }
  at::Generator gen = at::detail::createCPUGenerator(options.seed);
  MetricAccumulator metrics;
  const std::vector<at::Tensor> params = model.parameters();
  auto long_opts = at::TensorOptions().dtype(at::kLong);
  MicroBatching micro;
  micro.rows = options.micro_batch_size;
  micro.max_token_len = options.max_token_len;
  micro.budget_key = "critic.ppo_max_token_len_per_gpu";
  micro.packed = options.remove_padding;
  const bool causal = CausalPasses(batch, options.remove_padding);  // as ComputeValuesNoGrad's
  micro.rolled = causal;
  for (int64_t epoch = 0; epoch < options.ppo_epochs; ++epoch) {
    at::Tensor order = options.shuffle ? at::randperm(N, gen, long_opts) : at::arange(N, long_opts);
    for (int64_t mb = 0; mb < N; mb += options.mini_batch_size) {
      const at::Tensor idx_host = order.narrow(0, mb, options.mini_batch_size);
      const at::Tensor idx = UploadAsync(idx_host, device);
      const SequenceBatch mini = SelectRows(batch, idx_host);
      at::Tensor vold = old_values.index_select(0, idx);
      at::Tensor ret = returns.index_select(0, idx);
      const AggNormalizer norm = GlobalAggNormalizer(mini.host_response_mask.to(at::kFloat), options.reduce_sum);
      DeviceFigures figures;  // per pass: vf_loss, vf_clipfrac, vpred_mean
      optimizer.ZeroGrad();
      GradAccumulator grads(params);  // the micro-batches' gradients summed in float32
      ASSIGN_OR_RETURN(std::vector<at::Tensor> micro_batches, SplitMicroBatches(mini, micro));
      metrics.Add("perf/critic_micro_batches", static_cast<double>(micro_batches.size()));
      metrics.Add("perf/critic_recomputed_layers", static_cast<double>(model.decoder().recomputed_layers()));
      for (const at::Tensor& rows : micro_batches) {
        const SequenceBatch sub = SelectTrimmed(mini, rows);  // as in UpdatePolicy
        const int64_t r = sub.responses.size(1);
        const at::Tensor rows_on = UploadAsync(rows, device);
        auto cut = [&](const at::Tensor& t) { return t.index_select(0, rows_on).narrow(1, 0, r); };
        at::Tensor m = sub.response_mask.to(at::kFloat);
        at::Tensor vpreds = Values(model, sub, options.remove_padding, causal);
        ASSIGN_OR_RETURN(ValueLossResult vl, ComputeValueLoss(vpreds, cut(ret), cut(vold), m, options.cliprange_value,
                                                              options.loss_agg_mode, norm));
        vl.vf_loss.backward();
        grads.Collect();
        figures.Add({vl.vf_loss, vl.vf_clipfrac, MaskedMean(vpreds.detach(), m)});
      }
      grads.Finish();
      double vf_loss = 0;
      for (const std::vector<double>& f : figures.ReadBack()) {
        vf_loss += f[0];
        metrics.Add("critic/vf_clipfrac", f[1]);
        metrics.Add("critic/vpred_mean", f[2]);
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
