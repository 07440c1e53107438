// The CUDA decoding path of the rollout engine against plain ATen: the GQA decode kernel over the slot cache,
// CUDA-graph decoding against eager decoding, and continuous batching (kernel + graphs) against static batching (SDPA).
// Tagged [gpu]: each case skips with a warning where the build has no CUDA or no GPU is visible.

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "tests/test_dir.h"
#include "tests/worker/gpu_skip.h"
#include "tests/worker/tiny_model.h"
#include "tests/worker/torch_catch.h"
#include "worker/rollout/generator.h"
#ifdef VERL_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>

#include "worker/kernels/decode_attention.h"
#include "worker/kernels/decode_attention_kernel.h"
#include "worker/kernels/fused_ops.h"
#endif

namespace verl {
namespace {

using testing::SkipWithoutGpu;
using testing::TestDir;

// softmax(q k^T * scale) v over positions [0, lengths[b]) in float32 from the same (rounded) inputs; zeros for length
// 0.
at::Tensor ReferenceAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& lengths,
                              double scale) {
  const int64_t B = q.size(0), Hq = q.size(1), Hkv = k.size(1), C = k.size(2);
  at::Tensor kf = k.narrow(0, 0, B).to(at::kFloat).repeat_interleave(Hq / Hkv, 1);  // [B, Hq, C, D]
  at::Tensor vf = v.narrow(0, 0, B).to(at::kFloat).repeat_interleave(Hq / Hkv, 1);
  at::Tensor scores = at::matmul(q.to(at::kFloat).unsqueeze(2), kf.transpose(2, 3)) * scale;  // [B, Hq, 1, C]
  at::Tensor len = lengths.to(at::kLong).view({B, 1, 1, 1});
  at::Tensor invalid = at::arange(C, len.options()).view({1, 1, 1, C}).ge(len);
  at::Tensor probs = scores.masked_fill(invalid, -std::numeric_limits<float>::infinity()).softmax(-1);
  probs = probs.masked_fill(len.eq(0), 0.0);  // a row of -inf is NaN
  return at::matmul(probs, vf).squeeze(2);
}

TEST_CASE("the CUDA decode kernel agrees with ATen attention over each slot's length", "[worker][rollout][gpu]") {
  if (SkipWithoutGpu()) return;
#ifdef VERL_WITH_CUDA
  c10::InferenceMode guard;
  struct Shape {
    int64_t B, Hq, Hkv, D, C;
  };
  // Qwen2.5-0.5B's heads (14 / 2, D 64) with one range per block and with the ranges merged (few slots, long cache),
  // multi-head (G 1), G 8 with D 128, and a cache of one position.
  const std::vector<Shape> shapes = {{300, 14, 2, 64, 300}, {3, 14, 2, 64, 700},  {1, 8, 1, 128, 2000},
                                     {5, 4, 4, 128, 37},    {7, 28, 4, 128, 513}, {4, 8, 1, 64, 1}};
  std::mt19937_64 rng(11);
  for (const Shape& sh : shapes) {
    for (at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
      INFO("B " << sh.B << " Hq " << sh.Hq << " Hkv " << sh.Hkv << " D " << sh.D << " C " << sh.C << " "
                << c10::toString(dtype));
      auto opts = at::TensorOptions().device(at::kCUDA);
      at::Tensor q = at::randn({sh.B, sh.Hq, sh.D}, opts).to(dtype);
      // Two more cache rows than queries: rows >= B must not be read (NaN there would show).
      at::Tensor k = at::randn({sh.B + 2, sh.Hkv, sh.C, sh.D}, opts).to(dtype);
      at::Tensor v = at::randn({sh.B + 2, sh.Hkv, sh.C, sh.D}, opts).to(dtype);
      k.narrow(0, sh.B, 2).fill_(std::numeric_limits<float>::quiet_NaN());
      v.narrow(0, sh.B, 2).fill_(std::numeric_limits<float>::quiet_NaN());
      std::vector<int32_t> len(sh.B);
      for (int64_t b = 0; b < sh.B; ++b) len[b] = static_cast<int32_t>(rng() % (sh.C + 1));
      len[0] = static_cast<int32_t>(sh.C);
      if (sh.B > 1) len[1] = 1;
      if (sh.B > 2) len[2] = 0;
      at::Tensor lengths = at::tensor(len, at::kInt).to(at::kCUDA);
      // Positions past a slot's length must not be read either (the tensor-core kernel loads whole tiles of 16).
      for (int64_t b = 0; b < sh.B; ++b) {
        k[b].narrow(1, len[b], sh.C - len[b]).fill_(std::numeric_limits<float>::quiet_NaN());
        v[b].narrow(1, len[b], sh.C - len[b]).fill_(std::numeric_limits<float>::quiet_NaN());
      }
      const double scale = 1.0 / std::sqrt(static_cast<double>(sh.D));
      REQUIRE(kernels::DecodeAttentionSupported(q, k));
      const at::Tensor k_read = k.nan_to_num(0);  // what a kernel reads of the caches (no NaN)
      const at::Tensor v_read = v.nan_to_num(0);
      at::Tensor ref = ReferenceAttention(q, k_read, v_read, lengths, scale);
      const double rtol = dtype == at::kFloat ? 1e-5 : dtype == at::kHalf ? 1e-3 : 8e-3;
      const double atol = dtype == at::kFloat ? 1e-5 : dtype == at::kHalf ? 1e-3 : 8e-3;
      // The tensor-core kernel (bf16 / fp16; float32 takes the SIMT kernel either way) and the SIMT kernel.
      at::Tensor out = kernels::DecodeAttention(q, k, v, lengths, scale);
      at::Tensor simt = kernels::DecodeAttention(q, k, v, lengths, scale, /*tensor_cores=*/false);
      at::Tensor err;
      for (const at::Tensor& o : {simt, out}) {
        REQUIRE(o.sizes() == q.sizes());
        REQUIRE(o.scalar_type() == dtype);
        err = (o.to(at::kFloat) - ref).abs();
        at::Tensor bound = ref.abs() * rtol + atol;
        CAPTURE(err.max().item<double>());
        CHECK(err.le(bound).all().item<bool>());
        if (sh.B > 2) CHECK(o[2].eq(0).all().item<bool>());  // length 0
      }
      // Within the error ATen's own attention in this dtype makes (bf16/fp16 round their intermediates too).
      if (dtype != at::kFloat) {
        const int64_t G = sh.Hq / sh.Hkv;
        at::Tensor valid = at::arange(sh.C, lengths.options().dtype(at::kLong))
                               .view({1, 1, 1, sh.C})
                               .lt(lengths.to(at::kLong).view({sh.B, 1, 1, 1}));
        at::Tensor aten = at::scaled_dot_product_attention(
                              q.unsqueeze(2), k_read.narrow(0, 0, sh.B).repeat_interleave(G, 1),
                              v_read.narrow(0, 0, sh.B).repeat_interleave(G, 1), valid, 0.0, false, scale)
                              .squeeze(2)
                              .to(at::kFloat);
        at::Tensor has = lengths.gt(0).view({sh.B, 1, 1});
        const double aten_err = (aten - ref).abs().masked_fill(has.logical_not(), 0).max().item<double>();
        CAPTURE(aten_err);
        CHECK(err.max().item<double>() <= std::max(2 * aten_err, atol));  // err: the tensor-core kernel's
      }
    }
  }
#endif
}

TEST_CASE("the CUDA decode kernel's shared prompts read what a copy in each slot holds, bit for bit",
          "[worker][rollout][gpu]") {
  if (SkipWithoutGpu()) return;
#ifdef VERL_WITH_CUDA
  c10::InferenceMode guard;
  struct Shape {
    int64_t B, Hq, Hkv, D, C;
  };
  // One range per block, and merged ranges (few slots, a long cache).
  const std::vector<Shape> shapes = {{301, 14, 2, 64, 300}, {7, 14, 2, 64, 900}, {9, 28, 4, 128, 513}};
  std::mt19937_64 rng(12);
  for (const Shape& sh : shapes) {
    for (at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
      INFO("B " << sh.B << " Hq " << sh.Hq << " Hkv " << sh.Hkv << " D " << sh.D << " C " << sh.C << " "
                << c10::toString(dtype));
      auto opts = at::TensorOptions().device(at::kCUDA);
      const at::Tensor q = at::randn({sh.B, sh.Hq, sh.D}, opts).to(dtype);
      at::Tensor k = at::randn({sh.B, sh.Hkv, sh.C, sh.D}, opts).to(dtype);
      at::Tensor v = at::randn({sh.B, sh.Hkv, sh.C, sh.D}, opts).to(dtype);
      // Groups of three slots read one slot's prompt (lengths 0 to the slot's length, whole tiles or not): the
      // group's first, or in the second shape its last; the copies hold it in each slot, the shared caches NaN there
      // instead (never read).
      const bool last_holds = &sh == &shapes[1];
      std::vector<int32_t> len(sh.B), from(sh.B), plen(sh.B);
      for (int64_t g0 = 0; g0 < sh.B; g0 += 3) {
        const int64_t size = std::min<int64_t>(3, sh.B - g0);
        const int64_t holder = last_holds ? g0 + size - 1 : g0;
        const int32_t prompt = static_cast<int32_t>(rng() % (sh.C / 2 + 1));
        for (int64_t b = g0; b < g0 + size; ++b) {
          from[b] = static_cast<int32_t>(holder);
          plen[b] = prompt;
          len[b] = prompt + static_cast<int32_t>(rng() % (sh.C - prompt + 1));
        }
      }
      if (sh.B > 4) len[4] = plen[4];  // nothing past the prompt
      at::Tensor k_copy = k.clone(), v_copy = v.clone();
      for (int64_t b = 0; b < sh.B; ++b) {
        if (from[b] == b || plen[b] == 0) continue;
        k_copy[b].narrow(1, 0, plen[b]).copy_(k[from[b]].narrow(1, 0, plen[b]));
        v_copy[b].narrow(1, 0, plen[b]).copy_(v[from[b]].narrow(1, 0, plen[b]));
        k[b].narrow(1, 0, plen[b]).fill_(std::numeric_limits<float>::quiet_NaN());
        v[b].narrow(1, 0, plen[b]).fill_(std::numeric_limits<float>::quiet_NaN());
      }
      const at::Tensor lengths = at::tensor(len, at::kInt).to(at::kCUDA);
      const at::Tensor prefix_slots = at::tensor(from, at::kInt).to(at::kCUDA);
      const at::Tensor prefix_lengths = at::tensor(plen, at::kInt).to(at::kCUDA);
      const double scale = 1.0 / std::sqrt(static_cast<double>(sh.D));
      for (const bool tensor_cores : {true, false}) {
        INFO((tensor_cores ? "tensor cores" : "SIMT"));
        const at::Tensor copied = kernels::DecodeAttention(q, k_copy, v_copy, lengths, scale, tensor_cores);
        const at::Tensor shared =
            kernels::DecodeAttention(q, k, v, lengths, scale, tensor_cores, prefix_slots, prefix_lengths);
        REQUIRE(!copied.isnan().any().item<bool>());
        CHECK(at::equal(shared, copied));
      }
    }
  }
  // Both or neither, int32 [B] on the query's device.
  const at::Tensor q = at::zeros({2, 2, 64}, at::TensorOptions().device(at::kCUDA).dtype(at::kBFloat16));
  const at::Tensor k = at::zeros({2, 1, 8, 64}, q.options());
  const at::Tensor lengths = at::ones({2}, q.options().dtype(at::kInt));
  CHECK_THROWS_WITH(kernels::DecodeAttention(q, k, k, lengths, 1.0, true, lengths, at::Tensor()),
                    Catch::Contains("go together"));
  CHECK_THROWS_WITH(kernels::DecodeAttention(q, k, k, lengths, 1.0, true, lengths.to(at::kLong), lengths),
                    Catch::Contains("int32"));
#endif
}

TEST_CASE("the CUDA decode kernel gives NaN where ATen attention does: a NaN key or value inside a slot's length",
          "[worker][rollout][gpu]") {
  if (SkipWithoutGpu()) return;
#ifdef VERL_WITH_CUDA
  c10::InferenceMode guard;
  // One range per block (many slots) and many ranges merged (two slots, a long cache); SIMT and tensor-core kernels.
  // Slot 0, KV head 0 gets a NaN key at one position inside its length, slot 1 a NaN value row: the query heads of
  // that KV head come out NaN in every dimension (ATen's softmax and weighted sum give NaN there), every other head of
  // every slot stays what it is without the NaN. Before e68939c the kernels returned zeros (or dropped the range).
  struct Shape {
    int64_t B, Hq, Hkv, D, C;
  };
  const int sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  for (const Shape& sh : {Shape{300, 14, 2, 64, 300}, Shape{2, 8, 1, 128, 1500}, Shape{3, 14, 2, 64, 700}}) {
    const int splits =
        kernels::DecodeAttentionSplits(static_cast<int>(sh.B), static_cast<int>(sh.Hkv), static_cast<int>(sh.C), sms);
    for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
      INFO("B " << sh.B << " Hq " << sh.Hq << " Hkv " << sh.Hkv << " D " << sh.D << " C " << sh.C << " splits "
                << splits << " " << c10::toString(dtype));
      auto opts = at::TensorOptions().device(at::kCUDA);
      const at::Tensor q = at::randn({sh.B, sh.Hq, sh.D}, opts).to(dtype);
      at::Tensor k = at::randn({sh.B, sh.Hkv, sh.C, sh.D}, opts).to(dtype);
      at::Tensor v = at::randn({sh.B, sh.Hkv, sh.C, sh.D}, opts).to(dtype);
      std::vector<int32_t> len(sh.B, static_cast<int32_t>(sh.C));
      len[1] = static_cast<int32_t>(sh.C / 2 + 3);
      const at::Tensor lengths = at::tensor(len, at::kInt).to(at::kCUDA);
      const double scale = 1.0 / std::sqrt(static_cast<double>(sh.D));
      for (bool tensor_cores : {false, true}) {
        INFO((tensor_cores ? "tensor cores" : "SIMT"));
        const at::Tensor clean = kernels::DecodeAttention(q, k, v, lengths, scale, tensor_cores);
        REQUIRE(at::isfinite(clean).all().item<bool>());
        at::Tensor k_nan = k.clone();
        at::Tensor v_nan = v.clone();
        const float nan = std::numeric_limits<float>::quiet_NaN();
        k_nan[0][0][sh.C / 3][5] = nan;      // one element of one key
        v_nan[1][0][len[1] - 1].fill_(nan);  // the last value row inside slot 1's length
        const at::Tensor out = kernels::DecodeAttention(q, k_nan, v_nan, lengths, scale, tensor_cores);
        const int64_t G = sh.Hq / sh.Hkv;
        at::Tensor want_nan = at::zeros({sh.B, sh.Hq}, at::kBool);
        want_nan[0].narrow(0, 0, G).fill_(true);
        want_nan[1].narrow(0, 0, G).fill_(true);
        const at::Tensor is_nan = out.isnan().cpu();
        CHECK(at::equal(is_nan.all(-1), want_nan));  // every dimension of those heads
        CHECK(at::equal(is_nan.any(-1), want_nan));  // and nothing else
        const at::Tensor keep = want_nan.logical_not().unsqueeze(-1).to(at::kCUDA);
        CHECK(at::equal(out.masked_select(keep), clean.masked_select(keep)));
        // ATen's own attention agrees on where the NaN are.
        const at::Tensor ref = ReferenceAttention(q, k_nan, v_nan, lengths, scale);
        CHECK(at::equal(ref.isnan().all(-1).cpu(), want_nan));
      }
    }
  }
  // A cache whose slots do not start 16-byte aligned (an odd slot stride) is not taken.
  auto opts = at::TensorOptions().device(at::kCUDA).dtype(at::kBFloat16);
  const at::Tensor q = at::randn({2, 4, 64}, opts);
  const at::Tensor flat = at::zeros({4096}, opts);
  CHECK(kernels::DecodeAttentionSupported(q, flat.as_strided({2, 2, 8, 64}, {2 * 8 * 64, 8 * 64, 64, 1})));
  CHECK_FALSE(kernels::DecodeAttentionSupported(q, flat.as_strided({2, 2, 8, 64}, {2 * 8 * 64 + 1, 8 * 64, 64, 1})));
  CHECK_FALSE(
      kernels::DecodeAttentionSupported(q, flat.as_strided({2, 2, 8, 64}, {2 * 8 * 64 + 8, 8 * 64 + 4, 64, 1})));
#endif
}

