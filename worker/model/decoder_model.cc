#include "worker/model/decoder_model.h"

#include <ATen/SDPBackend.h>
#include <ATen/TensorIndexing.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/_fused_sdp_choice.h>
#include <ATen/ops/_scaled_dot_product_cudnn_attention.h>
#include <ATen/ops/_scaled_dot_product_cudnn_attention_backward.h>
#include <ATen/record_function.h>
#include <c10/core/InferenceMode.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "common/status/status_macros.h"
#include "worker/model/host_upload.h"
#include "worker/model/safetensors_checkpoint.h"
#include "worker/model/stacked_linear.h"
#include "worker/rank/torch_util.h"
#ifdef VERL_WITH_CUDA
#include "worker/kernels/decode_attention.h"
#include "worker/kernels/decode_attention_kernel.h"
#include "worker/kernels/fused_ops.h"
#include "worker/kernels/gather_rows.h"
#endif

namespace verl {
namespace {

// [B, T, heads * d] -> [B, heads, T, d]
at::Tensor SplitHeads(const at::Tensor& x, int64_t heads, int64_t head_dim) {
  return x.view({x.size(0), x.size(1), heads, head_dim}).transpose(1, 2);
}

at::Tensor RotateHalf(const at::Tensor& x) {
  int64_t half = x.size(-1) / 2;
  return at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}

// x * cos + rotate_half(x) * sin; one fused kernel on a GPU (the same values), differentiable, in every mode: the
// rollout, the trainer's no-grad log-prob passes, its forward with gradients and a checkpointed layer's recompute run
// the same kernels, so their log-probs agree and a recompute reproduces its forward.
at::Tensor ApplyRope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
#ifdef VERL_WITH_CUDA
  if (kernels::RopeSupported(x, cos)) return kernels::Rope(x, cos, sin);
#endif
  return x * cos + RotateHalf(x) * sin;
}

#ifdef VERL_WITH_CUDA
// Whether a GPU pass forms shared-prompt attention's rows by kernels::SharedPromptRows (the default) or, with
// VERL_SHARED_PROMPT_ROWS=0, by the composition it replaces (Rope, ScatterDistinct, GatherRepeated): the same bits, for
// measuring one against the other. Read at every call, so a test can run both ways in one process.
bool SharedPromptRowsFused() {
  const char* env = std::getenv("VERL_SHARED_PROMPT_ROWS");
  return env == nullptr || std::string_view(env) != "0";
}
#endif

// The MLP's silu(gate) * up; one fused kernel on a GPU (see ApplyRope).
at::Tensor SwiGlu(const at::Tensor& gate, const at::Tensor& up) {
#ifdef VERL_WITH_CUDA
  if (kernels::SwiGluSupported(gate, up)) return kernels::SwiGlu(gate, up);
#endif
  return at::silu(gate) * up;
}

// Replaces `parts` (contiguous, of one dtype and device, equal but for the first dimension) by tensors on consecutive
// pieces of one new buffer, with the same values. Each stays a tensor of its own (not an autograd view of the buffer).
void Stack(const std::vector<at::Tensor*>& parts) {
  std::vector<at::Tensor> values;
  for (const at::Tensor* p : parts) values.push_back(*p);
  const at::Tensor buffer = at::cat(values, 0);
  int64_t offset = buffer.storage_offset();
  for (at::Tensor* p : parts) {
    const at::Tensor piece = at::empty({0}, buffer.options());
    piece.set_(buffer.storage(), offset, p->sizes(), p->strides());
    offset += p->numel();
    *p = piece;
  }
}

// `parts` as one tensor (concatenated along dimension 0) over their memory where they are consecutive pieces of one
// storage, as Stack leaves them; undefined otherwise (e.g. parameters gathered from ZeRO-3 units, whose layers' biases
// lie between the weights). Like Stack's pieces, not an autograd view: in-place updates of the parts show through.
at::Tensor StackedView(std::initializer_list<at::Tensor> parts) {
  const at::Tensor& first = *parts.begin();
  if (!first.defined()) return {};
  const char* next = static_cast<const char*>(first.data_ptr());
  std::vector<int64_t> size = first.sizes().vec();
  size[0] = 0;
  for (const at::Tensor& t : parts) {
    if (!t.defined() || !t.is_contiguous() || t.scalar_type() != first.scalar_type() ||
        !t.storage().is_alias_of(first.storage()) || t.dim() != first.dim() ||
        t.sizes().slice(1) != first.sizes().slice(1) || t.data_ptr() != next) {
      return {};
    }
    next += t.nbytes();
    size[0] += t.size(0);
  }
  std::vector<int64_t> stride(size.size(), 1);
  for (int64_t d = static_cast<int64_t>(size.size()) - 2; d >= 0; --d) stride[d] = stride[d + 1] * size[d + 1];
  at::Tensor stacked = at::empty({0}, first.options());
  stacked.set_(first.storage(), first.storage_offset(), size, stride);
  return stacked;
}

}  // namespace

absl::StatusOr<std::unique_ptr<DecoderModel>> DecoderModel::Load(const std::string& model_dir, at::ScalarType dtype,
                                                                 at::Device device) {
  ASSIGN_OR_RETURN(DecoderConfig config, LoadDecoderConfig(model_dir));
  ASSIGN_OR_RETURN(SafetensorsCheckpoint ckpt, SafetensorsCheckpoint::Open(model_dir));
  std::unique_ptr<DecoderModel> model(new DecoderModel(config));
  std::map<std::string, at::Tensor> loaded;
  for (const ParamSpec& spec : DecoderParamSpecs(config)) {
    auto view = ckpt.Get(spec.name);
    if (!view.ok()) return Annotate(view.status(), absl::StrCat("loading model from ", model_dir));
    if (view->shape != spec.shape) {
      return absl::InvalidArgumentError(absl::StrCat(model_dir, ": tensor '", spec.name, "' has shape ",
                                                     FormatShape(view->shape), ", config.json implies ",
                                                     FormatShape(spec.shape)));
    }
    at::Tensor t =
        at::from_blob(const_cast<void*>(view->data), view->shape, at::TensorOptions().dtype(ToScalarType(view->dtype)));
    loaded[spec.name] = t.to(device, dtype, /*non_blocking=*/false, /*copy=*/true);
    model->params_.emplace_back(spec.name, loaded[spec.name]);
  }
  // Each layer's q, k and v projections (weights; biases) and its gate and up projections on consecutive rows of one
  // buffer each, so that every pass runs them as one GEMM each over a view of that memory (LayerForward,
  // StackedLinear); they stay separate parameters for everything else.
  std::map<std::string, at::Tensor*> by_name;
  for (auto& [name, t] : model->params_) by_name[name] = &t;
  for (int64_t i = 0; i < config.num_hidden_layers; ++i) {
    const std::string layer = absl::StrCat("model.layers.", i, ".");
    for (const std::vector<std::string>& group :
         {std::vector<std::string>{"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight"},
          std::vector<std::string>{"self_attn.q_proj.bias", "self_attn.k_proj.bias", "self_attn.v_proj.bias"},
          std::vector<std::string>{"mlp.gate_proj.weight", "mlp.up_proj.weight"}}) {
      std::vector<at::Tensor*> parts;
      for (const std::string& name : group) {
        auto it = by_name.find(layer + name);
        if (it != by_name.end()) parts.push_back(it->second);
      }
      if (parts.size() == group.size()) Stack(parts);
    }
  }
  model->BindFields();
  model->inv_freq_ = RopeInverseFrequencies(config).to(device);
  return model;
}

DecoderModel::Layer DecoderModel::MakeLayer(const std::function<at::Tensor(const std::string&)>& get) {
  Layer layer;
  layer.input_norm = get("input_layernorm.weight");
  layer.q_w = get("self_attn.q_proj.weight");
  layer.q_b = get("self_attn.q_proj.bias");
  layer.k_w = get("self_attn.k_proj.weight");
  layer.k_b = get("self_attn.k_proj.bias");
  layer.v_w = get("self_attn.v_proj.weight");
  layer.v_b = get("self_attn.v_proj.bias");
  layer.o_w = get("self_attn.o_proj.weight");
  layer.o_b = get("self_attn.o_proj.bias");
  layer.post_norm = get("post_attention_layernorm.weight");
  layer.gate_w = get("mlp.gate_proj.weight");
  layer.up_w = get("mlp.up_proj.weight");
  layer.down_w = get("mlp.down_proj.weight");
  // The stacked views (Layer::qkv_w): q/k/v only where their biases are all there or all absent.
  layer.qkv_w = StackedView({layer.q_w, layer.k_w, layer.v_w});
  if (layer.q_b.defined() || layer.k_b.defined() || layer.v_b.defined()) {
    layer.qkv_b = StackedView({layer.q_b, layer.k_b, layer.v_b});
    if (!layer.qkv_b.defined()) layer.qkv_w = at::Tensor();
  }
  layer.gate_up_w = StackedView({layer.gate_w, layer.up_w});
  return layer;
}

void DecoderModel::BindFields() {
  std::map<std::string, at::Tensor> by_name;
  for (const auto& [name, t] : params_) by_name[name] = t;
  auto get = [&](const std::string& name) -> at::Tensor {
    auto it = by_name.find(name);
    return it == by_name.end() ? at::Tensor() : it->second;
  };
  embed_ = get("model.embed_tokens.weight");
  final_norm_ = get("model.norm.weight");
  lm_head_ = config_.tie_word_embeddings ? embed_ : get("lm_head.weight");
  layers_.clear();
  for (int64_t i = 0; i < config_.num_hidden_layers; ++i) {
    const std::string prefix = absl::StrCat("model.layers.", i, ".");
    layers_.push_back(MakeLayer([&](const std::string& name) { return get(prefix + name); }));
  }
  num_parameters_ = 0;
  for (const auto& [name, t] : params_) num_parameters_ += t.numel();
}

namespace {

// Copies of `tensors` on `device` (pinned when `pin`): tensors sharing a storage share one again, at the same offsets
// and strides, so stacked views stay stacked. Undefined tensors stay undefined.
std::vector<at::Tensor> CopiesKeepingStorage(const std::vector<at::Tensor>& tensors, at::Device device, bool pin) {
  std::map<const c10::StorageImpl*, at::Tensor> copies;
  std::vector<at::Tensor> out;
  out.reserve(tensors.size());
  for (const at::Tensor& t : tensors) {
    if (!t.defined()) {
      out.emplace_back();
      continue;
    }
    const c10::Storage& storage = t.storage();
    auto it = copies.find(storage.unsafeGetStorageImpl());
    if (it == copies.end()) {
      const int64_t n = static_cast<int64_t>(storage.nbytes()) / t.element_size();
      at::Tensor whole = at::empty({0}, t.options().requires_grad(false));
      whole.set_(storage, 0, {n}, {1});
      at::Tensor copy = at::empty({n}, whole.options().device(device).pinned_memory(pin));
      // Asynchronous both ways: a pinned host copy is read only by later copies on the same stream, and device
      // memory freed after it is reused in stream order.
      copy.copy_(whole, /*non_blocking=*/pin || whole.is_pinned());
      it = copies.emplace(storage.unsafeGetStorageImpl(), copy).first;
    }
    at::Tensor view = at::empty({0}, it->second.options());
    view.set_(it->second.storage(), t.storage_offset(), t.sizes(), t.strides());
    out.push_back(view);
  }
  return out;
}

}  // namespace

