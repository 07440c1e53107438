#ifndef VERL_WORKER_MODEL_DECODER_MODEL_H_
#define VERL_WORKER_MODEL_DECODER_MODEL_H_

// The Qwen2 / Llama decoder in LibTorch (ATen ops + autograd): token embedding, N blocks of
// RMSNorm -> GQA attention with RoPE (optional q/k/v bias) -> residual -> RMSNorm -> SwiGLU MLP -> residual,
// final RMSNorm, LM head (optionally tied to the embedding). Parameters keep HuggingFace names so checkpoints load
// and export unchanged.
//
// Thread-safety: a DecoderModel is used by one rank thread at a time.

#include <ATen/ATen.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/comm/param_sharding.h"
#include "worker/model/hf_config.h"

namespace verl {

// Per-layer key/value cache for incremental decoding: k[i], v[i] are [batch, kv_heads, capacity, head_dim];
// positions [0, length) are filled.
//
// Slot mode (continuous batching, worker/rollout): when slot_pos is defined, each row is a sequence slot with its own
// length. A Forward of one token per row (T = 1) writes row b's key and value at slot_pos[b] (int64 [batch], on the
// cache's device) and attends over positions [0, attend) of every row, under the caller's mask; length is not used.
// With slot_len as well (int32 [batch], slot_pos + 1; DecoderModel::DecodeKernelAvailable()), row b attends over its
// own positions [0, slot_len[b]) in the CUDA decode kernel instead (worker/kernels), without mask or `attend`: the
// step's shapes then do not depend on the lengths, so it can be captured once in a CUDA graph and replayed.
struct KvCache {
  std::vector<at::Tensor> k;
  std::vector<at::Tensor> v;
  int64_t length = 0;
  int64_t capacity = 0;
  at::Tensor slot_pos;
  int64_t attend = 0;
  at::Tensor slot_len;
  // Shared prompts over the slot cache (optional, both or neither; int32 [batch] on the device): slot b reads its
  // positions [0, prefix_len[b]) from slot slot_prefix[b] (< batch), where one sample of its prompt holds them.
  at::Tensor slot_prefix;
  at::Tensor prefix_len;
  at::Tensor slot_index;  // set by Forward: the rows of the new keys in each k[i] viewed as [batch * kv_heads * C, D]
  // A packed prefill (Forward with PackedSequences): the pass's keys and values of each layer, [kv_heads, T, D] as
  // rows (head, t), go to rows packed_rows of k[i] and v[i] viewed as [-1, D]; packed_sources (else all rows in
  // order) picks the pass's row for each.
  at::Tensor packed_rows;
  at::Tensor packed_sources;
  // Decoding over the slot cache with each layer's input RMSNorm folded into its q/k/v projection
  // (DecoderModel::FoldedQkvWeights; empty: not folded): the projection reads the un-normed residual, and the fused
  // RoPE + append kernel scales each row by its norm and adds the bias; each layer's MLP output is added into the
  // residual by the down projection's GEMM.
  std::vector<at::Tensor> qkv_folded;
  // With qkv_folded, each layer's post-attention RMSNorm folded into its stacked gate/up projection too
  // (DecoderModel::FoldedGateUpWeights; empty: not folded): the attention's output projection adds into the residual in
  // its GEMM, the gate/up projection reads that sum un-normed, and the SwiGLU kernel scales each row by its norm.
  std::vector<at::Tensor> gate_up_folded;
};

struct AttentionSaves;  // decoder_model.cc (a checkpointed layer's kept attention outputs)

// Sequences packed back to back in one row without padding (verl's use_remove_padding): token t belongs to sequence b
// when offsets[b] <= t < offsets[b + 1], and attends causally within its own sequence only.
//
// Shared prompts (PackBatch's share_prompts, verl's use_prefix_grouper): a prompt's tokens are packed once and each
// response that continues it is a sequence of its own, attending to the prompt's tokens and its own. Attention then
// runs over rows gathered from the packed tokens, each row a prompt's tokens followed by one of its responses' (a
// prompt without responses alone). The rows go longest first into buckets of rows at least 4/5 as long as the bucket's
// first, each row padded at the end to that length with its last token (on a GPU the length and the row count rounded
// up, PackBatch's BucketSteps): row_index lists the buckets' rows one after another, row_buckets their (rows, length).
// Causal attention over each bucket (SDPA's is_causal, no mask: cuDNN's fused kernel on GPUs) gives every valid
// position what its sequence attends to; token t's output is at row_output[t] in the buckets' flattened positions (a
// prompt token's from its prompt's first row).
struct PackedSequences {
  std::vector<int64_t> offsets;  // host, [B + 1], offsets[0] = 0
  at::Tensor cu_seqlens;         // the same as int32 on the model's device (flash attention's variable-length form)
  int64_t max_len = 0;
  at::Tensor row_index;   // int64 on the model's device, or undefined: each sequence attends to itself only
  at::Tensor row_output;  // int64 [T] on the model's device: positions in row_index
  // The same maps the other way, for the attention rows' movers on a GPU (kernels::GatherRowsOrZero, SumRows):
  // row_source [row_index's size]: the packed token whose query and output sit at each position (row_output's
  // inverse), -1 at the others; key_offsets [T + 1] and key_positions [row_index's size]: for packed token t, the
  // positions key_positions[key_offsets[t] .. key_offsets[t + 1]) whose row_index is t, ascending.
  at::Tensor row_source;
  at::Tensor key_offsets;
  at::Tensor key_positions;
  std::vector<std::pair<int64_t, int64_t>> row_buckets;  // (rows, row length), in row_index's order
};

// PackedSequences for sequences of these lengths, cu_seqlens on `device`.
PackedSequences PackLengths(const std::vector<int64_t>& lengths, at::Device device);

// Whether attention over packed sequences runs as one variable-length flash attention call (CUDA, bfloat16 or
// float16) rather than one call per sequence.
bool PackedAttentionIsFlash(at::Device device, at::ScalarType dtype);

// What checkpointed layers' recomputes have skipped, in this process (for tests): shared-prompt attention buckets
// taken from their forwards instead of attending again (AttentionSaves), and recomputes that stopped before SwiGLU,
// whose value and gradient the backward then formed with one kernel; how many layers were recomputed; and the
// projections (q/k/v, output) whose values came from their forwards instead of a GEMM.
struct RecomputeCounts {
  int64_t attention_buckets_replayed = 0;
  int64_t swiglu_formed_in_backward = 0;
  int64_t layers_recomputed = 0;  // checkpointed layers run again in backward
  int64_t projections_replayed = 0;
};
RecomputeCounts CheckpointRecomputeCounts();

// How many layer passes formed their shared-prompt attention rows with kernels::SharedPromptRows (on a GPU, unless
// VERL_SHARED_PROMPT_ROWS=0), in this process (for tests).
int64_t SharedPromptRowsFusedCalls();

// Whether decoding folds the input RMSNorms into the q/k/v projections for weights of this dtype
// (DecoderModel::FoldedQkvWeights): bfloat16 only (float32 decodes the exact composition; float16 might overflow where
// the projection reads the un-normed residual).
bool FoldsInputNorms(at::ScalarType dtype);

// A batch of prompt (left-padded) + response (right-padded) rows packed for Forward: its valid tokens in row order.
struct PackedBatch {
  at::Tensor input_ids;     // [1, T]
  at::Tensor position_ids;  // [1, T], restarting at 0 for every row
  PackedSequences sequences;
  // For every valid response token (row-major, as masked_select(response_mask) orders them), the packed position of
  // the hidden state that predicts it: [sum of response lengths] int64 on the batch's device.
  at::Tensor predicting;
  // The same tokens' flat indices in [N, R] (row-major): targets = responses.view(-1).index_select(0, response_tokens).
  at::Tensor response_tokens;
};
// input_ids and attention_mask [N, P + R], response_mask [N, R].
// share_prompts (verl's use_prefix_grouper): rows with the same prompt (the same valid prompt tokens) share one run of
// it. The packed tokens are, for each such group in the order of its first row, the prompt's tokens once and then
// each row's response tokens; a response sequence attends to the prompt's tokens and its own (row_index), so every
// response token gets the hidden state it would get packed alone (but for rounding), with the prompt's tokens
// computed once per group instead of once per row. Each row's valid prompt tokens must be its last prompt columns
// and its valid response tokens its first response columns (checked), and no prompt may be empty.
// Packing is planned on the host: from `host` (CPU copies of the three tensors, as the trainer keeps them per batch)
// where given, so that nothing is read back from the device, else from copies read back here. The index tensors go
// to the device without waiting for it (worker/model/host_upload.h).
struct HostCopies {
  at::Tensor input_ids, attention_mask, response_mask;  // CPU; any of them undefined: read back
};
// Shared prompts' attention buckets (PackedSequences::row_buckets) take shapes from a coarse grid: each bucket's row
// count rounded up to a multiple of `rows` (below `rows`, to a power of two: a long row alone stays alone), its length
// to a multiple of `length`, the added rows and positions padding whose outputs are not taken. cuDNN builds an
// execution graph for every attention shape it has not seen (milliseconds of host time each, the device idle
// meanwhile), and micro-batches of varied rows and lengths would otherwise show it new shapes at every step. Unset:
// ForDevice's. Without share_prompts, unused.
struct BucketSteps {
  int64_t rows = 1, length = 1;
  // Multiples of 4 rows and 64 positions on a GPU; exact shapes elsewhere.
  static BucketSteps ForDevice(at::Device device);
};
PackedBatch PackBatch(const at::Tensor& input_ids, const at::Tensor& attention_mask, const at::Tensor& response_mask,
                      bool share_prompts = false, const HostCopies& host = {},
                      std::optional<BucketSteps> steps = std::nullopt);

// The groups of rows with the same prompt (the same valid tokens in the first P = input_ids.size(1) - response_cols
// columns): group[b] numbers row b's group in the order of each group's first row, prompt_len[b] its valid prompt
// tokens. Host vectors; one copy of the prompt columns to the host.
struct PromptGroups {
  std::vector<int64_t> group;
  std::vector<int64_t> prompt_len;
  int64_t count = 0;
};
PromptGroups GroupByPrompt(const at::Tensor& input_ids, const at::Tensor& attention_mask, int64_t response_cols);

class DecoderModel {
 public:
  // Loads config.json and the safetensors weights of an HF model directory. Weights are converted to `dtype` and
  // placed on `device`; Forward's inputs must be on that device too.
  // Errors name the directory and the tensor (missing, wrong shape).
  static absl::StatusOr<std::unique_ptr<DecoderModel>> Load(const std::string& model_dir, at::ScalarType dtype,
                                                            at::Device device = at::kCPU);

