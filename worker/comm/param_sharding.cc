#include "worker/comm/param_sharding.h"

#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include <utility>

namespace verl {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// What the autograd functions below keep for their backward: the unit (owned by the model, which outlives the
// step's graph) and the block. Carried in the context as an opaque capsule.
struct UnitHolder : torch::CustomClassHolder {
  const FlatUnit* unit = nullptr;
  ShardedBlockFn block;
};

c10::intrusive_ptr<UnitHolder> HolderOf(AutogradContext* ctx) {
  return c10::static_intrusive_pointer_cast<UnitHolder>(ctx->saved_data.at("unit").toCapsule());
}

// shard -> full buffer; backward: full gradient -> reduce-scatter -> shard gradient.
class GatherFunction : public torch::autograd::Function<GatherFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& shard, c10::intrusive_ptr<UnitHolder> holder) {
    (void)shard;  // the input only for autograd: the gather reads the unit's shard, which is this tensor
    at::Tensor full = holder->unit->Gather();
    ctx->saved_data["unit"] = c10::IValue::make_capsule(std::move(holder));
    return full;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_full) {
    const FlatUnit& unit = *HolderOf(ctx)->unit;
    at::Tensor g = grad_full[0].defined() ? grad_full[0] : at::zeros_like(unit.Gather());
    return {unit.ReduceScatter(g), at::Tensor()};
  }
};

// (x, shard) -> block(gathered params, x), recomputed in backward.
class BlockFunction : public torch::autograd::Function<BlockFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& shard,
                            c10::intrusive_ptr<UnitHolder> holder) {
    (void)shard;
    at::Tensor out;
    {
      at::Tensor full = holder->unit->Gather();
      out = holder->block(holder->unit->Views(full), x);
    }  // the gathered parameters are freed here; grad mode is off, so the block kept no activations
    ctx->save_for_backward({x});
    ctx->saved_data["unit"] = c10::IValue::make_capsule(std::move(holder));
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    const c10::intrusive_ptr<UnitHolder> holder = HolderOf(ctx);
    const FlatUnit& unit = *holder->unit;
    const at::Tensor x = ctx->get_saved_variables()[0];
    at::Tensor full = unit.Gather().requires_grad_(true);
    at::Tensor x_in = x.detach().requires_grad_(x.requires_grad());
    at::Tensor out;
    {
      at::AutoGradMode enable(true);
      out = holder->block(unit.Views(full), x_in);
    }
    variable_list inputs;
    if (x_in.requires_grad()) inputs.push_back(x_in);
    inputs.push_back(full);
    variable_list grads = torch::autograd::grad({out}, inputs, {grad_out[0]}, /*retain_graph=*/false,
                                                /*create_graph=*/false, /*allow_unused=*/true);
    at::Tensor grad_full = grads.back().defined() ? grads.back() : at::zeros_like(full);
    at::Tensor grad_x = x_in.requires_grad() ? grads.front() : at::Tensor();
    return {grad_x, unit.ReduceScatter(grad_full), at::Tensor()};
  }
};

}  // namespace

FlatUnit::FlatUnit(std::string name, std::vector<std::string> names, const std::vector<at::Tensor>& tensors,
                   ShardGroup group)
    : name_(std::move(name)), names_(std::move(names)), group_(std::move(group)) {
  TORCH_CHECK(!tensors.empty(), "unit ", name_, " has no tensors");
  TORCH_CHECK(names_.size() == tensors.size(), "unit ", name_, ": one name per tensor");
  TORCH_CHECK(group_.world >= 1 && group_.rank >= 0 && group_.rank < group_.world, "unit ", name_, ": rank ",
              group_.rank, " of ", group_.world);
  for (const at::Tensor& t : tensors) {
    shapes_.emplace_back(t.sizes().begin(), t.sizes().end());
    offsets_.push_back(numel_);
    numel_ += t.numel();
  }
  padded_ = (numel_ + group_.world - 1) / group_.world * group_.world;
  const int64_t n = padded_ / group_.world;
  at::NoGradGuard no_grad;
  // Only this rank's slice is copied: the full flat buffer is never built here.
  shard_ = at::zeros({n}, tensors.front().options().requires_grad(false));
  const int64_t begin = group_.rank * n, end = begin + n;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const int64_t lo = std::max(begin, offsets_[i]), hi = std::min(end, offsets_[i] + tensors[i].numel());
    if (lo >= hi) continue;
    shard_.narrow(0, lo - begin, hi - lo).copy_(tensors[i].reshape({-1}).narrow(0, lo - offsets_[i], hi - lo));
  }
}

at::Tensor FlatUnit::Gather(const at::Tensor& like_shard) const {
  TORCH_CHECK(like_shard.numel() == shard_.numel(), "unit ", name_, ": gathering ", like_shard.numel(),
              " elements per rank, the shard has ", shard_.numel());
  at::NoGradGuard no_grad;
  at::Tensor full = at::empty({padded_}, like_shard.options().requires_grad(false));
  if (group_.world == 1) {
    full.copy_(like_shard);
  } else {
    group_.all_gather(like_shard.detach().contiguous(), full);
  }
  return full;
}

at::Tensor FlatUnit::GatherForAutograd() const {
  auto holder = c10::make_intrusive<UnitHolder>();
  holder->unit = this;
  return GatherFunction::apply(shard_, std::move(holder));
}

std::vector<at::Tensor> FlatUnit::Views(const at::Tensor& full) const {
  TORCH_CHECK(full.numel() == padded_, "unit ", name_, ": a full buffer has ", padded_, " elements, not ",
              full.numel());
  std::vector<at::Tensor> views;
  views.reserve(shapes_.size());
  for (size_t i = 0; i < shapes_.size(); ++i) {
    int64_t n = 1;
    for (int64_t d : shapes_[i]) n *= d;
    views.push_back(full.narrow(0, offsets_[i], n).view(shapes_[i]));
  }
  return views;
}

at::Tensor FlatUnit::SliceOf(const at::Tensor& full) const {
  TORCH_CHECK(full.numel() == padded_, "unit ", name_, ": a full buffer has ", padded_, " elements, not ",
              full.numel());
  return full.narrow(0, group_.rank * shard_.numel(), shard_.numel());
}

at::Tensor FlatUnit::ReduceScatter(const at::Tensor& full_grad) const {
  at::NoGradGuard no_grad;
  if (group_.world == 1) return full_grad.reshape({-1}).to(shard_.scalar_type()).clone();
  at::Tensor full = full_grad.reshape({-1}).to(at::kFloat).contiguous();
  at::Tensor out = at::empty({shard_.numel()}, full.options());
  group_.reduce_scatter_sum(full, out);
  return out.to(shard_.scalar_type());
}

at::Tensor RunShardedBlock(const FlatUnit& unit, ShardedBlockFn block, const at::Tensor& x) {
  if (!at::GradMode::is_enabled()) {
    at::Tensor full = unit.Gather();
    return block(unit.Views(full), x);
  }
  auto holder = c10::make_intrusive<UnitHolder>();
  holder->unit = &unit;
  holder->block = std::move(block);
  return BlockFunction::apply(x, unit.shard(), std::move(holder));
}

}  // namespace verl
