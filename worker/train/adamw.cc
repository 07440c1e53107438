#include "worker/train/adamw.h"

#include <ATen/record_function.h>

#include <algorithm>
#include <cmath>
#include <map>

#ifdef VERL_WITH_CUDA
#include "worker/kernels/float_sums.h"
#endif

namespace verl {

AdamW::AdamW(std::vector<std::pair<std::string, at::Tensor>> params, AdamWOptions options)
    : params_(std::move(params)), options_(options) {
  offloaded_ = options_.offload_to_cpu && !params_.empty() && !params_.front().second.is_cpu();
  for (size_t i = 0; i < params_.size(); ++i) {
    const at::Tensor& p = params_[i].second;
    const at::TensorOptions state = at::TensorOptions(at::kFloat).device(offloaded_ ? at::kCPU : p.device());
    exp_avg_.push_back(at::zeros(p.sizes(), state));
    exp_avg_sq_.push_back(at::zeros(p.sizes(), state));
    // Offloaded, every parameter gets a host master: the update runs there and is copied back.
    master_.push_back(keeps_master(i) ? p.detach().to(state.device(), at::kFloat, false, /*copy=*/true) : at::Tensor());
  }
}

void AdamW::Shard(std::vector<int> owners, int rank, std::function<void(at::Tensor&, int)> broadcast) {
  owners_ = std::move(owners);
  rank_ = rank;
  broadcast_ = std::move(broadcast);
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!owns(i)) {
      exp_avg_[i] = at::Tensor();
      exp_avg_sq_[i] = at::Tensor();
      master_[i] = at::Tensor();
    }
  }
}

int64_t AdamW::StateBytes() const {
  int64_t bytes = 0;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (exp_avg_[i].defined()) bytes += exp_avg_[i].numel() * 4;
    if (exp_avg_sq_[i].defined()) bytes += exp_avg_sq_[i].numel() * 4;
    if (master_[i].defined()) bytes += master_[i].numel() * 4;
  }
  return bytes;
}

std::vector<int> AssignShardOwners(const std::vector<at::Tensor>& params, int world) {
  std::vector<size_t> order(params.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return params[a].numel() > params[b].numel(); });
  std::vector<int64_t> load(std::max(1, world), 0);
  std::vector<int> owners(params.size(), 0);
  for (size_t i : order) {
    const int r = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
    owners[i] = r;
    load[r] += params[i].numel();
  }
  return owners;
}

void AdamW::Step(double lr) {
  at::NoGradGuard no_grad;
  ++step_;
  const double bc1 = 1.0 - std::pow(options_.beta1, static_cast<double>(step_));
  const double bc2 = 1.0 - std::pow(options_.beta2, static_cast<double>(step_));
  // Fused: the float32 tensors updated (the parameter, or its master), their float32 gradients, moments and step
  // count, grouped by the device of the state.
  struct Group {
    std::vector<at::Tensor> targets, grads, m, v, steps;
    std::vector<size_t> mastered;  // parameters whose master is the target: copied back after
  };
  std::map<std::string, Group> groups;
  for (size_t i = 0; options_.fused && i < params_.size(); ++i) {
    const at::Tensor& p = params_[i].second;
    if (!p.grad().defined() || !owns(i)) continue;
    at::Tensor& m = exp_avg_[i];
    Group& g = groups[m.device().str()];
    at::Tensor target = master_[i].defined() ? master_[i] : p;
    if (target.scalar_type() != at::kFloat || target.device() != m.device() || !target.is_contiguous()) {
      groups.clear();  // a layout the kernel does not take: the element-wise path below for all
      break;
    }
    g.targets.push_back(target);
    g.grads.push_back(p.grad().to(m.device(), at::kFloat).contiguous());
    g.m.push_back(m);
    g.v.push_back(exp_avg_sq_[i]);
    if (g.steps.empty()) g.steps.push_back(at::full({}, static_cast<double>(step_), m.options()));
    else g.steps.push_back(g.steps.front());
    if (master_[i].defined()) g.mastered.push_back(i);
  }
  for (auto& [device, g] : groups) {
    at::_fused_adamw_(g.targets, g.grads, g.m, g.v, /*max_exp_avg_sqs=*/{}, g.steps, lr, options_.beta1,
                      options_.beta2, options_.weight_decay, options_.eps, /*amsgrad=*/false, /*maximize=*/false);
    for (size_t i : g.mastered) params_[i].second.copy_(master_[i]);
  }
  for (size_t i = 0; groups.empty() && i < params_.size(); ++i) {
    at::Tensor p = params_[i].second;
    const at::Tensor& g_any = p.grad();
    if (!g_any.defined() || !owns(i)) continue;
    at::Tensor& m = exp_avg_[i];
    at::Tensor g = g_any.to(m.device(), at::kFloat);
    at::Tensor& v = exp_avg_sq_[i];
    m.mul_(options_.beta1).add_(g, 1.0 - options_.beta1);
    v.mul_(options_.beta2).addcmul_(g, g, 1.0 - options_.beta2);
    at::Tensor denom = (v / bc2).sqrt_().add_(options_.eps);
    at::Tensor update = (m / bc1).div_(denom);
    if (!master_[i].defined()) {
      p.mul_(1.0 - lr * options_.weight_decay).sub_(update, lr);
    } else {
      at::Tensor& pf = master_[i];  // the float32 master: the parameter is its rounding
      pf.mul_(1.0 - lr * options_.weight_decay).sub_(update, lr);
      p.copy_(pf);
    }
  }
  if (!sharded()) return;
  // Every rank takes each parameter from its owner (in parameter order, so the calls pair up across ranks).
  for (size_t i = 0; i < params_.size(); ++i) {
    at::Tensor& p = params_[i].second;
    if (p.scalar_type() == at::kFloat && p.is_contiguous()) {
      broadcast_(p, owners_[i]);
    } else {
      at::Tensor pf = p.to(at::kFloat).contiguous();
      broadcast_(pf, owners_[i]);
      p.copy_(pf);
    }
  }
}