// A decoder the kernel takes: head_dim 64, 4 query heads on 2 KV heads, vocab 300, 2 layers.
DecoderConfig KernelModelConfig() {
  DecoderConfig c = testing::TinyDecoderConfig(300);
  c.hidden_size = 256;
  c.intermediate_size = 512;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 64;
  // Several EOS ids (of 300) so that sequences end at different steps and the running batch shrinks through buckets.
  c.eos_token_ids = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  c.pad_token_id = 0;
  return c;
}

std::vector<std::vector<int32_t>> RandomPrompts(int count, int vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::vector<int32_t>> prompts(count);
  for (auto& p : prompts) {
    p.resize(2 + rng() % 29);
    for (int32_t& t : p) t = 13 + static_cast<int32_t>(rng() % (vocab - 13));
  }
  return prompts;
}

SamplingOptions Options(const DecoderConfig& c, bool sample) {
  SamplingOptions o;
  o.do_sample = sample;
  o.temperature = sample ? 1.5 : 1.0;
  o.top_k = sample ? 200 : -1;
  o.top_p = sample ? 0.95 : 1.0;
  o.n = 2;
  o.max_new_tokens = 40;
  o.eos_token_ids = c.eos_token_ids;
  // Sampling: a third of the vocabulary ends a sequence, so lengths spread widely and the tail shrinks the running
  // batch through several buckets (compaction, one graph each).
  if (sample) {
    o.eos_token_ids.clear();
    for (int32_t id = 1; id <= 100; ++id) o.eos_token_ids.push_back(id);
  }
  o.pad_token_id = 0;
  o.seed = 5;
  o.max_num_seqs = 40;  // 48 rows: admissions continue while others run; buckets 32 and 40 and smaller ones
  return o;
}

std::unique_ptr<DecoderModel> LoadOn(const std::string& dir, at::ScalarType dtype) {
  auto model = DecoderModel::Load(dir, dtype, at::Device(at::kCUDA, 0));
  INFO(model.status().ToString());
  REQUIRE(model.ok());
  return std::move(*model);
}

// Declared before the other rollouts' cases on purpose: run in the default order, every rollout before the fix took a
// stream of ATen's pool it had not used, so each of these rollouts left one more GEMM workspace allocated.
TEST_CASE("rollouts with CUDA graphs leave nothing allocated behind them, one after another",
          "[worker][rollout][gpu]") {
  if (SkipWithoutGpu()) return;
#ifdef VERL_WITH_CUDA
  TestDir dir("gpu_decode_leftovers");
  const DecoderConfig config = KernelModelConfig();
  testing::WriteTinyModel(dir.path(), config);
  auto model = LoadOn(dir.path(), at::kBFloat16);
  REQUIRE(model->DecodeKernelAvailable());
  const auto prompts = RandomPrompts(8, 300, 6);
  const SamplingOptions o = Options(config, true);
  constexpr size_t kAggregate = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
  std::vector<int64_t> allocated, reserved;
  for (int i = 0; i < 4; ++i) {
    {
      const RolloutBatch r = Generate(*model, prompts, o);
      REQUIRE(r.decode_graphs >= 1);
    }
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(0);
    allocated.push_back(stats.allocated_bytes[kAggregate].current);
    reserved.push_back(stats.reserved_bytes[kAggregate].current);
  }
  // The first rollout may leave its capture stream's cuBLAS workspace (once a process); the others add nothing, and
  // reserve nothing more: each rollout's graphs' pool went back to the device (the same rollouts reserve the same).
  CAPTURE(allocated, reserved);
  CHECK(allocated[2] == allocated[1]);
  CHECK(allocated[3] == allocated[1]);
  CHECK(reserved[2] == reserved[1]);
  CHECK(reserved[3] == reserved[1]);
#endif
}