absl::Status DecoderModel::OffloadParameters() {
  if (offloaded_) return absl::OkStatus();
  if (requires_grad_) {
    return absl::FailedPreconditionError(
        "parameter offload keeps one host copy of the parameters and is for a model that is not trained (the "
        "reference); this model has requires_grad");
  }
  MoveParametersToHost();
  return absl::OkStatus();
}

std::vector<at::Tensor> DecoderModel::StoredTensors() const {
  std::vector<at::Tensor> out;
  if (sharded()) {
    for (const UnitInfo& u : units_) out.push_back(u.unit->shard());
  } else {
    for (const auto& [name, t] : params_) out.push_back(t);
  }
  return out;
}

void DecoderModel::SetStoredTensors(const std::vector<at::Tensor>& tensors) {
  if (sharded()) {
    for (size_t i = 0; i < units_.size(); ++i) units_[i].unit->shard() = tensors[i];
  } else {
    for (size_t i = 0; i < params_.size(); ++i) params_[i].second = tensors[i];
    BindFieldsKeepingCount();
  }
}

void DecoderModel::MoveParametersToHost() {
  if (host_copies_.empty()) host_copies_ = CopiesKeepingStorage(StoredTensors(), at::kCPU, device().is_cuda());
  SetStoredTensors(host_copies_);
  offloaded_ = true;
}

void DecoderModel::LoadParameters() {
  if (!offloaded_) return;
  SetStoredTensors(CopiesKeepingStorage(host_copies_, device(), /*pin=*/false));
  offloaded_ = false;
}

void DecoderModel::ShardParameters(const ShardGroup& group) {
  if (sharded()) return;
  if (offloaded_) {  // shard the device copy, then offload the shards (the full host copy goes)
    LoadParameters();
    host_copies_.clear();
    ShardParameters(group);
    MoveParametersToHost();
    return;
  }
  // Units in compute order: the embedding, each layer, the final norm, the untied LM head.
  std::vector<std::pair<std::string, std::string>> unit_prefixes = {{"embed", "model.embed_tokens."}};
  for (int64_t i = 0; i < config_.num_hidden_layers; ++i) {
    unit_prefixes.emplace_back(absl::StrCat("layers.", i), absl::StrCat("model.layers.", i, "."));
  }
  unit_prefixes.emplace_back("norm", "model.norm.");
  if (!config_.tie_word_embeddings) unit_prefixes.emplace_back("lm_head", "lm_head.");
  for (const auto& [unit_name, prefix] : unit_prefixes) {
    std::vector<std::string> names;
    std::vector<at::Tensor> tensors;
    UnitInfo info;
    for (size_t i = 0; i < params_.size(); ++i) {
      if (params_[i].first.rfind(prefix, 0) != 0) continue;
      names.push_back(params_[i].first.substr(prefix.size()));
      tensors.push_back(params_[i].second);
      info.param_index.push_back(i);
    }
    info.unit = std::make_unique<FlatUnit>(unit_name, std::move(names), tensors, group);
    info.unit->shard().set_requires_grad(requires_grad_);
    units_.push_back(std::move(info));
  }
  // From now on the full parameters exist only between Unshard() and Reshard().
  for (auto& [name, t] : params_) t = at::Tensor();
  BindFieldsKeepingCount();
}

void DecoderModel::BindFieldsKeepingCount() {
  const int64_t n = num_parameters_;
  BindFields();
  num_parameters_ = n;
}

std::vector<std::pair<std::string, at::Tensor>> DecoderModel::shard_parameters() const {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const UnitInfo& u : units_) out.emplace_back("shard." + u.unit->name(), u.unit->shard());
  return out;
}

std::vector<std::pair<std::string, at::Tensor>> DecoderModel::trainable_parameters() const {
  return sharded() ? shard_parameters() : params_;
}

void DecoderModel::Unshard() {
  if (!sharded() || gathered_) return;
  std::vector<at::Tensor> full;
  for (const UnitInfo& u : units_) full.push_back(u.unit->Gather());
  const auto named = NamedViews(full);
  for (size_t i = 0; i < named.size(); ++i) params_[i].second = named[i].second;
  BindFieldsKeepingCount();
  gathered_ = true;
}

void DecoderModel::Reshard(bool keep_changes) {
  if (!sharded() || !gathered_) return;
  if (keep_changes) {
    at::NoGradGuard no_grad;
    for (UnitInfo& u : units_) {
      // The gathered views of a unit are contiguous pieces of one buffer: rebuild it from them.
      std::vector<at::Tensor> flat;
      for (size_t i : u.param_index) flat.push_back(params_[i].second.reshape({-1}));
      at::Tensor full = at::cat(flat);
      const int64_t padding = u.unit->padded_numel() - full.numel();
      if (padding > 0) full = at::cat({full, at::zeros({padding}, full.options())});
      u.unit->shard().copy_(u.unit->SliceOf(full));
    }
  }
  for (auto& [name, t] : params_) t = at::Tensor();
  BindFieldsKeepingCount();
  gathered_ = false;
}

std::vector<std::pair<std::string, at::Tensor>> DecoderModel::NamedViews(const std::vector<at::Tensor>& full) const {
  std::vector<std::pair<std::string, at::Tensor>> out(params_.size());
  for (size_t u = 0; u < units_.size(); ++u) {
    const std::vector<at::Tensor> views = units_[u].unit->Views(full[u]);
    for (size_t k = 0; k < views.size(); ++k) {
      const size_t i = units_[u].param_index[k];
      out[i] = {params_[i].first, views[k]};
    }
  }
  return out;
}

std::vector<at::Tensor> DecoderModel::parameters() const {
  std::vector<at::Tensor> out;
  out.reserve(params_.size());
  for (const auto& [name, t] : params_) out.push_back(t);
  return out;
}

void DecoderModel::SetRequiresGrad(bool requires_grad) {
  requires_grad_ = requires_grad;
  for (auto& [name, t] : params_) {
    if (t.defined()) t.set_requires_grad(requires_grad);
  }
  for (UnitInfo& u : units_) u.unit->shard().set_requires_grad(requires_grad);
}

at::Tensor DecoderModel::RmsNorm(const at::Tensor& x, const at::Tensor& weight, at::Tensor* x_again) const {
#ifdef VERL_WITH_CUDA
  // One fused kernel on a GPU in every mode (see ApplyRope), the same values to float rounding of the mean; its
  // backward is one kernel too.
  if (kernels::RmsNormSupported(x, weight)) {
    return kernels::RmsNorm(x, weight, config_.rms_norm_eps, x_again);
  }
#endif
  if (x_again != nullptr) *x_again = x;
  // As HF: normalise in float32, cast back, then scale.
  at::Tensor xf = x.to(at::kFloat);
  at::Tensor var = xf.pow(2).mean(-1, /*keepdim=*/true);
  return weight * (xf * at::rsqrt(var + config_.rms_norm_eps)).to(x.scalar_type());
}

std::pair<at::Tensor, at::Tensor> DecoderModel::RopeCosSin(const at::Tensor& position_ids, at::ScalarType dtype) const {
  // freqs [B, T, d/2] -> emb [B, 1, T, d]
  at::Tensor freqs = position_ids.to(at::kFloat).unsqueeze(-1) * inv_freq_;
  at::Tensor emb = at::cat({freqs, freqs}, -1).unsqueeze(1);
  return {emb.cos().to(dtype), emb.sin().to(dtype)};
}

bool DecoderModel::ProjectionsStacked() const {
  for (const Layer& L : layers_) {
    if (!L.qkv_w.defined() || !L.gate_up_w.defined()) return false;
  }
  return !layers_.empty();
}

bool DecoderModel::InputNormsFoldable() const {
  if (!DecodeKernelAvailable() || !FoldsInputNorms(embed_.scalar_type())) return false;
  for (const Layer& L : layers_) {
    if (L.q_b.defined() && !L.qkv_b.defined()) return false;  // biases not stacked (ZeRO-3 gathers): decode unfolded
  }
  return true;
}

std::vector<at::Tensor> DecoderModel::FoldedQkvWeights() const {
  std::vector<at::Tensor> out;
  if (!InputNormsFoldable()) return out;
  const at::NoGradGuard no_grad;  // a copy for decoding, whatever the trainer's parameters require
  for (const Layer& L : layers_) {
    const at::Tensor w = L.qkv_w.defined() ? L.qkv_w : at::cat({L.q_w, L.k_w, L.v_w}, 0);
    // bf16 * bf16 multiplies in float32 and rounds once: the float32 product rounded to bf16.
    out.push_back(w * L.input_norm.unsqueeze(0));
  }
  return out;
}

bool DecoderModel::PostAttentionNormsFoldable() const {
  if (!InputNormsFoldable()) return false;
  for (const Layer& L : layers_) {
    if (!L.gate_up_w.defined() || L.o_b.defined()) return false;  // no stacked view / a bias the add in the GEMM omits
  }
  return true;
}

std::vector<at::Tensor> DecoderModel::FoldedGateUpWeights() const {
  std::vector<at::Tensor> out;
  if (!PostAttentionNormsFoldable()) return out;
  const at::NoGradGuard no_grad;
  for (const Layer& L : layers_) out.push_back(L.gate_up_w * L.post_norm.unsqueeze(0));
  return out;
}

bool DecoderModel::DecodeKernelAvailable() const {
#ifdef VERL_WITH_CUDA
  if (sharded() && !gathered_) return false;  // layer-by-layer gathers decode in lockstep, under a mask
  const at::ScalarType dtype = embed_.scalar_type();
  return device().is_cuda() && (dtype == at::kFloat || dtype == at::kBFloat16 || dtype == at::kHalf) &&
         kernels::DecodeAttentionShapeSupported(static_cast<int>(config_.num_attention_heads),
                                                static_cast<int>(config_.num_key_value_heads),
                                                static_cast<int>(config_.head_dim));
#else
  return false;
#endif
}

KvCache DecoderModel::NewCache(int64_t batch, int64_t capacity, bool zeroed) const {
  KvCache cache;
  cache.capacity = capacity;
  auto opts = (sharded() ? units_.front().unit->shard().options() : embed_.options()).requires_grad(false);
  const std::vector<int64_t> shape = {batch, config_.num_key_value_heads, capacity, config_.head_dim};
  for (int64_t i = 0; i < config_.num_hidden_layers; ++i) {
    cache.k.push_back(zeroed ? at::zeros(shape, opts) : at::empty(shape, opts));
    cache.v.push_back(zeroed ? at::zeros(shape, opts) : at::empty(shape, opts));
  }
  return cache;
}

