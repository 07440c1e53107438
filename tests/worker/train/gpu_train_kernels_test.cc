// The trainer's CUDA kernels against plain ATen: fused RMSNorm, RoPE and SwiGLU (values and gradients), the fused
// token log-prob / entropy kernels inside ChunkedLogProbs (values and gradients), and a whole decoder's training
// forward and backward on the GPU (all of them together, with and without gradient checkpointing) against the CPU, and
// the no-grad log-prob passes (residual adds fused into the norms) against the forward with gradients, bit for bit,
// and packed passes with shared prompts (use_prefix_grouper, and the row movers behind them) against the CPU's float32
// padded pass.
// Tagged [gpu]: each case skips with a warning where the build has no CUDA or no GPU is visible.

#include <torch/csrc/autograd/autograd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "tests/test_dir.h"
#include "tests/worker/gpu_skip.h"
#include "tests/worker/tiny_model.h"
#include "tests/worker/torch_catch.h"
#include "worker/rank/torch_util.h"
#include "worker/train/adamw.h"
#include "worker/train/chunked_log_probs.h"
#include "worker/train/ppo_actor.h"
#ifdef VERL_WITH_CUDA
#include "worker/kernels/float_sums.h"
#include "worker/kernels/fused_ops.h"
#include "worker/kernels/gather_rows.h"
#include "worker/kernels/log_probs.h"
#endif

namespace verl {
namespace {

using testing::MaxAbsDiff;
using testing::SkipWithoutGpu;
using testing::TestDir;

double MaxAbs(const at::Tensor& t) { return t.to(at::kDouble).abs().max().item<double>(); }

// One rounding step of the dtype, relative.
double Ulp(at::ScalarType dtype) {
  return dtype == at::kBFloat16 ? 1.0 / 128 : dtype == at::kHalf ? 1.0 / 1024 : 1.0 / (1 << 23);
}

// d(sum(out * g_out)) / d inputs.
std::vector<at::Tensor> Grads(const at::Tensor& out, const at::Tensor& g_out, const std::vector<at::Tensor>& inputs) {
  return torch::autograd::grad({out}, inputs, {g_out}, /*retain_graph=*/false, /*create_graph=*/false,
                               /*allow_unused=*/true);
}

#ifdef VERL_WITH_CUDA
// The ATen compositions the kernels replace, as DecoderModel writes them.
at::Tensor AtenRmsNorm(const at::Tensor& x, const at::Tensor& w, double eps) {
  at::Tensor xf = x.to(at::kFloat);
  return w * (xf * at::rsqrt(xf.pow(2).mean(-1, true) + eps)).to(x.scalar_type());
}
at::Tensor AtenRope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const int64_t half = x.size(-1) / 2;
  return x * cos + at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1) * sin;
}
#endif

// Each case loops over the three dtypes itself (a Catch2 SECTION inside a loop would run for the first dtype only).
const at::ScalarType kDtypes[] = {at::kFloat, at::kBFloat16, at::kHalf};

// `ours` no further from the float64 truth than ATen's composition (which rounds after every op, where the fused
// backward computes in float32 and rounds once) beyond a quarter, or than two rounding steps of the scale (float32
// sums of 300 rows in another order differ by that much); and within a few rounding steps of the scale in any case.
void CheckGradNoWorse(const char* what, const at::Tensor& ours, const at::Tensor& aten, const at::Tensor& truth,
                      double ulp) {
  const double e_ours = MaxAbsDiff(ours, truth), e_aten = MaxAbsDiff(aten, truth), scale = MaxAbs(truth);
  INFO(what << ": ours " << e_ours << ", ATen " << e_aten << ", scale " << scale);
  CHECK(e_ours <= std::max(1.25 * e_aten, 2 * ulp * scale));
  CHECK(e_ours <= 4 * ulp * scale);
}

// The fused norms' outputs and gradients against the unfused graph's, bit for bit (signed zeros included). The
// weight's gradient at `unused_weight_grad`, where the norm's output is unused, is zeros in the fused graph (the
// unfused one leaves it undefined); -1 where every entry is compared.
void CheckSameBits(const std::vector<at::Tensor>& fused, const std::vector<at::Tensor>& plain,
                   const std::vector<const char*>& names, int unused_weight_grad) {
  REQUIRE(fused.size() == names.size());
  REQUIRE(plain.size() == names.size());
  for (size_t i = 0; i < fused.size(); ++i) {
    INFO(names[i]);
    REQUIRE(fused[i].defined());
    if (static_cast<int>(i) == unused_weight_grad) {
      CHECK(fused[i].abs().sum().item<double>() == 0.0);
      continue;
    }
    REQUIRE(plain[i].defined());
    CHECK(at::equal(fused[i], plain[i]));
    CHECK(at::equal(fused[i].view(-1).signbit(), plain[i].view(-1).signbit()));
  }
}

TEST_CASE("fused RMSNorm gives the ATen composition's values and gradients", "[worker][train][gpu]") {
  if (SkipWithoutGpu()) return;
#ifdef VERL_WITH_CUDA
  at::manual_seed(11);
  const auto opts = at::TensorOptions().device(at::kCUDA);
  for (at::ScalarType dtype : kDtypes) {
    INFO(c10::toString(dtype));
    const double ulp = Ulp(dtype);
    for (int64_t hidden : {896, 37}) {  // vectorised rows and single elements
      CAPTURE(hidden);
      const double eps = 1e-6;
      const at::Tensor x0 = (at::randn({6, 50, hidden}, opts) * 3).to(dtype);
      const at::Tensor w0 = (at::rand({hidden}, opts) + 0.5).to(dtype);
      const at::Tensor gy = at::randn({6, 50, hidden}, opts).to(dtype);
      // Ours and ATen's in the dtype, and the float64 truth from the same rounded inputs.
      at::Tensor x = x0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true);
      at::Tensor y = kernels::RmsNorm(x, w, eps);
      const std::vector<at::Tensor> g = Grads(y, gy, {x, w});
      at::Tensor xa = x0.clone().requires_grad_(true), wa = w0.clone().requires_grad_(true);
      at::Tensor ya = AtenRmsNorm(xa, wa, eps);
      const std::vector<at::Tensor> ga = Grads(ya, gy, {xa, wa});
      at::Tensor xd = x0.to(at::kDouble).requires_grad_(true), wd = w0.to(at::kDouble).requires_grad_(true);
      at::Tensor yd = wd * (xd * at::rsqrt(xd.pow(2).mean(-1, true) + eps));
      const std::vector<at::Tensor> gd = Grads(yd, gy.to(at::kDouble), {xd, wd});
      // Values: one rounding step of ATen's (the mean is summed in another order).
      CHECK((y.to(at::kFloat) - ya.to(at::kFloat)).abs().le(ya.to(at::kFloat).abs() * ulp * 1.01 + 1e-6)
                .all()
                .item<bool>());
      CheckGradNoWorse("dx", g[0], ga[0], gd[0], ulp);
      CheckGradNoWorse("dweight", g[1], ga[1], gd[1], ulp);
      // The same numbers from inputs and weight at addresses that are not 16-byte aligned (views one element in, as
      // ZeRO-3's flat units may give): the rows are summed the same way, only loaded differently.
      at::Tensor xbuf = at::empty({x0.numel() + 1}, x0.options());
      at::Tensor wbuf = at::empty({hidden + 1}, w0.options());
      xbuf.narrow(0, 1, x0.numel()).copy_(x0.reshape({-1}));
      wbuf.narrow(0, 1, hidden).copy_(w0);
      at::Tensor xu = xbuf.narrow(0, 1, x0.numel()).view(x0.sizes()).detach().requires_grad_(true);
      at::Tensor wu = wbuf.narrow(0, 1, hidden).detach().requires_grad_(true);
      REQUIRE(reinterpret_cast<uintptr_t>(xu.data_ptr()) % 16 != 0);
      at::Tensor yu = kernels::RmsNorm(xu, wu, eps);
      const std::vector<at::Tensor> gu = Grads(yu, gy, {xu, wu});
      CHECK(at::equal(yu, y));
      CHECK(at::equal(gu[0], g[0]));
      CHECK(at::equal(gu[1], g[1]));
    }
    // No rows: an empty output and a zero weight gradient.
    at::Tensor xe = at::empty({0, 64}, opts.dtype(dtype)).requires_grad_(true);
    at::Tensor we = at::ones({64}, opts.dtype(dtype)).requires_grad_(true);
    at::Tensor ye = kernels::RmsNorm(xe, we, 1e-6);
    CHECK(ye.numel() == 0);
    const std::vector<at::Tensor> ge = Grads(ye, at::empty_like(ye), {xe, we});
    CHECK(ge[1].eq(0).all().item<bool>());
  }
#endif
}

TEST_CASE("fused AddRmsNorm with gradients gives the add and the norm's values and gradients, bit for bit",
          "[worker][train][gpu]") {
  if (SkipWithoutGpu()) return;
#ifdef VERL_WITH_CUDA
  at::manual_seed(4);
  for (at::ScalarType dtype : kDtypes) {
    INFO(c10::toString(dtype));
    const auto opts = at::TensorOptions().dtype(dtype).device(at::kCUDA);
    for (int64_t hidden : {896, 41}) {  // 16-byte vectors, and rows that take single elements
      CAPTURE(hidden);
      const at::Tensor x0 = at::randn({3, 5, hidden}, opts), r0 = at::randn({3, 5, hidden}, opts);
      const at::Tensor w0 = (1 + 0.1 * at::randn({hidden}, at::kFloat)).to(opts);
      // The residual stream's gradient (the sum's other use) and the norm's.
      const at::Tensor g_y = at::randn({3, 5, hidden}, opts), g_sum = at::randn({3, 5, hidden}, opts);
      for (int uses : {0, 1, 2}) {  // both outputs used, only y (the final norm's case), only the sum
        CAPTURE(uses);
        auto run = [&](bool fused) {
          const at::Tensor x = x0.clone().requires_grad_(true), r = r0.clone().requires_grad_(true),
                           w = w0.clone().requires_grad_(true);
          at::Tensor sum, y;
          if (fused) {
            y = kernels::AddRmsNorm(x, r, w, 1e-6, &sum);
          } else {
            sum = x + r;
            y = kernels::RmsNorm(sum, w, 1e-6);
          }
          at::Tensor loss = uses != 2 ? (y * g_y).sum() : (sum * g_sum).sum();
          if (uses == 0) loss = loss + (sum * g_sum).sum();
          std::vector<at::Tensor> g = Grads(loss, at::ones({}, opts), {x, r, w});
          g.insert(g.begin(), {y.detach(), sum.detach()});
          return g;
        };
        CheckSameBits(run(true), run(false), {"y", "sum", "dx", "dresidual", "dweight"}, uses == 2 ? 4 : -1);
      }
    }
  }
#endif
}