TEST_CASE("CUDA-graph decoding gives the same tokens and log-probs as eager decoding", "[worker][rollout][gpu]") {
  if (SkipWithoutGpu()) return;
  TestDir dir("gpu_decode");
  const DecoderConfig config = KernelModelConfig();
  testing::WriteTinyModel(dir.path(), config);
  auto model = LoadOn(dir.path(), at::kBFloat16);
  REQUIRE(model->DecodeKernelAvailable());
  const auto prompts = RandomPrompts(24, 300, 3);
  // Greedy, filtered (top-k, top-p) and unfiltered sampling, all through the fused sampler.
  for (int mode = 0; mode < 3; ++mode) {
    const bool sample = mode > 0;
    INFO((mode == 0 ? "greedy" : mode == 1 ? "sampling (temperature, top-k, top-p)" : "sampling (temperature)"));
    SamplingOptions o = Options(config, sample);
    if (mode == 2) {
      o.top_k = -1;
      o.top_p = 1.0;
    }
    o.enforce_eager = true;
    RolloutBatch eager = Generate(*model, prompts, o);
    CHECK(eager.decode_graphs == 0);
    o.enforce_eager = false;
    RolloutBatch graphed = Generate(*model, prompts, o);
    // Sampling: the batch shrank through several buckets, each captured once.
    CAPTURE(graphed.decode_graphs);
    CHECK(graphed.decode_graphs >= (sample ? 3 : 1));
    at::Tensor lengths = eager.response_mask.sum(1);
    CHECK(lengths.min().item<int64_t>() < lengths.max().item<int64_t>());
    CHECK(at::equal(eager.responses, graphed.responses));
    CHECK(at::equal(eager.response_mask, graphed.response_mask));
    CHECK(at::equal(eager.log_probs, graphed.log_probs));
  }
}

TEST_CASE("continuous batching with the decode kernel and CUDA graphs gives static batching's greedy outputs",
          "[worker][rollout][gpu]") {
  if (SkipWithoutGpu()) return;
  TestDir dir("gpu_decode_static");
  const DecoderConfig config = KernelModelConfig();
  testing::WriteTinyModel(dir.path(), config);
  // float32: the kernel and SDPA round differently in bf16, which could flip a near tie.
  auto model = LoadOn(dir.path(), at::kFloat);
  REQUIRE(model->DecodeKernelAvailable());
  const auto prompts = RandomPrompts(24, 300, 4);
  // Greedy, and temperature-only sampling with a third of the vocabulary ending a sequence: lengths spread, slots are
  // refilled and the tail is compacted (several buckets); the draws are keyed by (sample, position), so both
  // schedules draw the same numbers.
  // Prefills padded, and packed with each layer's keys and values written straight into the slots (bf16's default
  // on a GPU, where flash attention runs; in float32 the packed pass attends one prompt at a time).
  for (const PrefillLayout layout : {PrefillLayout::kPadded, PrefillLayout::kPacked}) {
    for (bool sample : {false, true}) {
      INFO((sample ? "sampling" : "greedy") << (layout == PrefillLayout::kPacked ? ", packed prefill" : ", padded"));
      SamplingOptions o = Options(config, sample);
      o.top_k = -1;
      o.top_p = 1.0;
      o.prefill_layout = layout;
      RolloutBatch continuous = GenerateContinuous(*model, prompts, o);
      CHECK(continuous.decode_graphs >= (sample ? 3 : 1));
      RolloutBatch stat = GenerateStatic(*model, prompts, o);
      REQUIRE(continuous.responses.sizes() == stat.responses.sizes());
      if (sample) {
        at::Tensor lengths = stat.response_mask.sum(1);
        CHECK(lengths.min().item<int64_t>() < lengths.max().item<int64_t>());
      }
      CHECK(at::equal(continuous.responses, stat.responses));
      CHECK(at::equal(continuous.response_mask, stat.response_mask));
      const double lp_diff = (continuous.log_probs - stat.log_probs).abs().max().item<double>();
      CAPTURE(lp_diff);
      CHECK(lp_diff < 1e-4);
    }
  }
}

TEST_CASE("shared prompts on the GPU give what a copy per sample gives, bit for bit", "[worker][rollout][gpu]") {
  if (SkipWithoutGpu()) return;
  TestDir dir("gpu_decode_shared");
  const DecoderConfig config = KernelModelConfig();
  testing::WriteTinyModel(dir.path(), config);
  auto model = LoadOn(dir.path(), at::kBFloat16);
  REQUIRE(model->DecodeKernelAvailable());
  const auto prompts = RandomPrompts(20, 300, 6);
  // Sampling with a third of the vocabulary ending a sequence: a prompt's holder often ends before its siblings
  // (hand-offs); 24 slots for 80 sequences (slots refilled mid-run), and all in slots (the tail compacted); 40 new
  // tokens (practically every sequence ends by EOS) and 8 (some end by the limit, released as their last step is
  // enqueued); the packed prefill (bf16's default) and the padded one.
  int64_t handoffs = 0, joins = 0;
  struct Case {
    int32_t slots;
    bool eager;
    int32_t max_new_tokens;
    PrefillLayout layout;
  };
  for (const Case& c : {Case{24, false, 40, PrefillLayout::kAuto}, Case{24, true, 40, PrefillLayout::kAuto},
                        Case{1024, false, 40, PrefillLayout::kAuto}, Case{1024, true, 40, PrefillLayout::kAuto},
                        Case{24, false, 8, PrefillLayout::kPadded}, Case{1024, false, 8, PrefillLayout::kAuto}}) {
    {
      INFO("max_num_seqs " << c.slots << (c.eager ? ", eager" : ", CUDA graphs") << ", max_new_tokens "
                           << c.max_new_tokens << (c.layout == PrefillLayout::kPadded ? ", padded prefill" : ""));
      SamplingOptions o = Options(config, /*sample=*/true);
      o.top_k = -1;
      o.top_p = 1.0;
      o.n = 4;
      o.max_num_seqs = c.slots;
      o.enforce_eager = c.eager;
      o.max_new_tokens = c.max_new_tokens;
      o.prefill_layout = c.layout;
      o.prompt_sharing = PromptSharing::kOff;
      const RolloutBatch copies = GenerateContinuous(*model, prompts, o);
      o.prompt_sharing = PromptSharing::kAuto;  // on where the decode kernel runs
      const RolloutBatch shared = GenerateContinuous(*model, prompts, o);
      CAPTURE(shared.prompt_handoffs, shared.compactions, shared.decode_graphs);
      const at::Tensor lengths = copies.response_mask.sum(1);
      REQUIRE(lengths.min().item<int64_t>() < lengths.max().item<int64_t>());
      CHECK(copies.prompt_handoffs == 0);
      CHECK(at::equal(shared.responses, copies.responses));
      CHECK(at::equal(shared.response_mask, copies.response_mask));
      CHECK(at::equal(shared.log_probs, copies.log_probs));
      CHECK(copies.prompt_joins == shared.prompt_joins);
      joins += shared.prompt_joins;
      if (c.slots == 1024) CHECK(shared.compactions > 0);
      if (c.max_new_tokens == 8) CHECK(lengths.max().item<int64_t>() == 8);  // some end by the limit
      handoffs += shared.prompt_handoffs;
    }
  }
  CHECK(handoffs > 0);
  CHECK(joins > 0);  // with 24 slots a prompt's later samples join its running ones
}

TEST_CASE("a packed bf16 prefill (flash attention) gives the padded prefill's first tokens", "[worker][rollout][gpu]") {
  if (SkipWithoutGpu()) return;
  TestDir dir("gpu_decode_packed");
  const DecoderConfig config = KernelModelConfig();
  testing::WriteTinyModel(dir.path(), config);
  auto model = LoadOn(dir.path(), at::kBFloat16);
  const auto prompts = RandomPrompts(48, 300, 5);
  // One greedy token per sample: only the prefill decides it (n = 2, so the packed pass's rows go to two slots each).
  SamplingOptions o = Options(config, /*sample=*/false);
  o.max_new_tokens = 1;
  o.eos_token_ids.clear();
  o.max_num_batched_tokens = 200;  // several prefill groups
  o.prefill_layout = PrefillLayout::kPadded;
  const RolloutBatch padded = GenerateContinuous(*model, prompts, o);
  o.prefill_layout = PrefillLayout::kPacked;
  const RolloutBatch packed = GenerateContinuous(*model, prompts, o);
  // Flash attention and SDPA round differently in bf16: the greedy token's log-prob moves by rounding, and a token may
  // differ only at a near tie (where the two log-probs are close as well). Wrong rows or positions move them by far
  // more.
  const double lp_diff = (packed.log_probs - padded.log_probs).abs().max().item<double>();
  const double agree = packed.responses.eq(padded.responses).to(at::kDouble).mean().item<double>();
  CAPTURE(lp_diff, agree);
  CHECK(lp_diff < 0.1);
  CHECK(agree >= 0.9);
}

TEST_CASE("a chunked prefill gives the whole prompt's: flash attention in bf16, SDPA under a mask in float32",
          "[worker][rollout][gpu]") {
  if (SkipWithoutGpu()) return;
  TestDir dir("gpu_decode_chunked");
  const DecoderConfig config = KernelModelConfig();
  testing::WriteTinyModel(dir.path(), config);
  const auto prompts = RandomPrompts(48, 300, 7);
  // Chunks of at most 8 tokens: the prompts of 9 to 30 tokens in 2 to 4 (each prompt prefilled once: every row has a
  // slot), each chunk's queries attending to the chunks before it in the slot and causally to their own.
  int64_t chunks = 0;
  for (const auto& p : prompts) chunks += p.size() > 8 ? (static_cast<int64_t>(p.size()) + 7) / 8 : 0;
  REQUIRE(chunks > 48);
  for (const at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    INFO((dtype == at::kFloat ? "float32" : "bfloat16"));
    auto model = LoadOn(dir.path(), dtype);
    SamplingOptions o = Options(config, /*sample=*/false);
    o.max_num_batched_tokens = 8;
    if (dtype == at::kBFloat16) {
      // One greedy token: only the prefill decides it (flash attention rounds differently from the whole prompt's
      // packed pass, so a longer greedy run could part at a near tie).
      o.max_new_tokens = 1;
      o.eos_token_ids.clear();
    }
    o.chunked_prefill = false;
    const RolloutBatch whole = GenerateContinuous(*model, prompts, o);
    o.chunked_prefill = true;
    const RolloutBatch chunked = GenerateContinuous(*model, prompts, o);
    CHECK(whole.prefill_chunks == 0);
    CHECK(chunked.prefill_chunks == chunks);
    const double lp_diff = (chunked.log_probs - whole.log_probs).abs().max().item<double>();
    const double agree = chunked.responses.eq(whole.responses).to(at::kDouble).mean().item<double>();
    CAPTURE(lp_diff, agree);
    if (dtype == at::kFloat) {
      // 40 greedy tokens after the prompt, its positions from the chunks.
      CHECK(at::equal(chunked.responses, whole.responses));
      CHECK(at::equal(chunked.response_mask, whole.response_mask));
      CHECK(lp_diff < 1e-4);
    } else {
      // A chunk attending to the wrong keys moves the log-probs by far more than rounding.
      CHECK(lp_diff < 0.1);
      CHECK(agree >= 0.9);
    }
  }
}