namespace {

// scaled_dot_product_attention turns a boolean mask into an additive one (0 where a position is attended, -inf where
// not, in the query's dtype) on every call; a pass does it once here instead of once per layer.
at::Tensor AdditiveMask(const at::Tensor& mask, at::ScalarType dtype) {
  if (!mask.defined() || mask.scalar_type() != at::kBool) return mask;
  const auto opts = mask.options().dtype(dtype);
  const double inf = std::numeric_limits<double>::infinity();
  return at::where(mask, at::scalar_tensor(0.0, opts), at::scalar_tensor(-inf, opts));
}

// The attention rows' movers of shared prompts (PackedAttention). On a GPU the zero-filled scatters and the repeated
// rows' gradient sums are kernels of their own (kernels::GatherRowsOrZero, SumRows: one launch instead of a fill and an
// index_copy_, and a deterministic sum instead of index_add_'s atomics); elsewhere ATen's ops.

// rows [n, ...] zero but for rows[index[i]] = x[i]; `inverse` lists each row's i (-1 for none).
at::Tensor ZeroRowsBut(const at::Tensor& x, const at::Tensor& index, const at::Tensor& inverse, int64_t n) {
#ifdef VERL_WITH_CUDA
  if (x.is_cuda()) {
    TORCH_CHECK(inverse.size(0) == n, "shared prompts: ", inverse.size(0), " inverse entries for ", n, " rows");
    return kernels::GatherRowsOrZero(x, inverse);
  }
#endif
  std::vector<int64_t> shape = x.sizes().vec();
  shape[0] = n;
  return at::zeros(shape, x.options()).index_copy_(0, index, x);
}

// Rows picked at distinct indices: y = x.index_select(0, index), no index repeated, so the backward puts the gradient
// back with plain stores (index_select's own backward, index_add, adds atomically: in B3's update it took 0.16 s for
// the shared prompts' attention rows). inverse[r]: the i with index[i] = r, -1 for none.
class GatherDistinct : public torch::autograd::Function<GatherDistinct> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& index,
                            const at::Tensor& inverse) {
    ctx->saved_data["rows"] = x.size(0);
    ctx->save_for_backward({index, inverse});
    return x.index_select(0, index);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad) {
    const auto saved = ctx->get_saved_variables();
    return {ZeroRowsBut(grad[0].contiguous(), saved[0], saved[1], ctx->saved_data["rows"].toInt()), at::Tensor(),
            at::Tensor()};
  }
};

// The inverse: y [rows, ...] zero but for y[index[i]] = x[i] (distinct indices); the backward gathers.
class ScatterDistinct : public torch::autograd::Function<ScatterDistinct> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& index,
                            const at::Tensor& inverse, int64_t rows) {
    ctx->save_for_backward({index});
    return ZeroRowsBut(x, index, inverse, rows);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad) {
    return {grad[0].index_select(0, ctx->get_saved_variables()[0]), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// Rows picked with repeats: y = x.index_select(0, index) (a prompt's keys and values in every row holding it); the
// backward sums each row's gradients, x's row t from the positions positions[offsets[t] .. offsets[t + 1]).
class GatherRepeated : public torch::autograd::Function<GatherRepeated> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& index,
                            const at::Tensor& offsets, const at::Tensor& positions) {
    ctx->saved_data["rows"] = x.size(0);
    ctx->save_for_backward({index, offsets, positions});
    return x.index_select(0, index);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor g = grad[0].contiguous();
    at::Tensor dx;
#ifdef VERL_WITH_CUDA
    if (kernels::SumRowsSupported(g)) dx = kernels::SumRows(g, saved[1], saved[2]);
#endif
    if (!dx.defined()) {
      std::vector<int64_t> shape = g.sizes().vec();
      shape[0] = ctx->saved_data["rows"].toInt();
      dx = at::zeros(shape, g.options()).index_add_(0, saved[0], g);
    }
    return {dx, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

// What a checkpointed layer's attention half keeps from its forward for its recompute in backward (CheckpointedLayer).
// The shared-prompt attention: cuDNN's output and log-sum-exp per bucket, so the recompute hands autograd those instead
// of running the attention forward again, and the backward is cuDNN's own, reading what the plain forward's would.
// Where ATen would not pick cuDNN for a bucket (a CPU, float32) nothing is kept and the recompute attends again.
// (Packed sequences without shared prompts attend again too: keeping flash attention's variable-length output the same
// way measured no faster, docs/decisions.md.) Also the q/k/v and output projections' values (unless
// SetGradientCheckpointing's keep_projections is off): the recompute hands them to StackedLinear as its value instead
// of running those GEMMs again, whose backward reads their inputs, not their outputs. The MLP's, by far the larger
// activations, are recomputed.
struct AttentionSaves {
  struct Bucket {
    at::Tensor out, lse, cum_q, cum_k, seed, offset;  // out undefined: not kept
    int64_t max_q = 0, max_k = 0;
  };
  bool replay = false;  // false while the forward records, true in the recompute
  std::vector<Bucket> buckets;
  at::Tensor qkv, o;  // the stacked q/k/v projection's and the output projection's values; undefined: not kept
  void Release() {
    buckets.clear();
    qkv = at::Tensor();
    o = at::Tensor();
  }
};

namespace {

std::atomic<int64_t> replayed_attention_buckets{0};
std::atomic<int64_t> swiglu_formed_in_backward{0};
std::atomic<int64_t> layers_recomputed{0};
std::atomic<int64_t> projections_replayed{0};
std::atomic<int64_t> shared_prompt_rows_fused{0};

// The recompute's attention of one bucket: the forward's output as the value, cuDNN's backward as the gradient.
class ReplayedAttention : public torch::autograd::Function<ReplayedAttention> {
 public:
  // out: saved->out, an input (without history) so that autograd returns it as a view of itself.
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k,
                            const at::Tensor& v, const at::Tensor& out, const AttentionSaves::Bucket* saved) {
    ctx->save_for_backward({q, k, v, out, saved->lse, saved->cum_q, saved->cum_k, saved->seed, saved->offset});
    ctx->saved_data["max_q"] = saved->max_q;
    ctx->saved_data["max_k"] = saved->max_k;
    return out;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad) {
    const auto s = ctx->get_saved_variables();
    const at::Tensor& out = s[3];
    // cuDNN reads the output's gradient in the output's layout (the rows' [n, len, h, D] memory, as here).
    const at::Tensor g = grad[0].strides() == out.strides() ? grad[0] : at::empty_like(out).copy_(grad[0]);
    auto [dq, dk, dv] = at::_scaled_dot_product_cudnn_attention_backward(
        g, s[0], s[1], s[2], out, s[4], s[7], s[8], at::Tensor(), s[5], s[6], ctx->saved_data["max_q"].toInt(),
        ctx->saved_data["max_k"].toInt(), /*dropout_p=*/0.0, /*is_causal=*/true);
    return {dq, dk, dv, at::Tensor(), at::Tensor()};
  }
};

// scaled_dot_product_attention of q [..., heads, T, D] over k and v [..., kv_heads, S, D], grouped query heads where
// kv_heads < heads, under `mask` (or none) and causal or not. On a GPU in float32 neither flash attention nor cuDNN
// runs, and PyTorch's memory-efficient kernel does not take grouped heads (enable_gqa), so SDPA would fall back to its
// math form, which holds the call's [heads, T, S] float32 scores and their softmax: there k and v are repeated to the
// query heads instead (what ForwardTokenBytes counts), and the memory-efficient kernel runs.
at::Tensor GroupedSdpa(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& mask,
                       bool causal) {
  const int64_t heads = q.size(-3), kv_heads = k.size(-3);
  const std::optional<at::Tensor> m = mask.defined() ? std::optional<at::Tensor>(mask) : std::nullopt;
  if (heads != kv_heads && q.is_cuda() && q.scalar_type() == at::kFloat) {
    const int64_t groups = heads / kv_heads;  // query head h reads key/value head h / groups, as enable_gqa maps them
    return at::scaled_dot_product_attention(q, k.repeat_interleave(groups, -3), v.repeat_interleave(groups, -3), m,
                                            0.0, causal);
  }
  return at::scaled_dot_product_attention(q, k, v, m, 0.0, causal, std::nullopt, /*enable_gqa=*/heads != kv_heads);
}

// Causal attention of one shared-prompt bucket ([n, h, len, D] views): SDPA, or with `saves` cuDNN's kernel called as
// SDPA calls it, its output and log-sum-exp kept (the forward), then handed back (the recompute).
at::Tensor BucketAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool gqa,
                           AttentionSaves* saves, size_t b) {
  if (saves != nullptr && !saves->replay) {
    TORCH_CHECK(saves->buckets.size() == b, "AttentionSaves: buckets out of order");
    saves->buckets.emplace_back();
    if (q.is_cuda() && at::_fused_sdp_choice(q, k, v, std::nullopt, 0.0, /*is_causal=*/true, std::nullopt, gqa) ==
                           static_cast<int64_t>(at::SDPBackend::cudnn_attention)) {
      auto r = at::_scaled_dot_product_cudnn_attention(q, k, v, std::nullopt, /*compute_log_sumexp=*/true, 0.0,
                                                       /*is_causal=*/true);
      AttentionSaves::Bucket& kept = saves->buckets.back();
      kept.out = std::get<0>(r);
      kept.lse = std::get<1>(r);
      kept.cum_q = std::get<2>(r);
      kept.cum_k = std::get<3>(r);
      kept.max_q = std::get<4>(r).guard_int(__FILE__, __LINE__);
      kept.max_k = std::get<5>(r).guard_int(__FILE__, __LINE__);
      kept.seed = std::get<6>(r);
      kept.offset = std::get<7>(r);
      return kept.out;
    }
  } else if (saves != nullptr && b < saves->buckets.size()) {
    // (None kept, e.g. a second backward through a retained graph after the first released them: attend again.)
    const AttentionSaves::Bucket& kept = saves->buckets[b];
    if (kept.out.defined()) {
      TORCH_CHECK(kept.out.size(0) == q.size(0) && kept.out.size(2) == q.size(2),
                  "AttentionSaves: the recompute's bucket differs from the forward's");
      replayed_attention_buckets.fetch_add(1, std::memory_order_relaxed);
      return ReplayedAttention::apply(q, k, v, kept.out, &kept);
    }
  }
  return GroupedSdpa(q, k, v, at::Tensor(), /*causal=*/true);
}

// Causal attention over shared-prompt rows (PackedSequences::row_index): q_rows [R, heads, D], k_rows and v_rows
// [R, kv_heads, D], the rows of all buckets one after another; returns each packed token's output, [1, heads, T, D].
at::Tensor SharedPromptAttention(const at::Tensor& q_rows, const at::Tensor& k_rows, const at::Tensor& v_rows,
                                 const PackedSequences& packed, AttentionSaves* saves) {
  const bool gqa = q_rows.size(1) != k_rows.size(1);
  const int64_t heads = q_rows.size(1), D = q_rows.size(2);
  // Each bucket's rows, by one split per tensor (its backward is one concatenation; a narrow's would zero-fill a
  // whole gradient per bucket and copy into it), and none where one bucket holds them all.
  std::vector<int64_t> sizes;
  for (const auto& [n, len] : packed.row_buckets) sizes.push_back(n * len);
  auto buckets = [&](const at::Tensor& t) {
    return sizes.size() == 1 && sizes[0] == t.size(0) ? std::vector<at::Tensor>{t} : t.split_with_sizes(sizes, 0);
  };
  const std::vector<at::Tensor> q_parts = buckets(q_rows), k_parts = buckets(k_rows), v_parts = buckets(v_rows);
  std::vector<at::Tensor> outs;
  for (size_t b = 0; b < packed.row_buckets.size(); ++b) {
    const auto [n, len] = packed.row_buckets[b];
    auto rows_view = [&](const at::Tensor& t) {  // [n * len, h, D] -> [n, h, len, D]
      return t.view({n, len, t.size(1), D}).transpose(1, 2);
    };
    outs.push_back(BucketAttention(rows_view(q_parts[b]), rows_view(k_parts[b]), rows_view(v_parts[b]), gqa, saves, b)
                       .transpose(1, 2)
                       .reshape({n * len, heads, D}));
  }
  const at::Tensor o_flat = outs.size() == 1 ? outs.front() : at::cat(outs, 0);
  return GatherDistinct::apply(o_flat, packed.row_output, packed.row_source).transpose(0, 1).unsqueeze(0);
}

// Causal attention within each packed sequence. q [1, heads, T, hd], k and v [1, kv_heads, T, hd]; returns
// [1, heads, T, hd]. With shared prompts (PackedSequences::row_index), SDPA over the gathered rows, a call per length
// bucket. Otherwise on a GPU in bf16/fp16, flash attention's variable-length kernel (GQA without repeating k and v,
// with autograd), else one scaled_dot_product_attention call per sequence.
at::Tensor PackedAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const PackedSequences& packed,
                           AttentionSaves* saves) {
  if (packed.row_index.defined()) {
    // Shared prompts: causal attention over the gathered rows (PackedSequences::row_index), then each token's output
    // from its row. Keys and values: every row gathers its tokens', so gradients reach a prompt's from every row that
    // holds it (GatherRepeated's backward sums them; two KV heads here against the queries' 14). Queries: each token's
    // only at the position its output is taken from (distinct positions, plain stores both ways); the prompt's
    // positions in its other rows hold zeros, whose outputs are not taken. (On a GPU the layer forms these rows from
    // its q/k/v projection directly, kernels::SharedPromptRows, and calls SharedPromptAttention itself.)
    const int64_t flat = packed.row_index.size(0);
    auto tokens_first = [](const at::Tensor& t) { return t.squeeze(0).transpose(0, 1); };  // [T, h, D]
    const at::Tensor q_rows =
        ScatterDistinct::apply(tokens_first(q).contiguous(), packed.row_output, packed.row_source, flat);
    auto repeated = [&](const at::Tensor& t) {
      return GatherRepeated::apply(tokens_first(t), packed.row_index, packed.key_offsets, packed.key_positions);
    };
    return SharedPromptAttention(q_rows, repeated(k), repeated(v), packed, saves);
  }
  if (PackedAttentionIsFlash(q.device(), q.scalar_type())) {
    // [1, heads, T, hd] -> [T, heads, hd]
    auto tokens_first = [](const at::Tensor& t) { return t.squeeze(0).transpose(0, 1).contiguous(); };
    at::Tensor out = std::get<0>(at::_flash_attention_forward(
        tokens_first(q), tokens_first(k), tokens_first(v), packed.cu_seqlens, packed.cu_seqlens, packed.max_len,
        packed.max_len, /*dropout_p=*/0.0, /*is_causal=*/true, /*return_debug_mask=*/false));
    return out.transpose(0, 1).unsqueeze(0);
  }
  std::vector<at::Tensor> parts;
  for (size_t b = 0; b + 1 < packed.offsets.size(); ++b) {
    const int64_t start = packed.offsets[b], len = packed.offsets[b + 1] - packed.offsets[b];
    if (len == 0) continue;
    parts.push_back(
        GroupedSdpa(q.narrow(2, start, len), k.narrow(2, start, len), v.narrow(2, start, len), at::Tensor(), true));
  }
  return at::cat(parts, 2);
}

// Causal attention of T new queries [1, heads, T, hd] over S = cached + T keys and values [1, kv_heads, S, hd], the
// last T of which are the queries' own: query t attends to keys [0, S - T + t]. Flash attention's variable-length
// kernel (a GPU in bf16/fp16, PackedAttentionIsFlash), whose causal mask is aligned so, to the last key (SDPA's
// is_causal aligns it to the first); GQA without repeating k and v.
at::Tensor FlashCausalAfterCache(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  const int64_t T = q.size(2), S = k.size(2);
  TORCH_CHECK(q.size(0) == 1 && k.size(0) == 1 && S >= T && PackedAttentionIsFlash(q.device(), q.scalar_type()),
              "FlashCausalAfterCache: one row of ", T, " queries over ", S, " keys, in flash attention's dtypes");
  auto tokens_first = [](const at::Tensor& t) { return t.squeeze(0).transpose(0, 1).contiguous(); };
  const at::Tensor cu_q = IntsOn({0, static_cast<int32_t>(T)}, q.device());
  const at::Tensor cu_k = IntsOn({0, static_cast<int32_t>(S)}, q.device());
  at::Tensor out = std::get<0>(at::_flash_attention_forward(tokens_first(q), tokens_first(k), tokens_first(v), cu_q,
                                                            cu_k, T, S, /*dropout_p=*/0.0, /*is_causal=*/true,
                                                            /*return_debug_mask=*/false));
  return out.transpose(0, 1).unsqueeze(0);
}

}  // namespace

