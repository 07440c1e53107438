#include "worker/model/decoder_model.h"

#include <filesystem>
#include <string>
#include <vector>

#include "tests/test_dir.h"
#include "tests/worker/tiny_model.h"
#include "tests/worker/torch_catch.h"
#include "worker/model/safetensors_checkpoint.h"
#include "worker/rank/torch_util.h"

namespace verl {
namespace {

using testing::LoadModelOrDie;
using testing::LongTensor2d;
using testing::MaxAbsDiff;
using testing::TestDir;

// Logits [B, T, V] of a plain forward over `ids` with validity `valid` (left padding allowed).
at::Tensor FullLogits(const DecoderModel& model, const at::Tensor& ids, const at::Tensor& valid) {
  const int64_t T = ids.size(1);
  return model.Logits(model.Forward(ids, PositionIdsFromMask(valid), BuildAttentionMask(valid, 0, T), nullptr));
}

TEST_CASE("BuildAttentionMask and PositionIdsFromMask", "[worker][model]") {
  at::Tensor valid = LongTensor2d({{0, 1, 1}, {1, 1, 1}}).to(at::kBool);
  at::Tensor pos = PositionIdsFromMask(valid);
  REQUIRE(at::equal(pos, LongTensor2d({{0, 0, 1}, {0, 1, 2}})));
  at::Tensor mask = BuildAttentionMask(valid, 0, 3);
  REQUIRE(mask.sizes() == at::IntArrayRef({2, 1, 3, 3}));
  // Row 0: the pad attends only to itself; real tokens attend to real tokens at or before them.
  at::Tensor expected0 = LongTensor2d({{1, 0, 0}, {0, 1, 0}, {0, 1, 1}}).to(at::kBool);
  at::Tensor expected1 = LongTensor2d({{1, 0, 0}, {1, 1, 0}, {1, 1, 1}}).to(at::kBool);
  REQUIRE(at::equal(mask[0][0], expected0));
  REQUIRE(at::equal(mask[1][0], expected1));
  // A decode query at position 3 over 4 keys.
  at::Tensor valid4 = LongTensor2d({{0, 1, 1, 1}}).to(at::kBool);
  REQUIRE(at::equal(BuildAttentionMask(valid4, 3, 1)[0][0], LongTensor2d({{0, 1, 1, 1}}).to(at::kBool)));
}

TEST_CASE("ForwardCausal equals Forward with the mask on rows without left padding", "[worker][model]") {
  TestDir dir("decoder_causal");
  testing::WriteTinyModel(dir.path(), testing::TinyDecoderConfig());
  auto model = LoadModelOrDie(dir.path());
  at::NoGradGuard no_grad;
  // Right padding only (responses that ended early): the valid positions see the same keys either way.
  const at::Tensor ids = LongTensor2d({{3, 9, 4, 7, 1, 0}, {5, 2, 8, 6, 0, 0}, {7, 7, 3, 1, 2, 9}});
  const at::Tensor valid = LongTensor2d({{1, 1, 1, 1, 1, 0}, {1, 1, 1, 1, 0, 0}, {1, 1, 1, 1, 1, 1}}).to(at::kBool);
  const at::Tensor masked = model->Forward(ids, PositionIdsFromMask(valid), BuildAttentionMask(valid, 0, 6), nullptr);
  const at::Tensor causal = model->ForwardCausal(ids, PositionIdsFromMask(valid));
  REQUIRE(causal.sizes() == masked.sizes());
  const at::Tensor at_valid = valid.unsqueeze(-1).expand_as(masked);
  REQUIRE(MaxAbsDiff(causal.masked_select(at_valid), masked.masked_select(at_valid)) <= 1e-5);
  // At a padding position the two differ (the mask lets it see only valid keys and itself).
  REQUIRE(MaxAbsDiff(causal[1][5], masked[1][5]) > 1e-4);
}

TEST_CASE("ForwardColumns with causal equals Forward with the mask at the valid columns of left- and right-padded rows",
          "[worker][model]") {
  REQUIRE(OneValidRun(LongTensor2d({{1, 1, 1}, {0, 1, 1}, {0, 1, 0}, {1, 0, 0}, {0, 0, 0}}).to(at::kBool)));
  REQUIRE_FALSE(OneValidRun(LongTensor2d({{1, 1, 1}, {1, 0, 1}}).to(at::kBool)));
  REQUIRE_FALSE(OneValidRun(LongTensor2d({{0, 1, 0, 1}}).to(at::kBool)));
  REQUIRE(OneValidRun(LongTensor2d({{0}, {1}}).to(at::kBool)));
  // Leading padding, also of rows with holes (the budget's prompt spans) and without valid tokens.
  REQUIRE(at::equal(LeadingPadding(LongTensor2d({{0, 1, 0, 1}, {1, 0, 0, 0}, {0, 0, 0, 0}}).to(at::kBool)),
                    at::tensor({1, 0, 4}, at::kLong)));
  // How the rows are rolled: past their leading padding, cut to the longest run.
  const RolledRows rolled =
      RollRows(LongTensor2d({{0, 0, 1, 1, 0}, {1, 1, 0, 0, 0}, {0, 0, 0, 0, 0}, {0, 1, 1, 1, 1}}).to(at::kBool));
  REQUIRE(rolled.width == 4);
  REQUIRE(at::equal(rolled.lead.view({-1}), at::tensor({2, 0, 5, 1}, at::kLong)));
  REQUIRE(at::equal(rolled.count, at::tensor({2, 2, 0, 4}, at::kLong)));
  REQUIRE(at::equal(rolled.index, LongTensor2d({{2, 3, 4, 0}, {0, 1, 2, 3}, {0, 1, 2, 3}, {1, 2, 3, 4}})));
  REQUIRE(RollRows(LongTensor2d({{0, 0}}).to(at::kBool)).width == 1);
  REQUIRE_THROWS_WITH(RollRows(LongTensor2d({{1, 0, 1}}).to(at::kBool)), Catch::Contains("not one run"));
  TestDir dir("decoder_causal_columns");
  testing::WriteTinyModel(dir.path(), testing::TinyDecoderConfig());
  auto model = LoadModelOrDie(dir.path());
  at::NoGradGuard no_grad;
  // Prompts of several lengths (left padding), responses that ended early (right padding), a row without padding
  // and one without valid tokens.
  const at::Tensor ids = LongTensor2d(
      {{0, 0, 9, 4, 7, 1, 3}, {5, 2, 8, 6, 0, 0, 0}, {0, 7, 3, 1, 2, 9, 8}, {7, 7, 3, 1, 2, 9, 4}, {0, 0, 0, 0, 0, 0, 0}});
  const at::Tensor valid = LongTensor2d({{0, 0, 1, 1, 1, 1, 1},
                                         {1, 1, 1, 1, 0, 0, 0},
                                         {0, 1, 1, 1, 1, 1, 0},
                                         {1, 1, 1, 1, 1, 1, 1},
                                         {0, 0, 0, 0, 0, 0, 0}})
                               .to(at::kBool);
  REQUIRE(OneValidRun(valid));
  REQUIRE(RollRows(valid).width == 7);
  REQUIRE(RollRows(valid.index_select(0, at::tensor({0, 1, 2, 4}, at::kLong))).width == 5);
  // All rows (the longest run fills the row), and without the unpadded row (the rolled rows are cut to 5 columns).
  const at::Tensor without_full = at::tensor({0, 1, 2, 4}, at::kLong);
  for (const auto& [rows, mask] : {std::pair{ids, valid}, std::pair{ids.index_select(0, without_full),
                                                                      valid.index_select(0, without_full)}}) {
    const at::Tensor masked =
        model->Forward(rows, PositionIdsFromMask(mask), BuildAttentionMask(mask, 0, 7), nullptr);
    for (const auto& [begin, length] : {std::pair<int64_t, int64_t>{0, 7}, {2, 4}, {6, 1}}) {
      CAPTURE(rows.size(0), begin, length);
      const at::Tensor columns = model->ForwardColumns(rows, mask, begin, length, /*causal=*/true);
      REQUIRE(columns.sizes() == at::IntArrayRef({rows.size(0), length, masked.size(2)}));
      const at::Tensor want = masked.narrow(1, begin, length);
      const at::Tensor at_valid = mask.narrow(1, begin, length).unsqueeze(-1).expand_as(want);
      REQUIRE(at_valid.any().item<bool>());
      REQUIRE(MaxAbsDiff(columns.masked_select(at_valid), want.masked_select(at_valid)) <= 1e-5);
      REQUIRE(at::isfinite(columns).all().item<bool>());
      // Without causal: the masked forward's columns, every one of them.
      REQUIRE(at::equal(model->ForwardColumns(rows, mask, begin, length, /*causal=*/false), want));
    }
  }
  // A row without leading padding is ForwardCausal's, bit for bit.
  const at::Tensor plain = model->ForwardCausal(ids.narrow(0, 3, 1), PositionIdsFromMask(valid.narrow(0, 3, 1)));
  REQUIRE(at::equal(model->ForwardColumns(ids.narrow(0, 3, 1), valid.narrow(0, 3, 1), 1, 5, /*causal=*/true),
                    plain.narrow(1, 1, 5)));
  REQUIRE_THROWS(model->ForwardColumns(ids, valid, 3, 5, /*causal=*/true));
  const at::Tensor holed = valid.clone();
  holed[3][2] = false;
  REQUIRE_THROWS_WITH(model->ForwardColumns(ids, holed, 0, 7, /*causal=*/true), Catch::Contains("not one run"));
}

TEST_CASE("DecoderModel loads the tiny model with the expected shapes", "[worker][model]") {
  TestDir dir("decoder_shapes");
  testing::WriteTinyModel(dir.path(), testing::TinyDecoderConfig());
  auto model = LoadModelOrDie(dir.path());
  const DecoderConfig& c = model->config();
  REQUIRE(c.vocab_size == 50);
  // embed 50*32; per layer: 2 norms (64), q 32*32+32, k and v 16*32+16 each, o 32*32, gate/up/down 3*64*32; norm 32.
  REQUIRE(model->num_parameters() == 1600 + 2 * (64 + 1056 + 528 + 528 + 1024 + 6144) + 32);
  REQUIRE(model->named_parameters().size() == 1 + 2 * 12 + 1);  // tied: no lm_head.weight
  REQUIRE(model->named_parameters().front().first == "model.embed_tokens.weight");
  REQUIRE(model->named_parameters().back().first == "model.norm.weight");
  // Each layer's q/k/v and gate/up projections stacked in one buffer each (one GEMM when decoding), still separate
  // parameters with the checkpoint's values; an in-place update (an optimizer step, a weight sync) keeps them stacked.
  REQUIRE(model->ProjectionsStacked());
  {
    auto ckpt = SafetensorsCheckpoint::Open(dir.path());
    REQUIRE(ckpt.ok());
    for (const auto& [name, t] : model->named_parameters()) {
      auto view = ckpt->Get(name);
      REQUIRE(view.ok());
      const at::Tensor want =
          at::from_blob(const_cast<void*>(view->data), view->shape, at::TensorOptions(ToScalarType(view->dtype)));
      INFO(name);
      REQUIRE(at::equal(t, want));
    }
    // The stacked views are bound once (BindFields): an in-place update must leave the pieces where they were.
    auto named = [&](const std::string& name) {
      for (const auto& [n, t] : model->named_parameters()) {
        if (n == name) return t;
      }
      FAIL("no parameter " << name);
      return at::Tensor();
    };
    auto consecutive = [&](const std::vector<std::string>& names) {
      for (size_t j = 1; j < names.size(); ++j) {
        const at::Tensor prev = named(names[j - 1]), next = named(names[j]);
        if (static_cast<const char*>(prev.data_ptr()) + prev.nbytes() != next.data_ptr()) return false;
      }
      return true;
    };
    const std::vector<std::string> qkv = {"model.layers.1.self_attn.q_proj.weight",
                                          "model.layers.1.self_attn.k_proj.weight",
                                          "model.layers.1.self_attn.v_proj.weight"};
    const std::vector<std::string> gate_up = {"model.layers.1.mlp.gate_proj.weight",
                                              "model.layers.1.mlp.up_proj.weight"};
    REQUIRE(consecutive(qkv));
    REQUIRE(consecutive(gate_up));
    at::NoGradGuard no_grad;
    // Scaling by 2 and back is exact: the model below keeps the checkpoint's values.
    for (const auto& [name, t] : model->named_parameters()) t.mul_(2.0);
    REQUIRE(consecutive(qkv));
    REQUIRE(consecutive(gate_up));
    for (const auto& [name, t] : model->named_parameters()) t.mul_(0.5);
    REQUIRE(consecutive(qkv));
    REQUIRE(consecutive(gate_up));
    REQUIRE(model->ProjectionsStacked());
  }

  at::Tensor ids = LongTensor2d({{1, 2, 3, 4, 5}, {6, 7, 8, 9, 10}});
  at::Tensor valid = at::ones({2, 5}, at::kBool);
  at::Tensor hidden = model->Forward(ids, PositionIdsFromMask(valid), BuildAttentionMask(valid, 0, 5), nullptr);
  REQUIRE(hidden.sizes() == at::IntArrayRef({2, 5, 32}));
  at::Tensor logits = model->Logits(hidden);
  REQUIRE(logits.sizes() == at::IntArrayRef({2, 5, 50}));
  REQUIRE(logits.scalar_type() == at::kFloat);
  REQUIRE(at::isfinite(logits).all().item<bool>());
  // The random weights are large enough that logits are spread, not near-uniform (the other tests rely on this).
  REQUIRE(logits.std().item<double>() > 0.5);

  SECTION("bfloat16 load stays close to float32") {
    auto bf16 = LoadModelOrDie(dir.path(), at::kBFloat16);
    REQUIRE(bf16->named_parameters()[0].second.scalar_type() == at::kBFloat16);
    at::Tensor l16 = FullLogits(*bf16, ids, valid);
    REQUIRE(l16.scalar_type() == at::kFloat);
    REQUIRE(MaxAbsDiff(l16, logits) < 0.25);
    REQUIRE(MaxAbsDiff(l16, logits) > 0.0);
  }
}

TEST_CASE("DecoderModel parameter offload keeps the values, the stacked buffers and the forward", "[worker][model]") {
  TestDir dir("decoder_offload");
  testing::WriteTinyModel(dir.path(), testing::TinyDecoderConfig());
  const at::Tensor ids = LongTensor2d({{1, 2, 3, 4, 5}, {6, 7, 8, 9, 10}});
  const at::Tensor valid = at::ones({2, 5}, at::kBool);
  auto reference = LoadModelOrDie(dir.path());
  const at::Tensor want = FullLogits(*reference, ids, valid);
  auto data_ptrs = [](const DecoderModel& m) {
    std::vector<const void*> out;
    for (const auto& [name, t] : m.named_parameters()) out.push_back(t.data_ptr());
    return out;
  };

  SECTION("unsharded") {
    auto model = LoadModelOrDie(dir.path());
    const std::vector<const void*> before = data_ptrs(*model);
    REQUIRE(model->OffloadParameters().ok());
    REQUIRE(model->parameters_offloaded());
    // The host copies: other memory, the same values, still stacked (q/k/v and gate/up consecutive in one buffer).
    const std::vector<const void*> offloaded = data_ptrs(*model);
    for (size_t i = 0; i < before.size(); ++i) REQUIRE(offloaded[i] != before[i]);
    REQUIRE(model->ProjectionsStacked());
    for (size_t i = 0; i < before.size(); ++i) {
      INFO(model->named_parameters()[i].first);
      REQUIRE(at::equal(model->named_parameters()[i].second, reference->named_parameters()[i].second));
    }
    REQUIRE(model->OffloadParameters().ok());  // again: nothing moves
    REQUIRE(data_ptrs(*model) == offloaded);
    model->LoadParameters();
    REQUIRE_FALSE(model->parameters_offloaded());
    REQUIRE(data_ptrs(*model) != offloaded);
    REQUIRE(model->ProjectionsStacked());
    REQUIRE(at::equal(FullLogits(*model, ids, valid), want));
    // Offloading again drops the device copy for the host copy made the first time.
    REQUIRE(model->OffloadParameters().ok());
    REQUIRE(data_ptrs(*model) == offloaded);
    model->LoadParameters();
    REQUIRE(at::equal(FullLogits(*model, ids, valid), want));
  }

  SECTION("a model that is trained is refused") {
    auto model = LoadModelOrDie(dir.path());
    model->SetRequiresGrad(true);
    const absl::Status s = model->OffloadParameters();
    REQUIRE(absl::IsFailedPrecondition(s));
    REQUIRE(std::string(s.message()).find("requires_grad") != std::string::npos);
    REQUIRE_FALSE(model->parameters_offloaded());
  }

  SECTION("sharded (a group of one): the shards move, and sharding an offloaded model offloads its shards") {
    ShardGroup group;
    group.all_gather = [](const at::Tensor& shard, const at::Tensor& full) { full.copy_(shard); };
    group.reduce_scatter_sum = [](const at::Tensor& full, const at::Tensor& shard) { shard.copy_(full); };
    auto model = LoadModelOrDie(dir.path());
    REQUIRE(model->OffloadParameters().ok());
    model->ShardParameters(group);
    REQUIRE(model->sharded());
    REQUIRE(model->parameters_offloaded());
    std::vector<const void*> shards;
    for (const auto& [name, t] : model->shard_parameters()) shards.push_back(t.data_ptr());
    model->LoadParameters();
    for (size_t i = 0; i < shards.size(); ++i) REQUIRE(model->shard_parameters()[i].second.data_ptr() != shards[i]);
    REQUIRE(at::equal(FullLogits(*model, ids, valid), want));
    REQUIRE(model->OffloadParameters().ok());
    for (size_t i = 0; i < shards.size(); ++i) REQUIRE(model->shard_parameters()[i].second.data_ptr() == shards[i]);
  }
}

TEST_CASE("DecoderModel: decoding with the KV cache equals the full forward", "[worker][model]") {
  TestDir dir("decoder_cache");
  testing::WriteTinyModel(dir.path(), testing::TinyDecoderConfig());
  auto model = LoadModelOrDie(dir.path());
  at::NoGradGuard no_grad;
  // Row 1 is left-padded by two, as the generator lays out prompts.
  at::Tensor ids = LongTensor2d({{11, 12, 13, 14, 15, 16, 17, 18}, {49, 49, 21, 22, 23, 24, 25, 26}});
  at::Tensor valid = LongTensor2d({{1, 1, 1, 1, 1, 1, 1, 1}, {0, 0, 1, 1, 1, 1, 1, 1}}).to(at::kBool);
  const int64_t S = 8, T = 5;
  at::Tensor full = FullLogits(*model, ids, valid);

  KvCache cache = model->NewCache(2, S);
  REQUIRE(cache.k.size() == 2);
  REQUIRE(cache.k[0].sizes() == at::IntArrayRef({2, 2, S, 8}));
  at::Tensor pos = PositionIdsFromMask(valid);
  at::Tensor prefill = model->Logits(model->Forward(ids.narrow(1, 0, T), pos.narrow(1, 0, T),
                                                    BuildAttentionMask(valid.narrow(1, 0, T), 0, T), &cache));
  REQUIRE(cache.length == T);
  // Compare real tokens only (the padded rows' outputs are meaningless by design).
  REQUIRE(MaxAbsDiff(prefill[0], full[0].narrow(0, 0, T)) < 1e-5);
  REQUIRE(MaxAbsDiff(prefill[1].narrow(0, 2, T - 2), full[1].narrow(0, 2, T - 2)) < 1e-5);
  for (int64_t t = T; t < S; ++t) {
    at::Tensor step = model->Logits(model->Forward(ids.narrow(1, t, 1), pos.narrow(1, t, 1),
                                                   BuildAttentionMask(valid.narrow(1, 0, t + 1), t, 1), &cache));
    REQUIRE(cache.length == t + 1);
    INFO("decode position " << t);
    REQUIRE(MaxAbsDiff(step.select(1, 0), full.select(1, t)) < 1e-5);
  }
}

TEST_CASE("DecoderModel::ForwardChunk: a prompt in chunks gives the whole prompt's hidden states", "[worker][model]") {
  TestDir dir("decoder_chunk");
  testing::WriteTinyModel(dir.path(), testing::TinyDecoderConfig());
  auto model = LoadModelOrDie(dir.path());
  at::NoGradGuard no_grad;
  const at::Tensor ids = LongTensor2d({{11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21}});
  const at::Tensor whole = model->ForwardCausal(ids, at::arange(11, at::kLong).unsqueeze(0));
  // Chunks of 1, 4, 2 and 4 tokens into a cache of 12 positions: each chunk's tokens attend to the positions cached
  // before it and causally to their own.
  KvCache cache = model->NewCache(1, 12);
  int64_t begin = 0;
  for (const int64_t len : {1, 4, 2, 4}) {
    INFO("chunk at " << begin << " of " << len << " tokens");
    const at::Tensor part = model->ForwardChunk(ids.narrow(1, begin, len), &cache);
    REQUIRE(cache.length == begin + len);
    REQUIRE(MaxAbsDiff(part, whole.narrow(1, begin, len)) < 1e-5);
    begin += len;
  }
  // Past the cache's positions, or a cache of two rows: errors that say so.
  REQUIRE_THROWS_WITH(model->ForwardChunk(ids.narrow(1, 0, 2), &cache), Catch::Contains("past the cache's 12"));
  KvCache two = model->NewCache(2, 12);
  REQUIRE_THROWS_WITH(model->ForwardChunk(ids.narrow(1, 0, 2), &two), Catch::Contains("one row's cache"));
}

TEST_CASE("DecoderModel: left padding does not change the real tokens' logits", "[worker][model]") {
  TestDir dir("decoder_pad");
  testing::WriteTinyModel(dir.path(), testing::TinyDecoderConfig());
  auto model = LoadModelOrDie(dir.path());
  at::NoGradGuard no_grad;
  at::Tensor alone = FullLogits(*model, LongTensor2d({{5, 6, 7, 8}}), at::ones({1, 4}, at::kBool));
  // The same prompt behind three pads (whose ids are arbitrary tokens, to show the mask, not the id, hides them),
  // batched with a full-length prompt.
  at::Tensor ids = LongTensor2d({{30, 31, 32, 5, 6, 7, 8}, {1, 2, 3, 4, 5, 6, 7}});
  at::Tensor valid = LongTensor2d({{0, 0, 0, 1, 1, 1, 1}, {1, 1, 1, 1, 1, 1, 1}}).to(at::kBool);
  at::Tensor padded = FullLogits(*model, ids, valid);
  REQUIRE(MaxAbsDiff(padded[0].narrow(0, 3, 4), alone[0]) < 1e-5);
  // Sanity: without the mask (pads treated as real tokens) the last logits do change.
  at::Tensor unmasked = FullLogits(*model, ids.narrow(0, 0, 1), at::ones({1, 7}, at::kBool));
  REQUIRE(MaxAbsDiff(unmasked[0][6], alone[0][3]) > 1e-2);
}

TEST_CASE("DecoderModel: RoPE makes attention depend on relative positions", "[worker][model]") {
  TestDir dir("decoder_rope");
  testing::WriteTinyModel(dir.path(), testing::TinyDecoderConfig());
  auto model = LoadModelOrDie(dir.path());
  at::NoGradGuard no_grad;
  at::Tensor ids = LongTensor2d({{3, 9, 27, 31, 40}});
  at::Tensor mask = BuildAttentionMask(at::ones({1, 5}, at::kBool), 0, 5);
  auto run = [&](const std::vector<int64_t>& positions) {
    return model->Logits(model->Forward(ids, LongTensor2d({positions}), mask, nullptr));
  };
  at::Tensor base = run({0, 1, 2, 3, 4});
  // A uniform shift keeps every relative distance: same outputs (up to float rounding of the angles).
  REQUIRE(MaxAbsDiff(run({7, 8, 9, 10, 11}), base) < 1e-4);
  // A gap after token 1 changes the outputs of the tokens after it, not of the first two.
  at::Tensor gap = run({0, 1, 12, 13, 14});
  REQUIRE(MaxAbsDiff(gap.narrow(1, 0, 2), base.narrow(1, 0, 2)) < 1e-5);
  REQUIRE(MaxAbsDiff(gap.narrow(1, 2, 3), base.narrow(1, 2, 3)) > 1e-2);
}

TEST_CASE("DecoderModel::Load errors name the tensor", "[worker][model]") {
  TestDir dir("decoder_errors");
  DecoderConfig config = testing::TinyDecoderConfig();
  testing::WriteTinyModel(dir.path(), config);

  SECTION("wrong shape") {
    DecoderConfig wrong = config;
    wrong.intermediate_size = 48;  // the file holds [64, 32] MLP weights
    testing::WriteFile(dir.file("config.json"), DecoderConfigToJson(wrong));
    auto model = DecoderModel::Load(dir.path(), at::kFloat);
    REQUIRE(model.status().code() == absl::StatusCode::kInvalidArgument);
    const std::string msg(model.status().message());
    INFO(msg);
    REQUIRE(msg.find("model.layers.0.mlp.gate_proj.weight") != std::string::npos);
    REQUIRE(msg.find("[64, 32]") != std::string::npos);
    REQUIRE(msg.find("[48, 32]") != std::string::npos);
    REQUIRE(msg.find(dir.path()) != std::string::npos);
  }
  SECTION("missing tensor") {
    DecoderConfig untied = config;
    untied.tie_word_embeddings = false;  // now lm_head.weight is expected
    testing::WriteFile(dir.file("config.json"), DecoderConfigToJson(untied));
    auto model = DecoderModel::Load(dir.path(), at::kFloat);
    REQUIRE_FALSE(model.ok());
    const std::string msg(model.status().message());
    INFO(msg);
    REQUIRE(msg.find("lm_head.weight") != std::string::npos);
  }
  SECTION("missing directory") {
    auto model = DecoderModel::Load(dir.file("nope"), at::kFloat);
    REQUIRE(model.status().code() == absl::StatusCode::kNotFound);
  }
}

}  // namespace
}  // namespace verl
