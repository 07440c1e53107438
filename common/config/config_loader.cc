#include "common/config/config_loader.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <system_error>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/config/config_schema.h"
#include "common/status/status_macros.h"

namespace verl {
namespace {

// A value before resolution, with where it came from for error messages.
struct RawEntry {
  YAML::Node node;
  std::string origin;  // "configs/x.yaml:12:5", "command-line override 'k=v'" or "default"
};

absl::string_view AV(std::string_view s) { return absl::string_view(s.data(), s.size()); }

std::string MarkText(const std::string& source, const YAML::Mark& mark) {
  if (mark.is_null()) return source;
  return absl::StrCat(source, ":", mark.line + 1, ":", mark.column + 1);
}

std::string DescribeNode(const YAML::Node& node) {
  if (!node.IsDefined() || node.IsNull()) return "null";
  if (node.IsScalar()) return "'" + node.Scalar() + "'";
  YAML::Emitter out;
  out << YAML::Flow << node;
  return absl::StrCat(node.IsMap() ? "a mapping " : "a sequence ", out.c_str());
}

// `key` is `section` or lies under it.
bool Under(const std::string& key, std::string_view section) {
  return key == section || (absl::StartsWith(key, AV(section)) && key.size() > section.size() &&
                            key[section.size()] == '.');
}

// Advice given for several keys.
constexpr char kProfilerAdvice[] =
    "verl's profiler settings; tools/bench's --profile records kernel profiles here (docs/bench/README.md): drop it";
constexpr char kMoeAdvice[] = "MoE models are not supported here: drop it";
constexpr char kChunkedLogProbs[] = "compute log-probs and entropy in chunks, without [tokens, vocab] logits: drop it";

// Advice for the keys of verl's other backends and features (found in its example scripts) that the built-in
// trainer has no counterpart for; "" when `key` is none of them.
std::string OtherVerlFeatureAdvice(const std::string& key) {
  for (std::string_view role : {"actor_rollout_ref.actor", "actor_rollout_ref.ref", "critic"}) {
    const std::string r(role);
    if (Under(key, r + ".megatron.override_transformer_config") &&
        absl::StartsWith(key.substr(key.rfind('.') + 1), "recompute_")) {
      const std::string model = role == "critic" ? "critic.model" : "actor_rollout_ref.model";
      return absl::StrCat("a recompute setting of verl's Megatron-LM backend: activation checkpointing here is ", model,
                          ".enable_gradient_checkpointing (whole layers), narrowed to the first N layers with ", model,
                          ".recompute_num_layers=N (Megatron's recompute_method=block); set those instead");
    }
    if (Under(key, r + ".megatron") || Under(key, r + ".optim.override_optimizer_config")) {
      return "a setting of verl's Megatron-LM backend; the trainer here is built in (data parallel with ZeRO-1, "
             "ZeRO-3 with actor_rollout_ref.actor.shard_parameters=true, AdamW offload with "
             "fsdp_config.optimizer_offload=true): drop it";
    }
    if (key == r + ".strategy") {
      return "verl's choice of training backend (fsdp, fsdp2, megatron); the trainer here is built in: drop it";
    }
    if (key == r + ".ulysses_sequence_parallel_size") {
      return "verl's Ulysses sequence parallelism is not built in; long rows are packed (use_remove_padding) and "
             "split by a token budget (use_dynamic_bsz): drop it";
    }
    if (key == r + ".use_torch_compile") {
      return "verl's torch.compile switch; nothing is compiled at run time here: drop it";
    }
    if (key == r + ".fsdp_config.fsdp_size" || key == r + ".model.fsdp_config.fsdp_size") {
      return "verl's FSDP group size; a rank here shards over its whole data-parallel group (verl's -1): drop it";
    }
    for (std::string_view fsdp : {"forward_prefetch", "strategy", "model_dtype", "wrap_policy", "reshard_after_forward",
                                  "offload_policy", "mixed_precision"}) {
      if (key == absl::StrCat(r, ".fsdp_config.", AV(fsdp)) ||
          key == absl::StrCat(r, ".model.fsdp_config.", AV(fsdp))) {
        return "a setting of verl's FSDP wrapper; the trainer here is built in (bf16 compute, float32 master weights "
               "and AdamW state): drop it";
      }
    }
    if (key == r + ".entropy_checkpointing" || key == r + ".entropy_from_logits_with_chunking") {
      return absl::StrCat("the passes here always ", kChunkedLogProbs);
    }
    if (Under(key, r + ".router_replay")) return kMoeAdvice;
    if (Under(key, r + ".profiler")) return kProfilerAdvice;
    if (key == r + ".optim.clip_grad") {
      return absl::StrCat("verl's Megatron name for gradient clipping: set '",
                          role == "critic" ? "critic" : "actor_rollout_ref.actor", ".grad_clip' instead");
    }
  }
  if (Under(key, "global_profiler")) return kProfilerAdvice;
  for (std::string_view model : {"actor_rollout_ref.model.", "critic.model."}) {
    const std::string m(model);
    if (key == m + "use_fused_kernels") {
      return absl::StrCat("verl's fused log-prob kernels; the passes here always ", kChunkedLogProbs);
    }
    if (key == m + "use_shm") {
      return "a setting of verl's Hugging Face loading (a copy in /dev/shm); the model directory is read here "
             "directly: drop it";
    }
    for (std::string_view lora :
         {"lora_rank", "lora_alpha", "target_modules", "exclude_modules", "lora_adapter_path", "lora"}) {
      if (Under(key, m + std::string(lora))) {
        return "LoRA is not built in: the actor trains all its parameters (fsdp_config.optimizer_offload and "
               "actor_rollout_ref.actor.shard_parameters cut its memory): drop it";
      }
    }
    if (key == m + "enable_activation_offload") {
      return "activation offload is not built in; gradient checkpointing (enable_gradient_checkpointing) bounds the "
             "activations' memory: drop it";
    }
  }
  if (key == "actor_rollout_ref.rollout.enable_rollout_routing_replay") return kMoeAdvice;
  if (key == "actor_rollout_ref.nccl_timeout") return "verl's NCCL timeout: set 'cluster.comm_timeout_s' instead";
  if (key == "trainer.balance_batch") {
    return "verl's reordering of a batch to even out the data-parallel ranks' tokens; here a mini-batch's prompts are "
           "split evenly over the ranks, and use_dynamic_bsz cuts micro-batches by tokens: drop it";
  }
  if (Under(key, "data.custom_cls") || Under(key, "data.sampler")) {
    return "verl's Python dataset and sampler classes are not loaded here; the controller reads the parquet rows "
           "itself and samples them with data.shuffle and data.seed: drop it";
  }
  // verl's generation script (main_generation): top-level rollout.* and its data keys.
  if (Under(key, "rollout") || key == "data.path" || key == "data.n_samples" || key == "data.output_path") {
    return "a key of verl's generation script (main_generation); verl-controller runs PPO and GRPO jobs, and "
           "verl-infer generates from a model directory: drop it";
  }
  if (Under(key, "actor_rollout_ref.rollout.multi_turn")) {
    return "multi-turn rollouts with tool calls are not built in (one response per prompt here): drop it";
  }
  if (key == "trainer.use_legacy_worker_impl") return "a choice between verl's Python worker implementations: drop it";
  if (Under(key, "actor_rollout_ref.actor.checkpoint") || Under(key, "critic.checkpoint")) {
    return "verl's choice of what a checkpoint holds; checkpoints here always hold the model, the optimizer and the "
           "extra state (verl's default), and the last one also actor/huggingface: drop it";
  }
  // verl's SFT trainer (fsdp_sft_trainer): top-level model.* and optim.*, and its data keys.
  if (Under(key, "model") || Under(key, "optim") || key == "data.response_key" || key == "data.prompt_dict_keys" ||
      key == "data.response_dict_keys" || key == "data.micro_batch_size" || key == "data.micro_batch_size_per_gpu") {
    return "a key of verl's SFT trainer (fsdp_sft_trainer); verl-controller runs PPO and GRPO jobs: drop it";
  }
  return "";
}

// verl keys a ported script often carries that have no counterpart here, with what to do instead (the edit-distance
// suggestion would name an unrelated key: ppo_micro_batch_size -> ppo_mini_batch_size, rollout.name -> algorithm.lam).
std::string KnownVerlKeyAdvice(const std::string& key) {
  for (std::string_view global : {".ppo_micro_batch_size", ".log_prob_micro_batch_size", ".forward_micro_batch_size"}) {
    if (absl::EndsWith(key, AV(global)) && FindConfigKey(key + "_per_gpu") != nullptr) {
      return absl::StrCat("verl's deprecated global micro-batch size; set '", key, "_per_gpu' (per GPU) instead");
    }
  }
  for (std::string_view engine : {"name", "mode", "tensor_model_parallel_size", "free_cache_engine", "load_format",
                                  "engine_kwargs", "max_model_len", "layered_summon", "multi_stage_wake_up",
                                  "data_parallel_size", "expert_parallel_size", "over_sample_rate", "trace",
                                  "checkpoint_engine"}) {
    const std::string engine_key = absl::StrCat("actor_rollout_ref.rollout.", AV(engine));
    if (Under(key, engine_key)) {
      return "a setting of verl's vLLM/SGLang rollout; the rollout engine here is built in: drop it";
    }
  }
  // verl's Hugging Face loading options: the model directory is read here by its own loader (config.json,
  // safetensors, tokenizer.json), so there is no remote code to trust.
  for (std::string_view model : {"actor_rollout_ref.model.", "critic.model."}) {
    if (key == absl::StrCat(AV(model), "trust_remote_code")) {
      return "a setting of verl's Hugging Face loading; the model directory is read here without Python code: drop it";
    }
  }
  // Model-based rewards and Python reward functions: rewards here are the rule scorers chosen by data_source.
  if (Under(key, "reward_model") || Under(key, "custom_reward_function")) {
    return "verl's model-based reward and custom Python reward functions are not supported here; rewards come from "
           "the built-in rule scorer of each row's data_source (openai/gsm8k, verl_cpp/repeat_letter, ...): drop it";
  }
  // verl's Python data loading: here the controller reads and tokenizes the prompts itself.
  for (std::string_view loading : {"dataloader_num_workers", "filter_overlong_prompts_workers", "use_shm",
                                   "return_raw_chat", "return_raw_input_ids", "return_full_prompt",
                                   "trust_remote_code", "validation_shuffle"}) {
    if (key == absl::StrCat("data.", AV(loading))) {
      return "a setting of verl's Python data loading; the controller reads and tokenizes the prompts itself: drop it";
    }
  }
  if (key == "data.tokenizer") {
    return "the tokenizer here is the model's (tokenizer.json in actor_rollout_ref.model.path): drop it";
  }
  if (key == "data.reward_fn_key") {
    return "rewards are chosen by each row's data_source column here (verl's default reward_fn_key): drop it, and "
           "put the reward's name in data_source";
  }
  if (key == "data.image_key" || key == "data.video_key") {
    return "multi-modal prompts are not supported here: drop it";
  }
  return OtherVerlFeatureAdvice(key);
}

std::string UnknownKeyMessage(const std::string& key, const std::string& where) {
  std::string msg = absl::StrCat("unknown key '", key, "' in ", where);
  if (const std::string advice = KnownVerlKeyAdvice(key); !advice.empty()) return absl::StrCat(msg, ": ", advice);
  const std::string suggestion = SuggestConfigKey(key);
  if (!suggestion.empty()) absl::StrAppend(&msg, "; did you mean '", suggestion, "'?");
  return msg;
}

// Step 1: nested maps to dotted keys.
void Flatten(const YAML::Node& map, const std::string& prefix, const std::string& source,
             std::map<std::string, RawEntry>* raw, std::vector<std::string>* errors) {
  for (auto it = map.begin(); it != map.end(); ++it) {
    const YAML::Node k = it->first;
    const YAML::Node v = it->second;
    const std::string where = MarkText(source, k.Mark());
    if (!k.IsScalar()) {
      errors->push_back(absl::StrCat(where, ": keys must be plain names, got ", DescribeNode(k)));
      continue;
    }
    const std::string key = prefix.empty() ? k.Scalar() : absl::StrCat(prefix, ".", k.Scalar());
    if (FindConfigKey(key) != nullptr) {
      if (raw->count(key) > 0) {
        errors->push_back(absl::StrCat("duplicate key '", key, "' in ", where, " (first set at ",
                                       raw->at(key).origin, ")"));
        continue;
      }
      (*raw)[key] = RawEntry{v, MarkText(source, v.Mark().is_null() ? k.Mark() : v.Mark())};
    } else if (IsConfigSection(key)) {
      if (v.IsMap()) {
        Flatten(v, key, source, raw, errors);
      } else if (!v.IsNull()) {
        errors->push_back(absl::StrCat("'", key, "' in ", where, " is a section and needs a mapping of its keys, got ",
                                       DescribeNode(v)));
      }
    } else {
      errors->push_back(UnknownKeyMessage(key, where));
    }
  }
}

absl::Status ParseFile(const std::string& yaml_text, const std::string& source,
                       std::map<std::string, RawEntry>* raw) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::ParserException& e) {
    return absl::InvalidArgumentError(absl::StrCat(MarkText(source, e.mark), ": YAML syntax error: ", e.msg));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(MarkText(source, e.mark), ": cannot read YAML: ", e.msg));
  }
  if (!root.IsDefined() || root.IsNull()) return absl::OkStatus();
  if (!root.IsMap()) {
    return absl::InvalidArgumentError(absl::StrCat(MarkText(source, root.Mark()),
                                                   ": the top level must be a mapping of sections (data, trainer, "
                                                   "...), got ",
                                                   DescribeNode(root)));
  }
  std::vector<std::string> errors;
  Flatten(root, "", source, raw, &errors);
  if (!errors.empty()) return absl::InvalidArgumentError(absl::StrJoin(errors, "\n"));
  return absl::OkStatus();
}