int64_t SharedPromptRowsFusedCalls() { return shared_prompt_rows_fused.load(std::memory_order_relaxed); }

RecomputeCounts CheckpointRecomputeCounts() {
  return {replayed_attention_buckets.load(std::memory_order_relaxed),
          swiglu_formed_in_backward.load(std::memory_order_relaxed), layers_recomputed.load(std::memory_order_relaxed),
          projections_replayed.load(std::memory_order_relaxed)};
}

bool FoldsInputNorms(at::ScalarType dtype) { return dtype == at::kBFloat16; }

bool PackedAttentionIsFlash(at::Device device, at::ScalarType dtype) {
  return device.is_cuda() && (dtype == at::kBFloat16 || dtype == at::kHalf);
}

PackedSequences PackLengths(const std::vector<int64_t>& lengths, at::Device device) {
  PackedSequences p;
  p.offsets.push_back(0);
  std::vector<int32_t> cu{0};
  for (int64_t len : lengths) {
    p.offsets.push_back(p.offsets.back() + len);
    cu.push_back(static_cast<int32_t>(p.offsets.back()));
    p.max_len = std::max(p.max_len, len);
  }
  p.cu_seqlens = IntsOn(cu, device);
  return p;
}

namespace {

std::vector<int64_t> HostLongs(const at::Tensor& t) {
  const at::Tensor h = t.to(at::kCPU, at::kLong).contiguous();
  return std::vector<int64_t>(h.data_ptr<int64_t>(), h.data_ptr<int64_t>() + h.numel());
}

// PackBatch's inputs on the host: `host` where given, else read back.
HostCopies HostInputs(const at::Tensor& input_ids, const at::Tensor& attention_mask, const at::Tensor& response_mask,
                      const HostCopies& host) {
  auto pick = [](const at::Tensor& t, const at::Tensor& h, at::ScalarType dtype) {
    return (h.defined() ? h : OnHost(t)).to(dtype).contiguous();
  };
  return {pick(input_ids, host.input_ids, at::kLong), pick(attention_mask, host.attention_mask, at::kBool),
          pick(response_mask, host.response_mask, at::kBool)};
}

// PackBatch with share_prompts (see decoder_model.h), from the host copies `h`.
PackedBatch PackSharedPrompts(const at::Tensor& input_ids, const HostCopies& h, const BucketSteps& steps) {
  TORCH_CHECK(steps.rows >= 1 && steps.length >= 1, "BucketSteps: steps of ", steps.rows, " rows and ", steps.length,
              " positions");
  auto round_up = [](int64_t x, int64_t step) { return (x + step - 1) / step * step; };
  const int64_t N = h.input_ids.size(0);
  const int64_t S = h.input_ids.size(1);
  const int64_t R = h.response_mask.size(1);
  const int64_t P = S - R;
  const PromptGroups groups = GroupByPrompt(h.input_ids, h.attention_mask, R);
  const std::vector<int64_t> responses = HostLongs(h.response_mask.sum(1));
  // Valid tokens must be the prompt's last columns (the response's first: PackBatch checked them): the packed ids come
  // from those columns.
  const bool* valid = h.attention_mask.data_ptr<bool>();
  for (int64_t b = 0; b < N; ++b) {
    const int64_t p = groups.prompt_len[b];
    TORCH_CHECK(p > 0, "shared prompts (use_prefix_grouper): row ", b, " has an empty prompt");
    for (int64_t c = 0; c < P; ++c) {
      const bool want = c >= P - p;
      TORCH_CHECK(valid[b * S + c] == want, "shared prompts (use_prefix_grouper): row ", b,
                  "'s valid tokens are not a left-padded prompt followed by a right-padded response (column ", c, ")");
    }
  }
  std::vector<std::vector<int64_t>> members(groups.count);
  for (int64_t b = 0; b < N; ++b) members[groups.group[b]].push_back(b);
  // The packed tokens: each group's prompt, then its rows' responses. Rows for attention: each response with its
  // prompt before it (a prompt without responses alone), as lists of packed tokens.
  std::vector<int64_t> source, positions, lengths, predicting;
  std::vector<int64_t> prompt_start(groups.count), response_start(N), row_of(N, -1), first_row(groups.count);
  std::vector<std::vector<int64_t>> rows;
  for (int64_t g = 0; g < groups.count; ++g) {
    const int64_t first = members[g].front();
    const int64_t p = groups.prompt_len[first];
    const int64_t base = static_cast<int64_t>(source.size());
    prompt_start[g] = base;
    std::vector<int64_t> prompt;
    for (int64_t t = 0; t < p; ++t) {
      source.push_back(first * S + P - p + t);
      positions.push_back(t);
      prompt.push_back(base + t);
    }
    lengths.push_back(p);
    first_row[g] = static_cast<int64_t>(rows.size());
    for (int64_t b : members[g]) {
      const int64_t r = responses[b];
      if (r == 0) continue;  // nothing to predict: no sequence
      const int64_t start = static_cast<int64_t>(source.size());
      response_start[b] = start;
      row_of[b] = static_cast<int64_t>(rows.size());
      rows.push_back(prompt);
      for (int64_t t = 0; t < r; ++t) {
        source.push_back(b * S + P + t);
        positions.push_back(p + t);
        rows.back().push_back(start + t);
      }
      lengths.push_back(r);
    }
    if (static_cast<int64_t>(rows.size()) == first_row[g]) rows.push_back(prompt);  // no responses: the prompt alone
  }
  // Buckets: rows longest first, each bucket's rows at least 4/5 of its first's length, padded to it (rounded up to
  // a multiple of steps.length), and rows of padding up to a multiple of steps.rows (the bucket's last row again:
  // keys of a real row, zero queries, outputs not taken); a bucket of fewer rows to the next power of two (a long
  // row alone stays alone).
  std::vector<int64_t> order(rows.size()), flat_start(rows.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return rows[a].size() > rows[b].size(); });
  std::vector<std::pair<int64_t, int64_t>> buckets;
  std::vector<int64_t> row_index, row_output(source.size());
  for (size_t i = 0; i < order.size();) {
    const int64_t first = static_cast<int64_t>(rows[order[i]].size());
    const int64_t len = round_up(first, steps.length);
    size_t j = i;
    for (; j < order.size() && static_cast<int64_t>(rows[order[j]].size()) * 5 >= first * 4; ++j) {
      const std::vector<int64_t>& row = rows[order[j]];
      flat_start[order[j]] = static_cast<int64_t>(row_index.size());
      row_index.insert(row_index.end(), row.begin(), row.end());
      row_index.insert(row_index.end(), len - static_cast<int64_t>(row.size()), row.back());
    }
    const int64_t n = static_cast<int64_t>(j - i);
    int64_t padded = round_up(n, steps.rows);
    if (n < steps.rows) {  // fewer rows: the next power of two, at most steps.rows
      padded = 1;
      while (padded < n) padded *= 2;
      padded = std::min(padded, steps.rows);
    }
    if (padded > n) {
      const std::vector<int64_t> last(row_index.end() - len, row_index.end());
      for (int64_t extra = n; extra < padded; ++extra) row_index.insert(row_index.end(), last.begin(), last.end());
    }
    buckets.push_back({padded, len});
    i = j;
  }
  for (int64_t g = 0; g < groups.count; ++g) {
    for (int64_t t = 0; t < groups.prompt_len[members[g].front()]; ++t) {
      row_output[prompt_start[g] + t] = flat_start[first_row[g]] + t;
    }
  }
  for (int64_t b = 0; b < N; ++b) {
    for (int64_t t = 0; t < responses[b]; ++t) {
      row_output[response_start[b] + t] = flat_start[row_of[b]] + groups.prompt_len[b] + t;
    }
  }
  // Response token t of row b: predicted by its prompt's last token (t = 0), else by its own token t - 1; in the order
  // masked_select(response_mask) gives the targets (row-major).
  for (int64_t b = 0; b < N; ++b) {
    const int64_t g = groups.group[b];
    for (int64_t t = 0; t < responses[b]; ++t) {
      predicting.push_back(t == 0 ? prompt_start[g] + groups.prompt_len[b] - 1 : response_start[b] + t - 1);
    }
  }
  const at::Device device = input_ids.device();
  PackedBatch out;
  out.input_ids = input_ids.reshape({-1}).index_select(0, LongsOn(source, device)).unsqueeze(0);
  out.position_ids = LongsOn(positions, device).unsqueeze(0);
  out.sequences = PackLengths(lengths, device);
  // The inverse maps (PackedSequences::row_source, key_offsets, key_positions).
  std::vector<int64_t> row_source(row_index.size(), -1), key_offsets(source.size() + 1, 0),
      key_positions(row_index.size());
  for (size_t t = 0; t < row_output.size(); ++t) row_source[row_output[t]] = static_cast<int64_t>(t);
  for (int64_t t : row_index) ++key_offsets[t + 1];
  for (size_t t = 0; t < source.size(); ++t) key_offsets[t + 1] += key_offsets[t];
  std::vector<int64_t> filled(key_offsets.begin(), key_offsets.end() - 1);
  for (size_t i = 0; i < row_index.size(); ++i) key_positions[filled[row_index[i]]++] = static_cast<int64_t>(i);
  out.sequences.row_index = LongsOn(row_index, device);
  out.sequences.row_output = LongsOn(row_output, device);
  out.sequences.row_source = LongsOn(row_source, device);
  out.sequences.key_offsets = LongsOn(key_offsets, device);
  out.sequences.key_positions = LongsOn(key_positions, device);
  out.sequences.row_buckets = buckets;
  out.predicting = LongsOn(predicting, device);
  return out;
}