TEST_CASE("fused RMSNorm handing its input on (x_again) gives the norm's values and x's summed gradient, bit for bit",
          "[worker][train][gpu]") {
  if (SkipWithoutGpu()) return;
#ifdef VERL_WITH_CUDA
  at::manual_seed(5);
  for (at::ScalarType dtype : kDtypes) {
    INFO(c10::toString(dtype));
    const auto opts = at::TensorOptions().dtype(dtype).device(at::kCUDA);
    for (int64_t hidden : {896, 41}) {
      CAPTURE(hidden);
      const at::Tensor x0 = at::randn({3, 5, hidden}, opts);
      const at::Tensor w0 = (1 + 0.1 * at::randn({hidden}, at::kFloat)).to(opts);
      const at::Tensor g_y = at::randn({3, 5, hidden}, opts), g_other = at::randn({3, 5, hidden}, opts);
      for (int uses : {0, 1, 2}) {  // both used, only the norm, only x's other use
        CAPTURE(uses);
        auto run = [&](bool again) {
          const at::Tensor x = x0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true);
          at::Tensor x_other = x;
          const at::Tensor y = again ? kernels::RmsNorm(x, w, 1e-6, &x_other) : kernels::RmsNorm(x, w, 1e-6);
          at::Tensor loss = uses != 2 ? (y * g_y).sum() : (x_other * g_other).sum();
          if (uses == 0) loss = loss + (x_other * g_other).sum();
          std::vector<at::Tensor> g = Grads(loss, at::ones({}, opts), {x, w});
          g.insert(g.begin(), {y.detach(), x_other.detach()});
          return g;
        };
        CheckSameBits(run(true), run(false), {"y", "x again", "dx", "dweight"}, uses == 2 ? 3 : -1);
      }
    }
  }
#endif
}

TEST_CASE("fused RoPE gives the ATen composition's values and gradients", "[worker][train][gpu]") {
  if (SkipWithoutGpu()) return;
#ifdef VERL_WITH_CUDA
  at::manual_seed(12);
  const auto opts = at::TensorOptions().device(at::kCUDA);
  for (at::ScalarType dtype : kDtypes) {
    INFO(c10::toString(dtype));
    // {T, H}: the general shape, and the one-token and one-head forms whose size-1 dimensions' strides are free.
    for (const auto& [D, T, H] : std::vector<std::array<int64_t, 3>>{{64, 33, 5}, {128, 33, 5}, {8, 33, 5},
                                                                      {64, 1, 5}, {64, 33, 1}, {128, 1, 1}}) {
      CAPTURE(D, T, H);
      const int64_t B = 2;
      const at::Tensor pos = at::arange(T, opts.dtype(at::kFloat)).repeat({B, 1}).unsqueeze(-1) * 1.7;
      const at::Tensor freqs = pos * at::rand({D / 2}, opts);
      const at::Tensor emb = at::cat({freqs, freqs}, -1).unsqueeze(1);
      const at::Tensor cos = emb.cos().to(dtype), sin = emb.sin().to(dtype);
      const at::Tensor x0 = at::randn({B, T, H, D}, opts).to(dtype);
      const at::Tensor gy = at::randn({B, H, T, D}, opts).to(dtype);
      // The transposed [B, H, T, D] view the attention makes of the projection.
      at::Tensor x = x0.clone().requires_grad_(true);
      at::Tensor y = kernels::Rope(x.transpose(1, 2), cos, sin);
      at::Tensor xa = x0.clone().requires_grad_(true);
      at::Tensor ya = AtenRope(xa.transpose(1, 2), cos, sin);
      CHECK(at::equal(y, ya));
      // The backward rotates back with -sin: the same products and sums, rounded where autograd through the
      // composition rounds them.
      const at::Tensor dx = Grads(y, gy, {x})[0];
      const at::Tensor dxa = Grads(ya, gy, {xa})[0];
      CAPTURE((dx.to(at::kFloat) - dxa.to(at::kFloat)).abs().max().item<double>());
      CHECK(at::equal(dx, dxa));
      // The same values from an input one element off 16-byte alignment (the kernel's element-by-element form; the
      // aligned head dims above take its 16-byte one).
      at::Tensor buf = at::empty({x0.numel() + 1}, x0.options());
      buf.narrow(0, 1, x0.numel()).copy_(x0.reshape({-1}));
      const at::Tensor xu = buf.narrow(0, 1, x0.numel()).view(x0.sizes()).transpose(1, 2);
      REQUIRE(reinterpret_cast<uintptr_t>(xu.data_ptr()) % 16 != 0);
      CHECK(at::equal(kernels::Rope(xu, cos, sin).detach(), ya.detach()));
      // A column range of a stacked projection ([B, T, H * D] between 3 * D columns before and D after, as
      // DecoderModel's q/k/v GEMM), read where it lies: the same values and gradient, the result laid out as
      // [B, T, H, D].
      const at::Tensor wide0 = at::randn({B, T, (H + 4) * D}, opts).to(dtype);
      wide0.narrow(-1, 3 * D, H * D).copy_(x0.reshape({B, T, H * D}));
      at::Tensor wide = wide0.clone().requires_grad_(true);
      const at::Tensor xv = wide.narrow(-1, 3 * D, H * D).view({B, T, H, D}).transpose(1, 2);
      REQUIRE(!xv.is_non_overlapping_and_dense());
      REQUIRE(kernels::RopeSupported(xv, cos));
      const at::Tensor yv = kernels::Rope(xv, cos, sin);
      CHECK(at::equal(yv, ya));
      CHECK(yv.transpose(1, 2).is_contiguous());
      const at::Tensor dwide = Grads(yv, gy, {wide})[0];
      CHECK(at::equal(dwide.narrow(-1, 3 * D, H * D).reshape({B, T, H, D}), dxa));
      CHECK(dwide.narrow(-1, 0, 3 * D).eq(0).all().item<bool>());
      CHECK(dwide.narrow(-1, (H + 3) * D, D).eq(0).all().item<bool>());
      // Views whose elements could overlap are refused (the ATen composition runs for them).
      if (H > 1) CHECK_FALSE(kernels::RopeSupported(wide0.as_strided({B, H, T, D}, {T * D, D, D, 1}), cos));
      CHECK_FALSE(kernels::RopeSupported(wide0.as_strided({B, H, T, D}, {0, D, H * D, 1}), cos));
    }
  }
#endif
}

TEST_CASE("fused SwiGLU gives the ATen composition's values and gradients", "[worker][train][gpu]") {
  if (SkipWithoutGpu()) return;
#ifdef VERL_WITH_CUDA
  at::manual_seed(13);
  const auto opts = at::TensorOptions().device(at::kCUDA);
  for (at::ScalarType dtype : kDtypes) {
    INFO(c10::toString(dtype));
    const double ulp = Ulp(dtype);
    for (int64_t n : {4864, 999}) {  // vectorised and single elements
      CAPTURE(n);
      const at::Tensor g0 = (at::randn({7, n}, opts) * 4).to(dtype);
      const at::Tensor u0 = at::randn({7, n}, opts).to(dtype);
      const at::Tensor gy = at::randn({7, n}, opts).to(dtype);
      at::Tensor g = g0.clone().requires_grad_(true), u = u0.clone().requires_grad_(true);
      at::Tensor y = kernels::SwiGlu(g, u);
      const std::vector<at::Tensor> gr = Grads(y, gy, {g, u});
      at::Tensor ga = g0.clone().requires_grad_(true), ua = u0.clone().requires_grad_(true);
      at::Tensor ya = at::silu(ga) * ua;
      const std::vector<at::Tensor> gra = Grads(ya, gy, {ga, ua});
      // The same float32 formulas and roundings as ATen's silu, mul and silu_backward kernels: at most one
      // rounding step apart where the compiler contracts differently.
      auto close = [&](const at::Tensor& a, const at::Tensor& b) {
        const at::Tensor bf = b.to(at::kFloat);
        return (a.to(at::kFloat) - bf).abs().le(bf.abs() * ulp * 1.01 + 1e-30).all().item<bool>();
      };
      CHECK(close(y, ya));
      CHECK(close(gr[0], gra[0]));
      CHECK(close(gr[1], gra[1]));
      // The stacked form (one GEMM's [.., 2I] output, DecoderModel's MLP): SwiGlu's values and, stacked the same
      // way, its gradients, bit for bit.
      at::Tensor gu = at::cat({g0, u0}, -1).requires_grad_(true);
      const at::Tensor ys = kernels::SwiGluStacked(gu);
      CHECK(at::equal(ys, y));
      const at::Tensor dgu = Grads(ys, gy, {gu})[0];
      CHECK(at::equal(dgu, at::cat({gr[0], gr[1]}, -1)));
      // A checkpointed layer's recompute: the stacked gradient and the value from one kernel, the same bits.
      const auto [dgu_once, y_once] = kernels::SwiGluStackedBackwardWithValue(gu.detach(), gy);
      CHECK(at::equal(dgu_once, dgu));
      CHECK(at::equal(y_once, ys));
    }
  }
#endif
}