// Step 2: Hydra-style overrides.
absl::Status ApplyOverrides(const std::vector<std::string>& overrides, std::map<std::string, RawEntry>* raw) {
  std::vector<std::string> errors;
  for (const std::string& text : overrides) {
    const std::string where = absl::StrCat("command-line override '", text, "'");
    std::string_view rest = text;
    if (!rest.empty() && rest.front() == '~') {
      rest.remove_prefix(1);
      const std::string key(rest.substr(0, rest.find('=')));
      if (FindConfigKey(key) != nullptr) {
        raw->erase(key);
      } else if (!key.empty() && IsConfigSection(key)) {
        const std::string section = key + ".";
        for (auto it = raw->begin(); it != raw->end();) {
          it = it->first.compare(0, section.size(), section) == 0 ? raw->erase(it) : std::next(it);
        }
      } else {
        errors.push_back(UnknownKeyMessage(key, where));
      }
      continue;
    }
    if (rest.substr(0, 2) == "++") {
      rest.remove_prefix(2);
    } else if (!rest.empty() && rest.front() == '+') {
      rest.remove_prefix(1);
    }
    const size_t eq = rest.find('=');
    if (eq == std::string_view::npos) {
      errors.push_back(absl::StrCat(where, " must have the form key=value (or +key=value, ~key)"));
      continue;
    }
    const std::string key(rest.substr(0, eq));
    const std::string value(rest.substr(eq + 1));
    if (FindConfigKey(key) == nullptr) {
      if (IsConfigSection(key)) {
        errors.push_back(absl::StrCat("'", key, "' in ", where, " is a section; override its keys one at a time (",
                                      key, ".<name>=value)"));
      } else {
        errors.push_back(UnknownKeyMessage(key, where));
      }
      continue;
    }
    // The whole text must be one value. YAML::Load stops after the first node, so `[console],jsonl` would quietly be
    // [console]; read as the only item of a block sequence, anything after the value is an error.
    YAML::Node node;
    try {
      YAML::Node items = YAML::Load("- " + value);
      if (!items.IsSequence() || items.size() != 1) {
        errors.push_back(absl::StrCat(key, ": the value '", value, "' of ", where, " is not one value"));
        continue;
      }
      node = items[0];
    } catch (const YAML::Exception& e) {
      errors.push_back(
          absl::StrCat(key, ": cannot parse the value '", value, "' of ", where, ": ", e.msg,
                       " (nothing may follow a list or a quoted string; to mean text, quote the whole value)"));
      continue;
    }
    (*raw)[key] = RawEntry{node, where};
  }
  if (!errors.empty()) return absl::InvalidArgumentError(absl::StrJoin(errors, "\n"));
  return absl::OkStatus();
}