// PackBatch without share_prompts, from the host copies `h`.
PackedBatch PackRows(const at::Tensor& input_ids, const HostCopies& h) {
  const int64_t N = h.input_ids.size(0);
  const int64_t S = h.input_ids.size(1);
  const int64_t P = S - h.response_mask.size(1);
  const at::Device device = input_ids.device();
  // Each row's valid tokens are contiguous (left-padded prompt, right-padded response): in row order, each at its
  // position among its row's valid tokens (masked_select(attention_mask) and PositionIdsFromMask's order and values).
  const bool* valid = h.attention_mask.data_ptr<bool>();
  std::vector<int64_t> source, positions, lengths(N), prompts(N, 0);
  for (int64_t b = 0; b < N; ++b) {
    for (int64_t c = 0; c < S; ++c) {
      if (!valid[b * S + c]) continue;
      source.push_back(b * S + c);
      positions.push_back(lengths[b]++);
      if (c < P) ++prompts[b];
    }
  }
  const std::vector<int64_t> responses = HostLongs(h.response_mask.sum(1));
  PackedBatch out;
  out.input_ids = input_ids.reshape({-1}).index_select(0, LongsOn(source, device)).unsqueeze(0);
  out.position_ids = LongsOn(positions, device).unsqueeze(0);
  out.sequences = PackLengths(lengths, device);
  // Response token t of row b is predicted by the hidden state at offsets[b] + prompt_b - 1 + t.
  std::vector<int64_t> predicting;
  for (int64_t b = 0; b < N; ++b) {
    // A response's first token is predicted from its prompt's last: without one, it would read the previous row's.
    TORCH_CHECK(prompts[b] > 0 || responses[b] == 0, "packed passes (use_remove_padding): row ", b,
                " has an empty prompt");
    const int64_t first = out.sequences.offsets[b] + prompts[b] - 1;
    for (int64_t t = 0; t < responses[b]; ++t) predicting.push_back(first + t);
  }
  out.predicting = LongsOn(predicting, device);
  return out;
}

}  // namespace

PromptGroups GroupByPrompt(const at::Tensor& input_ids, const at::Tensor& attention_mask, int64_t response_cols) {
  const int64_t N = input_ids.size(0);
  const int64_t P = input_ids.size(1) - response_cols;
  TORCH_CHECK(P >= 0, "GroupByPrompt: ", response_cols, " response columns in rows of ", input_ids.size(1));
  const at::Tensor ids = HostRows(input_ids.narrow(1, 0, P), at::kLong);
  const at::Tensor valid = HostRows(attention_mask.narrow(1, 0, P), at::kBool);
  PromptGroups out;
  out.group.resize(N);
  out.prompt_len.resize(N);
  std::map<std::vector<int64_t>, int64_t> seen;
  for (int64_t b = 0; b < N; ++b) {
    std::vector<int64_t> prompt;
    if (P > 0) {
      const int64_t* id = ids.data_ptr<int64_t>() + b * ids.stride(0);
      const bool* ok = valid.data_ptr<bool>() + b * valid.stride(0);
      for (int64_t c = 0; c < P; ++c) {
        if (ok[c]) prompt.push_back(id[c]);
      }
    }
    out.prompt_len[b] = static_cast<int64_t>(prompt.size());
    auto [it, added] = seen.emplace(std::move(prompt), out.count);
    if (added) ++out.count;
    out.group[b] = it->second;
  }
  return out;
}

BucketSteps BucketSteps::ForDevice(at::Device device) { return device.is_cuda() ? BucketSteps{4, 64} : BucketSteps{}; }

PackedBatch PackBatch(const at::Tensor& input_ids, const at::Tensor& attention_mask, const at::Tensor& response_mask,
                      bool share_prompts, const HostCopies& host, std::optional<BucketSteps> steps) {
  RECORD_USER_SCOPE("verl::PackBatch");  // named in a profile (tools/bench/kernel_profile.h: idle.host_in_gaps)
  const HostCopies h = HostInputs(input_ids, attention_mask, response_mask, host);
  // Both packings pair a row's t-th response target with the t-th response token they packed: its valid response
  // tokens must be its first response columns, valid in the attention mask too (else targets and hidden states part).
  const int64_t N = h.response_mask.size(0), R = h.response_mask.size(1), S = h.attention_mask.size(1);
  const bool* resp = h.response_mask.data_ptr<bool>();
  const bool* valid = h.attention_mask.data_ptr<bool>();
  for (int64_t b = 0; b < N; ++b) {
    int64_t r = 0;
    while (r < R && resp[b * R + r]) ++r;
    for (int64_t c = 0; c < R; ++c) {
      TORCH_CHECK(resp[b * R + c] == (c < r) && valid[b * S + S - R + c] == resp[b * R + c], "packed passes: row ", b,
                  "'s response mask is not its first ", r, " response columns, valid in the attention mask too (",
                  "response column ", c, ")");
    }
  }
  PackedBatch out = share_prompts
                        ? PackSharedPrompts(input_ids, h, steps.value_or(BucketSteps::ForDevice(input_ids.device())))
                        : PackRows(input_ids, h);
  const at::Tensor flat = h.response_mask.reshape({-1});
  out.response_tokens = UploadAsync(at::arange(flat.numel(), at::TensorOptions().dtype(at::kLong)).masked_select(flat),
                                    input_ids.device());
  return out;
}