// Runs ChunkedLogProbs on fresh leaves and backpropagates g_lp . log_probs + g_ent . entropy.
struct LogProbRun {
  at::Tensor log_probs, entropy, grad_hidden, grad_weight;
};
LogProbRun RunChunked(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& targets, double temperature,
                      const at::Tensor& g_lp, const at::Tensor& g_ent, int64_t chunk) {
  at::Tensor h = hidden.clone().requires_grad_(true);
  at::Tensor w = weight.clone().requires_grad_(true);
  ChunkedLogProbsResult r = ChunkedLogProbs(h, w, targets, temperature, /*with_entropy=*/true, chunk);
  at::Tensor loss = (r.log_probs * g_lp).sum() + (r.entropy * g_ent).sum();
  loss.backward();
  return {r.log_probs.detach(), r.entropy.detach(), h.grad(), w.grad()};
}

TEST_CASE("the fused log-prob kernels give the ATen path's log-probs, entropy and gradients", "[worker][train][gpu]") {
  if (SkipWithoutGpu()) return;
  at::manual_seed(5);
  const int64_t N = 45, H = 64;
  for (int64_t V : {151936, 1001}) {  // Qwen's vocabulary (16-byte rows) and rows the vectors do not fit
    CAPTURE(V);
    const at::Tensor hidden = at::randn({N, H});
    const at::Tensor weight = at::randn({V, H}) * 0.4;
    at::Tensor targets = at::randint(0, V, {N}, at::kLong);
    const at::Tensor g_lp = at::randn({N});
    const at::Tensor g_ent = at::randn({N});
    for (double temperature : {1.0, 0.7}) {
      CAPTURE(temperature);
      // float32: the fused path (GPU) against the ATen composition (CPU) on the same numbers, 16-token chunks. The
      // two devices' float32 GEMMs (logits and both gradient products) round differently, so this bounds the whole
      // path loosely (a wrong or missing term would be off by the scale); the kernels' own precision is checked on
      // fixed logits in the next test case.
      const LogProbRun cpu = RunChunked(hidden, weight, targets, temperature, g_lp, g_ent, 16);
      const auto dev = [](const at::Tensor& t) { return t.to(at::kCUDA); };
      const LogProbRun gpu =
          RunChunked(dev(hidden), dev(weight), dev(targets), temperature, dev(g_lp), dev(g_ent), 16);
      WARN("float32 logits, GPU against CPU: max |diff| "
           << MaxAbsDiff(at::linear(dev(hidden), dev(weight)).cpu(), at::linear(hidden, weight)));
      const auto close = [](const char* what, const at::Tensor& ours, const at::Tensor& aten) {
        const double err = MaxAbsDiff(ours.cpu(), aten), scale = MaxAbs(aten);
        INFO(what << ": max |diff| " << err << ", scale " << scale);
        CHECK(err <= 1e-3 * (1 + scale));
      };
      close("log_probs", gpu.log_probs, cpu.log_probs);
      close("entropy", gpu.entropy, cpu.entropy);
      close("grad_hidden", gpu.grad_hidden, cpu.grad_hidden);
      close("grad_weight", gpu.grad_weight, cpu.grad_weight);
      // bfloat16: against the ATen path on float64 copies of the same rounded inputs (its logits are rounded to
      // float32, far below bf16's steps), as close as one bf16 rounding of the logits and gradients allows.
      const at::Tensor hb = dev(hidden).to(at::kBFloat16), wb = dev(weight).to(at::kBFloat16);
      const LogProbRun bf = RunChunked(hb, wb, dev(targets), temperature, dev(g_lp), dev(g_ent), 0);
      const LogProbRun truth = RunChunked(hb.to(at::kDouble).cpu(), wb.to(at::kDouble).cpu(), targets, temperature,
                                          g_lp.to(at::kDouble), g_ent.to(at::kDouble), 16);
      const double logit_scale = MaxAbs(at::linear(hidden, weight)) / temperature;
      CAPTURE(logit_scale, MaxAbsDiff(bf.log_probs.cpu(), truth.log_probs));
      CHECK(MaxAbsDiff(bf.log_probs.cpu(), truth.log_probs) <= 2 * Ulp(at::kBFloat16) * logit_scale);
      CHECK(MaxAbsDiff(bf.entropy.cpu(), truth.entropy) <= 2 * Ulp(at::kBFloat16) * logit_scale);
      CHECK(MaxAbsDiff(bf.grad_hidden.cpu(), truth.grad_hidden) <= 4 * Ulp(at::kBFloat16) * MaxAbs(truth.grad_hidden));
      CHECK(MaxAbsDiff(bf.grad_weight.cpu(), truth.grad_weight) <= 4 * Ulp(at::kBFloat16) * MaxAbs(truth.grad_weight));
      // In 16-row chunks (three): the weight gradient summed over the chunks in float32 by the GEMM (beta 1), as
      // close to the truth.
      const LogProbRun bf16_chunks = RunChunked(hb, wb, dev(targets), temperature, dev(g_lp), dev(g_ent), 16);
      CHECK(MaxAbsDiff(bf16_chunks.grad_hidden.cpu(), truth.grad_hidden) <=
            4 * Ulp(at::kBFloat16) * MaxAbs(truth.grad_hidden));
      CHECK(MaxAbsDiff(bf16_chunks.grad_weight.cpu(), truth.grad_weight) <=
            4 * Ulp(at::kBFloat16) * MaxAbs(truth.grad_weight));
    }
  }
}

TEST_CASE("ChunkedLogProbsWithGrad on the GPU gives ChunkedLogProbs' values and backward (fused kernels)",
          "[worker][train][gpu]") {
  if (SkipWithoutGpu()) return;
  at::manual_seed(6);
  const int64_t N = 45, H = 64;
  for (int64_t V : {151936, 1001}) {
    for (at::ScalarType dtype : {at::kBFloat16, at::kFloat}) {
      for (int64_t chunk : {int64_t{0}, int64_t{16}}) {
        CAPTURE(V, c10::toString(dtype), chunk);
        const at::Tensor hidden = at::randn({N, H}).to(at::kCUDA, dtype);
        const at::Tensor weight = (at::randn({V, H}) * 0.4).to(at::kCUDA, dtype);
        const at::Tensor targets = at::randint(0, V, {N}, at::kLong).to(at::kCUDA);
        const at::Tensor g_lp = at::randn({N}).to(at::kCUDA), g_ent = at::randn({N}).to(at::kCUDA);
        const LogProbRun plain = RunChunked(hidden, weight, targets, 0.7, g_lp, g_ent, chunk);
        at::Tensor h = hidden.clone().requires_grad_(true), w = weight.clone().requires_grad_(true);
        const TokenLossGrad token_grad = [&](int64_t begin, const at::Tensor& lp, const at::Tensor&) {
          return std::make_pair(g_lp.narrow(0, begin, lp.size(0)), g_ent.narrow(0, begin, lp.size(0)));
        };
        ChunkedLossGradResult fused = ChunkedLogProbsWithGrad(h, w, targets, 0.7, token_grad, chunk);
        fused.anchor.backward();
        // The same kernels on the same logits: the same bits.
        CHECK(MaxAbsDiff(fused.log_probs.cpu(), plain.log_probs.cpu()) == 0.0);
        CHECK(MaxAbsDiff(fused.entropy.cpu(), plain.entropy.cpu()) == 0.0);
        CHECK(MaxAbsDiff(h.grad().cpu(), plain.grad_hidden.cpu()) == 0.0);
        CHECK(MaxAbsDiff(w.grad().cpu(), plain.grad_weight.cpu()) == 0.0);
      }
    }
  }
}

TEST_CASE("an update on the GPU with the LM head's gradients formed in the forward equals the one without",
          "[worker][train][gpu]") {
  if (SkipWithoutGpu()) return;
  // The tiny decoder in bf16 on the GPU, a batch of ragged rows (two share a prompt), padded and packed with shared
  // prompts, the first mini-batch's old log-probs deferred: UpdatePolicy fused and not, from the same weights.
  TestDir dir;
  testing::WriteTinyModel(dir.path(), testing::TinyDecoderConfig());
  at::manual_seed(12);
  const int64_t N = 6, P = 6, R = 5;
  const std::vector<int64_t> prompt_len = {3, 6, 3, 1, 4, 2}, response_len = {5, 3, 4, 2, 1, 5};
  SequenceBatch batch;
  batch.input_ids = at::randint(1, 50, {N, P + R}, at::kLong);
  batch.input_ids[2].narrow(0, 0, P).copy_(batch.input_ids[0].narrow(0, 0, P));  // rows 0 and 2: one prompt
  batch.attention_mask = at::zeros({N, P + R}, at::kBool);
  for (int64_t b = 0; b < N; ++b) {
    batch.attention_mask[b].narrow(0, P - prompt_len[b], prompt_len[b]).fill_(true);
    batch.attention_mask[b].narrow(0, P, response_len[b]).fill_(true);
  }
  batch.responses = batch.input_ids.narrow(1, P, R).contiguous();
  batch.response_mask = batch.attention_mask.narrow(1, P, R).contiguous();
  SequenceBatch on;
  on.input_ids = batch.input_ids.cuda();
  on.attention_mask = batch.attention_mask.cuda();
  on.responses = batch.responses.cuda();
  on.response_mask = batch.response_mask.cuda();
  const at::Tensor mask = on.response_mask.to(at::kFloat);
  const at::Tensor adv = at::linspace(-1.0, 1.5, N * R, at::kFloat).view({N, R}).cuda();
  const at::Tensor off = at::linspace(-1.2, 0.9, N * R, at::kFloat).view({N, R}).cuda();
  for (bool packed : {false, true}) {
    CAPTURE(packed);
    auto run = [&](bool fuse) {
      auto loaded = DecoderModel::Load(dir.path(), at::kBFloat16, at::kCUDA);
      REQUIRE(loaded.ok());
      DecoderModel& model = **loaded;
      MicroBatching micro;
      micro.rows = 3;
      micro.packed = packed;
      micro.share_prompts = packed;
      const at::Tensor lp = ComputeLogProbsNoGrad(model, on, 0.9, micro).value();
      PolicyUpdateOptions o;
      o.lr = 1e-2;
      o.mini_batch_size = 3;
      o.micro_batch_size = 2;
      o.share_prompts = packed;
      o.temperature = 0.9;
      o.entropy_coeff = 0.05;
      o.use_kl_loss = true;
      o.kl_loss_coef = 0.2;
      o.fuse_lm_head_grad = fuse;
      model.SetRequiresGrad(true);
      AdamW opt(model.named_parameters(), AdamWOptions{o.lr, 0.0, 0.9, 0.999, /*eps=*/1e-3});
      PolicyUpdateInputs in{(lp + off) * mask, (lp - off) * mask, adv, at::Tensor()};
      in.first_mini_batch_deferred = true;
      auto m = UpdatePolicy(model, opt, on, in, o);
      INFO(m.status().ToString());
      REQUIRE(m.ok());
      REQUIRE(m->at("perf/actor_fused_lm_head") == (fuse ? 1.0 : 0.0));
      std::vector<at::Tensor> weights;
      for (const at::Tensor& p : model.parameters()) weights.push_back(p.detach().cpu().to(at::kFloat));
      return std::make_tuple(weights, *m, in.old_log_probs.cpu());
    };
    const auto [plain_w, plain_m, plain_old] = run(false);
    const auto [fused_w, fused_m, fused_old] = run(true);
    CHECK(MaxAbsDiff(fused_old, plain_old) == 0.0);
    for (size_t i = 0; i < plain_w.size(); ++i) {
      CAPTURE(i);
      // Within a bf16 step of the weights' scale (the update itself is about lr, several steps of the small weights).
      CHECK(MaxAbsDiff(fused_w[i], plain_w[i]) <= Ulp(at::kBFloat16) * MaxAbs(plain_w[i]));
    }
    CHECK(fused_m.at("actor/pg_loss") == Approx(plain_m.at("actor/pg_loss")).margin(1e-6));
    CHECK(fused_m.at("actor/kl_loss") == Approx(plain_m.at("actor/kl_loss")).margin(1e-6));
    CHECK(fused_m.at("actor/grad_norm") == Approx(plain_m.at("actor/grad_norm")).epsilon(1e-3));
  }
}