bool ParseInt(const std::string& text, int64_t* out) {
  std::string_view s = text;
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  if (s.empty()) return false;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && end == s.data() + s.size();
}

bool ParseDouble(const YAML::Node& node, double* out) {
  if (!node.IsScalar() || node.Scalar().empty()) return false;
  return YAML::convert<double>::decode(node, *out);
}

// Step 4 for one key: resolves interpolations (recursively, with cycle detection), converts, checks enums.
class Resolver {
 public:
  explicit Resolver(const std::map<std::string, RawEntry>& raw) : raw_(raw) {}

  absl::Status Resolve(const std::string& key) {
    if (tree_.count(key) > 0) return absl::OkStatus();
    for (size_t i = 0; i < stack_.size(); ++i) {
      if (stack_[i] == key) {
        std::vector<std::string> cycle(stack_.begin() + static_cast<std::ptrdiff_t>(i), stack_.end());
        cycle.push_back(key);
        return absl::InvalidArgumentError(
            absl::StrCat("interpolation cycle: ", absl::StrJoin(cycle, " -> ")));
      }
    }
    const ConfigKeySpec& spec = *FindConfigKey(key);
    RawEntry entry;
    if (auto it = raw_.find(key); it != raw_.end()) {
      entry = it->second;
    } else {
      entry = RawEntry{YAML::Load(std::string(spec.default_yaml)), "default"};
    }
    stack_.push_back(key);
    absl::StatusOr<ConfigValue> value = Convert(spec, entry);
    stack_.pop_back();
    if (!value.ok()) return value.status();
    RETURN_IF_ERROR(CheckAllowed(spec, *value, entry.origin));
    tree_[key] = *std::move(value);
    return absl::OkStatus();
  }

