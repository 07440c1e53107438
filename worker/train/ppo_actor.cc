#include "worker/train/ppo_actor.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/record_function.h>
#include <torch/csrc/autograd/autograd.h>

#include <cmath>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status/status_macros.h"
#include "worker/model/host_upload.h"
#include "worker/train/chunked_log_probs.h"
#include "worker/train/core_algos.h"
#include "worker/train/metric_accumulator.h"
#include "worker/train/policy_loss.h"

namespace verl {

LogProbResult ForwardLogProbs(const DecoderModel& model, const SequenceBatch& batch, int64_t begin, int64_t count,
                              double temperature, bool with_entropy, bool causal, const TokenLossGradFor* loss_grad) {
  at::Tensor ids = batch.input_ids.narrow(0, begin, count);
  at::Tensor valid = batch.attention_mask.narrow(0, begin, count);
  at::Tensor responses = batch.responses.narrow(0, begin, count);
  const at::Tensor host_valid =
      batch.has_host_copies() ? batch.host_attention_mask.narrow(0, begin, count) : at::Tensor();
  const int64_t S = ids.size(1);
  const int64_t R = responses.size(1);
  // Rows whose valid tokens form one run (prompt left padding, response right padding; checked) attend causally
  // without a mask, each rolled past its leading padding and cut to the longest (ForwardColumns): SDPA then skips the
  // tiles above the diagonal, which a mask makes it compute. Only valid positions are read below.
  // The hidden state at position t predicts token t + 1: responses start at S - R.
  const at::Tensor hidden = model.ForwardColumns(ids, valid, S - R - 1, R, causal, host_valid);
  // The [tokens, vocab] logits are formed a chunk of tokens at a time (worker/train/chunked_log_probs.h).
  if (loss_grad != nullptr) {
    ChunkedLossGradResult c =
        ChunkedLogProbsWithGrad(hidden, model.LmHeadWeight(), responses, temperature, (*loss_grad)(at::Tensor()));
    return {c.log_probs, c.entropy, 0, c.anchor};
  }
  ChunkedLogProbsResult c = ChunkedLogProbs(hidden, model.LmHeadWeight(), responses, temperature, with_entropy);
  return {c.log_probs, c.entropy};
}

LogProbResult ForwardLogProbsPacked(const DecoderModel& model, const SequenceBatch& batch, double temperature,
                                    bool with_entropy, bool share_prompts, const TokenLossGradFor* loss_grad) {
  const PackedBatch packed = PackBatch(batch.input_ids, batch.attention_mask, batch.response_mask, share_prompts,
                                       {batch.host_input_ids, batch.host_attention_mask, batch.host_response_mask});
  at::Tensor hidden = model.Forward(packed.input_ids, packed.position_ids, at::Tensor(), nullptr, &packed.sequences);
  const at::Tensor targets = batch.responses.reshape({-1}).index_select(0, packed.response_tokens).unsqueeze(0);
  auto unpack = [&](const at::Tensor& flat) {
    return at::zeros({batch.responses.numel()}, flat.options())
        .index_copy(0, packed.response_tokens, flat.squeeze(0))
        .view(batch.responses.sizes());
  };
  const at::Tensor predicting = hidden.index_select(1, packed.predicting);
  if (loss_grad != nullptr) {
    ChunkedLossGradResult c = ChunkedLogProbsWithGrad(predicting, model.LmHeadWeight(), targets, temperature,
                                                      (*loss_grad)(packed.response_tokens));
    return {unpack(c.log_probs), unpack(c.entropy), packed.input_ids.size(1), c.anchor};
  }
  ChunkedLogProbsResult c = ChunkedLogProbs(predicting, model.LmHeadWeight(), targets, temperature, with_entropy);
  return {unpack(c.log_probs), with_entropy ? unpack(c.entropy) : at::Tensor(), packed.input_ids.size(1)};
}

absl::StatusOr<at::Tensor> ComputeLogProbsNoGrad(const DecoderModel& model, const SequenceBatch& whole,
                                                 double temperature, const MicroBatching& micro) {
  at::NoGradGuard no_grad;
  // Planned on the host from one read-back: the passes then run without the device waiting for the host between them.
  const SequenceBatch batch = WithHostCopies(whole);
  const bool causal = micro.causal.has_value() ? *micro.causal : CausalPasses(batch, micro.packed);
  MicroBatching how = micro;
  how.rolled = causal;  // the passes compute rows x the longest row
  ASSIGN_OR_RETURN(std::vector<at::Tensor> parts, SplitMicroBatches(batch, how));
  const int64_t R = batch.responses.size(1);
  const at::Device device = batch.input_ids.device();
  at::Tensor out = at::zeros({batch.size(), R}, at::TensorOptions().dtype(at::kFloat).device(device));
  for (const at::Tensor& rows : parts) {
    const SequenceBatch sub = SelectTrimmed(batch, rows);
    const at::Tensor lp = micro.packed
                              ? ForwardLogProbsPacked(model, sub, temperature, false, micro.share_prompts).log_probs
                              : ForwardLogProbs(model, sub, 0, sub.size(), temperature, false, causal).log_probs;
    out.index_copy_(0, UploadAsync(rows, device), PadResponseColumns(lp * sub.response_mask.to(lp.scalar_type()), R));
  }
  return out;
}

at::Tensor ComputeLogProbsNoGrad(const DecoderModel& model, const SequenceBatch& batch, double temperature,
                                 int64_t micro_batch_size) {
  MicroBatching micro;
  micro.rows = micro_batch_size;
  return ComputeLogProbsNoGrad(model, batch, temperature, micro).value();  // fixed micro-batches cannot fail
}

namespace {

// The update's sample order for each epoch: one permutation per epoch from `gen` when shuffling.
at::Tensor EpochOrder(int64_t N, bool shuffle, at::Generator& gen) {
  return shuffle ? at::randperm(N, gen, at::TensorOptions().dtype(at::kLong))
                 : at::arange(N, at::TensorOptions().dtype(at::kLong));
}

// The weight of each token's term in AggLossGlobal(terms, mask, mode, norm), which is linear in the terms: its gradient
// w.r.t. them (0 outside the mask).
absl::StatusOr<at::Tensor> AggWeights(const at::Tensor& mask, const std::string& mode, const AggNormalizer& norm) {
  at::AutoGradMode grad_on(true);
  const at::Tensor terms = at::zeros(mask.sizes(), mask.options().dtype(at::kFloat)).requires_grad_(true);
  ASSIGN_OR_RETURN(at::Tensor agg, AggLossGlobal(terms, mask, mode, norm));
  return torch::autograd::grad({agg}, {terms})[0];
}

// The fused update's token gradients (PolicyUpdateOptions::fuse_lm_head_grad) for a pass whose per-token inputs are
// [rows, r]: each token's loss gradient from its own log-prob, as backpropagating UpdatePolicy's loss would give it —
// its policy-loss and KL terms differentiated where they stand, times the token's aggregation weight `weight`
// (AggWeights); the entropy term's gradient is that weight times -entropy_coeff. `old` undefined: the old log-probs
// are the forward's own (a deferred first mini-batch).
TokenLossGradFor FusedLossGrad(const at::Tensor& weight, const at::Tensor& mask, const at::Tensor& adv,
                               const at::Tensor& old, const at::Tensor& ref, const at::Tensor& roll,
                               const PolicyUpdateOptions& options) {
  return [=, &options](const at::Tensor& flat) -> TokenLossGrad {
    // In the order the pass computes its tokens.
    auto flat_of = [&](const at::Tensor& t) {
      if (!t.defined()) return t;
      const at::Tensor f = t.reshape({-1});
      return flat.defined() ? f.index_select(0, flat) : f;
    };
    return [w = flat_of(weight), m = flat_of(mask), a = flat_of(adv), o = flat_of(old), rf = flat_of(ref),
            rl = flat_of(roll), &options](int64_t begin, const at::Tensor& lp, const at::Tensor&) {
      const int64_t n = lp.size(0);
      auto part = [&](const at::Tensor& t) { return t.defined() ? t.narrow(0, begin, n) : t; };
      at::AutoGradMode grad_on(true);
      const at::Tensor leaf = lp.detach().requires_grad_(true);
      const at::Tensor wc = part(w), valid = part(m).ne(0), zero = at::zeros({}, wc.options());
      auto pg = PerTokenPolicyLoss(o.defined() ? part(o) : lp.detach(), leaf, part(a), part(m), part(rl), options.loss);
      TORCH_CHECK(pg.ok(), pg.status().ToString());
      at::Tensor total = (at::where(valid, *pg, zero) * wc).sum();
      if (options.use_kl_loss) {
        auto kld = KlPenalty(leaf, part(rf), options.kl_loss_type);
        TORCH_CHECK(kld.ok(), kld.status().ToString());
        total = total + (at::where(valid, *kld, zero) * wc).sum() * options.kl_loss_coef;
      }
      return std::make_pair(torch::autograd::grad({total}, {leaf})[0],
                            options.entropy_coeff != 0 ? wc * -options.entropy_coeff : at::Tensor());
    };
  };
}

}  // namespace

at::Tensor FirstMiniBatchRows(int64_t N, int64_t mini_batch_size, bool shuffle, uint64_t seed) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  return EpochOrder(N, shuffle, gen).narrow(0, 0, std::min(N, mini_batch_size));
}