TEST_CASE("the shared-prompt row movers give index_copy_'s rows and index_add_'s sums", "[worker][train][gpu]") {
  if (SkipWithoutGpu()) return;
#ifdef VERL_WITH_CUDA
  at::manual_seed(3);
  // Rows of 32 bytes and more (16-byte copies), of 6 and 20 bytes (2- and 4-byte ones), and a strided input.
  const std::vector<std::pair<at::ScalarType, std::vector<int64_t>>> shapes = {
      {at::kBFloat16, {37, 2, 8}}, {at::kHalf, {37, 3}}, {at::kFloat, {37, 5}}, {at::kBFloat16, {37, 14, 64}}};
  for (const auto& [dtype, shape] : shapes) {
    INFO(c10::toString(dtype) << " " << at::IntArrayRef(shape));
    const at::Tensor x = at::randn(shape, at::kFloat).to(dtype);
    const int64_t S = shape[0], R = 53;
    // Each of x's rows at most once, in a shuffled order, among -1s: GatherRowsOrZero against a zero fill and
    // index_copy_.
    const at::Tensor perm = at::randperm(R, at::kLong);
    at::Tensor inverse = at::full({R}, -1, at::kLong);
    const at::Tensor used = perm.narrow(0, 0, S);
    inverse.index_copy_(0, used, at::arange(S, at::kLong));
    std::vector<int64_t> out_shape = shape;
    out_shape[0] = R;
    const at::Tensor want = at::zeros(out_shape, x.options()).index_copy_(0, used, x);
    const at::Tensor got = kernels::GatherRowsOrZero(x.cuda(), inverse.cuda()).cpu();
    CHECK(got.sizes() == want.sizes());
    CHECK(at::equal(got, want));
    // A transposed (non-contiguous) input gives its values too.
    if (shape.size() == 3) {
      const at::Tensor xt = x.transpose(1, 2).contiguous().transpose(1, 2);
      CHECK(at::equal(kernels::GatherRowsOrZero(xt.cuda(), inverse.cuda()).cpu(), want));
    }
    // SumRows: each of R positions names a row of x (repeats and rows named by none), summed per x's row in float32 in
    // the positions' order and rounded once: exactly a float32 loop's values.
    const at::Tensor index = at::randint(0, S - 3, {R}, at::kLong);  // rows S-3.. get nothing: zeros
    const at::Tensor g = at::randn(out_shape, at::kFloat).to(dtype);
    std::vector<int64_t> offsets(S + 1, 0), positions;
    const int64_t* ix = index.data_ptr<int64_t>();
    for (int64_t s = 0; s < S; ++s) {
      for (int64_t i = 0; i < R; ++i) {
        if (ix[i] == s) positions.push_back(i);
      }
      offsets[s + 1] = static_cast<int64_t>(positions.size());
    }
    const int64_t width = g.numel() / R;
    const at::Tensor gf = g.to(at::kFloat).contiguous().view({R, width});
    at::Tensor loop = at::zeros({S, width}, at::kFloat);
    for (int64_t s = 0; s < S; ++s) {
      for (int64_t j = offsets[s]; j < offsets[s + 1]; ++j) loop[s] += gf[positions[j]];  // float32 adds in order
    }
    std::vector<int64_t> sum_shape = shape;
    const at::Tensor sums =
        kernels::SumRows(g.cuda(), at::tensor(offsets, at::kLong).cuda(), at::tensor(positions, at::kLong).cuda())
            .cpu();
    CHECK(sums.sizes() == at::IntArrayRef(sum_shape));
    CHECK(at::equal(sums, loop.to(dtype).view(sum_shape)));
    CHECK(sums.narrow(0, S - 3, 3).abs().sum().item<double>() == 0.0);
    // index_add_ into zeros (index_select's backward), to its atomics' rounding.
    const at::Tensor added = at::zeros(sum_shape, at::kFloat).index_add_(0, index, g.to(at::kFloat));
    CHECK(MaxAbsDiff(sums.to(at::kFloat), added) <= 4 * Ulp(dtype) * (1 + MaxAbs(added)));
  }
#endif
}

TEST_CASE("AddIntoFloatSums gives add_'s and to(float32)'s values, bit for bit", "[worker][train][gpu]") {
  if (SkipWithoutGpu()) return;
#ifdef VERL_WITH_CUDA
  // 150 gradients (more than one launch's 64), bfloat16 and float16 mixed, of sizes with and without a tail past the
  // 8-element vectors and past a block's 8,192 elements, one empty, one of 8,200 elements viewed 2 bytes past 16-byte
  // alignment (the kernel's element-wise path for a whole tensor); half the sums exist (added to), half are created
  // (copied; a negative zero stays negative, as to(float32) keeps it). A bad entry leaves every sum as it was.
  at::manual_seed(21);
  const auto opts = at::TensorOptions().device(at::kCUDA);
  std::vector<at::Tensor> grads, sums, want;
  for (int i = 0; i < 150; ++i) {
    const at::ScalarType dtype = i % 3 == 0 ? at::kHalf : at::kBFloat16;
    const int64_t n = std::vector<int64_t>{1, 7, 8, 896, 8191, 8192, 8200, 100003}[i % 8];
    at::Tensor g = (at::randn({n}, opts) * 3).to(dtype);
    if (i == 5) g = at::empty({0}, opts.dtype(dtype));
    if (i == 14) g = (at::randn({n + 1}, opts)).to(dtype).narrow(0, 1, n);  // contiguous, 2 bytes past alignment
    if (i == 11) g[0] = -0.0;
    CHECK(kernels::FloatSumSupported(g));
    at::Tensor sum = i % 2 == 0 ? at::randn({n}, opts) : at::Tensor();
    want.push_back(sum.defined() ? sum.clone().add_(g) : g.to(at::kFloat));
    grads.push_back(g);
    sums.push_back(sum);
  }
  std::vector<at::Tensor*> into;
  for (at::Tensor& t : sums) into.push_back(&t);
  kernels::AddIntoFloatSums(into, grads);
  for (size_t i = 0; i < want.size(); ++i) {
    CAPTURE(i);
    REQUIRE(sums[i].defined());
    CHECK(sums[i].scalar_type() == at::kFloat);
    CHECK(at::equal(sums[i], want[i]));
  }
  CHECK(std::signbit(sums[11][0].item<float>()));
  CHECK_FALSE(kernels::FloatSumSupported(at::ones({4, 4}, opts.dtype(at::kBFloat16)).t()));
  CHECK_FALSE(kernels::FloatSumSupported(at::ones({4}, opts)));
  at::Tensor wrong = at::zeros({3}, opts);
  at::Tensor fresh;  // undefined: would be created, but the entry after it is bad
  CHECK_THROWS_WITH(kernels::AddIntoFloatSums({&fresh, &wrong}, {at::ones({2}, opts.dtype(at::kBFloat16)),
                                                                 at::ones({4}, opts.dtype(at::kBFloat16))}),
                    Catch::Contains("float32, contiguous"));
  CHECK_FALSE(fresh.defined());
  CHECK(wrong.eq(0).all().item<bool>());
  CHECK_THROWS_WITH(kernels::AddIntoFloatSums({&wrong}, {at::ones({3}, opts)}), Catch::Contains("bfloat16 or float16"));
#endif
}