  ConfigTree TakeTree() { return std::move(tree_); }

 private:
  absl::StatusOr<ConfigValue> Convert(const ConfigKeySpec& spec, const RawEntry& entry) {
    const std::string key(spec.key);
    const YAML::Node& node = entry.node;
    const std::string& origin = entry.origin;
    auto mismatch = [&](const std::string& given) {
      return absl::InvalidArgumentError(absl::StrCat(key, ": expected ", AV(ConfigTypeName(spec.type)), ", got ",
                                                     given, " (", origin, ")"));
    };
    if (node.IsMap()) return mismatch(DescribeNode(node));

    // A scalar with interpolations: substitute, then read the result as a YAML scalar of the key's type.
    if (node.IsScalar() && node.Scalar().find("${") != std::string::npos) {
      ASSIGN_OR_RETURN(std::string text, Interpolate(key, node.Scalar(), origin));
      if (spec.type == ConfigType::kString) return ConfigValue(std::move(text));
      YAML::Node reparsed;
      try {
        reparsed = YAML::Load(text);
      } catch (const YAML::Exception&) {
        return mismatch(absl::StrCat("'", text, "' (from '", node.Scalar(), "')"));
      }
      return Convert(spec, RawEntry{reparsed, origin});
    }

    switch (spec.type) {
      case ConfigType::kBool: {
        bool b = false;
        if (!node.IsScalar() || !YAML::convert<bool>::decode(node, b)) return mismatch(DescribeNode(node));
        return ConfigValue(b);
      }
      case ConfigType::kInt:
      case ConfigType::kOptionalInt: {
        if (node.IsNull() && spec.type == ConfigType::kOptionalInt) return ConfigValue(std::monostate{});
        int64_t i = 0;
        if (!node.IsScalar() || !ParseInt(node.Scalar(), &i)) return mismatch(DescribeNode(node));
        return ConfigValue(i);
      }
      case ConfigType::kDouble:
      case ConfigType::kOptionalDouble: {
        if (node.IsNull() && spec.type == ConfigType::kOptionalDouble) return ConfigValue(std::monostate{});
        double d = 0;
        if (!ParseDouble(node, &d)) return mismatch(DescribeNode(node));
        return ConfigValue(d);
      }
      case ConfigType::kString:
        if (node.IsNull()) return ConfigValue(std::string());
        if (!node.IsScalar()) return mismatch(DescribeNode(node));
        return ConfigValue(node.Scalar());
      case ConfigType::kStringList: {
        std::vector<std::string> items;
        if (node.IsNull()) return ConfigValue(items);
        if (node.IsScalar()) {
          if (node.Scalar().empty()) return ConfigValue(items);
          items.push_back(node.Scalar());
          return ConfigValue(items);
        }
        for (const YAML::Node& item : node) {
          if (!item.IsScalar()) return mismatch(DescribeNode(node));
          if (item.Scalar().find("${") != std::string::npos) {
            ASSIGN_OR_RETURN(std::string text, Interpolate(key, item.Scalar(), origin));
            items.push_back(std::move(text));
          } else {
            items.push_back(item.Scalar());
          }
        }
        return ConfigValue(items);
      }
      case ConfigType::kDoubleList: {
        if (!node.IsSequence()) return mismatch(DescribeNode(node));
        std::vector<double> items;
        for (const YAML::Node& item : node) {
          double d = 0;
          YAML::Node element = item;
          if (item.IsScalar() && item.Scalar().find("${") != std::string::npos) {
            ASSIGN_OR_RETURN(std::string text, Interpolate(key, item.Scalar(), origin));
            element = YAML::Node(text);
          }
          if (!ParseDouble(element, &d)) return mismatch(DescribeNode(node));
          items.push_back(d);
        }
        return ConfigValue(items);
      }
    }
    return absl::InternalError("unhandled config type");
  }