TEST_CASE("float32 attention on the GPU forms no [heads, T, S] scores: grouped keys repeated for the fused kernel",
          "[worker][rollout][gpu]") {
  if (SkipWithoutGpu()) return;
#ifdef VERL_WITH_CUDA
  // PyTorch's memory-efficient kernel (the fused one that takes float32) does not take grouped query heads; called with
  // enable_gqa, SDPA runs its math form and holds the scores. 8 query heads over 2 KV heads, 4,096 positions: the
  // scores of one layer are 8 x 4,096 x 4,096 float32 = 512 MiB, the model's own activations a few MiB a layer.
  TestDir dir("gpu_f32_attention");
  DecoderConfig config = KernelModelConfig();
  config.num_attention_heads = 8;
  config.max_position_embeddings = 8192;
  testing::WriteTinyModel(dir.path(), config);
  auto model = LoadOn(dir.path(), at::kFloat);
  auto cpu = DecoderModel::Load(dir.path(), at::kFloat);
  REQUIRE(cpu.ok());
  c10::InferenceMode guard;
  constexpr int64_t kT = 4096;
  const int64_t scores = config.num_attention_heads * kT * kT * 4;
  const at::Tensor ids = at::randint(13, config.vocab_size, {1, kT}, at::TensorOptions().dtype(at::kLong));
  const at::Tensor pos = at::arange(kT, at::kLong).unsqueeze(0);
  const c10::cuda::CUDAGuard device(0);
  constexpr size_t kAggregate = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
  auto peak_of = [&](const std::function<at::Tensor()>& run) {
    c10::cuda::device_synchronize();
    c10::cuda::CUDACachingAllocator::resetPeakStats(0);
    const int64_t before = c10::cuda::CUDACachingAllocator::getDeviceStats(0).allocated_bytes[kAggregate].current;
    at::Tensor out = run();
    c10::cuda::device_synchronize();
    const int64_t peak = c10::cuda::CUDACachingAllocator::getDeviceStats(0).allocated_bytes[kAggregate].peak;
    return std::make_pair(out, peak - before);
  };
  // The packed causal pass (use_remove_padding's, one sequence).
  const PackedSequences packed = PackLengths({kT}, at::Device(at::kCUDA, 0));
  auto [hidden, packed_peak] =
      peak_of([&]() { return model->Forward(ids.cuda(), pos.cuda(), at::Tensor(), nullptr, &packed); });
  CAPTURE(packed_peak, scores);
  CHECK(packed_peak < scores / 4);
  const PackedSequences packed_cpu = PackLengths({kT}, at::kCPU);
  const at::Tensor expected = (*cpu)->Forward(ids, pos, at::Tensor(), nullptr, &packed_cpu);
  const double diff = (hidden.cpu() - expected).abs().max().item<double>();
  CAPTURE(diff);
  CHECK(diff < 1e-3);
  // A prefill chunk of 2,048 tokens after 2,048 cached ones, under its mask (ForwardChunk's float32 path): the mask is
  // [2,048 x 4,096] (bool and float32, 40 MiB), the scores 256 MiB and their softmax as much again.
  KvCache cache = model->NewCache(1, kT);
  (void)model->ForwardChunk(ids.narrow(1, 0, kT / 2).cuda(), &cache);
  auto [tail, chunk_peak] =
      peak_of([&]() { return model->ForwardChunk(ids.narrow(1, kT / 2, kT / 2).cuda(), &cache); });
  CAPTURE(chunk_peak);
  CHECK(chunk_peak < scores / 4);
  const double chunk_diff = (tail.cpu() - expected.narrow(1, kT / 2, kT / 2)).abs().max().item<double>();
  CAPTURE(chunk_diff);
  CHECK(chunk_diff < 1e-3);
#endif
}

TEST_CASE("decoding with the norms folded into the q/k/v and gate/up projections is as close to float32 as unfolded",
          "[worker][rollout][gpu]") {
  if (SkipWithoutGpu()) return;
  TestDir dir("gpu_decode_folded");
  const DecoderConfig config = KernelModelConfig();
  testing::WriteTinyModel(dir.path(), config);
  auto model = LoadOn(dir.path(), at::kBFloat16);
  auto reference = LoadOn(dir.path(), at::kFloat);
  // Norm weights away from one and biases away from zero (the tiny model's are ones and zeros), so that folding the
  // norms into the weights and adding the biases after the scale matter; the same bf16 values in both models.
  for (DecoderModel* m : {model.get(), reference.get()}) {
    at::NoGradGuard no_grad;
    uint64_t seed = 100;
    for (const auto& [name, t] : m->named_parameters()) {
      const auto gen = at::make_generator<at::CPUGeneratorImpl>(seed++);
      if (name.find("layernorm") != std::string::npos) {
        t.copy_((at::rand(t.sizes(), gen) + 0.5).to(at::kBFloat16));
      } else if (name.find("bias") != std::string::npos) {
        t.copy_((at::randn(t.sizes(), gen) * 0.2).to(at::kBFloat16));
      }
    }
  }
  REQUIRE(model->FoldedQkvWeights().size() == static_cast<size_t>(config.num_hidden_layers));
  CHECK(reference->FoldedQkvWeights().empty());  // float32 decodes unfolded (the exact composition)
  const auto prompts = RandomPrompts(48, 300, 6);
  // Two greedy tokens per sample: the first from the prefill (the same with and without folding), the second from one
  // decoding step. bf16 moves the second token's log-prob off float32's by rounding, folded or not (a tie may flip a
  // token); folding rounds in other places (the scaled weights, the projection before the scale), not more. A missing
  // norm scale or bias would move it by far more.
  SamplingOptions o = Options(config, /*sample=*/false);
  o.max_new_tokens = 2;
  o.eos_token_ids.clear();
  const RolloutBatch want = GenerateContinuous(*reference, prompts, o);
  o.fold_input_norms = false;
  const RolloutBatch plain = GenerateContinuous(*model, prompts, o);
  o.fold_input_norms = true;
  o.fold_post_attention_norms = false;
  const RolloutBatch folded = GenerateContinuous(*model, prompts, o);  // the input norms only
  o.fold_post_attention_norms = true;
  const RolloutBatch both = GenerateContinuous(*model, prompts, o);  // the post-attention norms too (the default)
  REQUIRE(model->FoldedGateUpWeights().size() == static_cast<size_t>(config.num_hidden_layers));
  CHECK(reference->FoldedGateUpWeights().empty());
  for (const RolloutBatch* r : {&folded, &both}) {
    CHECK(at::equal(plain.responses.select(1, 0), r->responses.select(1, 0)));
    CHECK(at::equal(plain.log_probs.select(1, 0), r->log_probs.select(1, 0)));
  }
  CHECK_FALSE(at::equal(plain.log_probs.select(1, 1), folded.log_probs.select(1, 1)));  // the fold did run
  CHECK_FALSE(at::equal(folded.log_probs.select(1, 1), both.log_probs.select(1, 1)));   // and the second one
  // Rows whose two tokens all four runs agree on.
  const at::Tensor same = plain.responses.eq(want.responses).all(1) & folded.responses.eq(want.responses).all(1) &
                          both.responses.eq(want.responses).all(1);
  const double agree = same.to(at::kDouble).mean().item<double>();
  CAPTURE(agree);
  REQUIRE(agree >= 0.8);
  auto err = [&](const RolloutBatch& r) {
    const at::Tensor d = (r.log_probs.select(1, 1) - want.log_probs.select(1, 1)).abs().masked_select(same);
    return std::pair<double, double>{d.max().item<double>(), d.mean().item<double>()};
  };
  const auto [plain_max, plain_mean] = err(plain);
  const auto [folded_max, folded_mean] = err(folded);
  const auto [both_max, both_mean] = err(both);
  CAPTURE(plain_max, plain_mean, folded_max, folded_mean, both_max, both_mean);
  CHECK(folded_max <= 2 * plain_max + 0.05);
  CHECK(folded_mean <= 2 * plain_mean + 0.01);
  CHECK(both_max <= 2 * plain_max + 0.05);
  CHECK(both_mean <= 2 * plain_mean + 0.01);
}