TEST_CASE("GradAccumulator on the GPU sums bf16 and fp16 gradients in float32 as ATen's adds do",
          "[worker][train][gpu]") {
  if (SkipWithoutGpu()) return;
  // Three micro-batches' gradients into their float32 sums (AddIntoFloatSums on a GPU): a bf16 matrix, an fp16 vector
  // longer than a block, a bf16 parameter whose first gradient is not contiguous (ATen's path: its sum is then not
  // contiguous either, so the later contiguous gradients go the same way), and one no pass reaches. The sums equal
  // grad.to(float32) then add_ of the later ones, bit for bit.
  at::manual_seed(23);
  const auto opts = at::TensorOptions().device(at::kCUDA);
  std::vector<at::Tensor> params = {
      at::zeros({300, 70}, opts.dtype(at::kBFloat16)), at::zeros({9000}, opts.dtype(at::kHalf)),
      at::zeros({5, 4}, opts.dtype(at::kBFloat16)), at::zeros({3}, opts.dtype(at::kBFloat16))};
  for (at::Tensor& p : params) p.requires_grad_(true);
  GradAccumulator acc(params);
  std::vector<at::Tensor> want(params.size());
  for (int pass = 0; pass < 3; ++pass) {
    for (size_t i = 0; i + 1 < params.size(); ++i) {
      at::Tensor g = at::randn(params[i].sizes(), opts).to(params[i].scalar_type());
      if (i == 2 && pass == 0) g = at::randn({4, 5}, opts).to(at::kBFloat16).t();
      want[i] = want[i].defined() ? want[i].add_(g) : g.to(at::kFloat);
      params[i].mutable_grad() = g;
    }
    acc.Collect();
    for (const at::Tensor& p : params) CHECK_FALSE(p.grad().defined());
  }
  acc.Finish();
  for (size_t i = 0; i + 1 < params.size(); ++i) {
    CAPTURE(i);
    REQUIRE(params[i].grad().defined());
    CHECK(params[i].grad().scalar_type() == at::kFloat);
    CHECK(at::equal(params[i].grad(), want[i]));
  }
  CHECK_FALSE(params.back().grad().defined());
}

TEST_CASE("AddTransposedMatmulFloat adds a^T b to a float32 matrix in place", "[worker][train][gpu]") {
  if (SkipWithoutGpu()) return;
#ifdef VERL_WITH_CUDA
  at::manual_seed(11);
  // The LM head's weight-gradient shape (a few rows of Qwen's vocabulary) and odd sizes; bf16 and fp16.
  for (const auto& [k, m, n] : {std::tuple<int64_t, int64_t, int64_t>{37, 151936, 64}, {5, 7, 3}, {300, 129, 33}}) {
    for (at::ScalarType dtype : {at::kBFloat16, at::kHalf}) {
      CAPTURE(k, m, n, c10::toString(dtype));
      const at::Tensor a = at::randn({k, m}).to(dtype), b = at::randn({k, n}).to(dtype);
      const at::Tensor c0 = at::randn({m, n});
      at::Tensor c = c0.to(at::kCUDA);
      kernels::AddTransposedMatmulFloat(c, a.to(at::kCUDA), b.to(at::kCUDA));
      kernels::AddTransposedMatmulFloat(c, a.to(at::kCUDA), b.to(at::kCUDA));  // accumulates: c0 + 2 a^T b
      const at::Tensor truth = c0.to(at::kDouble) + 2 * at::mm(a.to(at::kDouble).t(), b.to(at::kDouble));
      // float32 sums of k exact products (bf16 x bf16 is exact in float32): a few float32 roundings of the terms.
      const double bound = 1e-6 * (static_cast<double>(k) + 2) * (MaxAbs(truth) + 1);
      CHECK(MaxAbsDiff(c.cpu().to(at::kDouble), truth) <= bound);
    }
  }
  at::Tensor c = at::zeros({4, 3}, at::TensorOptions().dtype(at::kFloat).device(at::kCUDA));
  const at::Tensor a = at::ones({2, 4}, at::TensorOptions().dtype(at::kBFloat16).device(at::kCUDA));
  CHECK_THROWS_WITH(kernels::AddTransposedMatmulFloat(c, a, a), Catch::Contains("AddTransposedMatmulFloat"));
  at::Tensor c_bf16 = c.to(at::kBFloat16);
  CHECK_THROWS_WITH(kernels::AddTransposedMatmulFloat(c_bf16, a, a.narrow(1, 0, 3).contiguous()),
                    Catch::Contains("float32"));
#endif
}

TEST_CASE("the token log-prob kernels agree with float64 math on the same logits", "[worker][train][gpu]") {
  if (SkipWithoutGpu()) return;
#ifdef VERL_WITH_CUDA
  at::manual_seed(9);
  const int64_t N = 37;
  for (int64_t V : {151936, 1001}) {
    for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
      for (double temperature : {1.0, 0.7}) {
        INFO("vocab " << V << " " << c10::toString(dtype) << " temperature " << temperature);
        at::Tensor logits = (at::randn({N, V}, at::kCUDA) * 3).to(dtype);
        logits[0][5] = 40.0;  // a peaked row: entropy near 0, where lse - sum(p z) would cancel
        logits[1].narrow(0, 0, V / 2).fill_(-std::numeric_limits<float>::infinity());  // tokens of no mass
        at::Tensor targets = at::randint(0, V, {N}, at::TensorOptions().device(at::kCUDA).dtype(at::kLong));
        targets[1] = V - 1;
        const kernels::TokenLogProbsResult r = kernels::TokenLogProbs(logits, targets, temperature);
        // float64 from the same logits, scaled as ATen scales on a GPU (by the float reciprocal).
        const double inv_t = static_cast<double>(1.0f / static_cast<float>(temperature));
        const at::Tensor z = logits.to(at::kDouble) * inv_t;
        const at::Tensor lse = z.logsumexp(-1);
        const at::Tensor p = z.softmax(-1);
        const at::Tensor log_p = z.log_softmax(-1);
        const at::Tensor lp = log_p.gather(-1, targets.unsqueeze(-1)).squeeze(-1);
        const at::Tensor has_mass = p.gt(0);
        const at::Tensor ent = -at::where(has_mass, p * log_p, at::zeros_like(p)).sum(-1);
        CHECK(MaxAbsDiff(r.log_probs, lp) <= 1e-6 * (1 + MaxAbs(lp)));
        CHECK(MaxAbsDiff(r.lse, lse) <= 1e-6 * (1 + MaxAbs(lse)));
        const at::Tensor ent_err = (r.entropy.to(at::kDouble) - ent).abs();
        CAPTURE(ent_err.max().item<double>(), ent[0].item<double>());
        CHECK(ent_err.le(1e-5 * (1 + ent)).all().item<bool>());  // relative, also on the peaked row
        // Backward, written over the logits: float32 math (p from float log-probs, about 1e-5 relative), then one
        // rounding to the dtype.
        const double rel = std::max(Ulp(dtype), 1e-5);
        const at::Tensor g_lp = at::randn({N}, at::kCUDA);
        const at::Tensor g_ent = at::randn({N}, at::kCUDA);
        at::Tensor grad = logits.clone();
        kernels::TokenLogProbsBackwardInPlace(grad, targets, r.lse, r.entropy, g_lp, g_ent, temperature);
        const at::Tensor onehot = at::zeros_like(z).scatter_(-1, targets.unsqueeze(-1), 1.0);
        const at::Tensor gz =
            g_lp.to(at::kDouble).unsqueeze(-1) * (onehot - p) -
            g_ent.to(at::kDouble).unsqueeze(-1) * at::where(has_mass, p * (log_p + ent.unsqueeze(-1)), at::zeros_like(p));
        const at::Tensor want = gz * inv_t;
        const at::Tensor err = (grad.to(at::kDouble) - want).abs();
        CAPTURE(err.max().item<double>(), MaxAbs(want));
        CHECK(err.le(want.abs() * rel + 1e-6 * MaxAbs(want)).all().item<bool>());
        CHECK(grad[1].narrow(0, 0, V / 2).eq(0).all().item<bool>());  // -inf logits: zero gradient, not NaN
        // Without an entropy gradient (nor a log-prob one): only the other term, and zeros.
        at::Tensor grad_lp = logits.clone();
        kernels::TokenLogProbsBackwardInPlace(grad_lp, targets, r.lse, r.entropy, g_lp, at::Tensor(), temperature);
        const at::Tensor want_lp = g_lp.to(at::kDouble).unsqueeze(-1) * (onehot - p) * inv_t;
        CHECK((grad_lp.to(at::kDouble) - want_lp).abs().le(want_lp.abs() * rel + 1e-6 * MaxAbs(want_lp))
                  .all()
                  .item<bool>());
        at::Tensor none = logits.clone();
        kernels::TokenLogProbsBackwardInPlace(none, targets, r.lse, r.entropy, at::Tensor(), at::Tensor(),
                                              temperature);
        CHECK(none.eq(0).all().item<bool>());
      }
    }
  }
#endif
}

TEST_CASE("the token log-prob kernels give NaN for a row with a NaN logit, as ATen's log_softmax does",
          "[worker][train][gpu]") {
  if (SkipWithoutGpu()) return;
#ifdef VERL_WITH_CUDA
  // A NaN first, in the middle, last, alone among -inf, everywhere, and over half the row: that row's log-prob, lse and
  // entropy are NaN (before 7251d49 a NaN that a thread met before any finite value was dropped: a finite log-prob
  // and entropy); every other row is bit for bit what it is without the NaN rows.
  at::manual_seed(13);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (int64_t V : {151936, 1001}) {
    for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
      INFO("vocab " << V << " " << c10::toString(dtype));
      const int64_t N = 20;
      const at::Tensor clean = (at::randn({N, V}, at::kCUDA) * 3).to(dtype);
      at::Tensor logits = clean.clone();
      logits[0][0] = nan;
      logits[1][V / 2] = nan;
      logits[2][V - 1] = nan;
      logits[3].fill_(-inf);
      logits[3][V / 3] = nan;
      logits[4].fill_(nan);
      logits[5].narrow(0, 0, V / 2 + 1).fill_(nan);
      const at::Tensor targets = at::randint(0, V, {N}, at::TensorOptions().device(at::kCUDA).dtype(at::kLong));
      const kernels::TokenLogProbsResult r = kernels::TokenLogProbs(logits, targets, 0.8);
      const kernels::TokenLogProbsResult c = kernels::TokenLogProbs(clean, targets, 0.8);
      const at::Tensor aten = logits.to(at::kFloat).log_softmax(-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1);
      CHECK(aten.narrow(0, 0, 6).isnan().all().item<bool>());
      for (const at::Tensor& t : {r.log_probs, r.lse, r.entropy}) {
        CHECK(t.narrow(0, 0, 6).isnan().all().item<bool>());
      }
      CHECK(at::equal(r.log_probs.narrow(0, 6, N - 6), c.log_probs.narrow(0, 6, N - 6)));
      CHECK(at::equal(r.lse.narrow(0, 6, N - 6), c.lse.narrow(0, 6, N - 6)));
      CHECK(at::equal(r.entropy.narrow(0, 6, N - 6), c.entropy.narrow(0, 6, N - 6)));
    }
  }