  DecoderModel(const DecoderModel&) = delete;
  DecoderModel& operator=(const DecoderModel&) = delete;

  // Runs the decoder over `input_ids` [B, T] at `position_ids` [B, T].
  // `attn_mask` is bool [B, 1, T, S] (true = may attend), where S = T without a cache, or cache->length + T with one.
  // With a cache, the new keys/values are written at [cache->length, cache->length + T) and length advances.
  // Returns the final-norm hidden states [B, T, hidden].
  // With `packed`: one row (B = 1) of packed sequences, `attn_mask` undefined and no cache; attention runs per
  // sequence (flash attention's variable-length kernel on a GPU in bf16/fp16, one call per sequence otherwise).
  at::Tensor Forward(const at::Tensor& input_ids, const at::Tensor& position_ids, const at::Tensor& attn_mask,
                     KvCache* cache, const PackedSequences* packed = nullptr) const;
  // Forward without a cache over rows whose valid tokens all come first (no left padding): causal
  // attention without a mask (SDPA's is_causal, which skips the tiles above the diagonal). At valid positions each
  // query attends to the same keys as in Forward with BuildAttentionMask(valid, 0, T), so the hidden states are the
  // same but for the attention kernel's rounding (another SDPA backend may run); at padding positions they differ (they
  // attend to the padding before them), so callers read valid positions only.
  at::Tensor ForwardCausal(const at::Tensor& input_ids, const at::Tensor& position_ids) const;
  // Continues the one sequence held in `cache` (KvCache of one row and no slots, with cache->length positions written)
  // by `input_ids` [1, T] at positions [length, length + T): their keys and values go into the cache (length advances)
  // and each new token attends to the cached positions and to the new ones up to itself (flash attention's causal
  // kernel, without a mask, on a GPU in bf16/fp16; else Forward's masked path). Continuous batching's chunked
  // prefill: a chunk's hidden states equal those of the prompt's positions in one whole pass but for the kernels'
  // rounding.
  at::Tensor ForwardChunk(const at::Tensor& input_ids, KvCache* cache) const;
  // The hidden states [B, length, hidden] at columns [begin, begin + length) of rows with validity `valid` [B, T]
  // (bool), as Forward with BuildAttentionMask(valid, 0, T) computes them at valid columns. `causal`: every row's valid
  // tokens form one run (OneValidRun: prompt left padding, response right padding; else an error), and attention runs
  // without a mask: each row is rolled left past its leading padding, so that its valid tokens come first, the rolled
  // rows, cut to the longest run, run through ForwardCausal (RollRows; two numbers read back unless `host_valid`,
  // valid's CPU copy, is given), and the states are gathered back to the rows' own columns: the masked pass's states at
  // valid columns but for the attention kernel's rounding; a padding column gets its row's last valid token's state.
  // Rows without leading padding, the longest of which fills T, give ForwardCausal's states at their valid columns bit
  // for bit.
  at::Tensor ForwardColumns(const at::Tensor& input_ids, const at::Tensor& valid, int64_t begin, int64_t length,
                            bool causal, const at::Tensor& host_valid = {}) const;

