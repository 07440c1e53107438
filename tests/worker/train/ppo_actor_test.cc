#include "worker/train/ppo_actor.h"

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "tests/worker/torch_catch.h"
#include "tests/test_dir.h"
#include "tests/worker/tiny_model.h"

namespace verl {
namespace {

using testing::LoadModelOrDie;
using testing::LongTensor2d;
using testing::MaxAbsDiff;
using testing::TestDir;

// Two sequences with 3-token prompts (the second left-padded by one) and 3-token responses.
SequenceBatch TinyBatch() {
  SequenceBatch b;
  at::Tensor prompts = LongTensor2d({{3, 4, 5}, {49, 7, 8}});
  at::Tensor prompt_mask = LongTensor2d({{1, 1, 1}, {0, 1, 1}}).to(at::kBool);
  b.responses = LongTensor2d({{10, 11, 12}, {20, 21, 22}});
  b.response_mask = at::ones({2, 3}, at::kBool);
  b.input_ids = at::cat({prompts, b.responses}, 1);
  b.attention_mask = at::cat({prompt_mask, b.response_mask}, 1);
  return b;
}

TEST_CASE("ForwardLogProbs reads the logits that predict each response token", "[worker][train]") {
  TestDir dir("ppo_lp");
  testing::WriteTinyModel(dir.path(), testing::TinyDecoderConfig());
  auto model = LoadModelOrDie(dir.path());
  at::NoGradGuard no_grad;
  SequenceBatch b = TinyBatch();
  LogProbResult r = ForwardLogProbs(*model, b, 0, 2, /*temperature=*/0.5, /*with_entropy=*/true);
  REQUIRE(r.log_probs.sizes() == at::IntArrayRef({2, 3}));
  REQUIRE(r.entropy.sizes() == at::IntArrayRef({2, 3}));
  // Row 0 by hand: an unpadded forward over the 6 tokens; hidden state t predicts token t + 1.
  at::Tensor ids = b.input_ids.narrow(0, 0, 1);
  at::Tensor valid = at::ones({1, 6}, at::kBool);
  at::Tensor logits = model->Logits(model->Forward(ids, at::arange(6, at::kLong).unsqueeze(0),
                                                   BuildAttentionMask(valid, 0, 6), nullptr)) / 0.5;
  at::Tensor lsm = logits.log_softmax(-1);
  for (int64_t j = 0; j < 3; ++j) {
    REQUIRE(r.log_probs[0][j].item<double>() ==
            Approx(lsm[0][2 + j][b.responses[0][j].item<int64_t>()].item<double>()).margin(1e-5));
  }
  // Micro-batching does not change the numbers (ComputeLogProbsNoGrad attends causally, row 1 rolled past its
  // padding: CausalPasses).
  REQUIRE(CausalPasses(b, /*packed=*/false));
  at::Tensor micro = ComputeLogProbsNoGrad(*model, b, 0.5, /*micro_batch_size=*/1);
  REQUIRE(MaxAbsDiff(micro, r.log_probs) < 1e-5);
}

TEST_CASE("ForwardLogProbs: causal attention over rolled rows gives the masked pass's log-probs and gradients",
          "[worker][train]") {
  TestDir dir("ppo_lp_causal");
  testing::WriteTinyModel(dir.path(), testing::TinyDecoderConfig());
  auto model = LoadModelOrDie(dir.path());
  model->SetRequiresGrad(true);
  // With activation checkpointing the rolled layers run again in backward.
  const bool checkpointing = GENERATE(false, true);
  CAPTURE(checkpointing);
  model->SetGradientCheckpointing(checkpointing);
  SequenceBatch b = TinyBatch();  // row 1 left-padded
  b.response_mask[0][2] = false;  // and row 0's response ended early
  b.attention_mask[0][5] = false;
  std::vector<std::vector<at::Tensor>> grads;
  std::vector<at::Tensor> log_probs;
  for (bool causal : {false, true}) {
    for (const auto& [name, p] : model->named_parameters()) p.mutable_grad() = at::Tensor();
    const LogProbResult r = ForwardLogProbs(*model, b, 0, 2, 1.0, /*with_entropy=*/true, causal);
    (r.log_probs * b.response_mask).sum().backward();
    log_probs.push_back(r.log_probs.detach().masked_select(b.response_mask));
    grads.emplace_back();
    for (const auto& [name, p] : model->named_parameters()) grads.back().push_back(p.grad().clone());
  }
  REQUIRE(MaxAbsDiff(log_probs[0], log_probs[1]) < 1e-5);
  // The same float32 terms summed in another order (rolled rows): equal up to rounding relative to the gradients'
  // size (8.1e-6 apart at a scale of 10.8 on one CPU, against an absolute 1e-5 before).
  double grad_scale = 0;
  for (const at::Tensor& g : grads[0]) grad_scale = std::max(grad_scale, g.abs().max().item<double>());
  INFO("gradient scale " << grad_scale);
  REQUIRE(grad_scale > 0.1);
  for (size_t i = 0; i < grads[0].size(); ++i) {
    INFO(model->named_parameters()[i].first);
    REQUIRE(MaxAbsDiff(grads[0][i], grads[1][i]) < std::max(1e-5, 2e-6 * grad_scale));
  }
  // A row whose valid tokens are not one run cannot run causally.
  b.attention_mask[1][4] = false;
  REQUIRE_FALSE(CausalPasses(b, /*packed=*/false));
  REQUIRE_THROWS_WITH(ForwardLogProbs(*model, b, 0, 2, 1.0, false, /*causal=*/true), Catch::Contains("not one run"));
  model->SetRequiresGrad(false);
}

TEST_CASE("UpdatePolicy raises the log-prob of a response with positive advantage", "[worker][train]") {
  TestDir dir("ppo_update");
  testing::WriteTinyModel(dir.path(), testing::TinyDecoderConfig());
  auto model = LoadModelOrDie(dir.path());
  SequenceBatch b = TinyBatch();
  const at::Tensor old_lp = ComputeLogProbsNoGrad(*model, b, 1.0, 2);
  PolicyUpdateInputs in{old_lp, at::Tensor(), at::ones({2, 3}, at::kFloat)};
  PolicyUpdateOptions o;
  // Adam's first steps are ~lr * sign(g) on every weight at once, which moves a tiny model a lot: keep the ratios
  // inside the clip range (clipped tokens have no gradient).
  o.lr = 2e-5;
  o.mini_batch_size = 2;
  o.micro_batch_size = 1;
  model->SetRequiresGrad(true);
  AdamW opt(model->named_parameters(), AdamWOptions{o.lr, 0.0, 0.9, 0.999, 1e-8});

  std::vector<double> losses;
  for (int i = 0; i < 3; ++i) {
    auto m = UpdatePolicy(*model, opt, b, in, o);
    INFO(m.status().ToString());
    REQUIRE(m.ok());
    for (const char* key : {"actor/pg_loss", "actor/pg_clipfrac", "actor/ppo_kl", "actor/pg_clipfrac_lower",
                            "actor/entropy", "actor/grad_norm", "actor/lr"}) {
      INFO(key);
      REQUIRE(m->count(key) == 1);
    }
    REQUIRE(m->at("actor/lr") == o.lr);
    for (const auto& [k, v] : *m) UNSCOPED_INFO(i << " " << k << " = " << v);
    REQUIRE(m->at("actor/grad_norm") > 0.0);
    REQUIRE(m->at("actor/pg_clipfrac") == 0.0);
    if (i == 0) {
      // First pass: the policy is the old policy, ratio 1, so the loss is -mean(A) = -1 and nothing is clipped.
      REQUIRE(m->at("actor/pg_loss") == Approx(-1.0).epsilon(1e-5));
      REQUIRE(m->at("actor/ppo_kl") == Approx(0.0).margin(1e-6));
    }
    losses.push_back(m->at("actor/pg_loss"));
  }
  REQUIRE(opt.step_count() == 3);  // one mini-batch per call
  INFO(losses[0] << " " << losses[1] << " " << losses[2]);
  REQUIRE(losses[1] < losses[0]);
  REQUIRE(losses[2] < losses[1]);
  // seq-mean-token-sum-norm divides the token sum by loss_scale_factor when given (verl's actor.loss_scale_factor),
  // else by the response width (3 here): a factor of 1.5 doubles the loss. lr 0 keeps the weights for the comparison.
  {
    PolicyUpdateOptions so = o;
    so.lr = 0;
    so.loss.loss_agg_mode = "seq-mean-token-sum-norm";
    auto by_width = UpdatePolicy(*model, opt, b, in, so);
    REQUIRE(by_width.ok());
    so.loss_scale_factor = 1.5;
    auto by_factor = UpdatePolicy(*model, opt, b, in, so);
    REQUIRE(by_factor.ok());
    REQUIRE(by_factor->at("actor/pg_loss") == Approx(2 * by_width->at("actor/pg_loss")).epsilon(1e-6));
  }
  // Modes whose verl loss function reports fewer figures report only those (no constant-zero series).
  for (const auto& [mode, want] : std::vector<std::pair<std::string, std::vector<int>>>{
           {"gpg", {0, 0, 0}},
           {"kl_cov", {0, 1, 0}},
           {"clip_cov", {1, 1, 0}},
           {"cispo", {1, 1, 1}},
           {"reinforce", {0, 1, 0}}}) {
    INFO(mode);
    PolicyUpdateOptions mo = o;
    mo.loss.loss_mode = mode;
    auto m = UpdatePolicy(*model, opt, b, in, mo);
    INFO(m.status().ToString());
    REQUIRE(m.ok());
    REQUIRE(m->count("actor/pg_loss") == 1);
    REQUIRE(static_cast<int>(m->count("actor/pg_clipfrac")) == want[0]);
    REQUIRE(static_cast<int>(m->count("actor/ppo_kl")) == want[1]);
    REQUIRE(static_cast<int>(m->count("actor/pg_clipfrac_lower")) == want[2]);
  }
  // verl's rollout_corr/* figures only when asked, which needs the rollout's log-probs; here those are the policy's
  // own (lr 0 keeps it), so nothing diverges.
  {
    PolicyUpdateOptions ro = o;
    ro.lr = 0;
    ro.rollout_corr_metrics = true;
    REQUIRE(UpdatePolicy(*model, opt, b, in, ro).status().code() == absl::StatusCode::kFailedPrecondition);
    PolicyUpdateInputs with = in;
    with.rollout_log_probs = ComputeLogProbsNoGrad(*model, b, 1.0, 2);
    auto m = UpdatePolicy(*model, opt, b, with, ro);
    INFO(m.status().ToString());
    REQUIRE(m.ok());
    for (const std::string& name : OffPolicyFigureNames()) REQUIRE(m->count("rollout_corr/" + name) == 1);
    CHECK(m->at("rollout_corr/kl") == Approx(0.0).margin(1e-5));
    CHECK(m->at("rollout_corr/chi2_token") == Approx(0.0).margin(1e-4));
    CHECK(m->at("rollout_corr/training_ppl") == Approx(m->at("rollout_corr/rollout_ppl")).epsilon(1e-5));
    ro.rollout_corr_metrics = false;
    auto off = UpdatePolicy(*model, opt, b, with, ro);
    REQUIRE(off.ok());
    CHECK(off->count("rollout_corr/kl") == 0);
  }
  model->SetRequiresGrad(false);
  at::Tensor new_lp = ComputeLogProbsNoGrad(*model, b, 1.0, 2);
  REQUIRE(new_lp.sum().item<double>() > old_lp.sum().item<double>() + 1e-3);
}

TEST_CASE("UpdatePolicy: micro-batches accumulate to the mini-batch gradient", "[worker][train]") {
  TestDir dir("ppo_micro");
  testing::WriteTinyModel(dir.path(), testing::TinyDecoderConfig());
  SequenceBatch b = TinyBatch();
  at::Tensor adv = at::tensor({1.0f, 0.5f, -0.25f, -1.0f, 0.0f, 2.0f}).view({2, 3});
  std::vector<std::vector<at::Tensor>> before, after;
  for (int64_t micro : {1, 2}) {
    auto model = LoadModelOrDie(dir.path());
    const at::Tensor old_lp = ComputeLogProbsNoGrad(*model, b, 1.0, 2);
    PolicyUpdateOptions o;
    o.lr = 1.0;
    o.grad_clip = 1e9;
    o.mini_batch_size = 2;
    o.micro_batch_size = micro;
    model->SetRequiresGrad(true);
    // eps 1 makes the first Adam step about lr * g / (|g| + 1) ~ g, linear in the gradient (with the default eps it
    // would be ~sign(g), which hides a wrong scale and amplifies rounding in near-zero coordinates).
    AdamW opt(model->named_parameters(), AdamWOptions{o.lr, 0.0, 0.9, 0.999, /*eps=*/1.0});
    before.emplace_back();
    for (const auto& [name, p] : model->named_parameters()) before.back().push_back(p.detach().clone());
    auto m = UpdatePolicy(*model, opt, b, {old_lp, at::Tensor(), adv}, o);
    REQUIRE(m.ok());
    after.emplace_back();
    for (const auto& [name, p] : model->named_parameters()) after.back().push_back(p.detach().clone());
  }
  double moved = 0.0, mismatch = 0.0;
  for (size_t i = 0; i < after[0].size(); ++i) {
    moved = std::max(moved, MaxAbsDiff(after[0][i], before[0][i]));
    mismatch = std::max(mismatch, MaxAbsDiff(after[0][i], after[1][i]));
  }
  INFO("moved " << moved << ", mismatch " << mismatch);
  REQUIRE(moved > 1e-2);
  REQUIRE(mismatch < 1e-5);
}

TEST_CASE("UpdatePolicy: KL loss against the reference, and argument errors", "[worker][train]") {
  TestDir dir("ppo_errors");
  testing::WriteTinyModel(dir.path(), testing::TinyDecoderConfig());
  auto model = LoadModelOrDie(dir.path());
  SequenceBatch b = TinyBatch();
  const at::Tensor old_lp = ComputeLogProbsNoGrad(*model, b, 1.0, 2);
  model->SetRequiresGrad(true);
  AdamW opt(model->named_parameters(), AdamWOptions{});
  PolicyUpdateOptions o;
  o.mini_batch_size = 2;

  SECTION("mini-batch size must divide the batch") {
    o.mini_batch_size = 3;
    auto m = UpdatePolicy(*model, opt, b, {old_lp, at::Tensor(), at::ones({2, 3})}, o);
    REQUIRE(m.status().code() == absl::StatusCode::kInvalidArgument);
    REQUIRE(std::string(m.status().message()).find("mini-batches of 3") != std::string::npos);
    REQUIRE(opt.step_count() == 0);
  }
  SECTION("use_kl_loss needs ref log-probs") {
    o.use_kl_loss = true;
    auto m = UpdatePolicy(*model, opt, b, {old_lp, at::Tensor(), at::ones({2, 3})}, o);
    REQUIRE(m.status().code() == absl::StatusCode::kFailedPrecondition);
    REQUIRE(std::string(m.status().message()).find("ref log-probs") != std::string::npos);
  }
  SECTION("unknown kl_loss_type is reported") {
    o.use_kl_loss = true;
    o.kl_loss_type = "k9";
    auto m = UpdatePolicy(*model, opt, b, {old_lp, old_lp, at::ones({2, 3})}, o);
    REQUIRE(m.status().code() == absl::StatusCode::kInvalidArgument);
    REQUIRE(std::string(m.status().message()).find("k9") != std::string::npos);
  }
  SECTION("KL loss is 0 against an identical reference, and reported") {
    o.use_kl_loss = true;
    o.kl_loss_coef = 0.5;
    auto m = UpdatePolicy(*model, opt, b, {old_lp, old_lp, at::ones({2, 3})}, o);
    INFO(m.status().ToString());
    REQUIRE(m.ok());
    REQUIRE(m->at("actor/kl_loss") == Approx(0.0).margin(1e-6));
    REQUIRE(m->at("actor/kl_coef") == 0.5);
  }
}

}  // namespace
}  // namespace verl