at::Tensor DecoderModel::LayerForward(const Layer& L, const at::Tensor& h_in, const at::Tensor& cos,
                                      const at::Tensor& sin, const at::Tensor& attn_mask, KvCache* cache, size_t i,
                                      const PackedSequences* packed, at::Tensor* pending, bool causal,
                                      at::Tensor* mlp_input, AttentionSaves* saves) const {
  const int64_t heads = config_.num_attention_heads;
  const int64_t kv_heads = config_.num_key_value_heads;
  const int64_t hd = config_.head_dim;
  const int64_t T = h_in.size(1);
  const int64_t start = cache ? cache->length : 0;
  TORCH_CHECK(!mlp_input || (!cache && !pending), "LayerForward: mlp_input is for a checkpointed layer's recompute");
  // A decoding step over the slot cache (inference mode): the residual adds happen inside the RMSNorm kernels, or,
  // with the input norm folded, the MLP's in the down GEMM. Every pass runs q/k/v and gate/up as one GEMM each
  // (StackedLinear).
  const bool decode_step = T == 1 && cache && cache->slot_len.defined() && c10::InferenceMode::is_enabled();
  // A residual add and the RMSNorm after it are one kernel on a GPU (kernels::AddRmsNorm: the add's rounding, the same
  // bits as the two ops; differentiable, its backward adds the residual stream's gradient in the norm's kernel): the
  // post-attention norm's here, and the layer's last add where the caller defers it to the next norm (`pending`).
  // The input norm folded into the q/k/v projection (KvCache::qkv_folded): no norm kernel, the projection reads h_in.
  const bool folded = decode_step && !cache->qkv_folded.empty();
  at::Tensor h_layer = h_in;  // the layer's input: h_in, plus the previous layer's MLP output where that was deferred
  at::Tensor x;
#ifdef VERL_WITH_CUDA
  TORCH_CHECK(!folded || !pending || !pending->defined(), "a folded input norm takes the residual summed");
  if (pending && pending->defined()) {
    x = kernels::AddRmsNorm(h_in, *pending, L.input_norm, config_.rms_norm_eps, &h_layer);
    *pending = at::Tensor();
  }
#endif
  // The residual stream takes h_in again from the norm (RmsNorm's x_again): on a GPU with gradients the gradient of its
  // use below is added inside the norm's backward kernel, not by an add kernel of autograd's.
  if (!x.defined() && !folded) x = RmsNorm(h_in, L.input_norm, &h_layer);
  at::Tensor q, k, v;
  std::vector<at::Tensor> shared_rows;  // {q, k, v} rows of shared-prompt attention, where formed from qkv directly
  // A checkpointed layer's forward keeps the projections' values (AttentionSaves::qkv and o); its recompute hands them
  // back.
  const bool keep = saves != nullptr && !saves->replay && keep_projections_;
  const bool replay = saves != nullptr && saves->replay;
  if (folded || L.qkv_w.defined()) {
    // One GEMM over the stacked projections: the folded copy (its bias added by the RoPE kernel below), or
    // StackedLinear over the view of the parameters (no copy), split (one node in autograd: its backward writes the
    // three gradients side by side). RoPE reads q and k where they lie (kernels::Rope takes views of token rows), as
    // does a decoding step's kernel v; other passes copy v out, the layout their attention kernels took before. (q, k,
    // v may be views made inside an autograd function: nothing here modifies them in place.) Where the projections do
    // not lie stacked (ZeRO-3 units with biases between the weights) the separate GEMMs below run in every mode,
    // rather than copying the weights together at every step.
    const at::Tensor qkv = folded ? at::linear(h_in, cache->qkv_folded[i])
                                  : StackedLinear(x, {L.q_w, L.k_w, L.v_w},
                                                  L.qkv_b.defined() ? std::vector<at::Tensor>{L.q_b, L.k_b, L.v_b}
                                                                    : std::vector<at::Tensor>{},
                                                  L.qkv_w, L.qkv_b, replay ? saves->qkv : at::Tensor());
    if (keep) saves->qkv = qkv;
    if (replay && saves->qkv.defined()) projections_replayed.fetch_add(1, std::memory_order_relaxed);
#ifdef VERL_WITH_CUDA
    // Shared prompts' attention rows straight from the projection, RoPE on the way (kernels::SharedPromptRows: the
    // values of the composition below and its backward, bit for bit, without the rotated q and k, v's copy and the
    // split's concatenation of the gradients in between).
    if (!cache && packed != nullptr && packed->row_index.defined() && SharedPromptRowsFused()) {
      const at::Tensor qkv_rows = qkv.reshape({-1, qkv.size(-1)}), cos_rows = cos.reshape({-1, hd});
      if (kernels::SharedPromptRowsSupported(qkv_rows, cos_rows, heads, kv_heads, hd)) {
        shared_rows = kernels::SharedPromptRows(qkv_rows, cos_rows, sin.reshape({-1, hd}), heads, kv_heads, hd,
                                                packed->row_source, packed->row_index, packed->row_output,
                                                packed->key_offsets, packed->key_positions);
        shared_prompt_rows_fused.fetch_add(1, std::memory_order_relaxed);
      }
    }
#endif
    if (shared_rows.empty()) {
      const std::vector<at::Tensor> parts = qkv.split_with_sizes({heads * hd, kv_heads * hd, kv_heads * hd}, -1);
      q = SplitHeads(parts[0], heads, hd);
      k = SplitHeads(parts[1], kv_heads, hd);
      v = SplitHeads(decode_step ? parts[2] : parts[2].contiguous(), kv_heads, hd);
    }
  } else {
    q = SplitHeads(at::linear(x, L.q_w, L.q_b), heads, hd);
    k = SplitHeads(at::linear(x, L.k_w, L.k_b), kv_heads, hd);
    v = SplitHeads(at::linear(x, L.v_w, L.v_b), kv_heads, hd);
  }
  at::Tensor attn;
  if (cache && cache->slot_len.defined()) {
    TORCH_CHECK(T == 1, "a slot cache takes one token per row, got ", T);
#ifdef VERL_WITH_CUDA
    at::Tensor q_step;
    if (folded) {
      // The input norm's scale and the bias, RoPE of q and k and both cache writes in one kernel (FoldedQkvWeights
      // folds only where the biases, if any, are stacked).
      q_step = kernels::RopeAppendNormed(q, k, v, cos, sin, cache->k[i], cache->v[i], cache->slot_index, h_in,
                                         config_.rms_norm_eps, L.qkv_b);
    } else if (kernels::RopeAppendSupported(q, k, v, cos, cache->k[i], cache->v[i], cache->slot_index)) {
      // RoPE of q and k and both cache writes in one kernel (ApplyRope's values bit for bit).
      q_step = kernels::RopeAppend(q, k, v, cos, sin, cache->k[i], cache->v[i], cache->slot_index);
    } else {
      q_step = ApplyRope(q, cos, sin).select(2, 0);
      cache->k[i].view({-1, hd}).index_copy_(0, cache->slot_index,
                                             ApplyRope(k, cos, sin).select(2, 0).reshape({-1, hd}));
      cache->v[i].view({-1, hd}).index_copy_(0, cache->slot_index, v.select(2, 0).reshape({-1, hd}));
    }
    attn = kernels::DecodeAttention(q_step, cache->k[i], cache->v[i], cache->slot_len,
                                    1.0 / std::sqrt(static_cast<double>(hd)), /*tensor_cores=*/true, cache->slot_prefix,
                                    cache->prefix_len)
               .unsqueeze(2);
#else
    TORCH_CHECK(false, "KvCache::slot_len needs the CUDA decode kernel (a VERL_WITH_CUDA build)");
#endif
  } else if (!shared_rows.empty()) {
    attn = SharedPromptAttention(shared_rows[0], shared_rows[1], shared_rows[2], *packed, saves);
  } else {
    q = ApplyRope(q, cos, sin);
    k = ApplyRope(k, cos, sin);
    if (cache && cache->packed_rows.defined()) {
      // A packed prefill: the layer's keys and values into their rows of the cache; attention runs on the pass's own.
      auto store = [&](const at::Tensor& into, const at::Tensor& x) {
        at::Tensor rows = x.select(0, 0).reshape({-1, hd});
        if (cache->packed_sources.defined()) rows = rows.index_select(0, cache->packed_sources);
        into.view({-1, hd}).index_copy_(0, cache->packed_rows, rows);
      };
      store(cache->k[i], k);
      store(cache->v[i], v);
    } else if (cache && cache->slot_pos.defined()) {
      TORCH_CHECK(T == 1, "a slot cache takes one token per row, got ", T);
      using at::indexing::Slice;
      const at::Tensor rows = at::arange(h_in.size(0), cache->slot_pos.options());
      cache->k[i].index_put_({rows, Slice(), cache->slot_pos}, k.select(2, 0));
      cache->v[i].index_put_({rows, Slice(), cache->slot_pos}, v.select(2, 0));
      k = cache->k[i].narrow(2, 0, cache->attend);
      v = cache->v[i].narrow(2, 0, cache->attend);
      if (cache->slot_prefix.defined()) {
        // Shared prompts: each row's positions below its prefix length come from the slot holding its prompt.
        const at::Tensor from = cache->slot_prefix.to(at::kLong);
        const at::Tensor shared = at::arange(cache->attend, from.options()).view({1, 1, -1, 1}) <
                                  cache->prefix_len.to(at::kLong).view({-1, 1, 1, 1});
        k = at::where(shared, k.index_select(0, from), k);
        v = at::where(shared, v.index_select(0, from), v);
      }
    } else if (cache) {
      cache->k[i].narrow(2, start, T).copy_(k);
      cache->v[i].narrow(2, start, T).copy_(v);
      k = cache->k[i].narrow(2, 0, start + T);
      v = cache->v[i].narrow(2, 0, start + T);
    }
    if (packed) {
      attn = PackedAttention(q, k, v, *packed, saves);
    } else if (cache && causal) {  // ForwardChunk where flash attention runs
      attn = FlashCausalAfterCache(q, k, v);
    } else {
      attn = GroupedSdpa(q, k, v, attn_mask, causal);
    }
  }
  attn = attn.transpose(1, 2).reshape({h_in.size(0), T, heads * hd});
#ifdef VERL_WITH_CUDA
  if (folded && !cache->gate_up_folded.empty()) {
    // The post-attention norm folded into the gate/up projection (KvCache::gate_up_folded). The residual add happens
    // in the output projection's GEMM (beta 1 into h_in, this pass's own tensor, which nothing reads after the q/k/v
    // projection and the RoPE kernel above), the gate/up GEMM reads that sum, SwiGLU scales each row by its norm, and
    // the down projection adds into the residual as below: no norm kernel in the layer.
    const int64_t hidden = h_in.size(-1);
    at::Tensor h = h_in;
    h.view({-1, hidden}).addmm_(attn.view({-1, heads * hd}), L.o_w.t());
    const at::Tensor act =
        kernels::SwiGluStackedNormed(at::linear(h, cache->gate_up_folded[i]), h, config_.rms_norm_eps);
    h.view({-1, hidden}).addmm_(act.view({-1, act.size(-1)}), L.down_w.t());
    return h;
  }
#endif
  at::Tensor o;
  if (replay && saves->o.defined()) {
    // The forward's value; the backward StackedLinear's of the one weight (autograd's linear's gradients, their GEMMs'
    // operands in another order).
    o = StackedLinear(attn, {L.o_w}, L.o_b.defined() ? std::vector<at::Tensor>{L.o_b} : std::vector<at::Tensor>{},
                      L.o_w, L.o_b, saves->o);
    projections_replayed.fetch_add(1, std::memory_order_relaxed);
  } else {
    o = at::linear(attn, L.o_w, L.o_b);
    if (keep) saves->o = o;
  }
  at::Tensor h;
#ifdef VERL_WITH_CUDA
  if (kernels::AddRmsNormSupported(h_layer, o, L.post_norm)) {
    x = kernels::AddRmsNorm(h_layer, o, L.post_norm, config_.rms_norm_eps, &h);  // the two lines below in one kernel
  }
#endif
  if (!h.defined()) {
    h = h_layer + o;
    x = RmsNorm(h, L.post_norm);
  }
  // Gate and up as one GEMM (StackedLinear) in every mode where they lie stacked, SwiGLU over its two halves (the
  // fused kernel's gradient comes back stacked; ATen's through split, one node).
  at::Tensor act;
  if (L.gate_up_w.defined()) {
    const at::Tensor gate_up = StackedLinear(x, {L.gate_w, L.up_w}, {}, L.gate_up_w, at::Tensor());
#ifdef VERL_WITH_CUDA
    if (kernels::SwiGluStackedSupported(gate_up)) {
      if (mlp_input) {
        // The recompute stops before SwiGLU: CheckpointFunction forms its value with its gradient (one kernel).
        *mlp_input = gate_up;
        return h;
      }
      act = kernels::SwiGluStacked(gate_up);
    }
#endif
    if (!act.defined()) {
      const std::vector<at::Tensor> halves = gate_up.split(L.gate_w.size(0), -1);
      act = SwiGlu(halves[0], halves[1]);
    }
  } else {
    act = SwiGlu(at::linear(x, L.gate_w), at::linear(x, L.up_w));
  }
  if (folded) {
    // The residual add in the down projection's GEMM (beta 1 into h): the next layer's projection reads the sum.
    const int64_t hidden = h.size(-1);
    h.view({-1, hidden}).addmm_(act.view({-1, act.size(-1)}), L.down_w.t());
    return h;
  }
  if (mlp_input) {
    *mlp_input = act;
    return h;
  }
  const at::Tensor mlp = at::linear(act, L.down_w);
#ifdef VERL_WITH_CUDA
  // The next norm (the next layer's input norm, or the final one) has this layer's norms' shape and dtype.
  if (pending && kernels::AddRmsNormSupported(h, mlp, L.input_norm)) {
    *pending = mlp;
    return h;
  }
#endif
  return h + mlp;
}

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// What CheckpointFunction keeps for backward: the layer as a function of its input, and the parameters it reads.
struct CheckpointHolder : torch::CustomClassHolder {
  // LayerForward of the layer on x; with `mlp_input` its recompute form (stopping before the down projection, or on a
  // GPU before SwiGLU: LayerForward's mlp_input).
  std::function<at::Tensor(const at::Tensor& x, at::Tensor* mlp_input)> block;
  std::vector<at::Tensor> params;  // the last: the down projection's weight
  std::shared_ptr<AttentionSaves> saves;  // the block's attention outputs, from the forward to the recompute
};

