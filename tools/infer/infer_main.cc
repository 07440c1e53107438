// verl-infer: sanity-checks a model directory and its chat template before a long run. Tokenizes a prompt (optionally
// through the ChatML template), scores a given response, and/or generates a continuation, then prints one JSON object.
//
//   verl-infer MODEL_DIR [--text STR | --messages JSON] [--chat] [--response STR] [--generate N]
//              [--greedy | --temperature T --top-p P --top-k K --seed S] [--dtype float32|bfloat16]
//
// Output (stdout, one line of JSON):
//   model, dtype, prompt_text (after the chat template with --chat or --messages), prompt_ids, prompt_tokens
//   (vocabulary spellings), and
//   with --response STR: response_ids, response_logprobs (log p(response token | prompt, earlier response tokens)
//                        at temperature 1, one per response token, via the trainer's ComputeLogProbsNoGrad);
//   with --generate N:   generated_ids (at most N, cut after the first EOS), generated_text, generated_logprobs
//                        (the rollout log-probs under the sampling temperature), via the rollout Generate.
// Exit status: 0 on success, 2 for usage errors (unknown flag, missing value, bad number, bad --messages JSON),
// 1 for runtime errors (missing directory or files, model load failure, LibTorch error). Errors go to stderr.

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/text/chat_message.h"
#include "common/text/chat_template.h"
#include "common/text/tokenizer.h"
#include "worker/model/decoder_model.h"
#include "worker/rollout/generator.h"
#include "worker/train/ppo_actor.h"

namespace {

constexpr int kExitRuntime = 1;
constexpr int kExitUsage = 2;

const char* kUsage =
    "usage: verl-infer MODEL_DIR [--text STR | --messages JSON] [--chat] [--response STR] [--generate N]\n"
    "                  [--greedy | --temperature T --top-p P --top-k K --seed S] [--dtype float32|bfloat16]\n"
    "  --text STR        the prompt as plain text (with --chat: one user message)\n"
    "  --messages JSON   the prompt as a JSON list of {\"role\", \"content\"}; implies --chat\n"
    "  --chat            apply the model's ChatML template (with the generation prompt)\n"
    "  --response STR    score STR as the response: per-token log-probs at temperature 1\n"
    "  --generate N      generate up to N tokens (stops at EOS)\n"
    "  --greedy          argmax decoding (default: sample with --temperature 1 --top-p 1 --top-k -1 --seed 0)\n"
    "  --dtype D         float32 (default) or bfloat16\n";

int UsageError(const std::string& message) {
  std::fprintf(stderr, "verl-infer: %s\n%s", message.c_str(), kUsage);
  return kExitUsage;
}

int RuntimeError(const std::string& message) {
  std::fprintf(stderr, "verl-infer: %s\n", message.c_str());
  return kExitRuntime;
}

struct Flags {
  std::string model_dir;
  std::optional<std::string> text;
  std::optional<std::string> messages_json;
  bool chat = false;
  std::optional<std::string> response;
  int64_t generate = 0;
  bool greedy = false;
  double temperature = 1.0;
  double top_p = 1.0;
  int32_t top_k = -1;
  uint64_t seed = 0;
  bool sampling_flag_given = false;
  std::string dtype = "float32";
};

// Parses argv into *flags; returns "" on success or the usage problem.
std::string ParseFlags(int argc, char** argv, Flags* flags) {
  const std::set<std::string> valued = {"--text", "--messages", "--response", "--generate", "--temperature",
                                        "--top-p", "--top-k",  "--seed",     "--dtype"};
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--chat") {
      flags->chat = true;
      continue;
    }
    if (arg == "--greedy") {
      flags->greedy = true;
      continue;
    }
    if (arg.rfind("--", 0) != 0) {
      if (!flags->model_dir.empty()) return "unexpected argument '" + arg + "' (MODEL_DIR is already '" +
                                            flags->model_dir + "')";
      flags->model_dir = arg;
      continue;
    }
    if (!valued.count(arg)) return "unknown flag '" + arg + "'";
    if (i + 1 >= argc) return "flag '" + arg + "' needs a value";
    const std::string value = argv[++i];
    try {
      size_t used = 0;
      if (arg == "--text") {
        flags->text = value;
      } else if (arg == "--messages") {
        flags->messages_json = value;
      } else if (arg == "--response") {
        flags->response = value;
      } else if (arg == "--dtype") {
        flags->dtype = value;
      } else if (arg == "--generate") {
        flags->generate = std::stoll(value, &used);
        if (flags->generate <= 0) return "--generate needs a positive token count, got '" + value + "'";
      } else if (arg == "--temperature") {
        flags->temperature = std::stod(value, &used);
        if (flags->temperature <= 0) return "--temperature must be > 0, got '" + value + "'";
      } else if (arg == "--top-p") {
        flags->top_p = std::stod(value, &used);
        if (flags->top_p <= 0 || flags->top_p > 1) return "--top-p must be in (0, 1], got '" + value + "'";
      } else if (arg == "--top-k") {
        flags->top_k = static_cast<int32_t>(std::stol(value, &used));
      } else if (arg == "--seed") {
        flags->seed = std::stoull(value, &used);
      }
      if (used != 0 && used != value.size()) return "flag '" + arg + "' has a malformed number '" + value + "'";
    } catch (const std::exception&) {
      return "flag '" + arg + "' has a malformed number '" + value + "'";
    }
    if (arg == "--temperature" || arg == "--top-p" || arg == "--top-k" || arg == "--seed") {
      flags->sampling_flag_given = true;
    }
  }
  if (flags->model_dir.empty()) return "MODEL_DIR is required";
  if (flags->text && flags->messages_json) return "--text and --messages are exclusive";
  if (!flags->text && !flags->messages_json) return "a prompt is required: --text STR or --messages JSON";
  if (flags->greedy && flags->sampling_flag_given) {
    return "--greedy excludes --temperature, --top-p, --top-k and --seed";
  }
  if (flags->dtype != "float32" && flags->dtype != "bfloat16") {
    return "--dtype must be float32 or bfloat16, got '" + flags->dtype + "'";
  }
  return "";
}

