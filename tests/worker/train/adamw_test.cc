#include "worker/train/adamw.h"

#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "tests/worker/torch_catch.h"

namespace verl {
namespace {

at::Tensor Vec(const std::vector<float>& v) {
  at::Tensor t = at::empty({static_cast<int64_t>(v.size())}, at::kFloat);
  for (size_t i = 0; i < v.size(); ++i) t[i] = v[i];
  return t;
}

void SetGrad(at::Tensor& p, const std::vector<float>& g) { p.mutable_grad() = Vec(g); }

TEST_CASE("AdamW follows torch.optim.AdamW for two steps", "[worker][train]") {
  // Expected values from torch.optim.AdamW's update written out in double precision:
  //   p *= 1 - lr wd;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
  //   p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
  // with lr 0.1, wd 0.1, betas (0.9, 0.999), eps 1e-8, p0 = [1, -2], g1 = [0.5, -1], g2 = [0.1, 0.3].
  // Both implementations: the element-wise one and ATen's fused multi-tensor kernel.
  const bool fused = GENERATE(false, true);
  INFO("fused " << fused);
  at::Tensor p = Vec({1.0f, -2.0f});
  AdamWOptions options{/*lr=*/0.1, /*weight_decay=*/0.1, 0.9, 0.999, 1e-8};
  options.fused = fused;
  AdamW opt({{"w", p}}, options);

  SetGrad(p, {0.5f, -1.0f});
  opt.Step(0.1);
  REQUIRE(opt.step_count() == 1);
  REQUIRE(p[0].item<double>() == Approx(0.890000002).epsilon(1e-6));
  REQUIRE(p[1].item<double>() == Approx(-1.880000001).epsilon(1e-6));
  REQUIRE(opt.exp_avg()[0][0].item<double>() == Approx(0.05).epsilon(1e-6));
  REQUIRE(opt.exp_avg()[0][1].item<double>() == Approx(-0.1).epsilon(1e-6));
  REQUIRE(opt.exp_avg_sq()[0][0].item<double>() == Approx(0.00025).epsilon(1e-6));
  REQUIRE(opt.exp_avg_sq()[0][1].item<double>() == Approx(0.001).epsilon(1e-6));

  SetGrad(p, {0.1f, 0.3f});
  opt.Step(0.1);
  REQUIRE(opt.step_count() == 2);
  REQUIRE(p[0].item<double>() == Approx(0.8007959063646517).epsilon(1e-6));
  REQUIRE(p[1].item<double>() == Approx(-1.8184151424192265).epsilon(1e-6));
  REQUIRE(opt.exp_avg()[0][1].item<double>() == Approx(-0.06).epsilon(1e-6));
  REQUIRE(opt.exp_avg_sq()[0][1].item<double>() == Approx(0.001089).epsilon(1e-6));
}

TEST_CASE("AdamW: weight decay is decoupled; parameters without a gradient are skipped", "[worker][train]") {
  at::Tensor zero_grad = Vec({3.0f, -3.0f});
  at::Tensor no_grad = Vec({5.0f});
  AdamW opt({{"a", zero_grad}, {"b", no_grad}}, AdamWOptions{0.1, 0.1, 0.9, 0.999, 1e-8});
  SetGrad(zero_grad, {0.0f, 0.0f});
  opt.Step(0.1);
  // A zero gradient gives a zero Adam update; only the decay p *= 1 - lr wd remains: 3 -> 2.97. (Adam's coupled L2
  // would add wd p to the gradient instead, and its normalised step would move p by about lr: 3 -> 2.9.)
  REQUIRE(zero_grad[0].item<double>() == Approx(3.0 * 0.99).epsilon(1e-7));
  REQUIRE(zero_grad[1].item<double>() == Approx(-3.0 * 0.99).epsilon(1e-7));
  REQUIRE(no_grad[0].item<float>() == 5.0f);
  // The learning rate passed to Step (the schedule's value) is the one used, not options.lr.
  opt.Step(0.0);
  REQUIRE(zero_grad[0].item<double>() == Approx(3.0 * 0.99).epsilon(1e-7));

  opt.ZeroGrad();
  REQUIRE_FALSE(zero_grad.grad().defined());
}

TEST_CASE("AdamW on bf16 parameters keeps float32 master weights, so small updates accumulate", "[worker][train]") {
  // 1.0 in bf16 has a spacing of 2^-7 = 0.0078: an Adam step of lr = 1e-3 is far below it and would round away if
  // applied to the bf16 weight directly. With the master, 20 steps move the master by about 0.02 and the weight
  // follows it to bf16 precision.
  at::Tensor p = Vec({1.0f, -1.0f}).to(at::kBFloat16);
  at::Tensor reference = Vec({1.0f, -1.0f});  // the same steps on a float32 parameter
  AdamW opt({{"w", p}}, AdamWOptions{1e-3, 0.0, 0.9, 0.999, 1e-8});
  AdamW ref_opt({{"w", reference}}, AdamWOptions{1e-3, 0.0, 0.9, 0.999, 1e-8});
  REQUIRE(opt.master()[0].defined());
  REQUIRE_FALSE(ref_opt.master()[0].defined());
  for (int i = 0; i < 20; ++i) {
    p.mutable_grad() = Vec({0.5f, -0.5f}).to(at::kBFloat16);
    SetGrad(reference, {0.5f, -0.5f});
    opt.Step(1e-3);
    ref_opt.Step(1e-3);
  }
  // The master follows the float32 run exactly (the gradients are representable in bf16).
  REQUIRE(opt.master()[0][0].item<double>() == Approx(reference[0].item<double>()).epsilon(1e-7));
  REQUIRE(reference[0].item<double>() == Approx(0.98).margin(1e-3));
  // The bf16 weight is the master rounded: it moved, and by what bf16 can show.
  REQUIRE(p[0].item<double>() < 1.0);
  REQUIRE(std::abs(p[0].item<double>() - opt.master()[0][0].item<double>()) <= 0.0039);
  REQUIRE(p[1].item<double>() > -1.0);
  REQUIRE(opt.StateBytes() == 3 * 2 * 4);  // exp_avg, exp_avg_sq and master, float32
}

TEST_CASE("ClipGradNorm scales to max_norm and returns the norm before clipping", "[worker][train]") {
  at::Tensor a = Vec({0.0f, 0.0f});
  at::Tensor b = Vec({0.0f, 0.0f});
  at::Tensor c = Vec({1.0f});  // no gradient: ignored
  SetGrad(a, {3.0f, 4.0f});
  SetGrad(b, {0.0f, 12.0f});  // global norm sqrt(9 + 16 + 144) = 13

  SECTION("above max_norm: scaled by max_norm / (norm + 1e-6)") {
    REQUIRE(ClipGradNorm({a, b, c}, 6.5) == Approx(13.0));
    const double coef = 6.5 / (13.0 + 1e-6);
    REQUIRE(a.grad()[0].item<double>() == Approx(3.0 * coef).epsilon(1e-6));
    REQUIRE(a.grad()[1].item<double>() == Approx(4.0 * coef).epsilon(1e-6));
    REQUIRE(b.grad()[1].item<double>() == Approx(12.0 * coef).epsilon(1e-6));
    REQUIRE(ClipGradNorm({a, b}, 6.5) == Approx(6.5).epsilon(1e-6));
  }
  SECTION("below max_norm: unchanged") {
    REQUIRE(ClipGradNorm({a, b, c}, 20.0) == Approx(13.0));
    REQUIRE(a.grad()[1].item<float>() == 4.0f);
    REQUIRE(b.grad()[1].item<float>() == 12.0f);
  }
  SECTION("non-finite norm: returned as is, nothing scaled") {
    SetGrad(b, {std::numeric_limits<float>::infinity(), 12.0f});
    REQUIRE(std::isinf(ClipGradNorm({a, b}, 1.0)));
    REQUIRE(a.grad()[1].item<float>() == 4.0f);
    SetGrad(b, {std::numeric_limits<float>::quiet_NaN(), 12.0f});
    REQUIRE(std::isnan(ClipGradNorm({a, b}, 1.0)));
    REQUIRE(a.grad()[0].item<float>() == 3.0f);
    REQUIRE(b.grad()[1].item<float>() == 12.0f);
  }
  SECTION("float64 gradients keep float64 precision, beside float32 and bf16 ones") {
    // 1 + 1e-9 in float64: a float32 norm would round it to 1.
    at::Tensor d = at::zeros({1}, at::kDouble).requires_grad_(true);
    d.mutable_grad() = at::full({1}, 1.0 + 1e-9, at::kDouble);
    at::Tensor h = at::zeros({2}, at::kBFloat16).requires_grad_(true);
    h.mutable_grad() = at::zeros({2}, at::kBFloat16);
    REQUIRE(ClipGradNorm({d, h}, 10.0) == 1.0 + 1e-9);
    const double expect = std::sqrt((1.0 + 1e-9) * (1.0 + 1e-9) + 169.0);
    REQUIRE(ClipGradNorm({a, b, d, h}, 100.0) == Approx(expect).epsilon(1e-12));
    REQUIRE(ClipGradNorm({a, b, d}, 1.0) == Approx(expect).epsilon(1e-12));
    REQUIRE(d.grad()[0].item<double>() == Approx((1.0 + 1e-9) / (expect + 1e-6)).epsilon(1e-12));
  }
}

TEST_CASE("AdamW: the fused kernel gives the element-wise update, float32 and bf16 with masters", "[worker][train]") {
  std::vector<std::vector<at::Tensor>> params(2), masters(2);
  for (int fused = 0; fused < 2; ++fused) {
    at::manual_seed(7);
    std::vector<std::pair<std::string, at::Tensor>> named = {
        {"a", at::randn({5, 3})}, {"b", at::randn({7}).to(at::kBFloat16)}, {"c", at::randn({2, 2, 2})}};
    AdamWOptions options{/*lr=*/0.01, /*weight_decay=*/0.05, 0.9, 0.99, 1e-6};
    options.fused = fused == 1;
    AdamW opt(named, options);
    for (int step = 0; step < 3; ++step) {
      for (auto& [name, t] : named) t.mutable_grad() = at::randn(t.sizes()).to(t.scalar_type());
      opt.Step(0.01 * (step + 1));
    }
    for (auto& [name, t] : named) params[fused].push_back(t.clone());
    masters[fused].push_back(opt.master()[1].clone());
  }
  for (size_t i = 0; i < params[0].size(); ++i) {
    INFO("parameter " << i);
    REQUIRE((params[0][i].to(at::kFloat) - params[1][i].to(at::kFloat)).abs().max().item<double>() < 1e-6);
  }
  REQUIRE((masters[0][0] - masters[1][0]).abs().max().item<double>() < 1e-6);
  REQUIRE((masters[0][0] - params[0][1].to(at::kFloat)).abs().max().item<double>() > 0);  // a real master
}

TEST_CASE("GradAccumulator sums micro-batch gradients of bf16 parameters in float32", "[worker][train]") {
  // 1.0 in bf16 has a spacing of 2^-7: adding 2^-9 to it rounds back to 1.0, so autograd's own sum into the bf16
  // .grad would stay 1.0 over any number of such micro-batches. The float32 sum keeps each of them.
  at::Tensor w = Vec({0.0f, 0.0f}).to(at::kBFloat16).set_requires_grad(true);
  at::Tensor f = Vec({0.0f}).set_requires_grad(true);  // float32: left to autograd
  at::Tensor unused = Vec({0.0f}).to(at::kBFloat16).set_requires_grad(true);
  const float small = 1.0f / 512.0f;
  auto pass = [&](float c0, float c1) {
    // d/dw of sum(w * c) is c (in bf16, exact for these values); d/df of 2 f is 2.
    at::Tensor loss = (w.to(at::kFloat) * Vec({c0, c1})).sum() + f.sum() * 2.0;
    loss.backward();
  };
  SECTION("with the accumulator") {
    GradAccumulator grads({w, f, unused});
    pass(1.0f, -1.0f);
    grads.Collect();
    REQUIRE_FALSE(w.grad().defined());  // moved into the sum: the next backward writes a fresh one
    REQUIRE(f.grad().defined());        // float32 parameters keep autograd's sum
    for (int i = 0; i < 16; ++i) {
      pass(small, small);
      grads.Collect();
    }
    grads.Finish();
    REQUIRE(w.grad().scalar_type() == at::kFloat);
    REQUIRE(w.grad()[0].item<double>() == 1.0 + 16 * small);  // 1.03125, exact in float32
    REQUIRE(w.grad()[1].item<double>() == -1.0 + 16 * small);
    REQUIRE(f.grad().item<double>() == 2.0 * 17);
    REQUIRE_FALSE(unused.grad().defined());  // no pass reached it
    // The optimizer takes the float32 gradient on the bf16 parameter; ZeroGrad clears it.
    AdamW opt({{"w", w}, {"f", f}}, AdamWOptions{1e-3, 0.0, 0.9, 0.999, 1e-8});
    const double norm = ClipAndStep(opt, {w, f}, 1e9, 1e-3);
    REQUIRE(norm == Approx(std::sqrt(1.03125 * 1.03125 + 0.96875 * 0.96875 + 34.0 * 34.0)).epsilon(1e-6));
    REQUIRE_FALSE(w.grad().defined());
    REQUIRE(opt.master()[0][0].item<double>() == Approx(-1e-3).epsilon(1e-4));  // Adam's first step: -lr sign(g)
  }
  SECTION("autograd alone rounds the running sum to bf16 (what the accumulator avoids)") {
    pass(1.0f, -1.0f);
    for (int i = 0; i < 16; ++i) pass(small, small);
    REQUIRE(w.grad().scalar_type() == at::kBFloat16);
    REQUIRE(w.grad()[0].item<double>() == 1.0);
  }
}

}  // namespace
}  // namespace verl