  // hidden [..., H] -> logits [..., vocab] in float32 (in the model's dtype with keep_dtype).
  at::Tensor Logits(const at::Tensor& hidden, bool keep_dtype = false) const;
  // The LM head's weight [vocab, H] (the embedding when tied; for a sharded model gathered, with autograd history to
  // its shard), for callers that apply it themselves (ChunkedLogProbs).
  at::Tensor LmHeadWeight() const;

  // Whether slot-mode decoding can run in the CUDA decode kernel (KvCache::slot_len): a CUDA build, the model on a
  // GPU in float32, bfloat16 or float16 (gathered, if sharded), and a head shape the kernel takes (head_dim 64 or
  // 128, at most 8 query heads per KV head).
  bool DecodeKernelAvailable() const;
  // Whether every layer's q, k and v projections, and its gate and up projections, lie stacked in one buffer each (as
  // Load leaves them), so that every pass runs each group as one GEMM (parameters gathered from ZeRO-3 units are not,
  // where the layer has biases: they lie between the weights).
  bool ProjectionsStacked() const;
  // Per layer, the stacked q, k, v projection weights [(Hq + 2 Hkv) D, H] with each column scaled by the input
  // RMSNorm's weight (float32 products rounded to bf16), for KvCache::qkv_folded: a copy of the current weights, made
  // per rollout. Empty unless DecodeKernelAvailable, FoldsInputNorms(the weights' dtype) and the biases, if any, are
  // stacked.
  std::vector<at::Tensor> FoldedQkvWeights() const;
  // Whether FoldedQkvWeights would give the copies (its conditions, checked without making them).
  bool InputNormsFoldable() const;
  // Per layer, the stacked gate and up projection weights [2 I, H] with each column scaled by the post-attention
  // RMSNorm's weight, for KvCache::gate_up_folded (a per-rollout copy, as FoldedQkvWeights). Empty unless
  // FoldedQkvWeights is not, the gate and up weights are stacked and the output projections have no bias.
  std::vector<at::Tensor> FoldedGateUpWeights() const;
  // Whether FoldedGateUpWeights would give the copies.
  bool PostAttentionNormsFoldable() const;
  // A cache for `batch` sequences of up to `capacity` positions, zero-filled unless !zeroed (for a caller that writes
  // every position before reading it, e.g. a prefill of `capacity` tokens).
  KvCache NewCache(int64_t batch, int64_t capacity, bool zeroed = true) const;
  // Where the parameters (or their shards) live.
  at::Device device() const { return inv_freq_.device(); }