TEST_CASE("fused sampling on the GPU draws what ATen's composition draws", "[worker][rollout][gpu]") {
  if (SkipWithoutGpu()) return;
  c10::InferenceMode guard;
  // Logits spread over several units; a bf16 row of Qwen2's vocabulary too (rows start 16-byte aligned) and an odd
  // vocabulary (scalar loads).
  struct Case {
    int64_t rows, vocab;
    at::ScalarType dtype;
    double temperature;
  };
  for (const Case& c : {Case{1000, 5000, at::kFloat, 1.0}, Case{64, 151936, at::kBFloat16, 0.7},
                        Case{300, 1001, at::kHalf, 1.3}, Case{200, 4096, at::kFloat, 0.0}}) {
    INFO("rows " << c.rows << " vocab " << c.vocab << " " << c10::toString(c.dtype) << " temperature "
                 << c.temperature);
    at::Tensor logits = (at::randn({c.rows, c.vocab}) * 3).to(c.dtype);
    // Row 2: two equal maxima (greedy takes the first); row 3: most tokens at -inf (never drawn).
    logits[2][5] = 20.0;
    logits[2][c.vocab - 3] = 20.0;
    logits[3].narrow(0, 0, c.vocab - 7).fill_(-std::numeric_limits<float>::infinity());
    at::Tensor uniforms = at::rand({c.rows}, at::kDouble);
    uniforms[0] = 0.0;
    uniforms[1] = 1.0 - 1e-16;  // the end of the CDF
    for (bool sample : {false, true}) {
      INFO((sample ? "sampling" : "greedy"));
      SamplingOptions o;
      o.do_sample = sample;
      o.temperature = c.temperature;
      // The reference: ATen's composition on the CPU over the same values in float32.
      at::Tensor ref_lp;
      at::Tensor ref = SampleNextTokens(logits.to(at::kFloat), o, uniforms, &ref_lp);
      at::Tensor lp;
      at::Tensor tok = SampleNextTokens(logits.to(at::kCUDA), o, uniforms.to(at::kCUDA), &lp);
      tok = tok.cpu();
      lp = lp.cpu();
      // The kernel is deterministic: the same draws and log-probs again, from fresh copies of the inputs.
      for (int again = 0; again < 3; ++again) {
        at::Tensor lp2;
        const at::Tensor tok2 = SampleNextTokens(logits.to(at::kCUDA), o, uniforms.to(at::kCUDA), &lp2).cpu();
        CHECK(at::equal(tok2, tok));
        CHECK(at::equal(lp2.cpu(), lp));
      }
      // Row 1 (u at the very end of the CDF) sits within rounding of the last steps by construction: it is left out
      // of the agreement, and its draw must come from the CDF's top (any token of positive mass past 90 % of the row).
      at::Tensor rows = at::ones({c.rows}, at::kBool);
      if (sample) rows[1] = false;
      const double agree = tok.eq(ref).masked_select(rows).to(at::kDouble).mean().item<double>();
      CAPTURE(agree);
      std::string differ;  // row: ours / ATen's token, the draw
      for (int64_t r = 0; r < c.rows; ++r) {
        if (rows[r].item<bool>() && tok[r].item<int64_t>() != ref[r].item<int64_t>()) {
          differ += std::to_string(r) + ": " + std::to_string(tok[r].item<int64_t>()) + " / " +
                    std::to_string(ref[r].item<int64_t>()) + " u " + std::to_string(uniforms[r].item<double>()) + "; ";
        }
      }
      CAPTURE(differ);
      // Greedy must agree everywhere. A draw may differ only where u falls within rounding of a CDF step (the kernel's
      // float sums against the reference's float32 softmax; either side's rounding differs with the host's CPU too):
      // at Qwen2's vocabulary and temperature 0.7 most tokens carry far less than the average mass, so about one row
      // in a hundred does (one of 63 on 2026-12-03, neighbours 40553 / 40554). Each such row is checked against the
      // exact (float64) CDF: every token from the lower draw up to the higher one ends within 1e-5 of u, so the two
      // differ only by tokens whose mass sits inside the rounding.
      CHECK(agree >= (sample ? 0.95 : 1.0));
      if (sample && c.temperature > 0) {
        const at::Tensor cdf = at::softmax(logits.to(at::kDouble) / c.temperature, -1).cumsum(-1);
        for (int64_t r = 0; r < c.rows; ++r) {
          const int64_t a = tok[r].item<int64_t>(), b = ref[r].item<int64_t>();
          if (!rows[r].item<bool>() || a == b) continue;
          const double u = uniforms[r].item<double>();
          const int64_t lo = std::min(a, b), hi = std::max(a, b);
          INFO("row " << r << ": exact CDF " << cdf[r][lo].item<double>() << " at " << lo << ", "
                      << cdf[r][hi - 1].item<double>() << " at " << hi - 1 << ", u " << u);
          CHECK(std::abs(cdf[r][lo].item<double>() - u) <= 1e-5);
          CHECK(std::abs(cdf[r][hi - 1].item<double>() - u) <= 1e-5);
        }
      }
      if (sample && c.temperature > 0) CHECK(tok[1].item<int64_t>() >= static_cast<int64_t>(0.9 * c.vocab));
      if (!sample) CHECK(tok[2].item<int64_t>() == 5);
      CHECK(tok[3].item<int64_t>() >= c.vocab - 7);
      at::Tensor same = tok.eq(ref);
      REQUIRE(same.any().item<bool>());
      const double lp_diff = (lp - ref_lp).abs().masked_select(same).max().item<double>();
      CAPTURE(lp_diff);
      CHECK(lp_diff < 1e-4);
      // Every draw has positive probability (log-prob finite).
      CHECK(at::isfinite(lp).all().item<bool>());
      CHECK(tok.ge(0).logical_and(tok.lt(c.vocab)).all().item<bool>());
    }
  }
}

TEST_CASE("fused sampling at the very end of the CDF draws from its top, row after row", "[worker][rollout][gpu]") {
  if (SkipWithoutGpu()) return;
  c10::InferenceMode guard;
  // Every row's u within 2^-52 (or 1e-12, 1e-7) of 1: the draw is the first token past u * total, which the float sums
  // of the segments and pieces may place a little before the last token, never far (the last 10 % of the row here),
  // and never on a token of zero mass. Many rows, odd and aligned rows, three dtypes. (Until 2026-12-03 the rescan
  // could cross at a lane past the row's end and return the argmax instead: 79 of 2048 rows here.)
  struct Case {
    int64_t rows, vocab;
    at::ScalarType dtype;
    double temperature;
    bool masked;  // a third of the tokens at -inf (zero mass: never drawn)
  };
  for (const Case& c : {Case{2048, 1001, at::kHalf, 1.3, false}, Case{2048, 5000, at::kFloat, 1.0, false},
                        Case{512, 151936, at::kBFloat16, 0.7, false}, Case{2048, 1001, at::kBFloat16, 1.0, false},
                        Case{2048, 1001, at::kBFloat16, 1.0, true}}) {
    INFO("rows " << c.rows << " vocab " << c.vocab << " " << c10::toString(c.dtype) << " temperature " << c.temperature
                 << (c.masked ? ", a third of the tokens at -inf" : ""));
    at::Tensor logits = (at::randn({c.rows, c.vocab}) * 3).to(c.dtype);
    if (c.masked) logits.masked_fill_(at::rand({c.rows, c.vocab}).lt(1.0 / 3), -std::numeric_limits<float>::infinity());
    for (const double u : {1.0 - 1e-16, 1.0 - 1e-12, 1.0 - 1e-7}) {
      INFO("u = 1 - " << 1.0 - u);
      SamplingOptions o;
      o.do_sample = true;
      o.temperature = c.temperature;
      at::Tensor lp;
      const at::Tensor tok =
          SampleNextTokens(logits.to(at::kCUDA), o, at::full({c.rows}, u, at::kDouble).to(at::kCUDA), &lp).cpu();
      const at::Tensor low = tok.lt(static_cast<int64_t>(0.9 * c.vocab)).nonzero();
      std::string rows;  // row: token, ATen's draw, the row's argmax
      for (int64_t i = 0; i < std::min<int64_t>(low.size(0), 5); ++i) {
        const int64_t r = low[i][0].item<int64_t>();
        const at::Tensor ref =
            SampleNextTokens(logits.narrow(0, r, 1).to(at::kFloat), o, at::full({1}, u, at::kDouble), nullptr);
        rows += std::to_string(r) + ": " + std::to_string(tok[r].item<int64_t>()) + ", ATen " +
                std::to_string(ref[0].item<int64_t>()) + ", argmax " +
                std::to_string(logits[r].to(at::kFloat).argmax().item<int64_t>()) + "; ";
      }
      CAPTURE(rows);
      CHECK(low.size(0) == 0);
      CHECK(at::isfinite(lp).all().item<bool>());  // no token of zero mass
      CHECK(tok.lt(c.vocab).all().item<bool>());
    }
  }
}

TEST_CASE("fused sampling over small and odd vocabularies draws ATen's tokens", "[worker][rollout][gpu]") {
  if (SkipWithoutGpu()) return;
  c10::InferenceMode guard;
  // Vocabularies below one warp's stride, at and around a segment's edge (256 elements of 16-bit types), and odd; rows
  // of odd length (most rows misaligned); u random, 0 and within 2^-53 of 1; a low temperature (mass on few tokens).
  for (const int64_t vocab : {1, 2, 33, 255, 256, 257, 4097}) {
    for (const at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
      for (const double temperature : {1.0, 0.05}) {
        INFO("vocab " << vocab << " " << c10::toString(dtype) << " temperature " << temperature);
        const int64_t rows = 129;
        const at::Tensor logits = (at::randn({rows, vocab}) * 3).to(dtype);
        at::Tensor uniforms = at::rand({rows}, at::kDouble);
        uniforms[0] = 0.0;
        uniforms[1] = 1.0 - 1e-16;
        SamplingOptions o;
        o.do_sample = true;
        o.temperature = temperature;
        at::Tensor lp;
        const at::Tensor tok = SampleNextTokens(logits.to(at::kCUDA), o, uniforms.to(at::kCUDA), &lp).cpu();
        const at::Tensor ref = SampleNextTokens(logits.to(at::kFloat), o, uniforms, nullptr);
        CHECK(tok.ge(0).logical_and(tok.lt(vocab)).all().item<bool>());
        CHECK(at::isfinite(lp.cpu()).all().item<bool>());
        // Row 1 sits within rounding of the CDF's end: left out, as in the case above.
        const double agree =
            tok.narrow(0, 2, rows - 2).eq(ref.narrow(0, 2, rows - 2)).to(at::kDouble).mean().item<double>();
        CAPTURE(agree);
        CHECK(agree >= 0.99);
        CHECK(tok[0].item<int64_t>() == ref[0].item<int64_t>());  // u = 0: the first token of positive mass
      }
    }
  }
}