absl::StatusOr<std::map<std::string, double>> UpdatePolicy(DecoderModel& model, AdamW& optimizer,
                                                           const SequenceBatch& whole, const PolicyUpdateInputs& inputs,
                                                           const PolicyUpdateOptions& options) {
  // Planned on the host from one read-back, and the losses' figures read back once per mini-batch: the micro-batches'
  // passes then run without the device waiting for the host between them.
  const SequenceBatch batch = WithHostCopies(whole);
  const at::Device device = batch.input_ids.device();
  const int64_t N = batch.size();
  if (options.mini_batch_size <= 0 || N % options.mini_batch_size != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch of ", N, " sequences is not divisible into mini-batches of ", options.mini_batch_size));
  }
  if (options.use_kl_loss && !inputs.ref_log_probs.defined()) {
    return absl::FailedPreconditionError("use_kl_loss is set but no ref log-probs were computed for this step");
  }
  if (options.loss.tis_imp_ratio_cap > 0 && !inputs.rollout_log_probs.defined()) {
    return absl::FailedPreconditionError("tis_imp_ratio_cap is set but the rollout log-probs are missing");
  }
  if (options.rollout_corr_metrics && !inputs.rollout_log_probs.defined()) {
    return absl::FailedPreconditionError("rollout_corr_metrics is set but the rollout log-probs are missing");
  }
  const bool needs_rollout = options.loss.tis_imp_ratio_cap > 0 || options.rollout_corr_metrics;
  const PolicyLossOptions& loss_options = options.loss;
  at::Generator gen = at::detail::createCPUGenerator(options.seed);
  MetricAccumulator metrics;
  // The tensors the optimizer updates: the parameters, or this rank's shards of them (parameter sharding), whose
  // gradients arrive already summed over the group (reduce-scattered in backward).
  std::vector<at::Tensor> params;
  for (const auto& [name, t] : model.trainable_parameters()) params.push_back(t);
  const ReduceSumFn sum_over_shards = model.sharded() ? options.reduce_sum : nullptr;
  MicroBatching micro;
  micro.rows = options.micro_batch_size;
  micro.max_token_len = options.max_token_len;
  micro.budget_key = "actor_rollout_ref.actor.ppo_max_token_len_per_gpu";
  micro.agree = sum_over_shards;  // a sharded model gathers its layers in every pass: same pass count on every rank
  micro.packed = options.remove_padding || options.share_prompts;
  micro.share_prompts = options.share_prompts;
  const bool causal = CausalPasses(batch, micro.packed);  // as ComputeLogProbsNoGrad's
  micro.rolled = causal;
  // The LM head's gradients formed in the forward (PolicyUpdateOptions::fuse_lm_head_grad).
  const bool fused =
      options.fuse_lm_head_grad && PolicyLossIsPerToken(loss_options) && !model.sharded() && at::GradMode::is_enabled();
  if (fused) {  // the loss's settings checked up front, as the first micro-batch's loss would check them
    const at::Tensor z = at::zeros({1, 1});
    AggNormalizer one;
    one.global_tokens = one.global_seqs = one.max_response_length = 1;
    RETURN_IF_ERROR(ComputePolicyLossByMode(z, z, z, at::ones({1, 1}), z, loss_options, one).status());
    if (options.use_kl_loss) RETURN_IF_ERROR(KlPenalty(z, z, options.kl_loss_type).status());
  }
  for (int64_t epoch = 0; epoch < options.ppo_epochs; ++epoch) {
    const at::Tensor order = EpochOrder(N, options.shuffle, gen);
    for (int64_t mb = 0; mb < N; mb += options.mini_batch_size) {
      // The mini-batch's setup (up to its micro-batches' loop) as a span named in a profile (kernel_profile.h).
      std::optional<at::RecordFunction> setup_scope(std::in_place, at::RecordScope::USER_SCOPE);
      setup_scope->before("verl::UpdatePolicy mini-batch setup", c10::ArrayRef<const c10::IValue>{});
      const at::Tensor idx_host = order.narrow(0, mb, options.mini_batch_size);
      const at::Tensor idx = UploadAsync(idx_host, device);
      // The first mini-batch of a deferred pass: old log-probs from this forward (the policy is the rollout's yet).
      const bool own_old = inputs.first_mini_batch_deferred && epoch == 0 && mb == 0;
      SequenceBatch mini = SelectRows(batch, idx_host);
      at::Tensor old_lp = inputs.old_log_probs.index_select(0, idx);
      at::Tensor adv = inputs.advantages.index_select(0, idx);
      at::Tensor ref_lp = options.use_kl_loss ? inputs.ref_log_probs.index_select(0, idx) : at::Tensor();
      at::Tensor rollout_lp = needs_rollout ? inputs.rollout_log_probs.index_select(0, idx) : at::Tensor();
      AggNormalizer norm = GlobalAggNormalizer(mini.host_response_mask, options.reduce_sum);
      if (options.loss_scale_factor > 0) norm.max_response_length = options.loss_scale_factor;
      DeviceFigures figures;  // per pass: pg_loss, entropy, kl_loss, pg_clipfrac, ppo_kl, pg_clipfrac_lower
      DeviceFigures off_policy;  // per pass, with rollout_corr_metrics: OffPolicyFigures
      optimizer.ZeroGrad();
      GradAccumulator grads(params);  // the micro-batches' gradients summed in float32
      ASSIGN_OR_RETURN(std::vector<at::Tensor> micro_batches, SplitMicroBatches(mini, micro));
      metrics.Add("perf/actor_micro_batches", static_cast<double>(micro_batches.size()));
      metrics.Add("perf/actor_recomputed_layers", static_cast<double>(model.recomputed_layers()));
      setup_scope.reset();
      for (const at::Tensor& rows : micro_batches) {
        // Each pass runs without the padding columns none of its rows uses; the per-token tensors it produces are
        // [rows, r] with r the longest response among them, and the inputs it compares them with are cut to match.
        const SequenceBatch sub = SelectTrimmed(mini, rows);
        const int64_t r = sub.responses.size(1);
        const at::Tensor rows_on = UploadAsync(rows, device);
        auto cut = [&](const at::Tensor& t) { return t.defined() ? t.index_select(0, rows_on).narrow(1, 0, r) : t; };
        const at::Tensor mask = sub.response_mask.to(at::kFloat);
        const at::Tensor adv_c = cut(adv), ref_c = cut(ref_lp), roll_c = cut(rollout_lp);
        at::Tensor old = cut(old_lp);
        std::optional<TokenLossGradFor> loss_grad;
        if (fused) {
          ASSIGN_OR_RETURN(const at::Tensor weight, AggWeights(mask, options.loss.loss_agg_mode, norm));
          loss_grad = FusedLossGrad(weight, mask, adv_c, own_old ? at::Tensor() : old, ref_c, roll_c, options);
        }
        const TokenLossGradFor* grad_for = loss_grad ? &*loss_grad : nullptr;
        LogProbResult lp = micro.packed ? ForwardLogProbsPacked(model, sub, options.temperature, /*with_entropy=*/true,
                                                                micro.share_prompts, grad_for)
                                        : ForwardLogProbs(model, sub, 0, sub.size(), options.temperature,
                                                          /*with_entropy=*/true, causal, grad_for);
        if (micro.packed) metrics.Add("perf/actor_packed_tokens", static_cast<double>(lp.packed_tokens));
        if (own_old) {
          old = lp.log_probs.detach().to(at::kFloat) * mask;  // as ComputeLogProbsNoGrad stores them
          inputs.old_log_probs.index_copy_(0, idx.index_select(0, rows_on),
                                           PadResponseColumns(old, inputs.old_log_probs.size(1)));
        }
        // Fused, the loss is computed for its figures only (its gradient went with the forward).
        std::optional<at::NoGradGuard> figures_only;
        if (fused) figures_only.emplace();
        ASSIGN_OR_RETURN(PolicyLossResult pl,
                         ComputePolicyLossByMode(old, lp.log_probs, adv_c, mask, roll_c, loss_options, norm));
        ASSIGN_OR_RETURN(at::Tensor entropy_term, AggLossGlobal(lp.entropy, mask, options.loss.loss_agg_mode, norm));
        at::Tensor loss = pl.pg_loss - options.entropy_coeff * entropy_term;
        at::Tensor kl_term = at::zeros({}, pl.pg_loss.options());
        if (options.use_kl_loss) {
          ASSIGN_OR_RETURN(at::Tensor kld, KlPenalty(lp.log_probs, ref_c, options.kl_loss_type));
          ASSIGN_OR_RETURN(kl_term, AggLossGlobal(kld, mask, options.loss.loss_agg_mode, norm));
          loss = loss + kl_term * options.kl_loss_coef;
        }
        figures_only.reset();
        (fused ? lp.anchor : loss).backward();
        grads.Collect();
        figures.Add({pl.pg_loss, entropy_term, kl_term, pl.pg_clipfrac, pl.ppo_kl, pl.pg_clipfrac_lower});
        if (options.rollout_corr_metrics) off_policy.Add(OffPolicyFigures(lp.log_probs, roll_c, mask));
      }
      grads.Finish();
      double pg_loss = 0, entropy = 0, kl_loss = 0;
      const ReportedPolicyMetrics reported = PolicyMetricsReported(options.loss.loss_mode);
      for (const std::vector<double>& f : figures.ReadBack()) {
        pg_loss += f[0];
        entropy += f[1];
        kl_loss += f[2];
        if (reported.pg_clipfrac) metrics.Add("actor/pg_clipfrac", f[3]);
        if (reported.ppo_kl) metrics.Add("actor/ppo_kl", f[4]);
        if (reported.pg_clipfrac_lower) metrics.Add("actor/pg_clipfrac_lower", f[5]);
      }
      for (const std::vector<double>& f : off_policy.ReadBack()) {
        for (size_t i = 0; i < f.size(); ++i) metrics.Add("rollout_corr/" + OffPolicyFigureNames()[i], f[i]);
      }
      if (!model.sharded()) ReduceGradients(params, options.reduce_sum);
      // Each rank holds its share of the mini-batch's (globally normalised) losses: the sum is the mini-batch's.
      if (options.reduce_sum) {
        at::Tensor sums = ReduceSum(options.reduce_sum, at::tensor({pg_loss, entropy, kl_loss}, at::kDouble));
        pg_loss = sums[0].item<double>();
        entropy = sums[1].item<double>();
        kl_loss = sums[2].item<double>();
      }
      metrics.Add("actor/pg_loss", pg_loss);
      metrics.Add("actor/entropy", entropy);
      if (options.use_kl_loss) {
        metrics.Add("actor/kl_loss", kl_loss);
        metrics.Add("actor/kl_coef", options.kl_loss_coef);
      }
      const double grad_norm = ClipAndStep(optimizer, params, options.grad_clip, options.lr, sum_over_shards);
      if (!std::isfinite(grad_norm)) metrics.Add("actor/grad_norm_nonfinite", 1.0);
      metrics.Add("actor/grad_norm", grad_norm);
    }
  }
  auto out = metrics.Means();
  out["actor/lr"] = options.lr;
  out["perf/actor_fused_lm_head"] = fused ? 1.0 : 0.0;  // the LM head's gradients formed in the forward
  return out;
}

}  // namespace verl