  absl::StatusOr<std::string> Interpolate(const std::string& key, const std::string& text,
                                          const std::string& origin) {
    std::string out;
    size_t i = 0;
    while (i < text.size()) {
      if (text.compare(i, 3, "\\${") == 0) {
        out += "${";
        i += 3;
        continue;
      }
      if (text.compare(i, 2, "${") != 0) {
        out += text[i++];
        continue;
      }
      const size_t close = text.find('}', i + 2);
      if (close == std::string::npos) {
        return absl::InvalidArgumentError(
            absl::StrCat(key, ": unterminated interpolation in '", text, "' (", origin, ")"));
      }
      const std::string ref = text.substr(i + 2, close - i - 2);
      if (FindConfigKey(ref) == nullptr) {
        std::string msg = absl::StrCat(key, ": interpolation '${", ref, "}' refers to an unknown key (", origin, ")");
        const std::string suggestion = SuggestConfigKey(ref);
        if (!suggestion.empty()) absl::StrAppend(&msg, "; did you mean '", suggestion, "'?");
        return absl::InvalidArgumentError(msg);
      }
      RETURN_IF_ERROR(Resolve(ref));
      const ConfigValue& v = tree_.at(ref);
      if (const auto* s = std::get_if<std::string>(&v)) {
        out += *s;
      } else {
        out += FormatConfigValue(v);
      }
      i = close + 1;
    }
    return out;
  }

