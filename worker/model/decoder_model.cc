#include "worker/model/decoder_model.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/status/status_macros.h"
#include "worker/model/safetensors_checkpoint.h"
#include "worker/rank/torch_util.h"

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
    at::Tensor t = at::from_blob(const_cast<void*>(view->data), view->shape,
                                 at::TensorOptions().dtype(ToScalarType(view->dtype)));
    loaded[spec.name] = t.to(device, dtype, /*non_blocking=*/false, /*copy=*/true);
    model->params_.emplace_back(spec.name, loaded[spec.name]);
  }
  model->embed_ = loaded.at("model.embed_tokens.weight");
  model->final_norm_ = loaded.at("model.norm.weight");
  model->lm_head_ = config.tie_word_embeddings ? model->embed_ : loaded.at("lm_head.weight");
  for (int64_t i = 0; i < config.num_hidden_layers; ++i) {
    std::string p = absl::StrCat("model.layers.", i, ".");
    auto get = [&](const std::string& name) -> at::Tensor {
      auto it = loaded.find(p + name);
      return it == loaded.end() ? at::Tensor() : it->second;
    };
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
    model->layers_.push_back(std::move(layer));
  }
  model->inv_freq_ = RopeInverseFrequencies(config).to(device);
  return model;
}

std::vector<at::Tensor> DecoderModel::parameters() const {
  std::vector<at::Tensor> out;
  out.reserve(params_.size());
  for (const auto& [name, t] : params_) out.push_back(t);
  return out;
}

int64_t DecoderModel::num_parameters() const {
  int64_t n = 0;
  for (const auto& [name, t] : params_) n += t.numel();
  return n;
}

void DecoderModel::SetRequiresGrad(bool requires_grad) {
  for (auto& [name, t] : params_) t.set_requires_grad(requires_grad);
}

at::Tensor DecoderModel::RmsNorm(const at::Tensor& x, const at::Tensor& weight) const {
  // As HF: normalise in float32, cast back, then scale.
  at::Tensor xf = x.to(at::kFloat);
  at::Tensor var = xf.pow(2).mean(-1, /*keepdim=*/true);
  return weight * (xf * at::rsqrt(var + config_.rms_norm_eps)).to(x.scalar_type());
}

std::pair<at::Tensor, at::Tensor> DecoderModel::RopeCosSin(const at::Tensor& position_ids,
                                                            at::ScalarType dtype) const {
  // freqs [B, T, d/2] -> emb [B, 1, T, d]
  at::Tensor freqs = position_ids.to(at::kFloat).unsqueeze(-1) * inv_freq_;
  at::Tensor emb = at::cat({freqs, freqs}, -1).unsqueeze(1);
  return {emb.cos().to(dtype), emb.sin().to(dtype)};
}

KvCache DecoderModel::NewCache(int64_t batch, int64_t capacity) const {
  KvCache cache;
  cache.capacity = capacity;
  auto opts = embed_.options().requires_grad(false);
  for (int64_t i = 0; i < config_.num_hidden_layers; ++i) {
    cache.k.push_back(at::zeros({batch, config_.num_key_value_heads, capacity, config_.head_dim}, opts));
    cache.v.push_back(at::zeros({batch, config_.num_key_value_heads, capacity, config_.head_dim}, opts));
  }
  return cache;
}

at::Tensor DecoderModel::Forward(const at::Tensor& input_ids, const at::Tensor& position_ids,
                                 const at::Tensor& attn_mask, KvCache* cache) const {
  const int64_t heads = config_.num_attention_heads;
  const int64_t kv_heads = config_.num_key_value_heads;
  const int64_t hd = config_.head_dim;
  const int64_t T = input_ids.size(1);
  at::Tensor h = at::embedding(embed_, input_ids);
  auto [cos, sin] = RopeCosSin(position_ids, h.scalar_type());
  const int64_t start = cache ? cache->length : 0;
  for (size_t i = 0; i < layers_.size(); ++i) {
    const Layer& L = layers_[i];
    at::Tensor x = RmsNorm(h, L.input_norm);
    at::Tensor q = SplitHeads(at::linear(x, L.q_w, L.q_b), heads, hd);
    at::Tensor k = SplitHeads(at::linear(x, L.k_w, L.k_b), kv_heads, hd);
    at::Tensor v = SplitHeads(at::linear(x, L.v_w, L.v_b), kv_heads, hd);
    q = q * cos + RotateHalf(q) * sin;
    k = k * cos + RotateHalf(k) * sin;
    if (cache) {
      cache->k[i].narrow(2, start, T).copy_(k);
      cache->v[i].narrow(2, start, T).copy_(v);
      k = cache->k[i].narrow(2, 0, start + T);
      v = cache->v[i].narrow(2, 0, start + T);
    }
    at::Tensor attn = at::scaled_dot_product_attention(q, k, v, attn_mask, 0.0, false, std::nullopt,
                                                       /*enable_gqa=*/heads != kv_heads);
    attn = attn.transpose(1, 2).reshape({h.size(0), T, heads * hd});
    h = h + at::linear(attn, L.o_w, L.o_b);
    x = RmsNorm(h, L.post_norm);
    h = h + at::linear(at::silu(at::linear(x, L.gate_w)) * at::linear(x, L.up_w), L.down_w);
  }
  if (cache) cache->length = start + T;
  return RmsNorm(h, final_norm_);
}

at::Tensor DecoderModel::Logits(const at::Tensor& hidden) const {
  return at::linear(hidden, lm_head_).to(at::kFloat);
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

at::Tensor PositionIdsFromMask(const at::Tensor& valid) {
  return (valid.to(at::kLong).cumsum(1) - 1).clamp_min(0);
}

}  // namespace verl