void AdamW::ZeroGrad() {
  for (auto& [name, p] : params_) {
    if (p.grad().defined()) p.mutable_grad() = at::Tensor();
  }
}

void ReduceGradients(const std::vector<at::Tensor>& params, const ReduceSumFn& reduce_sum, int64_t bucket_elements) {
  if (!reduce_sum) return;
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> bucket;
  int64_t elements = 0;
  auto flush = [&] {
    if (bucket.empty()) return;
    std::vector<at::Tensor> flat;
    flat.reserve(bucket.size());
    for (const at::Tensor& g : bucket) flat.push_back(g.reshape({-1}).to(at::kFloat));
    at::Tensor summed = reduce_sum(at::cat(flat));
    int64_t offset = 0;
    for (at::Tensor& g : bucket) {
      g.copy_(summed.narrow(0, offset, g.numel()).view_as(g));
      offset += g.numel();
    }
    bucket.clear();
    elements = 0;
  };
  for (const at::Tensor& p : params) {
    at::Tensor& grad = const_cast<at::Tensor&>(p).mutable_grad();
    if (!grad.defined()) grad = at::zeros_like(p);
    if (elements > 0 && elements + grad.numel() > bucket_elements) flush();
    bucket.push_back(grad);
    elements += grad.numel();
  }
  flush();
}

GradAccumulator::GradAccumulator(std::vector<at::Tensor> params) {
  for (at::Tensor& p : params) {
    if (p.scalar_type() != at::kFloat) params_.push_back(std::move(p));
  }
  sums_.resize(params_.size());
}

void GradAccumulator::Collect() {
  at::NoGradGuard no_grad;
#ifdef VERL_WITH_CUDA
  // On a GPU the gradients go into their sums in one kernel launch per 64 tensors (a micro-batch of a 0.5B model's
  // update had some 290 add kernels, each a launch).
  std::vector<at::Tensor*> fused_sums;
  std::vector<at::Tensor> fused_grads;
#endif
  for (size_t i = 0; i < params_.size(); ++i) {
    at::Tensor& grad = params_[i].mutable_grad();
    if (!grad.defined()) continue;
#ifdef VERL_WITH_CUDA
    const at::Tensor& sum = sums_[i];
    if (kernels::FloatSumSupported(grad) &&
        (!sum.defined() || (sum.is_contiguous() && sum.sizes() == grad.sizes() && sum.device() == grad.device())) &&
        (fused_grads.empty() || grad.device() == fused_grads.front().device())) {
      fused_sums.push_back(&sums_[i]);
      fused_grads.push_back(std::move(grad));
      grad = at::Tensor();
      continue;
    }
#endif
    if (sums_[i].defined()) {
      sums_[i].add_(grad);
    } else {
      sums_[i] = grad.to(at::kFloat);  // a new tensor: grad is not float32
    }
    grad = at::Tensor();
  }
#ifdef VERL_WITH_CUDA
  kernels::AddIntoFloatSums(std::move(fused_sums), fused_grads);
#endif
}

void GradAccumulator::Finish() {
  for (size_t i = 0; i < params_.size(); ++i) {
    if (sums_[i].defined()) params_[i].mutable_grad() = std::move(sums_[i]);
    sums_[i] = at::Tensor();
  }
}

double ClipGradNorm(const std::vector<at::Tensor>& params, double max_norm, const ReduceSumFn& sum_over_shards) {
  at::NoGradGuard no_grad;
  // Each gradient's L2 norm (ATen's multi-tensor kernel on a GPU: a few launches for all of them, as
  // torch.nn.utils.clip_grad_norm_ does), their squares summed in float64 on the gradients' device, one host sync.
  std::vector<at::Tensor> grads;
  for (const at::Tensor& p : params) {
    if (p.grad().defined()) grads.push_back(p.grad());
  }
  at::Tensor total = at::zeros({}, at::kDouble);
  if (!grads.empty()) {
    // float32 sums of squares per tensor, float64 where any gradient is float64 (its precision kept).
    const bool any_double =
        std::any_of(grads.begin(), grads.end(), [](const at::Tensor& g) { return g.scalar_type() == at::kDouble; });
    const std::vector<at::Tensor> norms = at::_foreach_norm(grads, 2, any_double ? at::kDouble : at::kFloat);
    total = at::stack(norms).to(at::kDouble).square().sum();
  }
  if (sum_over_shards) total = sum_over_shards(total.reshape({1}));
  const double norm = std::sqrt(total.sum().item<double>());
  if (!std::isfinite(norm)) return norm;
  const double coef = max_norm / (norm + 1e-6);
  if (coef < 1.0 && !grads.empty()) at::_foreach_mul_(grads, coef);
  return norm;
}

double ClipAndStep(AdamW& optimizer, const std::vector<at::Tensor>& params, double max_norm, double lr,
                   const ReduceSumFn& sum_over_shards) {
  RECORD_USER_SCOPE("verl::ClipAndStep");  // named in a profile (tools/bench/kernel_profile.h: idle.host_in_gaps)
  const double norm = ClipGradNorm(params, max_norm, sum_over_shards);
  if (std::isfinite(norm)) optimizer.Step(lr);
  optimizer.ZeroGrad();
  return norm;
}

}  // namespace verl