  absl::Status CheckAllowed(const ConfigKeySpec& spec, const ConfigValue& value, const std::string& origin) {
    const std::vector<std::string> allowed = AllowedValues(spec);
    if (allowed.empty()) return absl::OkStatus();
    std::vector<std::string> given;
    if (const auto* s = std::get_if<std::string>(&value)) given.push_back(*s);
    if (const auto* l = std::get_if<std::vector<std::string>>(&value)) given = *l;
    for (const std::string& g : given) {
      if (std::find(allowed.begin(), allowed.end(), g) != allowed.end()) continue;
      std::string msg = absl::StrCat(AV(spec.key), ": '", g, "' is not one of ",
                                     absl::StrJoin(allowed, ", "), " (", origin, ")");
      if (spec.key == "trainer.logger" &&
          (g == "wandb" || g == "swanlab" || g == "mlflow" || g == "vemlp_wandb" || g == "clearml" || g == "trackio")) {
        absl::StrAppend(&msg, "; verl's '", g, "' tracker is not built in here: use tensorboard (event files under ",
                        "trainer.log_dir/tensorboard, which trackers such as wandb can import) or prometheus");
        return absl::InvalidArgumentError(msg);
      }
      const std::string suggestion = SuggestClosest(g, allowed);
      if (!suggestion.empty()) absl::StrAppend(&msg, "; did you mean '", suggestion, "'?");
      return absl::InvalidArgumentError(msg);
    }
    return absl::OkStatus();
  }

