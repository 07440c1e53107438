#include "worker/train/advantage.h"

#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <exception>
#include <unordered_map>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status/status_macros.h"
#include "worker/rank/torch_util.h"
#include "worker/train/core_algos.h"

namespace verl {
namespace {



// Row indices of each group, groups in order of first appearance.
std::vector<std::vector<int64_t>> GroupRows(const std::vector<std::string>& group_ids) {
  std::unordered_map<std::string, size_t> slot;
  std::vector<std::vector<int64_t>> rows;
  for (size_t i = 0; i < group_ids.size(); ++i) {
    auto [it, inserted] = slot.try_emplace(group_ids[i], rows.size());
    if (inserted) rows.emplace_back();
    rows[it->second].push_back(static_cast<int64_t>(i));
  }
  return rows;
}

double Mean(const std::vector<double>& s, const std::vector<int64_t>& rows) {
  double sum = 0;
  for (int64_t r : rows) sum += s[r];
  return sum / static_cast<double>(rows.size());
}

// Unbiased standard deviation (torch.std's default); callers ensure rows.size() > 1.
double StdUnbiased(const std::vector<double>& s, const std::vector<int64_t>& rows, double mean) {
  double sq = 0;
  for (int64_t r : rows) sq += (s[r] - mean) * (s[r] - mean);
  return std::sqrt(sq / static_cast<double>(rows.size() - 1));
}

// The float64 CPU working copies of the inputs.
struct Work {
  int64_t n = 0;
  int64_t r = 0;
  at::Tensor rewards;          // [N, R] float64
  at::Tensor mask;             // [N, R] float64
  std::vector<double> scores;  // per-sequence sum of token rewards (verl sums every position, masked or not)
};

at::Tensor ToWork(const at::Tensor& t) { return t.to(at::kCPU).to(at::kDouble).contiguous(); }

std::vector<double> ToVector(const at::Tensor& t) {
  at::Tensor c = ToWork(t).reshape({-1});
  const double* p = c.data_ptr<double>();
  return std::vector<double>(p, p + c.numel());
}

at::Tensor FromVector(const std::vector<double>& v) {
  return at::tensor(at::ArrayRef<double>(v), at::TensorOptions().dtype(at::kDouble));
}

// A per-sequence scalar broadcast over the response: scalar.unsqueeze(-1) * mask.
at::Tensor Broadcast(const std::vector<double>& per_seq, const at::Tensor& mask) {
  return FromVector(per_seq).unsqueeze(-1) * mask;
}

absl::Status RequireWhitenable(const at::Tensor& mask, const ReduceSumFn& reduce_sum, const std::string& estimator) {
  const double tokens = ReduceSum(reduce_sum, mask.sum()).item<double>();
  if (tokens <= 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("advantage estimator '", estimator,
                     "' whitens over the batch's valid response tokens and needs at least 2, got ", tokens,
                     " (response_mask sums to that over the data-parallel group)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<AdvantageResult> Gae(const Work& w, const AdvantageInputs& in, const AdvantageOptions& opt) {
  at::Tensor values = ToWork(in.values);
  at::Tensor adv = at::zeros_like(w.rewards);
  const double* rw = w.rewards.data_ptr<double>();
  const double* mk = w.mask.data_ptr<double>();
  const double* vl = values.data_ptr<double>();
  double* ad = adv.data_ptr<double>();
  for (int64_t i = 0; i < w.n; ++i) {
    double next_value = 0;
    double last_gae_lam = 0;
    for (int64_t t = w.r - 1; t >= 0; --t) {
      const int64_t k = i * w.r + t;
      const double delta = rw[k] + opt.gamma * next_value - vl[k];
      const double gae_lam = delta + opt.gamma * opt.lam * last_gae_lam;
      // Masked positions (observation tokens) neither bootstrap a value nor reset the running estimate.
      next_value = vl[k] * mk[k] + (1 - mk[k]) * next_value;
      last_gae_lam = gae_lam * mk[k] + (1 - mk[k]) * last_gae_lam;
      ad[k] = last_gae_lam;
    }
  }
  RETURN_IF_ERROR(RequireWhitenable(w.mask, opt.reduce_sum, "gae"));
  AdvantageResult out;
  out.returns = adv + values;
  out.advantages = MaskedWhiten(adv, w.mask, opt.reduce_sum);
  return out;
}

AdvantageResult Grpo(const Work& w, const std::vector<std::vector<int64_t>>& groups, const AdvantageOptions& opt) {
  std::vector<double> adv(w.n);
  for (const auto& rows : groups) {
    double mean = 0;
    double std = 1;  // a group of one: mean 0, std 1
    if (rows.size() > 1) {
      mean = Mean(w.scores, rows);
      std = StdUnbiased(w.scores, rows, mean);
    }
    for (int64_t r : rows) {
      adv[r] = opt.norm_adv_by_std_in_grpo ? (w.scores[r] - mean) / (std + opt.epsilon) : w.scores[r] - mean;
    }
  }
  at::Tensor a = Broadcast(adv, w.mask);
  return {a, a};
}

absl::StatusOr<AdvantageResult> GrpoPassk(const Work& w, const std::vector<std::vector<int64_t>>& groups,
                                          const AdvantageInputs& in, const AdvantageOptions& opt) {
  std::vector<double> adv(w.n, 0.0);
  for (const auto& rows : groups) {
    if (rows.size() < 2) {
      return absl::InvalidArgumentError(absl::StrCat("grpo_passk needs at least 2 samples per group; group '",
                                                     in.group_ids[rows[0]], "' has ", rows.size()));
    }
    // Only the best response of the group is credited, with r_max - r_second_max (the first maximum on ties, where
    // the credit is 0 anyway).
    size_t best = 0;
    for (size_t j = 1; j < rows.size(); ++j) {
      if (w.scores[rows[j]] > w.scores[rows[best]]) best = j;
    }
    double second = -INFINITY;
    for (size_t j = 0; j < rows.size(); ++j) {
      if (j != best) second = std::max(second, w.scores[rows[j]]);
    }
    double a = w.scores[rows[best]] - second;
    if (opt.norm_adv_by_std_in_grpo) a /= StdUnbiased(w.scores, rows, Mean(w.scores, rows)) + opt.epsilon;
    adv[rows[best]] = a;
  }
  at::Tensor a = Broadcast(adv, w.mask);
  return AdvantageResult{a, a};
}

AdvantageResult Rloo(const Work& w, const std::vector<std::vector<int64_t>>& groups) {
  std::vector<double> adv = w.scores;  // a group of one keeps its score, as verl's (non-vectorised) rloo does
  for (const auto& rows : groups) {
    if (rows.size() < 2) continue;
    const double n = static_cast<double>(rows.size());
    const double mean = Mean(w.scores, rows);
    for (int64_t r : rows) adv[r] = w.scores[r] * n / (n - 1) - mean * n / (n - 1);
  }
  at::Tensor a = Broadcast(adv, w.mask);
  return {a, a};
}

// verl's grpo_vectorized (group_mean_std): the group's variance from one pass of sums, floored at epsilon under the
// root, so a group whose scores differ by less than about 1e-3 is scaled by 1 / 1e-3 rather than by its own std as
// grpo does; a group of one: mean 0, std 1.
AdvantageResult GrpoVectorized(const Work& w, const std::vector<std::vector<int64_t>>& groups,
                               const AdvantageOptions& opt) {
  std::vector<double> adv(w.n);
  for (const auto& rows : groups) {
    double mean = 0;
    double std = 1;
    if (rows.size() > 1) {
      const double c = static_cast<double>(rows.size());
      double s1 = 0, s2 = 0;
      for (int64_t r : rows) {
        s1 += w.scores[r];
        s2 += w.scores[r] * w.scores[r];
      }
      mean = s1 / c;
      std = std::sqrt(std::max((s2 - s1 * s1 / c) / (c - 1), opt.epsilon));
    }
    for (int64_t r : rows) {
      adv[r] = opt.norm_adv_by_std_in_grpo ? (w.scores[r] - mean) / (std + opt.epsilon) : w.scores[r] - mean;
    }
  }
  at::Tensor a = Broadcast(adv, w.mask);
  return {a, a};
}

// verl's rloo_vectorized: rloo's (n s - sum) / (n - 1), but 0 for a group of one (rloo keeps the score there).
AdvantageResult RlooVectorized(const Work& w, const std::vector<std::vector<int64_t>>& groups) {
  std::vector<double> adv(w.n, 0.0);
  for (const auto& rows : groups) {
    if (rows.size() < 2) continue;
    const double n = static_cast<double>(rows.size());
    double sum = 0;
    for (int64_t r : rows) sum += w.scores[r];
    for (int64_t r : rows) adv[r] = (n * w.scores[r] - sum) / (n - 1);
  }
  at::Tensor a = Broadcast(adv, w.mask);
  return {a, a};
}

AdvantageResult Opo(const Work& w, const std::vector<std::vector<int64_t>>& groups) {
  const std::vector<double> lengths = ToVector(w.mask.sum(-1));
  std::vector<double> adv(w.n);
  for (const auto& rows : groups) {
    // Length-weighted group baseline; 0 for a group of one.
    double baseline = 0;
    if (rows.size() > 1) {
      double num = 0;
      double den = 0;
      for (int64_t r : rows) {
        num += lengths[r] * w.scores[r];
        den += lengths[r];
      }
      baseline = num / den;
    }
    for (int64_t r : rows) adv[r] = w.scores[r] - baseline;
  }
  at::Tensor a = Broadcast(adv, w.mask);
  return {a, a};
}

absl::StatusOr<AdvantageResult> ReinforcePlusPlus(const Work& w, const AdvantageOptions& opt) {
  at::Tensor returns = at::zeros_like(w.rewards);
  const double* rw = w.rewards.data_ptr<double>();
  const double* mk = w.mask.data_ptr<double>();
  double* rt = returns.data_ptr<double>();
  for (int64_t i = 0; i < w.n; ++i) {
    double running = 0;
    for (int64_t t = w.r - 1; t >= 0; --t) {
      const int64_t k = i * w.r + t;
      running = rw[k] + opt.gamma * running;
      rt[k] = running;
      running *= mk[k];  // reset after EOS
    }
  }
  RETURN_IF_ERROR(RequireWhitenable(w.mask, opt.reduce_sum, "reinforce_plus_plus"));
  AdvantageResult out;
  out.advantages = MaskedWhiten(returns, w.mask, opt.reduce_sum) * w.mask;
  out.returns = returns;
  return out;
}

absl::StatusOr<AdvantageResult> ReinforcePlusPlusBaseline(const Work& w,
                                                          const std::vector<std::vector<int64_t>>& groups,
                                                          const AdvantageOptions& opt) {
  std::vector<double> centered(w.n);
  for (const auto& rows : groups) {
    const double mean = rows.size() > 1 ? Mean(w.scores, rows) : 0.0;
    for (int64_t r : rows) centered[r] = w.scores[r] - mean;
  }
  RETURN_IF_ERROR(RequireWhitenable(w.mask, opt.reduce_sum, "reinforce_plus_plus_baseline"));
  at::Tensor a = MaskedWhiten(Broadcast(centered, w.mask), w.mask, opt.reduce_sum) * w.mask;
  return AdvantageResult{a, a};
}

AdvantageResult Remax(const Work& w, const AdvantageInputs& in) {
  at::Tensor returns = (w.rewards * w.mask).flip({-1}).cumsum(-1).flip({-1});
  at::Tensor baselines = ToWork(in.baseline_scores).reshape({-1});
  return {returns - baselines.unsqueeze(-1) * w.mask, returns};
}

AdvantageResult Gpg(const Work& w, const std::vector<std::vector<int64_t>>& groups, const AdvantageOptions& opt) {
  // alpha = batch size / number of non-zero scores, both over the whole (global) batch; f_norm = 1.
  double nonzero = 0;
  for (double s : w.scores) nonzero += s != 0 ? 1 : 0;
  at::Tensor counts = ReduceSum(opt.reduce_sum, FromVector({static_cast<double>(w.n), nonzero}));
  const double bsz = counts[0].item<double>();
  const double alpha = bsz / std::max(counts[1].item<double>(), 1.0);
  std::vector<double> adv(w.n);
  for (const auto& rows : groups) {
    const double mean = rows.size() > 1 ? Mean(w.scores, rows) : 0.0;
    for (int64_t r : rows) adv[r] = alpha * (w.scores[r] - mean) / 1.0;
  }
  at::Tensor a = Broadcast(adv, w.mask);
  return {a, a};
}

bool NeedsGroups(const std::string& estimator) {
  return estimator == "grpo" || estimator == "grpo_passk" || estimator == "rloo" ||
         estimator == "reinforce_plus_plus_baseline" || estimator == "opo" || estimator == "gpg" ||
         estimator == "grpo_vectorized" || estimator == "rloo_vectorized";
}

absl::Status Validate(const std::string& estimator, const AdvantageInputs& in) {
  const at::Tensor& rw = in.token_level_rewards;
  if (!rw.defined() || rw.dim() != 2) {
    return absl::InvalidArgumentError(absl::StrCat("token_level_rewards must be [N, R], got ", ShapeOf(rw)));
  }
  if (!in.response_mask.defined() || in.response_mask.sizes() != rw.sizes()) {
    return absl::InvalidArgumentError(absl::StrCat("response_mask must match token_level_rewards ", ShapeOf(rw),
                                                   ", got ", ShapeOf(in.response_mask)));
  }
  const int64_t n = rw.size(0);
  if (NeedsGroups(estimator)) {
    if (in.group_ids.empty() && n > 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("advantage estimator '", estimator, "' needs group_ids (the prompt uid of each sample)"));
    }
    if (static_cast<int64_t>(in.group_ids.size()) != n) {
      return absl::InvalidArgumentError(
          absl::StrCat("group_ids has ", in.group_ids.size(), " entries, token_level_rewards has ", n, " rows"));
    }
  }
  if (estimator == "gae") {
    if (!in.values.defined()) {
      return absl::FailedPreconditionError("advantage estimator 'gae' needs values (the critic's values [N, R])");
    }
    if (in.values.sizes() != rw.sizes()) {
      return absl::InvalidArgumentError(
          absl::StrCat("values must match token_level_rewards ", ShapeOf(rw), ", got ", ShapeOf(in.values)));
    }
  }
  if (estimator == "remax") {
    if (!in.baseline_scores.defined()) {
      return absl::FailedPreconditionError(
          "advantage estimator 'remax' needs baseline_scores (the greedy baseline response's score per sample, [N])");
    }
    if (in.baseline_scores.numel() != n) {
      return absl::InvalidArgumentError(
          absl::StrCat("baseline_scores must have ", n, " elements, got ", ShapeOf(in.baseline_scores)));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<AdvantageResult> Dispatch(const std::string& estimator, const AdvantageInputs& in,
                                         const AdvantageOptions& opt) {
  Work w;
  w.rewards = ToWork(in.token_level_rewards);
  w.mask = ToWork(in.response_mask);
  w.n = w.rewards.size(0);
  w.r = w.rewards.size(1);
  w.scores = ToVector(w.rewards.sum(-1));
  std::vector<std::vector<int64_t>> groups;
  if (NeedsGroups(estimator)) groups = GroupRows(in.group_ids);

  if (estimator == "gae") return Gae(w, in, opt);
  if (estimator == "grpo") return Grpo(w, groups, opt);
  if (estimator == "grpo_passk") return GrpoPassk(w, groups, in, opt);
  if (estimator == "rloo") return Rloo(w, groups);
  if (estimator == "reinforce_plus_plus") return ReinforcePlusPlus(w, opt);
  if (estimator == "reinforce_plus_plus_baseline") return ReinforcePlusPlusBaseline(w, groups, opt);
  if (estimator == "remax") return Remax(w, in);
  if (estimator == "opo") return Opo(w, groups);
  if (estimator == "gpg") return Gpg(w, groups, opt);
  if (estimator == "grpo_vectorized") return GrpoVectorized(w, groups, opt);
  if (estimator == "rloo_vectorized") return RlooVectorized(w, groups);
  return absl::InternalError(absl::StrCat("advantage estimator '", estimator, "' has no implementation"));
}

}  // namespace

const std::vector<std::string>& AdvantageEstimatorNames() {
  static const auto* names = new std::vector<std::string>{
      "gae", "grpo", "grpo_passk", "rloo", "reinforce_plus_plus", "reinforce_plus_plus_baseline",
      "remax", "opo", "gpg", "grpo_vectorized", "rloo_vectorized"};
  return *names;
}

at::Tensor MaskedWhiten(const at::Tensor& values, const at::Tensor& mask,
                        const ReduceSumFn& reduce_sum) {
  at::Tensor m = mask.to(values.scalar_type());
  at::Tensor valid = mask.ne(0);
  at::Tensor zero = at::zeros({}, values.options());
  // verl's masked_sum: values outside the mask are replaced by 0 first so a nan there cannot leak in.
  at::Tensor stats = ReduceSum(reduce_sum, at::stack({(at::where(valid, values, zero) * m).sum(), m.sum()}));
  at::Tensor count = stats[1];
  at::Tensor mean = stats[0] / (count + 1e-8);
  at::Tensor centered = values - mean;
  at::Tensor sq = ReduceSum(reduce_sum, (at::where(valid, centered.square(), zero) * m).sum());
  at::Tensor var = sq / (count + 1e-8) * (count / (count - 1));  // Bessel's correction, as masked_var(unbiased=True)
  return centered * at::rsqrt(var + 1e-8);
}

absl::StatusOr<AdvantageResult> ComputeAdvantages(const std::string& estimator, const AdvantageInputs& inputs,
                                                  const AdvantageOptions& options) {
  const auto& names = AdvantageEstimatorNames();
  if (std::find(names.begin(), names.end(), estimator) == names.end()) {
    return absl::InvalidArgumentError(absl::StrCat("unknown advantage estimator (algorithm.adv_estimator) '", estimator,
                                                   "'; valid: ", absl::StrJoin(names, ", ")));
  }
  RETURN_IF_ERROR(Validate(estimator, inputs));
  try {
    at::NoGradGuard no_grad;
    ASSIGN_OR_RETURN(AdvantageResult out, Dispatch(estimator, inputs, options));
    at::ScalarType dtype = inputs.token_level_rewards.scalar_type();
    if (!at::isFloatingType(dtype)) dtype = at::kFloat;
    const at::TensorOptions to = inputs.token_level_rewards.options().dtype(dtype);
    out.advantages = out.advantages.to(to);
    out.returns = out.returns.to(to);
    return out;
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("advantage estimator '", estimator, "' failed on token_level_rewards ",
                                            ShapeOf(inputs.token_level_rewards), ": ", e.what()));
  }
}

}  // namespace verl