  // Every parameter with its HF name, in a fixed order. With tied embeddings lm_head is not listed. For a sharded
  // model the tensors are defined only between Unshard() and Reshard().
  const std::vector<std::pair<std::string, at::Tensor>>& named_parameters() const { return params_; }
  std::vector<at::Tensor> parameters() const;
  int64_t num_parameters() const { return num_parameters_; }
  // Gradients on for the trained tensors (the parameters, or the shards of a sharded model).
  void SetRequiresGrad(bool requires_grad);
  // Activation checkpointing (verl's enable_gradient_checkpointing): a Forward with gradients keeps each layer's input
  // (and what AttentionSaves lists), and backward recomputes the layer from it. Same gradients, less memory, most of a
  // forward more per layer.
  // `recompute_layers` >= 0 checkpoints only the first that many layers (Megatron's recompute_method "block" with
  // recompute_num_layers); the others keep their activations for backward, as without checkpointing. A sharded model
  // always recomputes every layer (its layers are gathered again for backward). `keep_projections`: each
  // checkpointed layer's forward also keeps its q/k/v and output projections' outputs, and its recompute takes them
  // instead of running those GEMMs again (decoder_model.cc's AttentionSaves; more memory, less time).
  void SetGradientCheckpointing(bool on, int64_t recompute_layers = -1, bool keep_projections = true) {
    gradient_checkpointing_ = on;
    recompute_layers_ = recompute_layers;
    keep_projections_ = keep_projections;
  }
  bool gradient_checkpointing() const { return gradient_checkpointing_; }
  bool keep_projections() const { return keep_projections_; }
  // The layers a Forward with gradients recomputes in backward.
  int64_t recomputed_layers() const {
    return sharded() ? config_.num_hidden_layers : static_cast<int64_t>(CheckpointedLayers());
  }