  const std::map<std::string, RawEntry>& raw_;
  ConfigTree tree_;
  std::vector<std::string> stack_;
};

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::error_code ec;
  const std::filesystem::file_status st = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(st)) return absl::NotFoundError(absl::StrCat("config file '", path, "' not found"));
  if (std::filesystem::is_directory(st)) {
    return absl::InvalidArgumentError(absl::StrCat("config file '", path, "' is a directory"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::PermissionDeniedError(absl::StrCat("cannot open config file '", path, "'"));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat("error reading config file '", path, "'"));
  return text.str();
}

}  // namespace

absl::StatusOr<ConfigTree> ResolveConfigTree(const std::string& yaml_text, const std::string& source_name,
                                             const std::vector<std::string>& overrides) {
  try {
    std::map<std::string, RawEntry> raw;
    RETURN_IF_ERROR(ParseFile(yaml_text, source_name, &raw));
    RETURN_IF_ERROR(ApplyOverrides(overrides, &raw));
    Resolver resolver(raw);
    std::vector<std::string> errors;
    for (const ConfigKeySpec& spec : ConfigSchema()) {
      if (absl::Status s = resolver.Resolve(std::string(spec.key)); !s.ok()) {
        const std::string msg(s.message());
        if (std::find(errors.begin(), errors.end(), msg) == errors.end()) errors.push_back(msg);
      }
    }
    if (!errors.empty()) return absl::InvalidArgumentError(absl::StrJoin(errors, "\n"));
    return resolver.TakeTree();
  } catch (const std::exception& e) {
    // yaml-cpp throws from places the code above does not expect (e.g. a bad default); never let it escape.
    return absl::InternalError(absl::StrCat("while reading the configuration ", source_name, ": ", e.what()));
  }
}

absl::StatusOr<LoadedConfig> LoadConfigFromString(const std::string& yaml_text, const std::string& source_name,
                                                  const std::vector<std::string>& overrides) {
  LoadedConfig loaded;
  ASSIGN_OR_RETURN(loaded.tree, ResolveConfigTree(yaml_text, source_name, overrides));
  ASSIGN_OR_RETURN(loaded.job, JobConfigFromTree(loaded.tree));
  RETURN_IF_ERROR(ValidateJobConfig(loaded.job));
  return loaded;
}

absl::StatusOr<LoadedConfig> LoadConfig(const std::string& yaml_path, const std::vector<std::string>& overrides) {
  std::string text;
  if (!yaml_path.empty()) {
    ASSIGN_OR_RETURN(text, ReadFile(yaml_path));
  }
  return LoadConfigFromString(text, yaml_path.empty() ? "<no config file>" : yaml_path, overrides);
}

absl::StatusOr<JobConfig> LoadJobConfig(const std::string& yaml_path, const std::vector<std::string>& overrides) {
  ASSIGN_OR_RETURN(LoadedConfig loaded, LoadConfig(yaml_path, overrides));
  return std::move(loaded.job);
}

absl::StatusOr<std::string> ResolvedConfigYaml(const std::string& yaml_path,
                                               const std::vector<std::string>& overrides) {
  ASSIGN_OR_RETURN(LoadedConfig loaded, LoadConfig(yaml_path, overrides));
  return ConfigTreeToYaml(loaded.tree);
}

}  // namespace verl