#endif
}

// Log-probs of the next token and the gradients of every parameter for sum(log_probs * g), on `device`.
struct StepResult {
  at::Tensor log_probs;
  std::vector<at::Tensor> grads;
};
StepResult TrainingStep(const std::string& dir, at::Device device, bool checkpointing, const at::Tensor& ids,
                        const at::Tensor& g, int64_t recompute_layers = -1) {
  auto loaded = DecoderModel::Load(dir, at::kFloat, device);
  INFO(loaded.status().ToString());
  REQUIRE(loaded.ok());
  DecoderModel& model = **loaded;
  model.SetRequiresGrad(true);
  model.SetGradientCheckpointing(checkpointing, recompute_layers);
  const int64_t B = ids.size(0), T = ids.size(1);
  const at::Tensor input = ids.to(device);
  const at::Tensor pos = at::arange(T, input.options()).repeat({B, 1});
  const at::Tensor mask = at::ones({T, T}, input.options().dtype(at::kBool)).tril().view({1, 1, T, T}).expand({B, 1, T, T});
  const at::Tensor hidden = model.Forward(input, pos, mask, nullptr);
  ChunkedLogProbsResult r = ChunkedLogProbs(hidden.narrow(1, 0, T - 1), model.LmHeadWeight(),
                                            input.narrow(1, 1, T - 1), 1.0, /*with_entropy=*/false, 8);
  (r.log_probs * g.to(device)).sum().backward();
  StepResult out{r.log_probs.detach().cpu(), {}};
  for (const at::Tensor& p : model.parameters()) out.grads.push_back(p.grad().defined() ? p.grad().cpu() : at::Tensor());
  return out;
}

TEST_CASE("a decoder's training forward and backward on the GPU (fused kernels) equal the CPU's", "[worker][train][gpu]") {
  if (SkipWithoutGpu()) return;
  TestDir dir;
  testing::WriteTinyModel(dir.path(), testing::TinyDecoderConfig());
#ifdef VERL_WITH_CUDA
  {
    // The fused kernels take the tiny model's shapes, so this compares them (not ATen's fallback) with the CPU.
    const DecoderConfig c = testing::TinyDecoderConfig();
    const auto o = at::TensorOptions().device(at::kCUDA);
    REQUIRE(kernels::RmsNormSupported(at::empty({3, 12, c.hidden_size}, o), at::empty({c.hidden_size}, o)));
    REQUIRE(kernels::SwiGluSupported(at::empty({3, 12, c.intermediate_size}, o),
                                     at::empty({3, 12, c.intermediate_size}, o)));
    REQUIRE(kernels::RopeSupported(at::empty({3, 12, c.num_attention_heads, c.head_dim}, o).transpose(1, 2),
                                   at::empty({3, 1, 12, c.head_dim}, o)));
    REQUIRE(kernels::TokenLogProbsSupported(at::empty({8, c.vocab_size}, o)));
  }
#endif
  at::manual_seed(3);
  const at::Tensor ids = at::randint(0, 50, {3, 12}, at::kLong);
  const at::Tensor g = at::randn({3, 11});
  // Without checkpointing, every layer recomputed, and the first layer only (recompute_num_layers 1: a checkpointed
  // layer followed by one that keeps its activations and defers its residual add to the final norm's kernel).
  for (int64_t recompute : {int64_t{-2}, int64_t{-1}, int64_t{1}}) {
    const bool checkpointing = recompute != -2;
    CAPTURE(checkpointing, recompute);
    const StepResult cpu = TrainingStep(dir.path(), at::kCPU, checkpointing, ids, g, recompute);
    const StepResult gpu = TrainingStep(dir.path(), at::kCUDA, checkpointing, ids, g, recompute);
    CHECK(MaxAbsDiff(gpu.log_probs, cpu.log_probs) <= 1e-4);
    REQUIRE(gpu.grads.size() == cpu.grads.size());
    for (size_t i = 0; i < cpu.grads.size(); ++i) {
      CAPTURE(i);
      REQUIRE(cpu.grads[i].defined());
      REQUIRE(gpu.grads[i].defined());
      CHECK(MaxAbsDiff(gpu.grads[i], cpu.grads[i]) <= 1e-4 * (1 + MaxAbs(cpu.grads[i])));
    }
  }
}

TEST_CASE("no-grad log-prob passes on the GPU equal the forward with gradients, bit for bit", "[worker][train][gpu]") {
  if (SkipWithoutGpu()) return;
  // Without gradients a layer's residual adds run inside the RMSNorm kernels (AddRmsNorm); with them too, but for a
  // checkpointed layer's last add (the next layer's input norm then runs alone; the fused kernel's values equal the two
  // ops', a case above). The old log-probs of a GRPO step must be the first update's own, so the two forms must agree
  // exactly: padded (a boolean mask made additive once per pass, or causal attention without one, each row rolled past
  // its left padding) and packed, in bf16 and float32.
  TestDir dir;
  testing::WriteTinyModel(dir.path(), testing::TinyDecoderConfig());
  at::manual_seed(5);
  const int64_t N = 4, P = 6, R = 7;
  for (bool left_padding : {true, false}) {
    // Every row's valid tokens form one run, so the passes attend causally without a mask (ForwardLogProbs with causal:
    // ForwardColumns with causal), rolling the left-padded rows.
    CAPTURE(left_padding);
    SequenceBatch batch;
    batch.input_ids = at::randint(0, 50, {N, P + R}, at::kLong);
    batch.attention_mask = at::ones({N, P + R}, at::kBool);
    if (left_padding) {
      batch.attention_mask[1].narrow(0, 0, 2).fill_(false);  // shorter prompts
      batch.attention_mask[3].narrow(0, 0, 4).fill_(false);
    }
    REQUIRE(OneValidRun(batch.attention_mask));
    batch.response_mask = at::ones({N, R}, at::kBool);
    batch.response_mask[2].narrow(0, 5, 2).fill_(false);  // responses that ended early
    batch.attention_mask[2].narrow(0, P + 5, 2).fill_(false);
    batch.response_mask[0][R - 1] = false;
    batch.attention_mask[0][P + R - 1] = false;
    // With left padding the rolled rows are cut to the longest (12 of 13 columns); without, a row fills them.
    REQUIRE(RollRows(batch.attention_mask).width == (left_padding ? P + R - 1 : P + R));
    batch.responses = batch.input_ids.narrow(1, P, R).contiguous();
    SequenceBatch on;
    on.input_ids = batch.input_ids.cuda();
    on.attention_mask = batch.attention_mask.cuda();
    on.response_mask = batch.response_mask.cuda();
    on.responses = batch.responses.cuda();
    for (at::ScalarType dtype : {at::kBFloat16, at::kFloat}) {
      INFO(c10::toString(dtype));
      auto loaded = DecoderModel::Load(dir.path(), dtype, at::kCUDA);
      REQUIRE(loaded.ok());
      DecoderModel& model = **loaded;
      model.SetRequiresGrad(true);
      for (bool packed : {false, true}) {
        CAPTURE(packed);
        const bool causal = CausalPasses(on, packed);  // as ComputeLogProbsNoGrad and UpdatePolicy decide
        REQUIRE(causal == !packed);
        auto pass = [&] {
          return packed ? ForwardLogProbsPacked(model, on, 1.0, false).log_probs
                        : ForwardLogProbs(model, on, 0, N, 1.0, false, causal).log_probs;
        };
        const at::Tensor with_grad = pass();
        REQUIRE(with_grad.requires_grad());
        at::Tensor no_grad;
        {
          at::NoGradGuard guard;
          no_grad = pass();
        }
        const at::Tensor valid = on.response_mask;
        CHECK(at::equal(with_grad.detach().masked_select(valid), no_grad.masked_select(valid)));
        CHECK(at::isfinite(no_grad.masked_select(valid)).all().item<bool>());
        if (!packed) {
          // The causal pass against the same rows through the attention mask (BuildAttentionMask), at the responses:
          // the same values but for the attention kernel's rounding.
          at::NoGradGuard guard;
          const int64_t S = P + R;
          const at::Tensor hidden = model.Forward(on.input_ids, PositionIdsFromMask(on.attention_mask),
                                                  BuildAttentionMask(on.attention_mask, 0, S), nullptr);
          const at::Tensor masked =
              ChunkedLogProbs(hidden.narrow(1, S - R - 1, R), model.LmHeadWeight(), on.responses, 1.0, false).log_probs;
          const double diff = (masked - no_grad).abs().masked_select(valid).max().item<double>();
          CAPTURE(diff);
          CHECK(diff <= (dtype == at::kFloat ? 1e-4 : 0.05));
        }
      }
    }
  }
}

// Rows 0-2 share one prompt (5 tokens), rows 3-4 another (7, unpadded), row 5 has its own (2), responses of 1-6 tokens
// (random ids below 50, the tiny model's vocabulary).
SequenceBatch SharedPromptBatch() {
  at::manual_seed(11);
  const int64_t N = 6, P = 7, R = 6;
  const std::vector<int64_t> group = {0, 0, 0, 1, 1, 2}, prompt_len = {5, 7, 2}, response_len = {6, 4, 5, 3, 6, 1};
  const at::Tensor prompts = at::randint(1, 50, {3, P}, at::kLong);
  SequenceBatch batch;
  batch.input_ids = at::randint(1, 50, {N, P + R}, at::kLong);
  batch.attention_mask = at::zeros({N, P + R}, at::kBool);
  for (int64_t b = 0; b < N; ++b) {
    const int64_t p = prompt_len[group[b]];
    batch.input_ids[b].narrow(0, P - p, p).copy_(prompts[group[b]].narrow(0, 0, p));
    batch.attention_mask[b].narrow(0, P - p, p).fill_(true);
    batch.attention_mask[b].narrow(0, P, response_len[b]).fill_(true);
  }
  batch.responses = batch.input_ids.narrow(1, P, R).contiguous();
  batch.response_mask = batch.attention_mask.narrow(1, P, R).contiguous();
  return batch;
}