TEST_CASE("fused sampling with top-k and top-p draws what ATen's composition draws", "[worker][rollout][gpu]") {
  if (SkipWithoutGpu()) return;
  c10::InferenceMode guard;
  // The kernel's filters (a search over the values' keys, sampling_kernel.h) against ATen's sort-based composition on
  // the CPU over the same values in float32. bf16 rows of Qwen2's vocabulary hold many tokens of equal value, which
  // both sides keep or drop together at the top-p cut.
  struct Case {
    int64_t rows, vocab;
    at::ScalarType dtype;
    double temperature;
    int32_t top_k;
    double top_p;
  };
  for (const Case& c : {Case{500, 5000, at::kFloat, 1.0, 0, 0.9}, Case{64, 151936, at::kBFloat16, 0.7, 0, 0.95},
                        Case{64, 151936, at::kBFloat16, 1.0, 50, 1.0}, Case{300, 1001, at::kHalf, 1.3, 20, 0.8},
                        Case{200, 4096, at::kFloat, 1.0, 1, 1.0}, Case{200, 4097, at::kBFloat16, 1.0, 0, 1e-6},
                        Case{129, 33, at::kFloat, 0.5, 5, 0.5}}) {
    INFO("rows " << c.rows << " vocab " << c.vocab << " " << c10::toString(c.dtype) << " temperature "
                 << c.temperature << " top_k " << c.top_k << " top_p " << c.top_p);
    const at::Tensor logits = (at::randn({c.rows, c.vocab}) * 3).to(c.dtype);
    const at::Tensor uniforms = at::rand({c.rows}, at::kDouble);
    SamplingOptions o;
    o.temperature = c.temperature;
    o.top_k = c.top_k;
    o.top_p = c.top_p;
    at::Tensor ref_lp;
    const at::Tensor ref = SampleNextTokens(logits.to(at::kFloat), o, uniforms, &ref_lp);
    at::Tensor lp;
    const at::Tensor tok = SampleNextTokens(logits.to(at::kCUDA), o, uniforms.to(at::kCUDA), &lp).cpu();
    lp = lp.cpu();
    for (int again = 0; again < 2; ++again) {  // the same draws every time
      at::Tensor lp2;
      CHECK(at::equal(SampleNextTokens(logits.to(at::kCUDA), o, uniforms.to(at::kCUDA), &lp2).cpu(), tok));
      CHECK(at::equal(lp2.cpu(), lp));
    }
    CHECK(tok.ge(0).logical_and(tok.lt(c.vocab)).all().item<bool>());
    CHECK(at::isfinite(lp).all().item<bool>());
    // Every draw lies inside the filters, by the exact (float64) masses: within the top-k values, and with at most
    // top_p of the top-k mass at strictly larger values (1e-5 of slack for the float sums' rounding at the cut).
    const at::Tensor x = logits.to(at::kDouble) / c.temperature;
    const at::Tensor p = at::softmax(x, -1);
    std::string outside;
    for (int64_t r = 0; r < c.rows; ++r) {
      const int64_t t = tok[r].item<int64_t>();
      const double xt = x[r][t].item<double>();
      at::Tensor kept = at::ones({c.vocab}, at::kBool);
      if (c.top_k > 0) kept = x[r].ge(std::get<0>(x[r].topk(c.top_k)).min());
      const double zk = p[r].masked_select(kept).sum().item<double>();
      const double above = p[r].masked_select(kept.logical_and(x[r].gt(xt))).sum().item<double>();
      if (!kept[t].item<bool>() || above > c.top_p * zk + 1e-5) {
        outside += std::to_string(r) + ": token " + std::to_string(t) + " mass above " + std::to_string(above / zk) +
                   "; ";
      }
    }
    CAPTURE(outside);
    CHECK(outside.empty());
    // The same tokens as ATen's composition but where a draw or the cut falls within rounding (a row in a hundred at
    // most, as for the unfiltered kernel); the log-probs are the unfiltered softmax's.
    const at::Tensor same = tok.eq(ref);
    const double agree = same.to(at::kDouble).mean().item<double>();
    CAPTURE(agree);
    CHECK(agree >= 0.95);
    REQUIRE(same.any().item<bool>());
    CHECK((lp - ref_lp).abs().masked_select(same).max().item<double>() < 1e-4);
    const at::Tensor unfiltered_lp = at::log_softmax(x, -1).gather(-1, tok.unsqueeze(-1)).squeeze(-1);
    CHECK((lp.to(at::kDouble) - unfiltered_lp).abs().max().item<double>() < 1e-4);
    if (c.top_k == 1) CHECK(at::equal(tok, logits.to(at::kFloat).argmax(-1)));  // float32 rows: no tied maxima
    if (c.top_p < 1e-3) CHECK(at::equal(x.gather(-1, tok.unsqueeze(-1)).squeeze(-1), std::get<0>(x.max(-1))));
  }
}

TEST_CASE("fused sampling returns a NaN log-prob for a row with a NaN logit, and a token inside the vocabulary",
          "[worker][rollout][gpu]") {
  if (SkipWithoutGpu()) return;
  c10::InferenceMode guard;
  // A NaN logit first, in the middle, last, in a row of -inf, or everywhere; ATen's log_softmax gives NaN log-probs
  // for such a row, and so must we (before e68939c the kernel skipped a NaN that came before a lane's first finite
  // value). The other rows draw exactly what they draw without the NaN rows.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (const int64_t vocab : {151936, 1001, 33}) {
    for (const at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
      INFO("vocab " << vocab << " " << c10::toString(dtype));
      const int64_t rows = 40;
      const at::Tensor clean = (at::randn({rows, vocab}) * 3).to(dtype);
      at::Tensor logits = clean.clone();
      logits[0][0] = nan;
      logits[1][vocab / 2] = nan;
      logits[2][vocab - 1] = nan;
      logits[3].fill_(-inf);
      logits[3][vocab / 3] = nan;
      logits[4].fill_(nan);
      logits[5].narrow(0, 0, vocab / 2 + 1).fill_(nan);
      const at::Tensor uniforms = at::rand({rows}, at::kDouble);
      for (const bool sample : {false, true}) {
        INFO((sample ? "sampling" : "greedy"));
        SamplingOptions o;
        o.do_sample = sample;
        o.temperature = 0.9;
        at::Tensor lp, lp_clean;
        const at::Tensor tok = SampleNextTokens(logits.to(at::kCUDA), o, uniforms.to(at::kCUDA), &lp).cpu();
        const at::Tensor tok_clean = SampleNextTokens(clean.to(at::kCUDA), o, uniforms.to(at::kCUDA), &lp_clean).cpu();
        lp = lp.cpu();
        lp_clean = lp_clean.cpu();
        CHECK(tok.ge(0).logical_and(tok.lt(vocab)).all().item<bool>());
        CHECK(lp.narrow(0, 0, 6).isnan().all().item<bool>());
        CHECK(at::equal(tok.narrow(0, 6, rows - 6), tok_clean.narrow(0, 6, rows - 6)));
        CHECK(at::equal(lp.narrow(0, 6, rows - 6), lp_clean.narrow(0, 6, rows - 6)));
      }
    }
  }
}

TEST_CASE("fused RMSNorm and RoPE agree with the ATen composition they replace", "[worker][rollout][gpu]") {
  if (SkipWithoutGpu()) return;
#ifdef VERL_WITH_CUDA
  c10::InferenceMode guard;
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
    INFO(c10::toString(dtype));
    auto opts = at::TensorOptions().device(at::kCUDA);
    // RMSNorm over Qwen2.5-0.5B's hidden size, an odd one, the longest rows held in registers in bf16/fp16 (2048;
    // float32 reads them twice) and longer rows (read twice); HF's formula as DecoderModel::RmsNorm writes it.
    for (int64_t hidden : {896, 37, 2048, 5000}) {
      at::Tensor x = (at::randn({5, 7, hidden}, opts) * 3).to(dtype);
      at::Tensor w = (at::rand({hidden}, opts) + 0.5).to(dtype);
      const double eps = 1e-6;
      REQUIRE(kernels::RmsNormSupported(x, w));
      at::Tensor xf = x.to(at::kFloat);
      at::Tensor normed = (xf * at::rsqrt(xf.pow(2).mean(-1, true) + eps)).to(dtype);
      at::Tensor ref = w * normed;
      at::Tensor got = kernels::RmsNorm(x, w, eps);
      REQUIRE(got.sizes() == x.sizes());
      // The mean is summed in another order, so the normalised value may round one step of the dtype the other way;
      // the weight scales that step, and the product rounds once more (each step relative to the larger value, which
      // may lie on either side of a power of two). Seen on the H200: fp16 rows of 2048 and 5000 elements 2^-9 apart.
      const double ulp = dtype == at::kBFloat16 ? 1.0 / 128 : dtype == at::kHalf ? 1.0 / 1024 : 1e-6;
      at::Tensor err = (got.to(at::kFloat) - ref.to(at::kFloat)).abs();
      at::Tensor scale = at::maximum(got.to(at::kFloat).abs(), ref.to(at::kFloat).abs());
      at::Tensor bound = (w.to(at::kFloat).abs() * normed.to(at::kFloat).abs() + scale) * ulp * 1.01 + 1e-6;
      CAPTURE(err.max().item<double>());
      CHECK(err.le(bound).all().item<bool>());
    }
    // RoPE on the transposed [B, H, T, D] view the attention makes, with the model's cos/sin (positions 0..T-1).
    for (int64_t D : {64, 128}) {
      const int64_t B = 3, T = 9, H = 5;
      at::Tensor x = at::randn({B, T, H, D}, opts).to(dtype).transpose(1, 2);
      at::Tensor pos = at::arange(T, opts.dtype(at::kFloat)).repeat({B, 1}).unsqueeze(-1) * 0.37;
      at::Tensor freqs = pos * at::rand({D / 2}, opts);
      at::Tensor emb = at::cat({freqs, freqs}, -1).unsqueeze(1);
      at::Tensor cos = emb.cos().to(dtype), sin = emb.sin().to(dtype);
      REQUIRE(kernels::RopeSupported(x, cos));
      const int64_t half = D / 2;
      at::Tensor rot = at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
      at::Tensor ref = x * cos + rot * sin;
      at::Tensor got = kernels::Rope(x, cos, sin);
      REQUIRE(got.sizes() == x.sizes());
      CHECK(at::equal(got, ref));  // the same roundings: bit for bit
    }
  }
#endif
}