  // Parameter sharding (ZeRO-3 / FSDP, worker/comm/param_sharding.h) over `group`: units are the embedding, each
  // layer, the final norm and the untied LM head; this rank keeps its shard of each and drops the full parameters.
  // Forward and Logits then gather one unit at a time (layers recomputed in backward); decoding with a KvCache too,
  // without gradients (a gather per layer per decoding step), or with the whole model gathered once (Unshard). Every
  // rank of the group must call this, and every gathering method below, in the same order.
  void ShardParameters(const ShardGroup& group);
  bool sharded() const { return !units_.empty(); }
  // The rank's shard of each unit ("shard.embed", "shard.layers.N", "shard.norm", "shard.lm_head"), the tensors an
  // optimizer updates; for an unsharded model, named_parameters().
  std::vector<std::pair<std::string, at::Tensor>> shard_parameters() const;
  std::vector<std::pair<std::string, at::Tensor>> trainable_parameters() const;
  // Gathers every unit: named_parameters() and the unsharded Forward (with a cache) work until Reshard(), which, with
  // keep_changes, first writes this rank's slice of the (possibly modified) full parameters back into its shards.
  // No-ops for an unsharded model.
  void Unshard();
  void Reshard(bool keep_changes);

  // Parameter offload for a model whose parameters do not change (the reference model: verl's
  // ref.fsdp_config.param_offload). OffloadParameters moves the parameters (a sharded model: its shards) to host
  // memory, pinned when the model computes on a GPU, and drops their device copies; LoadParameters copies them back
  // to device() for a pass, keeping the host copy, so each later offload only drops the device copy again. Tensors
  // that share memory on the device (the stacked projections) share it in every copy, so passes keep their stacked
  // GEMMs. device() stays the compute device throughout; a pass over an offloaded model fails on mixed devices.
  // FailedPrecondition for a model with requires_grad (its host copy would go stale). ShardParameters on an
  // offloaded model loads it, shards it and offloads the shards.
  absl::Status OffloadParameters();
  void LoadParameters();
  bool parameters_offloaded() const { return offloaded_; }
  // Per-parameter views (HF names, named_parameters() order) of one full buffer per unit, shaped like the units'
  // (e.g. optimizer moments gathered with units()[u].Gather(moment_shard)).
  std::vector<std::pair<std::string, at::Tensor>> NamedViews(const std::vector<at::Tensor>& full_by_unit) const;
  std::vector<const FlatUnit*> units() const {
    std::vector<const FlatUnit*> out;
    for (const UnitInfo& u : units_) out.push_back(u.unit.get());
    return out;
  }