// (x, params) -> block(x) without keeping activations (the forward of an autograd function runs without gradients);
// backward runs block again on the saved input with gradients and differentiates it w.r.t. x and the parameters.
// The recompute stops before the layer's last GEMM, the down projection, whose backward reads its input and weight
// but not its output: that GEMM's backward is formed here, as autograd's matrix-product backward forms it, so a
// checkpointed layer costs one down projection fewer than a forward on top of its backward. On a GPU it stops before
// SwiGLU too: one kernel gives SwiGLU's gradient and its value (the down projection's input), the values its forward
// and backward kernels give.
class CheckpointFunction : public torch::autograd::Function<CheckpointFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, at::TensorList params,
                            c10::intrusive_ptr<CheckpointHolder> holder) {
    (void)params;  // inputs only for autograd: the block reads the same tensors
    at::Tensor out = holder->block(x, nullptr);
    ctx->save_for_backward({x});
    ctx->saved_data["holder"] = c10::IValue::make_capsule(std::move(holder));
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    const auto holder = c10::static_intrusive_pointer_cast<CheckpointHolder>(ctx->saved_data.at("holder").toCapsule());
    const at::Tensor x_in = ctx->get_saved_variables()[0].detach().requires_grad_(true);
    // The layer's output is h + act down_w^T (no bias: Layer has none for the down projection); the recompute returns
    // h and act, or, where SwiGLU runs as the fused stacked kernel, h and SwiGLU's input (the stacked gate/up output).
    at::Tensor h, mlp_in;
    // The forward's attention outputs are released when this backward ends, also when it throws.
    struct Release {
      AttentionSaves* saves;
      ~Release() { saves->Release(); }
    } release{holder->saves.get()};
    {
      at::AutoGradMode enable(true);
      holder->saves->replay = true;
      h = holder->block(x_in, &mlp_in);
    }
    layers_recomputed.fetch_add(1, std::memory_order_relaxed);
    const at::Tensor& down_w = holder->params.back();
    const at::Tensor g = grad_out[0].reshape({-1, grad_out[0].size(-1)});
    std::vector<int64_t> act_size = mlp_in.sizes().vec();
    act_size.back() = down_w.size(1);
    const at::Tensor d_act = g.mm(down_w).view(act_size);
    at::Tensor act, d_mlp_in;  // SwiGLU's value and the gradient of mlp_in
    if (mlp_in.size(-1) == 2 * down_w.size(1)) {
#ifdef VERL_WITH_CUDA
      std::tie(d_mlp_in, act) = kernels::SwiGluStackedBackwardWithValue(mlp_in.detach(), d_act);
      swiglu_formed_in_backward.fetch_add(1, std::memory_order_relaxed);
#else
      TORCH_CHECK(false, "a checkpointed layer's recompute returned SwiGLU's input without the CUDA kernels");
#endif
    } else {
      act = mlp_in;
      d_mlp_in = d_act;
    }
    // Differentiated: the input and the parameters that take gradients (a frozen one gets none).
    variable_list inputs{x_in};
    std::vector<size_t> slot{0};
    for (size_t i = 0; i + 1 < holder->params.size(); ++i) {
      if (!holder->params[i].requires_grad()) continue;
      inputs.push_back(holder->params[i]);
      slot.push_back(1 + i);
    }
    const variable_list found =
        torch::autograd::grad({h, mlp_in}, inputs, {grad_out[0], d_mlp_in}, /*retain_graph=*/false,
                              /*create_graph=*/false, /*allow_unused=*/true);
    variable_list grads(holder->params.size() + 2);  // x, the parameters, the holder
    for (size_t i = 0; i < found.size(); ++i) grads[slot[i]] = found[i];
    if (down_w.requires_grad()) grads[holder->params.size()] = g.t().mm(act.detach().reshape({-1, act.size(-1)}));
    return grads;
  }
};

}  // namespace

at::Tensor DecoderModel::CheckpointedLayer(size_t i, const at::Tensor& h, const at::Tensor& cos, const at::Tensor& sin,
                                           const at::Tensor& attn_mask, const PackedSequences* packed,
                                           bool causal) const {
  const Layer& L = layers_[i];
  auto holder = c10::make_intrusive<CheckpointHolder>();
  for (const at::Tensor& t :
       {L.input_norm, L.q_w, L.q_b, L.k_w, L.k_b, L.v_w, L.v_b, L.o_w, L.o_b, L.post_norm, L.gate_w, L.up_w}) {
    if (t.defined()) holder->params.push_back(t);
  }
  holder->params.push_back(L.down_w);  // last (CheckpointFunction's backward forms its gradient)
  // The block runs again in backward, after the caller's PackedSequences may be gone: it keeps its own copy.
  std::shared_ptr<const PackedSequences> own = packed ? std::make_shared<const PackedSequences>(*packed) : nullptr;
  holder->saves = std::make_shared<AttentionSaves>();
  holder->block = [this, i, cos, sin, attn_mask, own, causal, saves = holder->saves.get()](const at::Tensor& x,
                                                                                           at::Tensor* mlp_input) {
    return LayerForward(layers_[i], x, cos, sin, attn_mask, nullptr, i, own.get(), nullptr, causal, mlp_input, saves);
  };
  const std::vector<at::Tensor> params = holder->params;
  return CheckpointFunction::apply(h, at::TensorList(params), std::move(holder));
}

at::Tensor DecoderModel::Forward(const at::Tensor& input_ids, const at::Tensor& position_ids,
                                 const at::Tensor& attn_mask, KvCache* cache, const PackedSequences* packed) const {
  return ForwardImpl(input_ids, position_ids, attn_mask, cache, packed, /*causal=*/false);
}

at::Tensor DecoderModel::ForwardCausal(const at::Tensor& input_ids, const at::Tensor& position_ids) const {
  return ForwardImpl(input_ids, position_ids, at::Tensor(), nullptr, nullptr, /*causal=*/true);
}

at::Tensor DecoderModel::ForwardChunk(const at::Tensor& input_ids, KvCache* cache) const {
  TORCH_CHECK(cache != nullptr && input_ids.dim() == 2 && input_ids.size(0) == 1 && cache->k.size() == layers_.size() &&
                  cache->k.front().size(0) == 1 && !cache->slot_pos.defined() && !cache->slot_len.defined() &&
                  !cache->packed_rows.defined(),
              "ForwardChunk continues one row's cache (KvCache of one sequence, no slots), got ids ",
              input_ids.sizes());
  const int64_t T = input_ids.size(1);
  TORCH_CHECK(cache->length + T <= cache->k.front().size(2), "ForwardChunk: positions [", cache->length, ", ",
              cache->length + T, ") past the cache's ", cache->k.front().size(2));
  const at::Tensor positions =
      at::arange(cache->length, cache->length + T, input_ids.options().dtype(at::kLong)).unsqueeze(0);
  if (PackedAttentionIsFlash(input_ids.device(), cache->k.front().scalar_type())) {
    return ForwardImpl(input_ids, positions, at::Tensor(), cache, nullptr, /*causal=*/true);
  }
  // Elsewhere the cached path under the mask of a decoding step of T tokens (built once for every layer).
  const at::Tensor valid = at::ones({1, cache->length + T}, input_ids.options().dtype(at::kBool));
  return Forward(input_ids, positions, BuildAttentionMask(valid, cache->length, T), cache);
}