TEST_CASE("decoding's fused residual add + RMSNorm and stacked SwiGLU equal the unfused kernels",
          "[worker][rollout][gpu]") {
  if (SkipWithoutGpu()) return;
#ifdef VERL_WITH_CUDA
  c10::InferenceMode guard;
  auto opts = at::TensorOptions().device(at::kCUDA);
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
    // Hidden sizes that take 16-byte vectors (896; 5000: too long to hold in registers) and single elements (37); a
    // residual of another scale.
    for (int64_t hidden : {896, 37, 5000}) {
      INFO(c10::toString(dtype) << " hidden " << hidden);
      at::Tensor x = (at::randn({9, 1, hidden}, opts) * 3).to(dtype);
      at::Tensor res = at::randn({9, 1, hidden}, opts).to(dtype);
      at::Tensor w = (at::rand({hidden}, opts) + 0.5).to(dtype);
      REQUIRE(kernels::AddRmsNormSupported(x, res, w));
      at::Tensor sum;
      at::Tensor got = kernels::AddRmsNorm(x, res, w, 1e-6, &sum);
      const at::Tensor want_sum = x + res;
      CHECK(at::equal(sum, want_sum));
      CHECK(at::equal(got, kernels::RmsNorm(want_sum, w, 1e-6)));
    }
    // gate/up halves of one GEMM output: intermediate sizes that take vectors (4864) and not (37).
    for (int64_t inter : {4864, 37}) {
      INFO(c10::toString(dtype) << " intermediate " << inter);
      at::Tensor gate_up = (at::randn({7, 1, 2 * inter}, opts) * 2).to(dtype);
      REQUIRE(kernels::SwiGluStackedSupported(gate_up));
      at::Tensor got = kernels::SwiGluStacked(gate_up);
      REQUIRE(got.sizes() == at::IntArrayRef{7, 1, inter});
      at::Tensor want =
          kernels::SwiGlu(gate_up.narrow(-1, 0, inter).contiguous(), gate_up.narrow(-1, inter, inter).contiguous());
      CHECK(at::equal(got, want));
    }
  }
  // The post-attention norm folded into the stacked gate/up projection: against the unfolded composition (RMSNorm,
  // the projection, SwiGluStacked) within rounding, and against the kernel's own formula on the same projection
  // (to_dtype(r * x) of each value, then SwiGluStacked) all but exactly. Hidden sizes with and without 16-byte vectors,
  // intermediate sizes with (4864) and without (37).
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
    for (const auto [hidden, inter] : {std::pair<int64_t, int64_t>{896, 4864}, {90, 4864}, {896, 37}}) {
      INFO("folded post-attention norm, " << c10::toString(dtype) << " hidden " << hidden << " intermediate "
                                          << inter);
      const int64_t B = 11;
      at::Tensor h = (at::randn({B, 1, hidden}, opts) * 3).to(dtype);
      at::Tensor g = (at::rand({hidden}, opts) + 0.5).to(dtype);
      at::Tensor w = (at::randn({2 * inter, hidden}, opts) / std::sqrt(static_cast<double>(hidden))).to(dtype);
      const at::Tensor want = kernels::SwiGluStacked(at::linear(kernels::RmsNorm(h, g, 1e-6), w));
      const at::Tensor w_folded = (w.to(at::kFloat) * g.to(at::kFloat).unsqueeze(0)).to(dtype);
      const at::Tensor gate_up = at::linear(h, w_folded);
      REQUIRE(kernels::SwiGluStackedNormedSupported(gate_up, h));
      const at::Tensor got = kernels::SwiGluStackedNormed(gate_up, h, 1e-6);
      REQUIRE(got.sizes() == want.sizes());
      // float32: sums in another order; bf16 / fp16: other roundings of values of a few units (the folded weights
      // rounded to bf16, the worst of 53k outputs: 0.031 seen at hidden 90). A missing or doubled norm scale (h is
      // about 3 times its norm) is off by far more.
      const double tol = dtype == at::kFloat ? 1e-4 : dtype == at::kHalf ? 0.01 : 0.05;
      const at::Tensor wf = want.to(at::kFloat);
      CHECK(((got.to(at::kFloat) - wf).abs() / (wf.abs() + 1)).max().item<double>() < tol);
      const at::Tensor r = (h.to(at::kFloat).pow(2).mean(-1, true) + 1e-6).rsqrt();
      const at::Tensor formula = kernels::SwiGluStacked((gate_up.to(at::kFloat) * r).to(dtype));
      if (dtype == at::kFloat) {
        CHECK(at::allclose(got, formula, 1e-5, 1e-6));
      } else {  // r may differ from ATen's in its last bit (another order of the sum), and silu by 2 ulp (the
                // special-function unit's), moving a rounding
        CHECK(got.eq(formula).to(at::kDouble).mean().item<double>() >= 0.99);
      }
    }
  }
  {
    at::Tensor gate_up = at::randn({3, 1, 64}, opts), h = at::randn({3, 1, 16}, opts);
    CHECK(kernels::SwiGluStackedNormedSupported(gate_up, h));
    CHECK_FALSE(kernels::SwiGluStackedNormedSupported(gate_up, at::randn({2, 1, 16}, opts)));  // rows differ
    CHECK_FALSE(kernels::SwiGluStackedNormedSupported(gate_up, at::randn({3, 1, 32}, opts).slice(2, 0, 32, 2)));
    CHECK_FALSE(kernels::SwiGluStackedNormedSupported(gate_up.view({3, 64}), h));  // not one token per row
  }
  // Not taken: a residual of another shape, an odd stacked width, a non-contiguous input.
  at::Tensor x = at::randn({4, 64}, opts);
  CHECK_FALSE(kernels::AddRmsNormSupported(x, at::randn({4, 32}, opts), at::ones({64}, opts)));
  CHECK_FALSE(kernels::SwiGluStackedSupported(at::randn({4, 63}, opts)));
  CHECK_FALSE(kernels::SwiGluStackedSupported(x.t()));
#endif
}

TEST_CASE("one decoding step's fused RoPE and cache append equal two Rope calls and two index_copy_ calls",
          "[worker][rollout][gpu]") {
  if (SkipWithoutGpu()) return;
#ifdef VERL_WITH_CUDA
  c10::InferenceMode guard;
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
    // offset: rows of q, k and v one element past 16-byte alignment (the kernel's element-by-element form).
    for (auto [D, offset] : {std::pair<int64_t, int64_t>{64, 0}, {128, 0}, {64, 1}}) {
      INFO(c10::toString(dtype) << " D " << D << " offset " << offset);
      const int64_t B = 6, Hq = 14, Hkv = 2, S = 9, C = 40;
      auto opts = at::TensorOptions().device(at::kCUDA);
      // The projections' [B, 1, H * D] outputs as the layer views them: [B, H, 1, D].
      auto project = [&](int64_t heads) {
        return at::randn({B, 1, heads * D + offset}, opts)
            .to(dtype)
            .narrow(2, offset, heads * D)
            .view({B, 1, heads, D})
            .transpose(1, 2);
      };
      at::Tensor q = project(Hq), k = project(Hkv), v = project(Hkv);
      at::Tensor pos = at::randint(0, C, {B}, opts.dtype(at::kLong));
      at::Tensor freqs = pos.to(at::kFloat).view({B, 1}) * at::rand({D / 2}, opts);
      at::Tensor emb = at::cat({freqs, freqs}, -1).view({B, 1, 1, D});
      at::Tensor cos = emb.cos().to(dtype), sin = emb.sin().to(dtype);
      // Slots 0..B-1 of a cache of S slots (the generator's view), rows (b * Hkv + h) * C + pos[b].
      at::Tensor k_cache = at::randn({S, Hkv, C, D}, opts).to(dtype),
                 v_cache = at::randn({S, Hkv, C, D}, opts).to(dtype);
      at::Tensor rows = (at::arange(B * Hkv, opts.dtype(at::kLong)).view({B, Hkv}) * C + pos.view({B, 1})).view({-1});
      at::Tensor k_want = k_cache.clone(), v_want = v_cache.clone();
      at::Tensor q_want = kernels::Rope(q.contiguous(), cos, sin).select(2, 0);
      k_want.view({-1, D}).index_copy_(0, rows, kernels::Rope(k.contiguous(), cos, sin).select(2, 0).reshape({-1, D}));
      v_want.view({-1, D}).index_copy_(0, rows, v.select(2, 0).reshape({-1, D}));
      REQUIRE(kernels::RopeAppendSupported(q, k, v, cos, k_cache, v_cache, rows));
      at::Tensor q_got = kernels::RopeAppend(q, k, v, cos, sin, k_cache, v_cache, rows);
      REQUIRE(q_got.sizes() == at::IntArrayRef{B, Hq, D});
      CHECK(at::equal(q_got, q_want));
      CHECK(at::equal(k_cache, k_want));  // the new rows, and every other row untouched
      CHECK(at::equal(v_cache, v_want));
    }
  }
  // With the input norm folded into the projection: what RMSNorm, the projection with bias and RopeAppend give.
  // Cases: float32, bf16, fp16 with H = 96 (16-byte vectors); bf16 with H = 90 (the element-by-element form); bf16
  // without a bias.
  struct FoldCase {
    at::ScalarType dtype;
    int64_t H;
    bool bias;
  };
  for (const FoldCase fc : {FoldCase{at::kFloat, 96, true}, FoldCase{at::kBFloat16, 96, true},
                            FoldCase{at::kHalf, 96, true}, FoldCase{at::kBFloat16, 90, true},
                            FoldCase{at::kBFloat16, 96, false}}) {
    const at::ScalarType dtype = fc.dtype;
    INFO("folded input norm, " << c10::toString(dtype) << " H " << fc.H << (fc.bias ? "" : ", no bias"));
    const int64_t B = 6, Hq = 14, Hkv = 2, D = 64, H = fc.H, S = 9, C = 40;
    const int64_t width = (Hq + 2 * Hkv) * D;
    auto opts = at::TensorOptions().device(at::kCUDA);
    at::Tensor h = (at::randn({B, 1, H}, opts) * 3).to(dtype);
    at::Tensor g = (at::rand({H}, opts) + 0.5).to(dtype);
    at::Tensor w = (at::randn({width, H}, opts) / std::sqrt(static_cast<double>(H))).to(dtype);
    at::Tensor bias = fc.bias ? (at::randn({width}, opts) * 0.5).to(dtype) : at::Tensor();
    at::Tensor pos = at::randint(0, C, {B}, opts.dtype(at::kLong));
    at::Tensor freqs = pos.to(at::kFloat).view({B, 1}) * at::rand({D / 2}, opts);
    at::Tensor emb = at::cat({freqs, freqs}, -1).view({B, 1, 1, D});
    at::Tensor cos = emb.cos().to(dtype), sin = emb.sin().to(dtype);
    at::Tensor rows = (at::arange(B * Hkv, opts.dtype(at::kLong)).view({B, Hkv}) * C + pos.view({B, 1})).view({-1});
    auto split = [&](const at::Tensor& qkv) {  // as the layer views the stacked projection
      auto heads = [&](int64_t from, int64_t n) { return qkv.narrow(-1, from * D, n * D).view({B, 1, n, D}).transpose(1, 2); };
      return std::array<at::Tensor, 3>{heads(0, Hq), heads(Hq, Hkv), heads(Hq + Hkv, Hkv)};
    };
    at::Tensor k_want = at::randn({S, Hkv, C, D}, opts).to(dtype), v_want = at::randn({S, Hkv, C, D}, opts).to(dtype);
    at::Tensor k_got = k_want.clone(), v_got = v_want.clone();
    auto [q, k, v] = split(at::linear(kernels::RmsNorm(h, g, 1e-6), w, bias));
    at::Tensor q_want = kernels::RopeAppend(q, k, v, cos, sin, k_want, v_want, rows);
    const at::Tensor w_folded = (w.to(at::kFloat) * g.to(at::kFloat).unsqueeze(0)).to(dtype);
    auto [qf, kf, vf] = split(at::linear(h, w_folded));
    REQUIRE(kernels::RopeAppendNormedSupported(qf, kf, vf, cos, k_got, v_got, rows, h, bias));
    at::Tensor q_got = kernels::RopeAppendNormed(qf, kf, vf, cos, sin, k_got, v_got, rows, h, 1e-6, bias);
    // float32: the same sums in another order; bf16: other roundings (a few of 2^-8 relative each) of values of a
    // few units. A missing norm scale (h is about 3 times its norm) or bias is off by far more.
    const double tol = dtype == at::kFloat ? 1e-4 : dtype == at::kHalf ? 0.01 : 0.03;
    auto rel_err = [](const at::Tensor& got, const at::Tensor& want) {
      const at::Tensor w = want.to(at::kFloat);
      return ((got.to(at::kFloat) - w).abs() / (w.abs() + 1)).max().item<double>();
    };
    CHECK(rel_err(q_got, q_want) < tol);
    CHECK(rel_err(k_got, k_want) < tol);  // the new rows; every other row untouched (equal)
    CHECK(rel_err(v_got, v_want) < tol);
    // A bias the size of another projection is not taken.
    if (fc.bias) {
      CHECK_FALSE(
          kernels::RopeAppendNormedSupported(qf, kf, vf, cos, k_got, v_got, rows, h, bias.narrow(0, 0, width - D)));
    }
  }
  // What it does not take: an int32 row index, a non-contiguous cache.
  auto opts = at::TensorOptions().device(at::kCUDA).dtype(at::kBFloat16);
  at::Tensor q = at::randn({2, 4, 1, 64}, opts), k = at::randn({2, 2, 1, 64}, opts);
  at::Tensor cos = at::randn({2, 1, 1, 64}, opts), cache = at::randn({2, 2, 8, 64}, opts);
  at::Tensor rows = at::zeros({4}, opts.dtype(at::kLong));
  CHECK(kernels::RopeAppendSupported(q, k, k, cos, cache, cache, rows));
  CHECK_FALSE(kernels::RopeAppendSupported(q, k, k, cos, cache, cache, rows.to(at::kInt)));
  CHECK_FALSE(kernels::RopeAppendSupported(q, k, k, cos, cache.transpose(1, 2), cache, rows));
  // Nor a value cache shorter than the key cache (both are written at the key cache's rows).
  CHECK_FALSE(kernels::RopeAppendSupported(q, k, k, cos, cache, cache.narrow(2, 0, 4).contiguous(), rows));
  // sin in host memory is refused, not read by the kernel.
  CHECK_THROWS(kernels::RopeAppend(q, k, k, cos, cos.cpu(), cache, cache, rows));
  CHECK_THROWS(kernels::Rope(at::randn({2, 4, 1, 64}, opts), cos, cos.cpu()));
