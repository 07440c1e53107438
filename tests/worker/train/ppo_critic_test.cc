#include "worker/train/ppo_critic.h"

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tests/worker/torch_catch.h"
#include "tests/test_dir.h"
#include "tests/worker/tiny_model.h"

namespace verl {
namespace {

using testing::LongTensor2d;
using testing::MaxAbsDiff;
using testing::TestDir;

std::unique_ptr<ValueModel> LoadCriticOrDie(const std::string& dir, uint64_t seed = 0) {
  auto model = ValueModel::Load(dir, at::kFloat, seed);
  INFO(model.status().ToString());
  REQUIRE(model.ok());
  return std::move(*model);
}

// Two sequences with 3-token prompts (the second left-padded by one) and 3-token responses, the second response one
// token shorter (right-padded), so that the rows carry different token counts.
SequenceBatch TinyBatch() {
  SequenceBatch b;
  at::Tensor prompts = LongTensor2d({{3, 4, 5}, {49, 7, 8}});
  at::Tensor prompt_mask = LongTensor2d({{1, 1, 1}, {0, 1, 1}}).to(at::kBool);
  b.responses = LongTensor2d({{10, 11, 12}, {20, 21, 49}});
  b.response_mask = LongTensor2d({{1, 1, 1}, {1, 1, 0}}).to(at::kBool);
  b.input_ids = at::cat({prompts, b.responses}, 1);
  b.attention_mask = at::cat({prompt_mask, b.response_mask}, 1);
  return b;
}

double MaskedMeanOf(const at::Tensor& x, const at::Tensor& mask) {
  at::Tensor m = mask.to(at::kDouble);
  return ((x.to(at::kDouble) * m).sum() / m.sum()).item<double>();
}

std::vector<at::Tensor> Snapshot(const ValueModel& model) {
  std::vector<at::Tensor> out;
  for (const auto& [name, p] : model.named_parameters()) out.push_back(p.detach().clone());
  return out;
}

TEST_CASE("ComputeValuesNoGrad: masked, micro-batch independent, no history", "[worker][train]") {
  TestDir dir("critic_values");
  testing::WriteTinyModel(dir.path(), testing::TinyDecoderConfig());
  auto model = LoadCriticOrDie(dir.path());
  model->SetRequiresGrad(true);
  SequenceBatch b = TinyBatch();
  at::Tensor v2 = ComputeValuesNoGrad(*model, b, 2);
  at::Tensor v1 = ComputeValuesNoGrad(*model, b, 1);
  REQUIRE(v2.sizes() == at::IntArrayRef({2, 3}));
  REQUIRE_FALSE(v2.requires_grad());
  REQUIRE(MaxAbsDiff(v1, v2) < 1e-5);
  REQUIRE(v2[1][2].item<double>() == 0.0);  // response padding
  REQUIRE(std::abs(v2[0][2].item<double>()) > 1e-6);
  // The unmasked values are the model's.
  at::NoGradGuard no_grad;
  at::Tensor raw = model->Values(b.input_ids, b.attention_mask, 3);
  REQUIRE(MaxAbsDiff(v2.narrow(1, 0, 2), raw.narrow(1, 0, 2)) < 1e-6);
}

TEST_CASE("UpdateValue fits the values to the returns", "[worker][train]") {
  TestDir dir("critic_fit");
  testing::WriteTinyModel(dir.path(), testing::TinyDecoderConfig());
  auto model = LoadCriticOrDie(dir.path());
  SequenceBatch b = TinyBatch();
  const at::Tensor returns = at::tensor({1.0f, 0.5f, -0.5f, 0.25f, -1.0f, 0.0f}).view({2, 3});
  ValueUpdateOptions o;
  o.lr = 1e-3;
  o.mini_batch_size = 2;
  o.micro_batch_size = 1;
  o.cliprange_value = 0.5;
  model->SetRequiresGrad(true);
  AdamW opt(model->named_parameters(), AdamWOptions{o.lr, 0.0, 0.9, 0.999, 1e-8});

  const int kSteps = 30;
  std::vector<double> losses;
  for (int i = 0; i < kSteps; ++i) {
    // Each step's old values are the critic's before the step, as in PPO.
    const at::Tensor old_values = ComputeValuesNoGrad(*model, b, 2);
    auto m = UpdateValue(*model, opt, b, old_values, returns, o);
    INFO(m.status().ToString());
    REQUIRE(m.ok());
    for (const char* key : {"critic/vf_loss", "critic/vf_clipfrac", "critic/vpred_mean", "critic/grad_norm",
                            "critic/lr"}) {
      INFO(key);
      REQUIRE(m->count(key) == 1);
    }
    REQUIRE(m->at("critic/lr") == o.lr);
    // The values are the old values during the (single) pass, so nothing is clipped and the loss is half the mean
    // squared error over the mini-batch's 5 valid tokens (not a mean of per-micro-batch means).
    REQUIRE(m->at("critic/vf_clipfrac") == 0.0);
    const at::Tensor err = (old_values - returns).square();
    REQUIRE(m->at("critic/vf_loss") == Approx(0.5 * MaskedMeanOf(err, b.response_mask)).epsilon(1e-4));
    // vpred_mean is, as in verl, the mean over micro-batches (here rows) of each one's masked mean.
    const double row_means = 0.5 * (MaskedMeanOf(old_values[0], b.response_mask[0]) +
                                    MaskedMeanOf(old_values[1], b.response_mask[1]));
    // An absolute margin: the row means are of values up to about 0.8 that cancel to as little as 2e-4, where float
    // rounding alone (4e-8, seen on an AMD EPYC) exceeds a relative 1e-4; the token mean differs by more than 1e-3.
    REQUIRE(m->at("critic/vpred_mean") == Approx(row_means).margin(1e-6));
    REQUIRE(m->at("critic/grad_norm") > 0.0);
    losses.push_back(m->at("critic/vf_loss"));
  }
  REQUIRE(opt.step_count() == kSteps);  // one mini-batch per call
  INFO("first loss " << losses.front() << ", last " << losses.back());
  REQUIRE(losses.front() > 0.05);
  REQUIRE(losses.back() < 0.01 * losses.front());
  const at::Tensor fitted = ComputeValuesNoGrad(*model, b, 2);
  const at::Tensor mask = b.response_mask.to(at::kFloat);
  INFO("fitted " << fitted);
  REQUIRE(((fitted - returns) * mask).abs().max().item<double>() < 0.1);
}

TEST_CASE("UpdateValue: micro-batches accumulate to the mini-batch gradient", "[worker][train]") {
  TestDir dir("critic_micro");
  testing::WriteTinyModel(dir.path(), testing::TinyDecoderConfig());
  SequenceBatch b = TinyBatch();
  const at::Tensor returns = at::tensor({1.0f, 0.5f, -0.5f, 0.25f, -1.0f, 0.0f}).view({2, 3});
  std::vector<std::vector<at::Tensor>> before, after;
  std::vector<std::map<std::string, double>> metrics;
  for (int64_t micro : {1, 2}) {
    auto model = LoadCriticOrDie(dir.path());
    const at::Tensor old_values = ComputeValuesNoGrad(*model, b, 2);
    ValueUpdateOptions o;
    o.lr = 0.1;
    o.grad_clip = 1e9;
    o.cliprange_value = 100.0;
    o.mini_batch_size = 2;
    o.micro_batch_size = micro;
    o.ppo_epochs = 2;  // the second step starts from the first one's parameters
    model->SetRequiresGrad(true);
    // eps 1: an Adam step of about lr * g / (|g| + 1), linear in the gradient, so a wrongly weighted micro-batch
    // shows (with the default eps each coordinate moves by ~lr * sign(g) whatever the scale).
    AdamW opt(model->named_parameters(), AdamWOptions{o.lr, 0.0, 0.9, 0.999, /*eps=*/1.0});
    before.push_back(Snapshot(*model));
    auto m = UpdateValue(*model, opt, b, old_values, returns, o);
    INFO(m.status().ToString());
    REQUIRE(m.ok());
    REQUIRE(opt.step_count() == 2);
    metrics.push_back(*m);
    after.push_back(Snapshot(*model));
  }
  double moved = 0.0, mismatch = 0.0;
  for (size_t i = 0; i < after[0].size(); ++i) {
    moved = std::max(moved, MaxAbsDiff(after[0][i], before[0][i]));
    mismatch = std::max(mismatch, MaxAbsDiff(after[0][i], after[1][i]));
  }
  INFO("moved " << moved << ", mismatch " << mismatch);
  REQUIRE(moved > 1e-3);
  REQUIRE(mismatch < 1e-5);
  REQUIRE(metrics[0].at("critic/vf_loss") == Approx(metrics[1].at("critic/vf_loss")).epsilon(1e-5));
  REQUIRE(metrics[0].at("critic/grad_norm") == Approx(metrics[1].at("critic/grad_norm")).epsilon(1e-4));
}

TEST_CASE("UpdateValue clips values that moved beyond cliprange_value", "[worker][train]") {
  TestDir dir("critic_clip");
  testing::WriteTinyModel(dir.path(), testing::TinyDecoderConfig());
  auto model = LoadCriticOrDie(dir.path());
  SequenceBatch b = TinyBatch();
  const at::Tensor v0 = ComputeValuesNoGrad(*model, b, 2);
  // The critic now predicts v0, 1.0 above the old values: beyond cliprange_value 0.5.
  const at::Tensor old_values = v0 - 1.0;
  ValueUpdateOptions o;
  o.lr = 1e-3;
  o.cliprange_value = 0.5;
  o.mini_batch_size = 2;
  o.micro_batch_size = 2;
  model->SetRequiresGrad(true);
  AdamW opt(model->named_parameters(), AdamWOptions{o.lr, 0.0, 0.9, 0.999, 1e-8});

  SECTION("returns above: the clipped value is the worse one, so the clipped term counts") {
    // Row 0's returns are 2 above v0: the clipped value (v_old + 0.5 = v0 - 0.5) is 2.5 away, more than v0's 2.
    // Row 1's returns are 3 below v0: the clipped value is nearer (2.5), so the unclipped 3 counts.
    at::Tensor returns = at::cat({v0.narrow(0, 0, 1) + 2.0, v0.narrow(0, 1, 1) - 3.0}, 0);
    auto m = UpdateValue(*model, opt, b, old_values, returns, o);
    INFO(m.status().ToString());
    REQUIRE(m.ok());
    REQUIRE(m->at("critic/vf_clipfrac") == Approx(3.0 / 5.0));
    REQUIRE(m->at("critic/vf_loss") == Approx(0.5 * (3 * 2.5 * 2.5 + 2 * 3.0 * 3.0) / 5).epsilon(1e-5));
    REQUIRE(m->at("critic/grad_norm") > 0.0);  // row 1 still has a gradient
  }
  SECTION("every token clipped: the loss has no gradient") {
    at::Tensor returns = v0 + 2.0;
    const std::vector<at::Tensor> start = Snapshot(*model);
    auto m = UpdateValue(*model, opt, b, old_values, returns, o);
    INFO(m.status().ToString());
    REQUIRE(m.ok());
    REQUIRE(m->at("critic/vf_clipfrac") == 1.0);
    REQUIRE(m->at("critic/vf_loss") == Approx(0.5 * 2.5 * 2.5).epsilon(1e-5));
    REQUIRE(m->at("critic/grad_norm") == 0.0);
    const std::vector<at::Tensor> end = Snapshot(*model);
    for (size_t i = 0; i < start.size(); ++i) REQUIRE(at::equal(start[i], end[i]));
  }
  SECTION("a wide cliprange clips nothing") {
    o.cliprange_value = 100.0;
    at::Tensor returns = v0 + 2.0;
    auto m = UpdateValue(*model, opt, b, old_values, returns, o);
    REQUIRE(m.ok());
    REQUIRE(m->at("critic/vf_clipfrac") == 0.0);
    REQUIRE(m->at("critic/vf_loss") == Approx(0.5 * 2.0 * 2.0).epsilon(1e-5));
  }
}

TEST_CASE("UpdateValue: the mini-batch size must divide the batch", "[worker][train]") {
  TestDir dir("critic_errors");
  testing::WriteTinyModel(dir.path(), testing::TinyDecoderConfig());
  auto model = LoadCriticOrDie(dir.path());
  SequenceBatch b = TinyBatch();
  model->SetRequiresGrad(true);
  AdamW opt(model->named_parameters(), AdamWOptions{});
  const at::Tensor zeros = at::zeros({2, 3});
  ValueUpdateOptions o;
  for (int64_t mini : {3, 0}) {
    o.mini_batch_size = mini;
    auto m = UpdateValue(*model, opt, b, zeros, zeros, o);
    INFO(m.status().ToString());
    REQUIRE(m.status().code() == absl::StatusCode::kInvalidArgument);
    REQUIRE(std::string(m.status().message()).find("mini-batches of " + std::to_string(mini)) != std::string::npos);
    REQUIRE(opt.step_count() == 0);
  }
  o.mini_batch_size = 2;
  o.loss_agg_mode = "token-median";
  auto m = UpdateValue(*model, opt, b, zeros, zeros, o);
  REQUIRE(m.status().code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(std::string(m.status().message()).find("token-median") != std::string::npos);
  REQUIRE(opt.step_count() == 0);
}

}  // namespace
}  // namespace verl