// A log-prob pass over `batch` with gradients (of the masked log-probs plus 0.1 x the masked entropy, at temperature
// 0.9): its masked figures and every parameter's gradient, float32 on the CPU.
struct Pass {
  at::Tensor log_probs, entropy;
  std::vector<at::Tensor> grads;
};
enum class Way { kPadded, kPacked, kShared };
Pass RunPass(const std::string& dir, const SequenceBatch& batch, at::ScalarType dtype, at::Device device, Way way,
             bool checkpointing = false, bool keep_projections = true) {
  auto loaded = DecoderModel::Load(dir, dtype, device);
  REQUIRE(loaded.ok());
  DecoderModel& model = **loaded;
  model.SetRequiresGrad(true);
  model.SetGradientCheckpointing(checkpointing, -1, keep_projections);
  SequenceBatch on;
  on.input_ids = batch.input_ids.to(device);
  on.attention_mask = batch.attention_mask.to(device);
  on.responses = batch.responses.to(device);
  on.response_mask = batch.response_mask.to(device);
  LogProbResult r = way == Way::kPadded
                        ? ForwardLogProbs(model, on, 0, batch.input_ids.size(0), 0.9, true)
                        : ForwardLogProbsPacked(model, on, 0.9, true, /*share_prompts=*/way == Way::kShared);
  const at::Tensor m = on.response_mask.to(at::kFloat);
  ((r.log_probs * m).sum() + 0.1 * (r.entropy * m).sum()).backward();
  Pass out{(r.log_probs * m).detach().cpu().to(at::kFloat), (r.entropy * m).detach().cpu().to(at::kFloat), {}};
  for (const at::Tensor& p : model.parameters()) out.grads.push_back(p.grad().cpu().to(at::kFloat));
  return out;
}

// `got` against `want`, two passes that differ only in how they compute: the log-probs and entropy bit for bit (or,
// where !same_bits, to float32 rounding), every parameter's gradient within a few rounding steps of its scale (the
// order of cuDNN's attention backward's atomic sums differs from run to run; float32 to 1e-4 of the scale).
void CheckPassesAgree(const Pass& got, const Pass& want, at::ScalarType dtype, bool same_bits) {
  if (same_bits) {
    CHECK(at::equal(got.log_probs, want.log_probs));
    CHECK(at::equal(got.entropy, want.entropy));
  } else {
    CHECK(MaxAbsDiff(got.log_probs, want.log_probs) <= 1e-5);
    CHECK(MaxAbsDiff(got.entropy, want.entropy) <= 1e-5);
  }
  REQUIRE(got.grads.size() == want.grads.size());
  for (size_t i = 0; i < want.grads.size(); ++i) {
    CAPTURE(i);
    const double scale = MaxAbs(want.grads[i]), e = MaxAbsDiff(got.grads[i], want.grads[i]);
    CAPTURE(scale, e);
    CHECK(scale > 0);
    CHECK(e <= (dtype == at::kBFloat16 ? 4 * Ulp(dtype) : 1e-4) * scale);
  }
}

TEST_CASE("shared prompts on the GPU (attention over gathered rows) give the packed pass's numbers",
          "[worker][train][gpu]") {
  if (SkipWithoutGpu()) return;
  // use_prefix_grouper: each response attends to its prompt's tokens, computed once, and its own, through rows
  // gathered from the packed tokens (SDPA, cuDNN's kernel in bf16/fp16 on an H200), SharedPromptBatch's rows. Truth:
  // the CPU's float32 padded pass; the unshared packed pass (flash attention's variable-length kernel in bf16/fp16)
  // beside it.
  TestDir dir;
  testing::WriteTinyModel(dir.path(), testing::TinyDecoderConfig());
  const SequenceBatch batch = SharedPromptBatch();
  auto run = [&](at::ScalarType dtype, at::Device device, Way way) {
    return RunPass(dir.path(), batch, dtype, device, way);
  };
  const Pass truth = run(at::kFloat, at::kCPU, Way::kPadded);
  REQUIRE(truth.log_probs.abs().sum().item<double>() > 1.0);
  {
    // On a GPU the attention buckets take shapes from BucketSteps' grid (rows of padding, longer rows): the passes
    // below attend over them. Rows of 13 and 11 tokens (a bucket), 10, 10 and 9 (another, padded with a fourth
    // row), 3 (alone: fewer than 4 rows go to a power of two).
    const PackedBatch packed = PackBatch(batch.input_ids.cuda(), batch.attention_mask.cuda(),
                                         batch.response_mask.cuda(), /*share_prompts=*/true);
    REQUIRE(packed.sequences.row_buckets == std::vector<std::pair<int64_t, int64_t>>{{2, 64}, {4, 64}, {1, 64}});
  }
  for (at::ScalarType dtype : {at::kBFloat16, at::kHalf, at::kFloat}) {
    INFO(c10::toString(dtype));
    REQUIRE(PackedAttentionIsFlash(at::kCUDA, dtype) == (dtype != at::kFloat));
    const Pass unshared = run(dtype, at::kCUDA, Way::kPacked);
    const Pass shared = run(dtype, at::kCUDA, Way::kShared);
    const double ulp = Ulp(dtype);
    const double e_lp_shared = MaxAbsDiff(shared.log_probs, truth.log_probs);
    const double e_lp_unshared = MaxAbsDiff(unshared.log_probs, truth.log_probs);
    const double e_ent_shared = MaxAbsDiff(shared.entropy, truth.entropy);
    const double e_ent_unshared = MaxAbsDiff(unshared.entropy, truth.entropy);
    CAPTURE(e_lp_shared, e_lp_unshared, e_ent_shared, e_ent_unshared);
    // No further from the truth than the unshared pass beyond rounding, and within bf16/fp16 tolerance.
    CHECK(e_lp_shared <= 2 * e_lp_unshared + 8 * ulp);
    CHECK(e_ent_shared <= 2 * e_ent_unshared + 8 * ulp);
    CHECK(e_lp_shared <= (dtype == at::kFloat ? 1e-4 : 0.1));
    REQUIRE(shared.grads.size() == truth.grads.size());
    for (size_t i = 0; i < truth.grads.size(); ++i) {
      CAPTURE(i);
      const double scale = MaxAbs(truth.grads[i]);
      const double e_shared = MaxAbsDiff(shared.grads[i], truth.grads[i]);
      const double e_unshared = MaxAbsDiff(unshared.grads[i], truth.grads[i]);
      CAPTURE(scale, e_shared, e_unshared);
      CHECK(e_shared <= 2 * e_unshared + 4 * ulp * scale);
      CHECK(e_shared <= (dtype == at::kFloat ? 1e-4 * (1 + scale) : 16 * ulp * scale + 1e-3));
    }
  }
}