#endif
}

// A copy of t in a buffer one element past 16-byte alignment: the same values, read element by element by the fused
// kernels (their 16-byte vectors need aligned rows).
#ifdef VERL_WITH_CUDA
at::Tensor Misaligned(const at::Tensor& t) {
  at::Tensor buf = at::empty({t.numel() + 1}, t.options());
  at::Tensor out = buf.narrow(0, 1, t.numel()).view(t.sizes());
  out.copy_(t);
  return out;
}
#endif

TEST_CASE("the folded norms' kernels give the same values with and without 16-byte vectors", "[worker][rollout][gpu]") {
  if (SkipWithoutGpu()) return;
#ifdef VERL_WITH_CUDA
  c10::InferenceMode guard;
  auto opts = at::TensorOptions().device(at::kCUDA);
  // SwiGluStackedNormed: aligned inputs take 16-byte vectors (bf16: the arithmetic in pairs, SwiGluNormedPairs), a
  // misaligned gate_up or h the per-element form; the row's scale is summed in one order either way (RowNormScale).
  // Qwen2.5-0.5B's shape (4864 outputs a row: one round of three vectors per thread) and 7B's (18944: several).
  for (at::ScalarType dtype : {at::kBFloat16, at::kHalf, at::kFloat}) {
    for (const auto [hidden, inter] : {std::pair<int64_t, int64_t>{896, 4864}, {3584, 18944}}) {
      INFO("SwiGluStackedNormed, " << c10::toString(dtype) << " hidden " << hidden << " intermediate " << inter);
      const int64_t B = 5;
      const at::Tensor h = (at::randn({B, 1, hidden}, opts) * 3).to(dtype);
      const at::Tensor gate_up = (at::randn({B, 1, 2 * inter}, opts) * 40).to(dtype);  // some silu(g) near 0 and g
      REQUIRE(kernels::SwiGluStackedNormedSupported(gate_up, h));
      const at::Tensor vec = kernels::SwiGluStackedNormed(gate_up, h, 1e-6);
      CHECK(at::equal(vec, kernels::SwiGluStackedNormed(Misaligned(gate_up), h, 1e-6)));
      CHECK(at::equal(vec, kernels::SwiGluStackedNormed(gate_up, Misaligned(h), 1e-6)));
      // Not trivially equal: another row's scale changes the values.
      CHECK_FALSE(at::equal(vec, kernels::SwiGluStackedNormed(gate_up, h * 2, 1e-6)));
    }
  }
  // RopeAppendNormed: rows of q, k and v aligned (16-byte items, RopeNormItem<T, 8>) and one element past (single
  // elements) give the same q and cache rows. Then with the scale exactly 0.5 (h of +-2, eps 0: mean 4, rsqrtf(4) =
  // 0.5): equal to RopeAppend of to_dtype(0.5 * x + bias) computed by ATen, the form the fused items replaced.
  for (at::ScalarType dtype : {at::kBFloat16, at::kHalf, at::kFloat}) {
    for (const bool exact_scale : {false, true}) {
      INFO("RopeAppendNormed, " << c10::toString(dtype) << (exact_scale ? ", scale 0.5" : ""));
      const int64_t B = 6, Hq = 14, Hkv = 2, D = 64, H = 896, S = 9, C = 40;
      const int64_t width = (Hq + 2 * Hkv) * D;
      const double eps = exact_scale ? 0.0 : 1e-6;
      at::Tensor h = exact_scale ? (at::randint(0, 2, {B, 1, H}, opts) * 4 - 2).to(dtype)
                                 : (at::randn({B, 1, H}, opts) * 3).to(dtype);
      at::Tensor qkv = at::randn({B, 1, width}, opts).to(dtype);
      at::Tensor bias = (at::randn({width}, opts) * 0.5).to(dtype);
      at::Tensor pos = at::randint(0, C, {B}, opts.dtype(at::kLong));
      at::Tensor freqs = pos.to(at::kFloat).view({B, 1}) * at::rand({D / 2}, opts);
      at::Tensor emb = at::cat({freqs, freqs}, -1).view({B, 1, 1, D});
      at::Tensor cos = emb.cos().to(dtype), sin = emb.sin().to(dtype);
      at::Tensor rows = (at::arange(B * Hkv, opts.dtype(at::kLong)).view({B, Hkv}) * C + pos.view({B, 1})).view({-1});
      auto split = [&](const at::Tensor& t) {
        auto heads = [&](int64_t from, int64_t n) {
          return t.narrow(-1, from * D, n * D).view({B, 1, n, D}).transpose(1, 2);
        };
        return std::array<at::Tensor, 3>{heads(0, Hq), heads(Hq, Hkv), heads(Hq + Hkv, Hkv)};
      };
      const at::Tensor k0 = at::randn({S, Hkv, C, D}, opts).to(dtype), v0 = at::randn({S, Hkv, C, D}, opts).to(dtype);
      auto run = [&](const at::Tensor& x) {
        at::Tensor kc = k0.clone(), vc = v0.clone();
        auto [q, k, v] = split(x);
        REQUIRE(kernels::RopeAppendNormedSupported(q, k, v, cos, kc, vc, rows, h, bias));
        at::Tensor q_out = kernels::RopeAppendNormed(q, k, v, cos, sin, kc, vc, rows, h, eps, bias);
        return std::array<at::Tensor, 3>{q_out, kc, vc};
      };
      const auto vec = run(qkv), elem = run(Misaligned(qkv));
      for (int i = 0; i < 3; ++i) CHECK(at::equal(vec[i], elem[i]));
      if (exact_scale) {
        at::Tensor kc = k0.clone(), vc = v0.clone();
        auto [q, k, v] = split((qkv.to(at::kFloat) * 0.5 + bias.to(at::kFloat)).to(dtype));
        const at::Tensor q_want = kernels::RopeAppend(q, k, v, cos, sin, kc, vc, rows);
        CHECK(at::equal(vec[0], q_want));
        CHECK(at::equal(vec[1], kc));
        CHECK(at::equal(vec[2], vc));
      }
    }
  }
#endif
}

}  // namespace
}  // namespace verl
