#ifndef VERL_WORKER_TRAIN_ADAMW_H_
#define VERL_WORKER_TRAIN_ADAMW_H_

// AdamW (decoupled weight decay, bias-corrected moments) over a fixed list of parameters, as torch.optim.AdamW.
// The moments are float32 tensors shaped like the parameters; they are exposed for checkpointing.
//
// Mixed precision: for a parameter that is not float32 (bf16 training), the optimizer keeps a float32 master copy,
// updates the master and rounds it into the parameter, so updates smaller than the parameter's precision accumulate
// instead of being lost. The masters are exposed for checkpointing too (master()[i] undefined for float32
// parameters).
//
// Optimizer-state sharding (ZeRO stage 1) over a data-parallel group: after Shard(), each parameter has one owner
// rank, only the owner keeps that parameter's moments and updates it, and Step() then broadcasts every parameter from
// its owner, so the replicas stay identical while each rank holds about 1/world of the optimizer state. The
// gradients must already be identical on every rank (summed over the group) when Step() runs.

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "worker/train/core_algos.h"

namespace verl {

struct AdamWOptions {
  double lr = 1e-6;
  double weight_decay = 0.01;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  // Keep the optimizer state (moments and a float32 master of every parameter) in host memory and update there
  // (ZeRO-Offload; verl's fsdp_config.optimizer_offload): the gradients go to the host, the updated parameters come
  // back. Only meaningful for parameters on a GPU; ignored for CPU parameters, whose state is in host memory anyway.
  bool offload_to_cpu = false;
  // One multi-tensor kernel per device for the whole update (ATen's _fused_adamw_, the kernel behind
  // torch.optim.AdamW(fused=True)) instead of a handful of element-wise ops per parameter. Same update to float
  // rounding.
  bool fused = true;
};

class AdamW {
 public:
  AdamW(std::vector<std::pair<std::string, at::Tensor>> params, AdamWOptions options);

  // One update from the parameters' .grad() at learning rate `lr` (the schedule's value for this step).
  // Parameters without a gradient are skipped.
  void Step(double lr);
  void ZeroGrad();

  // Shards the optimizer state: owners[i] is the rank that owns parameter i; this is rank `rank`. Moments of the
  // parameters this rank does not own are freed (undefined tensors from now on). `broadcast(tensor, root)` must
  // replace `tensor` (float32, contiguous) on every rank with root's values; every rank calls it for every parameter
  // in order at the end of each Step(). It may throw (e.g. verl::StatusError) and the exception propagates.
  void Shard(std::vector<int> owners, int rank, std::function<void(at::Tensor&, int)> broadcast);
  bool sharded() const { return !owners_.empty(); }
  // Whether this rank keeps (and updates) parameter i's moments: always when not sharded.
  bool owns(size_t i) const { return owners_.empty() || owners_[i] == rank_; }
  int owner(size_t i) const { return owners_.empty() ? rank_ : owners_[i]; }
  // Whether parameter i's owner keeps a float32 master of it (a non-float32 parameter, or any when offloaded): known
  // on every rank, also where master()[i] was dropped by Shard.
  bool keeps_master(size_t i) const { return offloaded_ || params_[i].second.scalar_type() != at::kFloat; }
  // Bytes of optimizer state this rank holds (the moments and masters it keeps), and where it keeps them.
  int64_t StateBytes() const;
  bool offloaded() const { return offloaded_; }

  int64_t step_count() const { return step_; }
  void set_step_count(int64_t step) { step_ = step; }
  const AdamWOptions& options() const { return options_; }
  const std::vector<std::pair<std::string, at::Tensor>>& params() const { return params_; }
  std::vector<at::Tensor>& exp_avg() { return exp_avg_; }
  std::vector<at::Tensor>& exp_avg_sq() { return exp_avg_sq_; }
  std::vector<at::Tensor>& master() { return master_; }

 private:
  std::vector<std::pair<std::string, at::Tensor>> params_;
  AdamWOptions options_;
  std::vector<at::Tensor> exp_avg_;
  std::vector<at::Tensor> exp_avg_sq_;
  std::vector<at::Tensor> master_;  // float32 copies of the non-float32 parameters this rank updates (of every
                                    // parameter when offloaded)
  bool offloaded_ = false;          // the state lives in host memory, the parameters on a GPU
  int64_t step_ = 0;
  std::vector<int> owners_;  // empty: not sharded
  int rank_ = 0;
  std::function<void(at::Tensor&, int)> broadcast_;
};

// Owners for sharding `params` over `world` ranks: largest parameters first, each to the rank holding the fewest
// elements so far (ties to the lowest rank). Deterministic, so every rank computes the same assignment.
std::vector<int> AssignShardOwners(const std::vector<at::Tensor>& params, int world);

// Scales all gradients so their global L2 norm is at most max_norm (torch.nn.utils.clip_grad_norm_).
// Returns the norm before clipping (may be inf/nan; then nothing is scaled). With `sum_over_shards`, the gradients
// are shards of the group's (parameter sharding): the squared norms are summed over the group with it.
double ClipGradNorm(const std::vector<at::Tensor>& params, double max_norm,
                    const ReduceSumFn& sum_over_shards = nullptr);

// The end of a mini-batch, as verl's _optimizer_step: clip the gradients to `max_norm`, take an optimizer step at
// `lr` unless the norm is not finite (then the step is skipped), and clear the gradients. Returns the norm.
double ClipAndStep(AdamW& optimizer, const std::vector<at::Tensor>& params, double max_norm, double lr,
                   const ReduceSumFn& sum_over_shards = nullptr);

// Sums the parameters' gradients over the data-parallel group with `reduce_sum`, in float32 buckets of at most
// `bucket_elements` elements (a parameter without a gradient counts as zeros and then gets one, so every rank makes
// the same calls). No-op when reduce_sum is unset.
void ReduceGradients(const std::vector<at::Tensor>& params, const ReduceSumFn& reduce_sum,
                     int64_t bucket_elements = int64_t{1} << 24);

// Sums the gradients of a mini-batch's micro-batches in float32 for the parameters that are not float32 (bf16
// training), as verl does (FSDP's sharded float32 gradients) and Megatron (main_grad): autograd alone would add each
// micro-batch's gradient into the bf16 .grad, rounding the running sum to bf16 at every micro-batch. Float32
// parameters are left to autograd. Costs a float32 sum per low-precision parameter while the mini-batch runs.
class GradAccumulator {
 public:
  explicit GradAccumulator(std::vector<at::Tensor> params);
  // After each backward: adds the low-precision parameters' gradients into their float32 sums and clears those
  // .grad, so the next backward writes a fresh one instead of adding to it.
  void Collect();
  // After the last backward: the sums become those parameters' .grad (float32; ReduceGradients, ClipGradNorm and
  // AdamW::Step take it as it is; AdamW::ZeroGrad clears it). A parameter no pass reached keeps no gradient.
  void Finish();

 private:
  std::vector<at::Tensor> params_;  // the parameters that are not float32
  std::vector<at::Tensor> sums_;    // their float32 sums (undefined until a gradient arrives)
};

// Turns gradients on for a model's parameters for its lifetime (also when the update throws).
template <typename Model>
class GradScope {
 public:
  explicit GradScope(Model& model) : model_(model) { model_.SetRequiresGrad(true); }
  ~GradScope() { model_.SetRequiresGrad(false); }
  GradScope(const GradScope&) = delete;
  GradScope& operator=(const GradScope&) = delete;

 private:
  Model& model_;
};

}  // namespace verl

#endif  // VERL_WORKER_TRAIN_ADAMW_H_