  const DecoderConfig& config() const { return config_; }

 private:
  struct Layer {
    // Biases (q_b, k_b, v_b, o_b) are undefined when the model has none; o_b exists only for Llama attention_bias.
    at::Tensor input_norm, q_w, q_b, k_w, k_b, v_w, v_b, o_w, o_b, post_norm, gate_w, up_w, down_w;
    // Set by MakeLayer where the parts lie stacked (as Load leaves them; in a ZeRO-3 unit gate/up do, q/k/v only
    // without biases): q/k/v (weights; biases, if all there) and gate/up as one tensor each over the parts' memory,
    // the stacked GEMMs' weights in every pass (StackedLinear routes the gradients to the parts); undefined
    // otherwise (then the separate GEMMs run).
    at::Tensor qkv_w, qkv_b, gate_up_w;
  };

  struct UnitInfo {
    std::unique_ptr<FlatUnit> unit;
    std::vector<size_t> param_index;  // the unit's tensors' positions in params_
  };

  explicit DecoderModel(DecoderConfig config) : config_(std::move(config)) {}
  // How many layers, from the first, an unsharded Forward with gradients runs checkpointed (SetGradientCheckpointing).
  size_t CheckpointedLayers() const {
    if (!gradient_checkpointing_) return 0;
    return recompute_layers_ < 0 ? layers_.size() : std::min(layers_.size(), static_cast<size_t>(recompute_layers_));
  }
  // A layer's tensors from their names relative to "model.layers.N." (undefined where get returns undefined).
  static Layer MakeLayer(const std::function<at::Tensor(const std::string&)>& get);
  // Points embed_, final_norm_, lm_head_ and layers_ at params_ (undefined while sharded and not gathered).
  void BindFields();
  void BindFieldsKeepingCount();
  // OffloadParameters' move (host copies made once), without its check.
  void MoveParametersToHost();
  // The tensors that hold the parameters: the shards of a sharded model, else params_'s (in their orders); and
  // rebinding them.
  std::vector<at::Tensor> StoredTensors() const;
  void SetStoredTensors(const std::vector<at::Tensor>& tensors);
  // With KvCache::gate_up_folded the layer adds into `h`'s own memory and returns it (the caller must not keep h).
  // `pending` (decoding steps over the slot cache only, else null): on entry, where defined, the previous layer's MLP
  // output, which the layer adds to `h` inside its input RMSNorm's kernel; on exit, this layer's MLP output where the
  // layer left its own residual add to the next norm (then the result is `h` + *pending), else undefined.
  // `causal` (ForwardCausal): attention is causal within each row, attn_mask undefined.
  // `mlp_input` (without a cache or `pending`: a checkpointed layer's recompute): the layer stops before its down
  // projection, stores the SwiGLU output there and returns the residual stream after attention, whose sum with
  // down(*mlp_input) is the layer's output; where SwiGLU would run as the fused stacked kernel (CUDA), it stops before
  // SwiGLU and stores SwiGLU's input there, the stacked gate/up output ([..., 2 x intermediate]).
  // `saves` (a checkpointed layer's forward and recompute): the shared-prompt attention's outputs and the q/k/v and
  // output projections' values kept from the forward for the recompute (decoder_model.cc's AttentionSaves).
  at::Tensor LayerForward(const Layer& L, const at::Tensor& h, const at::Tensor& cos, const at::Tensor& sin,
                          const at::Tensor& attn_mask, KvCache* cache, size_t i,
                          const PackedSequences* packed = nullptr, at::Tensor* pending = nullptr, bool causal = false,
                          at::Tensor* mlp_input = nullptr, AttentionSaves* saves = nullptr) const;
  // LayerForward of layer i through an autograd function that recomputes it in backward.
  at::Tensor CheckpointedLayer(size_t i, const at::Tensor& h, const at::Tensor& cos, const at::Tensor& sin,
                               const at::Tensor& attn_mask, const PackedSequences* packed, bool causal) const;
  at::Tensor ShardedForward(const at::Tensor& input_ids, const at::Tensor& position_ids, const at::Tensor& attn_mask,
                            KvCache* cache, const PackedSequences* packed, bool causal) const;
  at::Tensor ForwardImpl(const at::Tensor& input_ids, const at::Tensor& position_ids, const at::Tensor& attn_mask,
                         KvCache* cache, const PackedSequences* packed, bool causal) const;
  // x_again: x once more for its other uses (kernels::RmsNorm's: on a GPU with gradients their gradient is summed in
  // the norm's backward kernel); x itself elsewhere.
  at::Tensor RmsNorm(const at::Tensor& x, const at::Tensor& weight, at::Tensor* x_again = nullptr) const;
  std::pair<at::Tensor, at::Tensor> RopeCosSin(const at::Tensor& position_ids, at::ScalarType dtype) const;