// Parses --messages: a JSON array of objects with string "role" and "content". Returns "" or the problem.
std::string ParseMessages(const std::string& text, std::vector<verl::ChatMessage>* messages) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    return std::string("--messages is not valid JSON: ") + e.what();
  }
  if (!j.is_array() || j.empty()) return "--messages must be a non-empty JSON array of {\"role\", \"content\"}";
  for (size_t i = 0; i < j.size(); ++i) {
    const nlohmann::json& m = j[i];
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string() || !m.contains("content") ||
        !m["content"].is_string()) {
      return "--messages[" + std::to_string(i) + "] needs string \"role\" and \"content\"";
    }
    messages->push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
  }
  return "";
}

std::vector<int64_t> ToVector64(const std::vector<int32_t>& ids) { return {ids.begin(), ids.end()}; }

// The whole run after flag parsing; returns the exit status and fills *out.
int Run(const Flags& flags, nlohmann::json* out) {
  namespace fs = std::filesystem;
  const std::string dir = flags.model_dir;
  if (!fs::is_directory(dir)) return RuntimeError("model directory '" + dir + "' does not exist");
  auto tokenizer = verl::Tokenizer::FromFile(dir + "/tokenizer.json");
  if (!tokenizer.ok()) return RuntimeError(std::string(tokenizer.status().message()));

  // The prompt text.
  std::string prompt_text;
  const bool chat = flags.chat || flags.messages_json.has_value();
  if (chat) {
    std::vector<verl::ChatMessage> messages;
    if (flags.messages_json) {
      std::string problem = ParseMessages(*flags.messages_json, &messages);
      if (!problem.empty()) return UsageError(problem);
    } else {
      messages.push_back({"user", *flags.text});
    }
    auto options = verl::ChatTemplateOptionsFromTokenizerConfig(dir + "/tokenizer_config.json");
    if (!options.ok()) return RuntimeError(std::string(options.status().message()));
    if (absl::Status fits = verl::CheckChatTemplateFits(*options, *tokenizer, dir + "/tokenizer_config.json");
        !fits.ok()) {
      return RuntimeError(std::string(fits.message()));
    }
    auto rendered = verl::RenderChatTemplate(messages, /*add_generation_prompt=*/true, *options);
    if (!rendered.ok()) return RuntimeError(std::string(rendered.status().message()));
    prompt_text = *std::move(rendered);
  } else {
    prompt_text = *flags.text;
  }
  const std::vector<int32_t> prompt_ids = tokenizer->Encode(prompt_text);
  std::vector<std::string> prompt_tokens;
  for (int32_t id : prompt_ids) prompt_tokens.push_back(tokenizer->IdToToken(id));
  (*out)["model"] = dir;
  (*out)["dtype"] = flags.dtype;
  (*out)["chat"] = chat;
  (*out)["prompt_text"] = prompt_text;
  (*out)["prompt_ids"] = prompt_ids;
  (*out)["prompt_tokens"] = prompt_tokens;
  if (!flags.response && flags.generate == 0) return 0;
  if (prompt_ids.empty()) return UsageError("the prompt encodes to no tokens; --response and --generate need one");

  // The model.
  const at::ScalarType dtype = flags.dtype == "bfloat16" ? at::kBFloat16 : at::kFloat;
  auto model = verl::DecoderModel::Load(dir, dtype);
  if (!model.ok()) return RuntimeError(std::string(model.status().message()));
  const verl::DecoderConfig& config = (*model)->config();
  (*out)["model_type"] = config.model_type;
  (*out)["vocab_size"] = config.vocab_size;
  (*out)["eos_token_ids"] = config.eos_token_ids;
  for (int32_t id : prompt_ids) {
    if (id >= config.vocab_size) {
      return RuntimeError("prompt token id " + std::to_string(id) + " is outside the model's vocab_size " +
                          std::to_string(config.vocab_size) + " (tokenizer and model do not match)");
    }
  }

  try {
    at::InferenceMode guard;
    if (flags.response) {
      const std::vector<int32_t> response_ids = tokenizer->Encode(*flags.response);
      if (response_ids.empty()) return UsageError("--response encodes to no tokens");
      for (int32_t id : response_ids) {
        if (id >= config.vocab_size) {
          return RuntimeError("response token id " + std::to_string(id) + " is outside the model's vocab_size " +
                              std::to_string(config.vocab_size));
        }
      }
      const auto P = static_cast<int64_t>(prompt_ids.size());
      const auto R = static_cast<int64_t>(response_ids.size());
      std::vector<int64_t> all = ToVector64(prompt_ids);
      all.insert(all.end(), response_ids.begin(), response_ids.end());
      verl::SequenceBatch batch;
      batch.input_ids = at::tensor(all, at::kLong).view({1, P + R});
      batch.attention_mask = at::ones({1, P + R}, at::kBool);
      batch.responses = batch.input_ids.narrow(1, P, R).contiguous();
      batch.response_mask = at::ones({1, R}, at::kBool);
      at::Tensor lp = verl::ComputeLogProbsNoGrad(**model, batch, /*temperature=*/1.0, /*micro_batch_size=*/1)
                          .to(at::kDouble)
                          .contiguous();
      const double* p = lp.data_ptr<double>();
      (*out)["response_ids"] = response_ids;
      (*out)["response_logprobs"] = std::vector<double>(p, p + R);
    }
    if (flags.generate > 0) {
      verl::SamplingOptions options;
      options.do_sample = !flags.greedy;
      options.temperature = flags.greedy ? 1.0 : flags.temperature;
      options.top_p = flags.top_p;
      options.top_k = flags.top_k;
      options.seed = flags.seed;
      options.max_new_tokens = static_cast<int32_t>(flags.generate);
      options.eos_token_ids = config.eos_token_ids;
      options.pad_token_id = config.pad_token_id.value_or(config.eos_token_ids.empty() ? 0 : config.eos_token_ids[0]);
      verl::RolloutBatch rollout = verl::Generate(**model, {prompt_ids}, options);
      const int64_t n = rollout.response_mask[0].sum().item<int64_t>();
      at::Tensor ids = rollout.responses[0].narrow(0, 0, n).contiguous();
      at::Tensor lps = rollout.log_probs[0].narrow(0, 0, n).to(at::kDouble).contiguous();
      std::vector<int32_t> generated(ids.data_ptr<int64_t>(), ids.data_ptr<int64_t>() + n);
      (*out)["generated_ids"] = generated;
      (*out)["generated_text"] = tokenizer->Decode(generated);
      (*out)["generated_logprobs"] = std::vector<double>(lps.data_ptr<double>(), lps.data_ptr<double>() + n);
      (*out)["sampling"] = {{"greedy", flags.greedy},  {"temperature", options.temperature},
                            {"top_p", options.top_p},  {"top_k", options.top_k},
                            {"seed", options.seed},    {"max_new_tokens", options.max_new_tokens}};
    }
  } catch (const c10::Error& e) {
    return RuntimeError(std::string("LibTorch error on model '") + dir + "': " + e.what_without_backtrace());
  } catch (const std::exception& e) {
    return RuntimeError("error on model '" + dir + "': " + e.what());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
  }
  Flags flags;
  const std::string problem = ParseFlags(argc, argv, &flags);
  if (!problem.empty()) return UsageError(problem);
  nlohmann::json out = nlohmann::json::object();
  const int rc = Run(flags, &out);
  if (rc != 0) return rc;
  // Decoded text may hold invalid UTF-8 (a token can end mid-character): replace it rather than throw.
  std::printf("%s\n", out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  return 0;
}
