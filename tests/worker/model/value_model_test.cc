#include "worker/model/value_model.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "tests/worker/torch_catch.h"
#include "tests/test_dir.h"
#include "tests/worker/tiny_model.h"
#include "worker/model/safetensors.h"

namespace verl {
namespace {

using testing::LongTensor2d;
using testing::MaxAbsDiff;
using testing::TestDir;

std::unique_ptr<ValueModel> LoadValueModelOrDie(const std::string& dir, uint64_t seed) {
  auto model = ValueModel::Load(dir, at::kFloat, seed);
  INFO(model.status().ToString());
  REQUIRE(model.ok());
  return std::move(*model);
}

HostTensor FloatHostTensor(std::vector<int64_t> shape, const std::vector<float>& values) {
  HostTensor h;
  h.dtype = DType::kFloat32;
  h.shape = std::move(shape);
  REQUIRE(static_cast<int64_t>(values.size()) == h.numel());
  h.bytes.assign(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
  return h;
}

// Rewrites <dir>/model.safetensors with `extra` tensors added (the loader reads model.safetensors alone when it
// exists, so a separate file would be ignored).
void AddTensorsToModel(const std::string& dir, const std::vector<std::pair<std::string, HostTensor>>& extra) {
  const std::string path = dir + "/model.safetensors";
  std::vector<std::pair<std::string, HostTensor>> tensors;
  {
    auto file = SafetensorsFile::Open(path);
    INFO(file.status().ToString());
    REQUIRE(file.ok());
    for (const std::string& name : file->names()) tensors.emplace_back(name, file->Get(name)->ToHostTensor());
  }
  for (const auto& t : extra) tensors.push_back(t);
  absl::Status s = WriteSafetensors(path, tensors);
  INFO(s.ToString());
  REQUIRE(s.ok());
}

at::Tensor Param(const ValueModel& model, const std::string& name) {
  for (const auto& [n, t] : model.named_parameters()) {
    if (n == name) return t;
  }
  FAIL("no parameter " << name);
  return at::Tensor();
}

TEST_CASE("ValueModel on a plain LM checkpoint starts the head as transformers does", "[worker][model]") {
  TestDir dir("value_plain");
  // A wide hidden size (one layer) so that the head's 512 draws pin down its standard deviation.
  DecoderConfig config = testing::TinyDecoderConfig();
  config.hidden_size = 512;
  config.num_hidden_layers = 1;
  config.num_attention_heads = 4;
  config.num_key_value_heads = 2;
  config.head_dim = 16;
  config.tie_word_embeddings = false;
  testing::WriteTinyModel(dir.path(), config);
  auto a = LoadValueModelOrDie(dir.path(), 5);
  auto b = LoadValueModelOrDie(dir.path(), 5);
  auto c = LoadValueModelOrDie(dir.path(), 6);

  // The decoder's parameters minus the LM head (untied here, and of no use to a critic), then the head.
  const auto& params = a->named_parameters();
  const auto& decoder_params = a->decoder().named_parameters();
  REQUIRE(params.size() == decoder_params.size() - 1 + 2);
  for (const auto& [name, t] : params) REQUIRE(name != "lm_head.weight");
  REQUIRE(params[params.size() - 2].first == "score.weight");
  REQUIRE(params.back().first == "score.bias");
  REQUIRE(a->parameters().size() == params.size());

  at::Tensor w = Param(*a, "score.weight");
  at::Tensor bias = Param(*a, "score.bias");
  REQUIRE(w.sizes() == at::IntArrayRef({1, 512}));
  REQUIRE(w.scalar_type() == at::kFloat);
  REQUIRE(bias.sizes() == at::IntArrayRef({1}));
  REQUIRE(bias.item<double>() == 0.0);
  const double mean = w.mean().item<double>();
  const double std = w.std().item<double>();
  INFO("mean " << mean << ", std " << std);
  REQUIRE(std::abs(mean) < 0.004);    // 4.4 standard errors of the mean
  REQUIRE(std > 0.0175);              // N(0, 0.02): the sample std of 512 draws is 0.02 +- 0.0006
  REQUIRE(std < 0.0225);
  // Deterministic per seed, different across seeds.
  REQUIRE(at::equal(w, Param(*b, "score.weight")));
  REQUIRE(MaxAbsDiff(w, Param(*c, "score.weight")) > 1e-3);
  // The decoder is the checkpoint's, whatever the seed.
  REQUIRE(at::equal(Param(*a, "model.embed_tokens.weight"), Param(*c, "model.embed_tokens.weight")));

  // SetRequiresGrad reaches the head and the decoder.
  a->SetRequiresGrad(true);
  for (const at::Tensor& t : a->parameters()) REQUIRE(t.requires_grad());
  a->SetRequiresGrad(false);
  for (const at::Tensor& t : a->parameters()) REQUIRE_FALSE(t.requires_grad());
}

TEST_CASE("ValueModel loads a score head from the checkpoint exactly", "[worker][model]") {
  TestDir dir("value_head");
  testing::WriteTinyModel(dir.path(), testing::TinyDecoderConfig());
  std::vector<float> w(32);
  for (int i = 0; i < 32; ++i) w[i] = 0.01f * static_cast<float>(i) - 0.13f;

  SECTION("weight and bias") {
    AddTensorsToModel(dir.path(), {{"score.weight", FloatHostTensor({1, 32}, w)},
                                   {"score.bias", FloatHostTensor({1}, {0.375f})}});
    auto m = LoadValueModelOrDie(dir.path(), 1);
    at::Tensor expected = at::tensor(w).view({1, 32});
    REQUIRE(at::equal(Param(*m, "score.weight"), expected));
    REQUIRE(Param(*m, "score.bias").item<float>() == 0.375f);
    // A different seed does not matter when the head is in the checkpoint.
    auto m2 = LoadValueModelOrDie(dir.path(), 99);
    REQUIRE(at::equal(Param(*m2, "score.weight"), expected));
  }
  SECTION("bfloat16 model: the head is converted like the decoder") {
    AddTensorsToModel(dir.path(), {{"score.weight", FloatHostTensor({1, 32}, w)},
                                   {"score.bias", FloatHostTensor({1}, {0.375f})}});
    auto m = ValueModel::Load(dir.path(), at::kBFloat16, 1);
    REQUIRE(m.ok());
    REQUIRE((*m)->named_parameters().back().second.scalar_type() == at::kBFloat16);
    REQUIRE(MaxAbsDiff(Param(**m, "score.weight"), at::tensor(w).view({1, 32})) < 2e-3);
  }
  SECTION("a score.weight of the wrong shape is an error naming the tensor") {
    AddTensorsToModel(dir.path(), {{"score.weight", FloatHostTensor({2, 16}, w)},
                                   {"score.bias", FloatHostTensor({1}, {0.0f})}});
    auto m = ValueModel::Load(dir.path(), at::kFloat, 1);
    INFO(m.status().ToString());
    REQUIRE(m.status().code() == absl::StatusCode::kInvalidArgument);
    const std::string msg(m.status().message());
    REQUIRE(msg.find("'score.weight'") != std::string::npos);
    REQUIRE(msg.find("[1, 32]") != std::string::npos);
    REQUIRE(msg.find(dir.path()) != std::string::npos);
  }
  SECTION("a score.bias of the wrong shape is an error naming the tensor") {
    AddTensorsToModel(dir.path(), {{"score.weight", FloatHostTensor({1, 32}, w)},
                                   {"score.bias", FloatHostTensor({2}, {0.0f, 1.0f})}});
    auto m = ValueModel::Load(dir.path(), at::kFloat, 1);
    INFO(m.status().ToString());
    REQUIRE(m.status().code() == absl::StatusCode::kInvalidArgument);
    REQUIRE(std::string(m.status().message()).find("'score.bias'") != std::string::npos);
  }
  SECTION("a score.bias without score.weight is an error") {
    AddTensorsToModel(dir.path(), {{"score.bias", FloatHostTensor({1}, {0.5f})}});
    auto m = ValueModel::Load(dir.path(), at::kFloat, 1);
    INFO(m.status().ToString());
    REQUIRE(m.status().code() == absl::StatusCode::kInvalidArgument);
    REQUIRE(std::string(m.status().message()).find("'score.weight'") != std::string::npos);
  }
}

TEST_CASE("ValueModel::Values reads the hidden state before each response token", "[worker][model]") {
  TestDir dir("value_align");
  testing::WriteTinyModel(dir.path(), testing::TinyDecoderConfig());
  std::vector<float> w(32);
  for (int i = 0; i < 32; ++i) w[i] = 0.05f * static_cast<float>((i * 7) % 11) - 0.25f;
  AddTensorsToModel(dir.path(), {{"score.weight", FloatHostTensor({1, 32}, w)},
                                 {"score.bias", FloatHostTensor({1}, {0.5f})}});
  auto model = LoadValueModelOrDie(dir.path(), 0);
  at::NoGradGuard no_grad;

  // Prompts of 3 (the second left-padded by one), responses of 3 (the second right-padded by one).
  at::Tensor ids = LongTensor2d({{3, 4, 5, 10, 11, 12}, {49, 7, 8, 20, 21, 49}});
  at::Tensor valid = LongTensor2d({{1, 1, 1, 1, 1, 1}, {0, 1, 1, 1, 1, 0}}).to(at::kBool);
  at::Tensor values = model->Values(ids, valid, 3);
  REQUIRE(values.sizes() == at::IntArrayRef({2, 3}));
  REQUIRE(values.scalar_type() == at::kFloat);

  const DecoderModel& dec = model->decoder();
  at::Tensor wt = at::tensor(w);
  auto head = [&](const at::Tensor& h) { return (h * wt).sum().item<double>() + 0.5; };
  // Row 0, unpadded: response token t (position 3 + t) is valued from the hidden state at position 2 + t.
  {
    at::Tensor hidden = dec.Forward(ids.narrow(0, 0, 1), at::arange(6, at::kLong).unsqueeze(0),
                                    BuildAttentionMask(at::ones({1, 6}, at::kBool), 0, 6), nullptr);
    for (int64_t t = 0; t < 3; ++t) {
      INFO("row 0, t " << t);
      REQUIRE(values[0][t].item<double>() == Approx(head(hidden[0][2 + t])).margin(1e-5));
    }
  }
  // Row 1 without its padding: tokens {7, 8, 20, 21}; response token t follows the hidden state at 1 + t.
  {
    at::Tensor row = LongTensor2d({{7, 8, 20, 21}});
    at::Tensor hidden = dec.Forward(row, at::arange(4, at::kLong).unsqueeze(0),
                                    BuildAttentionMask(at::ones({1, 4}, at::kBool), 0, 4), nullptr);
    for (int64_t t = 0; t < 2; ++t) {
      INFO("row 1, t " << t);
      REQUIRE(values[1][t].item<double>() == Approx(head(hidden[0][1 + t])).margin(1e-5));
    }
  }
  // The values differ along the response (a misaligned narrow would still pass a constant check).
  REQUIRE(std::abs(values[0][0].item<double>() - values[0][1].item<double>()) > 1e-4);
  // Rows are independent: a row alone gives the same values.
  at::Tensor alone = model->Values(ids.narrow(0, 1, 1), valid.narrow(0, 1, 1), 3);
  REQUIRE(MaxAbsDiff(alone[0].narrow(0, 0, 2), values[1].narrow(0, 0, 2)) < 1e-5);
  // Causal attention without a mask (ForwardColumns with causal) over rows with right padding only, and over the left- and
  // right-padded rows above: the same values at the valid response positions (the critic masks the others); asking
  // for it over a row whose valid tokens are not one run is an error.
  const at::Tensor right = LongTensor2d({{1, 1, 1, 1, 1, 1}, {1, 1, 1, 1, 1, 0}, {1, 1, 1, 1, 0, 0}}).to(at::kBool);
  const at::Tensor ids3 = LongTensor2d({{3, 4, 5, 10, 11, 12}, {49, 7, 8, 20, 21, 49}, {6, 2, 9, 30, 49, 49}});
  for (const auto& [rows, mask] : {std::pair{ids3, right}, std::pair{ids, valid}}) {
    const at::Tensor masked = model->Values(rows, mask, 3, /*causal=*/false);
    const at::Tensor causal = model->Values(rows, mask, 3, /*causal=*/true);
    const at::Tensor at_valid = mask.narrow(1, 3, 3);
    REQUIRE(MaxAbsDiff(causal.masked_select(at_valid), masked.masked_select(at_valid)) < 1e-5);
  }
  // Gradients too: of the values at valid response positions, causal over rolled rows against the masked pass.
  model->SetRequiresGrad(true);
  std::vector<std::vector<at::Tensor>> grads;
  at::AutoGradMode with_grad(true);  // the test runs under a NoGradGuard
  for (bool causal : {false, true}) {
    for (const auto& [name, p] : model->named_parameters()) p.mutable_grad() = at::Tensor();
    (model->Values(ids, valid, 3, causal) * valid.narrow(1, 3, 3)).sum().backward();
    grads.emplace_back();
    for (const auto& [name, p] : model->named_parameters()) grads.back().push_back(p.grad().clone());
  }
  model->SetRequiresGrad(false);
  // The same float32 sums, maybe in another order: within rounding relative to the gradients' size.
  double grad_scale = 0;
  for (const at::Tensor& g : grads[0]) grad_scale = std::max(grad_scale, g.abs().max().item<double>());
  REQUIRE(grad_scale > 0.1);
  for (size_t i = 0; i < grads[0].size(); ++i) {
    INFO(model->named_parameters()[i].first);
    REQUIRE(MaxAbsDiff(grads[0][i], grads[1][i]) < std::max(1e-5, 2e-6 * grad_scale));
  }
  const at::Tensor holed = LongTensor2d({{1, 1, 0, 1, 1, 1}, {1, 1, 1, 1, 1, 1}}).to(at::kBool);
  REQUIRE_THROWS_WITH(model->Values(ids, holed, 3, /*causal=*/true), Catch::Contains("not one run"));
}

TEST_CASE("ValueModel::Values records autograd history for the head and the decoder", "[worker][model]") {
  TestDir dir("value_grad");
  testing::WriteTinyModel(dir.path(), testing::TinyDecoderConfig());
  auto model = LoadValueModelOrDie(dir.path(), 3);
  model->SetRequiresGrad(true);
  at::Tensor ids = LongTensor2d({{3, 4, 5, 10, 11, 12}});
  at::Tensor valid = at::ones({1, 6}, at::kBool);
  model->Values(ids, valid, 3).sum().backward();
  for (const auto& [name, t] : model->named_parameters()) {
    INFO(name);
    REQUIRE(t.grad().defined());
  }
  // d(sum of values)/d(bias) = number of values.
  REQUIRE(Param(*model, "score.bias").grad().item<double>() == Approx(3.0));
  model->SetRequiresGrad(false);
}

}  // namespace
}  // namespace verl