  DecoderConfig config_;
  at::Tensor embed_;
  at::Tensor final_norm_;
  at::Tensor lm_head_;   // aliases embed_ when tied
  at::Tensor inv_freq_;  // [head_dim / 2] float32
  std::vector<Layer> layers_;
  std::vector<std::pair<std::string, at::Tensor>> params_;
  int64_t num_parameters_ = 0;
  bool requires_grad_ = false;
  bool gradient_checkpointing_ = false;
  int64_t recompute_layers_ = -1;  // SetGradientCheckpointing's; < 0: every layer
  bool keep_projections_ = true;    // SetGradientCheckpointing's
  std::vector<UnitInfo> units_;  // empty: not sharded
  bool gathered_ = false;        // sharded, and the full parameters are bound (Unshard)
  bool offloaded_ = false;       // OffloadParameters: the parameters (shards) are the host copies below
  // The host copies of the parameters (params_'s order) or, sharded, of the shards (units_' order), once offloaded.
  std::vector<at::Tensor> host_copies_;
};

}  // namespace verl

namespace verl {

// The RoPE inverse frequencies [head_dim / 2], float32, for `config` (rope_theta and rope_scaling), computed with the
// same float32 operations as transformers' rope init functions, so the rotations match bit for bit.
at::Tensor RopeInverseFrequencies(const DecoderConfig& config);

// The attention mask for queries at positions [start, start + T) over keys [0, S) where `key_valid` is bool [B, S]:
// a query attends to valid keys at or before its own position, and always to itself (so rows of padding never
// become all -inf, which would turn into NaN). Returns bool [B, 1, T, S].
at::Tensor BuildAttentionMask(const at::Tensor& key_valid, int64_t start, int64_t T);

// Whether the valid tokens of every row of `valid` [B, S] (bool) form one run, if any (padding only before and after
// them; the condition of DecoderModel::ForwardColumns with causal). Reads one flag back from the device.
bool OneValidRun(const at::Tensor& valid);
// The number of runs of valid tokens in each row of `valid` [B, S] (S > 0): int64 [B], on its device.
at::Tensor RunStarts(const at::Tensor& valid);
// Each row's leading padding: the columns of `valid` [B, T] before its first valid one (T for a row without any).
// int64 [B] on valid's device.
at::Tensor LeadingPadding(const at::Tensor& valid);

// Rows of `valid` [B, T] (bool, T > 0) rolled left past their leading padding, as DecoderModel::ForwardColumns (causal)
// runs them: `index` [B, width] holds the column of each rolled column, (j + lead) mod T, so that a row [pad x a,
// valid x n, pad x c] reads [valid x n, pad x c, pad x a] cut to `width`, the longest run (at least 1). `lead` [B, 1]
// is each row's leading padding (T for a row without valid tokens, which stays as it is), `count` [B] its valid
// tokens; all int64 on valid's device. Reads two numbers back, or takes them from `host_valid` (valid's CPU copy) where
// given; a row whose valid tokens are not one run is an error.
struct RolledRows {
  at::Tensor lead;
  at::Tensor count;
  at::Tensor index;
  int64_t width = 0;
};
RolledRows RollRows(const at::Tensor& valid, const at::Tensor& host_valid = {});

// Position ids from a validity mask [B, S]: the count of valid tokens before each position (left padding -> 0).
at::Tensor PositionIdsFromMask(const at::Tensor& valid);

}  // namespace verl

#endif  // VERL_WORKER_MODEL_DECODER_MODEL_H_