TEST_CASE("SharedPromptRows gives Rope's and the row movers' rows and gradients, bit for bit", "[worker][train][gpu]") {
  if (SkipWithoutGpu()) return;
#ifdef VERL_WITH_CUDA
  // The shared-prompt attention rows straight from a stacked q/k/v projection, RoPE on the way, against what the layer
  // composed before: Rope of the q and k views, then GatherRowsOrZero (ScatterDistinct) and index_select
  // (GatherRepeated); the backward against Rope's backward of index_select / SumRows of the rows' gradients. The maps:
  // SharedPromptBatch's, packed.
  at::manual_seed(21);
  const SequenceBatch batch = SharedPromptBatch();
  const PackedBatch packed = PackBatch(batch.input_ids.cuda(), batch.attention_mask.cuda(),
                                       batch.response_mask.cuda(), /*share_prompts=*/true);
  const PackedSequences& p = packed.sequences;
  const int64_t T = p.row_output.size(0), R = p.row_index.size(0);
  REQUIRE(R > T);  // prompts' tokens in several rows: k and v sum over them in backward
  const auto opts = at::TensorOptions().device(at::kCUDA);
  for (at::ScalarType dtype : kDtypes) {
    // Head dims whose halves take 16-byte pieces, and 3- and 4-element halves (one element at a time in bf16); the
    // projection a column range of a wider matrix, 16-byte aligned or one element off.
    for (const auto& [D, Hq, Hkv, first] : std::vector<std::array<int64_t, 4>>{
             {64, 14, 2, 64}, {64, 14, 2, 1}, {8, 3, 1, 8}, {6, 2, 2, 0}}) {
      INFO(c10::toString(dtype) << " D " << D << " heads " << Hq << "/" << Hkv << " first column " << first);
      const int64_t C = (Hq + 2 * Hkv) * D;
      const at::Tensor pos = (at::arange(T, opts.dtype(at::kFloat)).remainder(11) * 1.3).unsqueeze(-1);
      const at::Tensor freqs = pos * at::rand({D / 2}, opts);
      const at::Tensor emb = at::cat({freqs, freqs}, -1);
      const at::Tensor cos = emb.cos().to(dtype), sin = emb.sin().to(dtype);
      const at::Tensor wide0 = at::randn({T, C + 2 * D}, opts).to(dtype);
      at::Tensor wide = wide0.clone().requires_grad_(true);
      const at::Tensor qkv = wide.narrow(1, first, C);
      REQUIRE(kernels::SharedPromptRowsSupported(qkv, cos, Hq, Hkv, D));
      const std::vector<at::Tensor> rows = kernels::SharedPromptRows(
          qkv, cos, sin, Hq, Hkv, D, p.row_source, p.row_index, p.row_output, p.key_offsets, p.key_positions);
      REQUIRE(rows.size() == 3);
      CHECK(rows[0].sizes() == at::IntArrayRef({R, Hq, D}));
      CHECK(rows[1].sizes() == at::IntArrayRef({R, Hkv, D}));
      CHECK(rows[2].sizes() == at::IntArrayRef({R, Hkv, D}));
      // The composition, on its own copy of the projection.
      at::Tensor wide_c = wide0.clone().requires_grad_(true);
      auto heads_view = [&](int64_t col, int64_t h) {  // [1, h, T, D], as SplitHeads of the projection's columns
        return wide_c.narrow(1, first + col, h * D).view({1, T, h, D}).transpose(1, 2);
      };
      const at::Tensor cos4 = cos.view({1, 1, T, D}), sin4 = sin.view({1, 1, T, D});
      const at::Tensor q4 = kernels::Rope(heads_view(0, Hq), cos4, sin4);
      const at::Tensor k4 = kernels::Rope(heads_view(Hq * D, Hkv), cos4, sin4);
      const at::Tensor v3 = wide_c.narrow(1, first + (Hq + Hkv) * D, Hkv * D).view({T, Hkv, D});
      auto tokens_first = [](const at::Tensor& t) { return t.squeeze(0).transpose(0, 1).contiguous(); };
      CHECK(at::equal(rows[0], kernels::GatherRowsOrZero(tokens_first(q4.detach()), p.row_source)));
      CHECK(at::equal(rows[1], tokens_first(k4.detach()).index_select(0, p.row_index)));
      CHECK(at::equal(rows[2], v3.detach().index_select(0, p.row_index)));
      // Without gradients: the same kernels, no autograd node.
      {
        at::NoGradGuard guard;
        const std::vector<at::Tensor> plain = kernels::SharedPromptRows(
            qkv, cos, sin, Hq, Hkv, D, p.row_source, p.row_index, p.row_output, p.key_offsets, p.key_positions);
        for (size_t i = 0; i < 3; ++i) CHECK(at::equal(plain[i], rows[i]));
      }
      // Backward: the rows' gradients into the projection's columns (zeros outside them).
      const at::Tensor gq = at::randn({R, Hq, D}, opts).to(dtype), gk = at::randn({R, Hkv, D}, opts).to(dtype),
                       gv = at::randn({R, Hkv, D}, opts).to(dtype);
      const at::Tensor d_fused = torch::autograd::grad({rows[0], rows[1], rows[2]}, {wide}, {gq, gk, gv})[0];
      const at::Tensor gq4 = gq.index_select(0, p.row_output).view({1, T, Hq, D}).transpose(1, 2);
      const at::Tensor gk4 = kernels::SumRows(gk, p.key_offsets, p.key_positions).view({1, T, Hkv, D}).transpose(1, 2);
      const at::Tensor gv3 = kernels::SumRows(gv, p.key_offsets, p.key_positions);
      const at::Tensor d_plain = torch::autograd::grad({q4, k4, v3}, {wide_c}, {gq4, gk4, gv3})[0];
      CAPTURE((d_fused.to(at::kFloat) - d_plain.to(at::kFloat)).abs().max().item<double>());
      CHECK(at::equal(d_fused, d_plain));
      CHECK(d_fused.narrow(1, first, C).abs().sum().item<double>() > 0);
    }
  }
  // Refused: an odd head dim, cos and sin of another length, a CPU tensor.
  const at::Tensor qkv = at::randn({5, 6 * 5}, opts).to(at::kBFloat16);
  CHECK_FALSE(kernels::SharedPromptRowsSupported(qkv, at::zeros({5, 5}, qkv.options()), 4, 1, 5));
  CHECK_FALSE(kernels::SharedPromptRowsSupported(qkv.narrow(1, 0, 24), at::zeros({4, 4}, qkv.options()), 4, 1, 4));
  CHECK_FALSE(kernels::SharedPromptRowsSupported(qkv.cpu(), at::zeros({5, 5}, at::kBFloat16), 4, 1, 5));
#endif
}

TEST_CASE("a pass with shared prompts equals the one whose rows the composition forms (VERL_SHARED_PROMPT_ROWS=0)",
          "[worker][train][gpu]") {
  if (SkipWithoutGpu()) return;
  // The whole pass with kernels::SharedPromptRows (the default on a GPU) against the same pass through Rope and the
  // row movers: the log-probs and entropy bit for bit, the gradients but for the order of cuDNN's attention backward's
  // atomic sums (its dq); with checkpointing too (the recompute forms the rows again).
  TestDir dir;
  const DecoderConfig config = testing::TinyDecoderConfig();
  testing::WriteTinyModel(dir.path(), config);
  const SequenceBatch batch = SharedPromptBatch();
  for (bool checkpointing : {false, true}) {
    for (at::ScalarType dtype : {at::kBFloat16, at::kFloat}) {
      INFO(c10::toString(dtype) << (checkpointing ? " checkpointed" : ""));
      const int64_t before = SharedPromptRowsFusedCalls();
      const Pass fused = RunPass(dir.path(), batch, dtype, at::kCUDA, Way::kShared, checkpointing);
      const int64_t calls = SharedPromptRowsFusedCalls() - before;
      // Every layer's forward, and each checkpointed layer's recompute.
      CHECK(calls == config.num_hidden_layers * (checkpointing ? 2 : 1));
      REQUIRE(setenv("VERL_SHARED_PROMPT_ROWS", "0", 1) == 0);
      const int64_t before_plain = SharedPromptRowsFusedCalls();
      const Pass plain = RunPass(dir.path(), batch, dtype, at::kCUDA, Way::kShared, checkpointing);
      const int64_t plain_calls = SharedPromptRowsFusedCalls() - before_plain;
      REQUIRE(unsetenv("VERL_SHARED_PROMPT_ROWS") == 0);
      CHECK(plain_calls == 0);
      CheckPassesAgree(fused, plain, dtype, /*same_bits=*/true);
    }
  }
}

TEST_CASE("a checkpointed layer's recompute takes the shared-prompt attention from its forward",
          "[worker][train][gpu]") {
  if (SkipWithoutGpu()) return;
  // With activation checkpointing, in bf16 on a GPU (cuDNN's attention), each layer's recompute hands autograd the
  // attention output and log-sum-exp its forward kept (AttentionSaves) instead of attending again; the backward is
  // cuDNN's on the same tensors. The recompute also stops before SwiGLU, whose value and gradient then come from one
  // kernel (SwiGluStackedBackwardWithValue), with shared prompts or without (packed sequences attend again). So the
  // pass equals the one without checkpointing: the forward bit for bit (the forward itself does not replay; the
  // gradients and the counts below check the recompute), the gradients but for the order of the attention backward's
  // atomic sums. float32 (not cuDNN) attends again: no bucket is replayed, and the figures agree to float32 rounding.
  // In every case the recompute takes the q/k/v and output projections' values from the forward (AttentionSaves::qkv
  // and o), and with keep_projections off (recompute_keep_projections=false) runs their GEMMs again, the same figures.
  TestDir dir;
  const DecoderConfig config = testing::TinyDecoderConfig();
  testing::WriteTinyModel(dir.path(), config);
  const SequenceBatch batch = SharedPromptBatch();
  for (Way way : {Way::kShared, Way::kPacked}) {
    for (at::ScalarType dtype : {at::kBFloat16, at::kFloat}) {
      INFO(c10::toString(dtype) << (way == Way::kShared ? " shared prompts" : " packed"));
      const Pass plain = RunPass(dir.path(), batch, dtype, at::kCUDA, way, /*checkpointing=*/false);
      const RecomputeCounts before = CheckpointRecomputeCounts();
      const Pass recomputed = RunPass(dir.path(), batch, dtype, at::kCUDA, way, /*checkpointing=*/true);
      const RecomputeCounts after = CheckpointRecomputeCounts();
      // Three buckets per layer with shared prompts (the case above lists them), none unshared.
      const int64_t calls = way == Way::kShared ? 3 : 0;
      CHECK(after.attention_buckets_replayed - before.attention_buckets_replayed ==
            (dtype == at::kBFloat16 ? calls * config.num_hidden_layers : 0));
      // Every layer's recompute stopped before SwiGLU (the fused kernel takes float32 too).
      CHECK(after.swiglu_formed_in_backward - before.swiglu_formed_in_backward == config.num_hidden_layers);
      // And took its two projections' values from its forward.
      CHECK(after.projections_replayed - before.projections_replayed == 2 * config.num_hidden_layers);
      CheckPassesAgree(recomputed, plain, dtype, /*same_bits=*/dtype == at::kBFloat16);
      const Pass again =
          RunPass(dir.path(), batch, dtype, at::kCUDA, way, /*checkpointing=*/true, /*keep_projections=*/false);
      CHECK(CheckpointRecomputeCounts().projections_replayed == after.projections_replayed);
      CheckPassesAgree(again, plain, dtype, /*same_bits=*/dtype == at::kBFloat16);
    }
  }
}

TEST_CASE("a CUDA allocation that fails becomes ResourceExhausted naming the phase's memory settings", "[gpu]") {
  if (testing::SkipWithoutGpu()) return;
  // 1 PiB on cuda:0: the caching allocator's OutOfMemoryError, which the rank's exception wall names.
  const absl::StatusOr<int> r = CatchTorch("rank 0 UpdateActor", "the phase's keys", []() -> absl::StatusOr<int> {
    const at::Tensor t = at::empty({int64_t{1} << 50}, at::TensorOptions().dtype(at::kByte).device(at::kCUDA, 0));
    return static_cast<int>(t.dim());
  });
  INFO(r.status().ToString());
  CHECK(absl::IsResourceExhausted(r.status()));
  CHECK_THAT(std::string(r.status().message()),
             Catch::Contains("rank 0 UpdateActor: out of memory: CUDA out of memory") &&
                 Catch::Contains("[the settings that bound this phase's memory: the phase's keys]"));
}

}  // namespace
}  // namespace verl
