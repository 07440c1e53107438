#ifndef VERL_WORKER_COMM_PARAM_SHARDING_H_
#define VERL_WORKER_COMM_PARAM_SHARDING_H_

// Parameter sharding over a data-parallel group (ZeRO stage 3, FSDP's FULL_SHARD): a model's parameters are
// grouped in units (the embedding, each decoder layer, the final norm, the LM head); a unit's tensors are flattened
// into one buffer, padded with zeros to a multiple of the group size and split into equal contiguous shards, and each
// rank keeps only its own shard. Compute gathers a unit just before it is used and drops it right after:
//  - GatherForAutograd: the full buffer, with autograd history to the shard: in backward its gradient is summed
//    over the group and scattered, so each rank's shard receives the gradient of its own slice.
//  - RunShardedBlock: a block (a decoder layer) run with its unit gathered only for the duration. Forward keeps
//    neither the gathered parameters nor the block's activations, only its input; backward gathers the unit again,
//    recomputes the block (activation checkpointing) and reduce-scatters the parameter gradients.
// So a rank holds 1/world of the parameters, of their gradients and (with an optimizer over the shards) of the
// optimizer state, plus one gathered unit and the layer inputs at a time.
//
// Every rank must make the same gathers in the same order (the same number of micro-batches): the collectives pair
// up across the group. The collectives throw (verl::StatusError) on failure; the exception leaves the computation.

#include <ATen/ATen.h>

#include <functional>
#include <string>
#include <vector>

namespace verl {

// The collectives a sharded model needs, over its data-parallel group (the rank supplies them on its communicator).
struct ShardGroup {
  int rank = 0;
  int world = 1;
  // `full` (world * n elements) becomes the concatenation of every rank's `shard` (n elements), in rank order.
  // Same dtype and device for both.
  std::function<void(const at::Tensor& shard, const at::Tensor& full)> all_gather;
  // `shard` (n float32) becomes the sum over the group of block `rank` of every rank's `full` (world * n float32).
  std::function<void(const at::Tensor& full, const at::Tensor& shard)> reduce_scatter_sum;
};

class FlatUnit {
 public:
  // Flattens `tensors` (one dtype, one device; their order is the layout) and keeps this rank's shard, a fresh leaf.
  // `names` label the tensors (for views by name).
  FlatUnit(std::string name, std::vector<std::string> names, const std::vector<at::Tensor>& tensors,
           ShardGroup group);
  FlatUnit(const FlatUnit&) = delete;
  FlatUnit& operator=(const FlatUnit&) = delete;

  const std::string& name() const { return name_; }
  const std::vector<std::string>& names() const { return names_; }
  at::Tensor& shard() { return shard_; }
  const at::Tensor& shard() const { return shard_; }
  int64_t numel() const { return numel_; }  // without the padding
  int64_t padded_numel() const { return padded_; }

  // The full buffer of `like_shard` (a tensor shaped like the shard, e.g. an optimizer moment), gathered from every
  // rank; no autograd history. Gather() gathers the parameters.
  at::Tensor Gather(const at::Tensor& like_shard) const;
  at::Tensor Gather() const { return Gather(shard_); }
  // The parameters' full buffer, with autograd history to the shard (see above).
  at::Tensor GatherForAutograd() const;
  // Each tensor of the unit as a view into `full` (a full buffer of this unit), in the constructor's order.
  std::vector<at::Tensor> Views(const at::Tensor& full) const;
  // This rank's block of `full`.
  at::Tensor SliceOf(const at::Tensor& full) const;
  // The sum over the group of the full-buffer gradient `full_grad`, this rank's block, in the shard's dtype.
  at::Tensor ReduceScatter(const at::Tensor& full_grad) const;

 private:
  std::string name_;
  std::vector<std::string> names_;
  std::vector<std::vector<int64_t>> shapes_;
  std::vector<int64_t> offsets_;
  int64_t numel_ = 0;
  int64_t padded_ = 0;
  ShardGroup group_;
  at::Tensor shard_;
};

// block(params, x): the computation of one unit on input x, with params the unit's tensors (Views order). It must be
// deterministic, as it runs twice with gradients on (forward, then the recomputation in backward). Returns the
// block's output with autograd history to x and to `unit`'s shard when grad mode is on; without grad mode this is
// simply a gather and a call.
using ShardedBlockFn = std::function<at::Tensor(const std::vector<at::Tensor>& params, const at::Tensor& x)>;
at::Tensor RunShardedBlock(const FlatUnit& unit, ShardedBlockFn block, const at::Tensor& x);

}  // namespace verl

#endif  // VERL_WORKER_COMM_PARAM_SHARDING_H_
