#include "common/text/chat_template.h"

#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status/status_macros.h"
#include "nlohmann/json.hpp"

namespace verl {
namespace {

constexpr std::string_view kImStart = "<|im_start|>";
constexpr std::string_view kImEnd = "<|im_end|>";
constexpr std::string_view kQwenMarker = "You are Qwen, created by Alibaba Cloud";
constexpr std::string_view kQwenDefaultSystem = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";

void AppendMessage(std::string_view role, std::string_view content, std::string* out) {
  out->append(kImStart).append(role).append("\n").append(content).append(kImEnd).append("\n");
}

// Finds a literal system prompt written into a ChatML template, as in Qwen2.5's
//   {{- '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n' }}
// i.e. "<|im_start|>system" + a newline (real, or the escape "\n") + literal text up to "<|im_end|>". Jinja string
// escapes in the text are undone (Qwen2.5-Math's "\\boxed{}" becomes "\boxed{}"). A quote that ends the string
// literal or Jinja syntax before "<|im_end|>" means the prompt is computed, not literal. Returns "" when none.
std::string FindLiteralDefaultSystem(std::string_view tmpl) {
  const std::string_view marker = "<|im_start|>system";
  for (size_t pos = tmpl.find(marker); pos != std::string_view::npos; pos = tmpl.find(marker, pos + 1)) {
    size_t i = pos + marker.size();
    if (tmpl.substr(i, 2) == "\\n") {
      i += 2;
    } else if (tmpl.substr(i, 1) == "\n") {
      i += 1;
    } else {
      continue;
    }
    std::string text;
    bool literal = false;
    while (i < tmpl.size()) {
      if (tmpl.substr(i, kImEnd.size()) == kImEnd) {
        literal = !text.empty();
        break;
      }
      const char c = tmpl[i];
      if (c == '\'' || c == '"' || tmpl.substr(i, 2) == "{{" || tmpl.substr(i, 2) == "{%") break;
      if (c == '\\' && i + 1 < tmpl.size()) {
        const char e = tmpl[i + 1];
        text.push_back(e == 'n' ? '\n' : e == 't' ? '\t' : e);
        i += 2;
        continue;
      }
      text.push_back(c);
      ++i;
    }
    if (literal) return text;
  }
  return "";
}

std::string RenderChatML(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                         const ChatTemplateOptions& options) {
  std::string out;
  size_t size = 32;
  for (const ChatMessage& m : messages) size += m.role.size() + m.content.size() + 24;
  out.reserve(size + options.default_system.size());
  if (!options.default_system.empty() && (messages.empty() || messages.front().role != "system")) {
    AppendMessage("system", options.default_system, &out);
  }
  for (const ChatMessage& m : messages) AppendMessage(m.role, m.content, &out);
  if (add_generation_prompt) out.append(kImStart).append("assistant\n");
  return out;
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  std::ostringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

// A special token in tokenizer_config.json: a string, or an AddedToken object {"content": ..., ...}.
std::optional<std::string> SpecialToken(const nlohmann::json& config, const char* key) {
  if (!config.contains(key)) return std::nullopt;
  const nlohmann::json& v = config[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return std::nullopt;
}

}  // namespace

absl::StatusOr<std::string> RenderChatTemplate(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                                               const ChatTemplateOptions& options) {
  if (!options.jinja_template.has_value()) return RenderChatML(messages, add_generation_prompt, options);
  JinjaValue::List message_values;
  message_values.reserve(messages.size());
  for (const ChatMessage& m : messages) {
    message_values.push_back(JinjaValue::MakeDict(
        {{"role", JinjaValue::String(m.role)}, {"content", JinjaValue::String(m.content)}}));
  }
  JinjaValue::Dict context = {
      {"messages", JinjaValue::MakeList(std::move(message_values))},
      {"tools", JinjaValue::None()},
      {"documents", JinjaValue::None()},
      {"add_generation_prompt", JinjaValue::Bool(add_generation_prompt)},
  };
  const std::pair<const char*, const std::optional<std::string>*> optional_strings[] = {
      {"bos_token", &options.bos_token},
      {"eos_token", &options.eos_token},
      {"unk_token", &options.unk_token},
      {"pad_token", &options.pad_token},
      {"date_string", &options.date_string}};
  for (const auto& [name, value] : optional_strings) {
    if (value->has_value()) context.emplace_back(name, JinjaValue::String(**value));
  }
  JinjaRenderOptions render_options;
  render_options.now = options.now;
  return options.jinja_template->Render(context, render_options);
}

std::string ApplyChatTemplate(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                              const ChatTemplateOptions& options) {
  absl::StatusOr<std::string> text = RenderChatTemplate(messages, add_generation_prompt, options);
  return text.ok() ? *std::move(text) : std::string();
}

absl::StatusOr<ChatTemplateOptions> ChatTemplateOptionsFromTokenizerConfig(const std::string& path) {
  ChatTemplateOptions options;
  std::error_code ec;
  nlohmann::json config = nlohmann::json::object();
  if (std::filesystem::exists(path, ec)) {
    absl::StatusOr<std::string> contents = ReadFile(path);
    if (!contents.ok()) return contents.status();
    try {
      config = nlohmann::json::parse(*contents);
    } catch (const nlohmann::json::exception& e) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": malformed JSON: ", e.what()));
    }
  }
  // As in transformers, a chat_template.jinja next to tokenizer_config.json takes priority over its chat_template.
  const std::string jinja_path = (std::filesystem::path(path).parent_path() / "chat_template.jinja").string();
  std::string tmpl;
  std::string source = path;
  if (std::filesystem::is_regular_file(jinja_path, ec)) {
    ASSIGN_OR_RETURN(tmpl, ReadFile(jinja_path));
    source = jinja_path;
  } else {
    if (!config.is_object() || !config.contains("chat_template") || config["chat_template"].is_null()) {
      return options;
    }
    // chat_template is a string, or a list of {"name", "template"} of which "default" is the one used for chat.
    const nlohmann::json& value = config["chat_template"];
    if (value.is_string()) {
      tmpl = value.get<std::string>();
    } else if (value.is_array()) {
      for (const nlohmann::json& entry : value) {
        if (entry.is_object() && entry.value("name", "") == "default" && entry.contains("template") &&
            entry["template"].is_string()) {
          tmpl = entry["template"].get<std::string>();
        }
      }
      if (tmpl.empty()) {
        return absl::InvalidArgumentError(absl::StrCat(path, ": chat_template list has no \"default\" template"));
      }
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": chat_template must be a string or a list, got ", value.type_name()));
    }
  }
  if (!config.is_object()) config = nlohmann::json::object();
  absl::StatusOr<JinjaTemplate> parsed = JinjaTemplate::Parse(tmpl, source);
  if (!parsed.ok()) return Annotate(parsed.status(), "chat_template");
  options.jinja_template = *std::move(parsed);
  options.bos_token = SpecialToken(config, "bos_token");
  options.eos_token = SpecialToken(config, "eos_token");
  options.unk_token = SpecialToken(config, "unk_token");
  options.pad_token = SpecialToken(config, "pad_token");
  if (tmpl.find(kImStart) != std::string::npos) {
    options.default_system = FindLiteralDefaultSystem(tmpl);
    // Qwen2.5 variants whose default prompt is not written as one literal still default to Qwen's.
    if (options.default_system.empty() && tmpl.find(kQwenMarker) != std::string::npos) {
      options.default_system = std::string(kQwenDefaultSystem);
    }
  }
  // A template that cannot render a plain training prompt is unusable: say so now, not per example.
  absl::StatusOr<std::string> probe = RenderChatTemplate({{"user", "Hello"}}, /*add_generation_prompt=*/true, options);
  if (!probe.ok()) return Annotate(probe.status(), "chat_template cannot render a single user message");
  return options;
}

absl::Status CheckChatTemplateFits(const ChatTemplateOptions& options, const Tokenizer& tokenizer,
                                   const std::string& tokenizer_config_json_path) {
  if (options.jinja_template.has_value()) return absl::OkStatus();
  if (tokenizer.TokenToId(kImStart).has_value() && tokenizer.TokenToId("<|im_end|>").has_value()) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      tokenizer_config_json_path,
      ": no chat_template (nor a chat_template.jinja beside it), and the tokenizer has no <|im_start|>/<|im_end|> "
      "tokens for the built-in ChatML rendering; add the model's chat template (transformers' apply_chat_template "
      "refuses such a model too)"));
}

}  // namespace verl