at::Tensor DecoderModel::ForwardColumns(const at::Tensor& input_ids, const at::Tensor& valid, int64_t begin,
                                        int64_t length, bool causal, const at::Tensor& host_valid) const {
  const int64_t B = input_ids.size(0), T = input_ids.size(1);
  TORCH_CHECK(valid.sizes() == input_ids.sizes() && T > 0 && begin >= 0 && length >= 0 && begin + length <= T,
              "ForwardColumns: columns [", begin, ", ", begin + length, ") of rows of ", T, " tokens");
  if (!causal) {
    return Forward(input_ids, PositionIdsFromMask(valid), BuildAttentionMask(valid, 0, T), nullptr)
        .narrow(1, begin, length);
  }
  const RolledRows r = RollRows(valid, host_valid);
  const at::Tensor hidden = ForwardCausal(input_ids.gather(1, r.index), PositionIdsFromMask(valid.gather(1, r.index)));
  // Back to the rows' own columns: valid column c of a row is rolled column c - lead. A padding column reads the
  // row's last valid token's state (a state of the row's own, whatever rows share the pass; not meaningful).
  const auto long_on = at::TensorOptions().dtype(at::kLong).device(input_ids.device());
  const at::Tensor back =
      at::minimum(at::remainder(at::arange(begin, begin + length, long_on).view({1, length}) - r.lead, T),
                  (r.count - 1).clamp_min(0).view({B, 1}));
  return hidden.gather(1, back.unsqueeze(-1).expand({B, length, hidden.size(2)}));
}

at::Tensor DecoderModel::ForwardImpl(const at::Tensor& input_ids, const at::Tensor& position_ids,
                                     const at::Tensor& attn_mask, KvCache* cache, const PackedSequences* packed,
                                     bool causal) const {
  TORCH_CHECK(packed == nullptr || ((cache == nullptr || cache->packed_rows.defined()) && input_ids.size(0) == 1),
              "packed sequences run as one row, without a cache or into one's packed_rows");
  TORCH_CHECK(cache == nullptr || !cache->packed_rows.defined() || packed != nullptr,
              "KvCache::packed_rows is for a pass of packed sequences");
  if (sharded() && !gathered_) {
    TORCH_CHECK(cache == nullptr || !at::GradMode::is_enabled(),
                "a sharded model decodes with a cache layer by layer only without gradients");
    return ShardedForward(input_ids, position_ids, attn_mask, cache, packed, causal);
  }
  at::Tensor h = at::embedding(embed_, input_ids);
  auto [cos, sin] = RopeCosSin(position_ids, h.scalar_type());
  const at::Tensor mask = AdditiveMask(attn_mask, h.scalar_type());
  if (cache && cache->slot_len.defined()) {
    // Row b's new key goes to (b, head, slot_pos[b]) of each layer's cache: flat row (b * kv_heads + head) * C + pos.
    const int64_t kv_heads = config_.num_key_value_heads;
    const int64_t B = input_ids.size(0);
    cache->slot_index =
        (at::arange(B * kv_heads, cache->slot_pos.options()).view({B, kv_heads}) * cache->k.front().size(2) +
         cache->slot_pos.view({B, 1}))
            .view({-1});
  }
  // The first `recomputed` layers run checkpointed (a Forward with gradients).
  const size_t recomputed = cache == nullptr && at::GradMode::is_enabled() ? CheckpointedLayers() : 0;
  // Each layer's last residual add is left to the next RMSNorm's kernel (LayerForward's `pending`), but across
  // checkpointed layers, each of which returns its whole output (they come first, so `pending` is empty up to the
  // first layer that keeps its activations).
  at::Tensor pending;
  for (size_t i = 0; i < layers_.size(); ++i) {
    h = i < recomputed ? CheckpointedLayer(i, h, cos, sin, mask, packed, causal)
                       : LayerForward(layers_[i], h, cos, sin, mask, cache, i, packed, &pending, causal);
  }
  if (cache) cache->length += input_ids.size(1);
#ifdef VERL_WITH_CUDA
  if (pending.defined()) {
    at::Tensor sum;
    return kernels::AddRmsNorm(h, pending, final_norm_, config_.rms_norm_eps, &sum);
  }
#endif
  return RmsNorm(h, final_norm_);
}

// Each unit gathered in turn: the embedding and the final norm with autograd history to their shards, each layer
// through RunShardedBlock (recomputed in backward).
at::Tensor DecoderModel::ShardedForward(const at::Tensor& input_ids, const at::Tensor& position_ids,
                                        const at::Tensor& attn_mask, KvCache* cache,
                                        const PackedSequences* packed, bool causal) const {
  at::Tensor h = at::embedding(units_.front().unit->Views(units_.front().unit->GatherForAutograd())[0], input_ids);
  auto [cos, sin] = RopeCosSin(position_ids, h.scalar_type());
  const at::Tensor mask = AdditiveMask(attn_mask, h.scalar_type());
  // Each block runs again in backward, after the caller's PackedSequences may be gone: they share a copy.
  std::shared_ptr<const PackedSequences> own = packed ? std::make_shared<const PackedSequences>(*packed) : nullptr;
  for (size_t i = 0; i < layers_.size(); ++i) {
    const FlatUnit& unit = *units_[1 + i].unit;
    h = RunShardedBlock(
        unit,
        [this, &unit, cos = cos, sin = sin, mask, cache, i, own, causal](const std::vector<at::Tensor>& params,
                                                                         const at::Tensor& x) {
          const Layer L = MakeLayer([&](const std::string& name) {
            for (size_t k = 0; k < params.size(); ++k) {
              if (unit.names()[k] == name) return params[k];
            }
            return at::Tensor();
          });
          // a cache only without gradients
          return LayerForward(L, x, cos, sin, mask, cache, i, own.get(), nullptr, causal);
        },
        h);
  }
  if (cache) cache->length += input_ids.size(1);
  const FlatUnit& norm = *units_[1 + layers_.size()].unit;
  return RmsNorm(h, norm.Views(norm.GatherForAutograd())[0]);
}

at::Tensor DecoderModel::Logits(const at::Tensor& hidden, bool keep_dtype) const {
  at::Tensor logits = at::linear(hidden, LmHeadWeight());
  return keep_dtype ? logits : logits.to(at::kFloat);
}

at::Tensor DecoderModel::LmHeadWeight() const {
  if (sharded() && !gathered_) {
    const FlatUnit& head = config_.tie_word_embeddings ? *units_.front().unit : *units_.back().unit;
    return head.Views(head.GatherForAutograd())[0];
  }
  return lm_head_;
}

}  // namespace verl

namespace verl {

at::Tensor RopeInverseFrequencies(const DecoderConfig& config) {
  // transformers' _compute_default_rope_parameters, op for op in float32 (Python's `scalar / t` is
  // t.reciprocal() * scalar, `scalar ** t` is pow(scalar, t)).
  const int64_t d = config.head_dim;
  at::Tensor exponent = at::arange(0, d, 2, at::TensorOptions().dtype(at::kLong)).to(at::kFloat) / double(d);
  at::Tensor inv_freq = at::pow(config.rope_theta, exponent).reciprocal() * 1.0;
  const RopeScaling& rs = config.rope_scaling;
  if (rs.rope_type == "linear") return inv_freq / rs.factor;
  if (rs.rope_type != "llama3") return inv_freq;
  // _compute_llama3_parameters: long wavelengths are divided by `factor`, short ones kept, the band between
  // interpolated smoothly.
  const auto old_context_len = static_cast<double>(rs.original_max_position_embeddings);
  const double low_freq_wavelen = old_context_len / rs.low_freq_factor;
  const double high_freq_wavelen = old_context_len / rs.high_freq_factor;
  at::Tensor wavelen = inv_freq.reciprocal() * (2 * M_PI);
  at::Tensor scaled = at::where(wavelen > low_freq_wavelen, inv_freq / rs.factor, inv_freq);
  at::Tensor smooth =
      (wavelen.reciprocal() * old_context_len - rs.low_freq_factor) / (rs.high_freq_factor - rs.low_freq_factor);
  at::Tensor smoothed = (1 - smooth) * scaled / rs.factor + smooth * scaled;
  at::Tensor is_medium =
      (wavelen < high_freq_wavelen).logical_not().logical_and((wavelen > low_freq_wavelen).logical_not());
  return at::where(is_medium, smoothed, scaled);
}

at::Tensor BuildAttentionMask(const at::Tensor& key_valid, int64_t start, int64_t T) {
  const int64_t S = key_valid.size(1);
  auto opts = at::TensorOptions().dtype(at::kLong).device(key_valid.device());
  at::Tensor q_pos = at::arange(start, start + T, opts).view({T, 1});
  at::Tensor k_pos = at::arange(0, S, opts).view({1, S});
  at::Tensor causal = k_pos.le(q_pos);  // [T, S]
  at::Tensor self = k_pos.eq(q_pos);
  at::Tensor mask = causal.unsqueeze(0).logical_and(key_valid.unsqueeze(1));  // [B, T, S]
  return mask.logical_or(self.unsqueeze(0)).unsqueeze(1);
}

at::Tensor RunStarts(const at::Tensor& valid) {
  // A run starts at a valid token that is a row's first or follows padding.
  const at::Tensor v = valid.to(at::kBool);
  at::Tensor starts = v.select(1, 0).to(at::kLong);
  if (v.size(1) > 1) {
    starts = starts + v.narrow(1, 1, v.size(1) - 1).logical_and(v.narrow(1, 0, v.size(1) - 1).logical_not()).sum(1);
  }
  return starts;
}

at::Tensor LeadingPadding(const at::Tensor& valid) { return valid.to(at::kLong).cumsum(1).eq(0).sum(1); }

RolledRows RollRows(const at::Tensor& valid, const at::Tensor& host_valid) {
  const int64_t T = valid.size(1);
  TORCH_CHECK(T > 0, "RollRows: rows without columns");
  TORCH_CHECK(!host_valid.defined() || (host_valid.is_cpu() && host_valid.sizes() == valid.sizes()),
              "RollRows: host_valid must be valid's CPU copy");
  const at::Tensor v = valid.to(at::kBool);
  RolledRows r;
  r.count = v.sum(1);
  // Whether every row's valid tokens are one run, and the longest run (the rolled rows' width): from the host copy, or
  // one read back.
  auto runs_and_width = [](const at::Tensor& m) { return at::stack({RunStarts(m).max(), m.sum(1).max()}); };
  const at::Tensor host =
      host_valid.defined() ? runs_and_width(host_valid.to(at::kBool)) : runs_and_width(v).to(at::kCPU);
  TORCH_CHECK(host[0].item<int64_t>() <= 1, "causal attention asked for rows whose valid tokens are not one run");
  r.width = std::max<int64_t>(1, host[1].item<int64_t>());
  // The leading padding: columns before the first valid token (T for a row without any, which then stays as it is).
  // Rolled column j holds column (j + lead) mod T: [pad x a, valid x n, pad x c] becomes [valid x n, pad x c, pad x a].
  r.lead = LeadingPadding(v).unsqueeze(1);
  r.index = at::remainder(at::arange(r.width, r.lead.options()).view({1, r.width}) + r.lead, T);
  return r;
}

bool OneValidRun(const at::Tensor& valid) {
  return valid.size(1) == 0 || RunStarts(valid).le(1).all().item<bool>();
}

at::Tensor PositionIdsFromMask(const at::Tensor& valid) { return (valid.to(at::kLong).cumsum(1) - 1).clamp_min(0); }

}  // namespace verl