namespace verl {
namespace {

TEST_CASE("Gradient checkpointing: the same gradients, layers recomputed in backward", "[worker][train]") {
  TestDir dir("ckpt_grad");
  testing::WriteTinyModel(dir.path(), testing::TinyDecoderConfig());
  const SequenceBatch b = TinyBatch();
  std::vector<std::vector<at::Tensor>> grads;
  std::vector<double> losses;
  for (bool checkpointing : {false, true}) {
    auto model = LoadModelOrDie(dir.path());
    model->SetGradientCheckpointing(checkpointing);
    model->SetRequiresGrad(true);
    LogProbResult r = ForwardLogProbs(*model, b, 0, 2, /*temperature=*/0.9, /*with_entropy=*/true);
    // Checkpointed layers keep no graph of their own: the first layer's output comes from the checkpoint function.
    at::Tensor loss = -(r.log_probs.sum() + 0.1 * r.entropy.sum());
    loss.backward();
    losses.push_back(loss.item<double>());
    grads.emplace_back();
    for (const auto& [name, p] : model->named_parameters()) {
      INFO(name);
      REQUIRE(p.grad().defined());
      grads.back().push_back(p.grad().clone());
    }
  }
  REQUIRE(losses[0] == losses[1]);
  double largest = 0;
  for (size_t i = 0; i < grads[0].size(); ++i) {
    largest = std::max(largest, grads[0][i].abs().max().item<double>());
    REQUIRE(MaxAbsDiff(grads[0][i], grads[1][i]) < 1e-6);
  }
  REQUIRE(largest > 1e-3);  // real gradients were compared

  // The recompute took each layer's q/k/v and output projections from its forward (keep_projections, the default);
  // with keep_projections off it runs those GEMMs again, the same figures.
  {
    auto model = LoadModelOrDie(dir.path());
    model->SetGradientCheckpointing(true, -1, /*keep_projections=*/false);
    model->SetRequiresGrad(true);
    const RecomputeCounts before = CheckpointRecomputeCounts();
    LogProbResult r = ForwardLogProbs(*model, b, 0, 2, /*temperature=*/0.9, /*with_entropy=*/true);
    at::Tensor loss = -(r.log_probs.sum() + 0.1 * r.entropy.sum());
    loss.backward();
    const RecomputeCounts after = CheckpointRecomputeCounts();
    CHECK(after.projections_replayed == before.projections_replayed);
    CHECK(after.layers_recomputed - before.layers_recomputed == testing::TinyDecoderConfig().num_hidden_layers);
    CHECK(loss.item<double>() == losses[0]);
    size_t i = 0;
    for (const auto& [name, p] : model->named_parameters()) {
      INFO(name);
      CHECK(MaxAbsDiff(p.grad(), grads[0][i++]) < 1e-6);
    }
  }

  // recompute_num_layers: only the first N layers are recomputed (counted in backward), the others keep their
  // activations, and the gradients are those without checkpointing.
  const int64_t layers = testing::TinyDecoderConfig().num_hidden_layers;
  REQUIRE(layers >= 2);
  for (int64_t n : {int64_t{0}, int64_t{1}, layers, layers + 3}) {
    CAPTURE(n);
    auto model = LoadModelOrDie(dir.path());
    model->SetGradientCheckpointing(true, n);
    model->SetRequiresGrad(true);
    CHECK(model->recomputed_layers() == std::min(n, layers));
    const RecomputeCounts before = CheckpointRecomputeCounts();
    LogProbResult r = ForwardLogProbs(*model, b, 0, 2, /*temperature=*/0.9, /*with_entropy=*/true);
    at::Tensor loss = -(r.log_probs.sum() + 0.1 * r.entropy.sum());
    loss.backward();
    const RecomputeCounts after = CheckpointRecomputeCounts();
    CHECK(after.layers_recomputed - before.layers_recomputed == std::min(n, layers));
    // Each recomputed layer's two projections came from its forward (keep_projections' default).
    CHECK(after.projections_replayed - before.projections_replayed == 2 * std::min(n, layers));
    CHECK(loss.item<double>() == losses[0]);
    size_t i = 0;
    for (const auto& [name, p] : model->named_parameters()) {
      INFO(name);
      REQUIRE(p.grad().defined());
      CHECK(MaxAbsDiff(p.grad(), grads[0][i++]) < 1e-6);
    }
  }
  {
    auto model = LoadModelOrDie(dir.path());
    model->SetGradientCheckpointing(false, 1);  // no checkpointing: nothing recomputed whatever the count
    CHECK(model->recomputed_layers() == 0);
    model->SetGradientCheckpointing(true);
    CHECK(model->recomputed_layers() == layers);
  }

  // Frozen parameters (a layer's attention and down projections) take no gradient in the checkpointed backward, and
  // the others take the same gradients as without checkpointing.
  auto frozen = [](const std::string& name) {
    return name.find("layers.0.self_attn.q_proj") != std::string::npos ||
           name.find("layers.1.mlp.down_proj") != std::string::npos;
  };
  std::vector<std::vector<at::Tensor>> partial;
  for (bool checkpointing : {false, true}) {
    auto model = LoadModelOrDie(dir.path());
    model->SetGradientCheckpointing(checkpointing);
    model->SetRequiresGrad(true);
    int64_t frozen_count = 0;
    for (const auto& [name, p] : model->named_parameters()) {
      if (frozen(name)) {
        p.requires_grad_(false);
        ++frozen_count;
      }
    }
    REQUIRE(frozen_count >= 2);
    LogProbResult r = ForwardLogProbs(*model, b, 0, 2, /*temperature=*/0.9, /*with_entropy=*/true);
    (-(r.log_probs.sum() + 0.1 * r.entropy.sum())).backward();
    partial.emplace_back();
    for (const auto& [name, p] : model->named_parameters()) {
      INFO(name);
      REQUIRE(p.grad().defined() == !frozen(name));
      partial.back().push_back(p.grad().defined() ? p.grad().clone() : at::Tensor());
    }
  }
  for (size_t i = 0; i < partial[0].size(); ++i) {
    if (partial[0][i].defined()) REQUIRE(MaxAbsDiff(partial[0][i], partial[1][i]) < 1e-6);
  }
}

}  // namespace
}  // namespace verl
