#include "common/text/chat_template.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
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

}  // namespace

std::string ApplyChatTemplate(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
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

absl::StatusOr<ChatTemplateOptions> ChatTemplateOptionsFromTokenizerConfig(const std::string& path) {
  ChatTemplateOptions options;
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return options;
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open tokenizer config"));
  std::ostringstream contents;
  contents << in.rdbuf();
  nlohmann::json config;
  try {
    config = nlohmann::json::parse(contents.str());
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": malformed JSON: ", e.what()));
  }
  if (!config.is_object() || !config.contains("chat_template") || config["chat_template"].is_null()) return options;

  // chat_template is a string, or a list of {"name", "template"} of which "default" is the one used for chat.
  const nlohmann::json& value = config["chat_template"];
  std::string tmpl;
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
  if (tmpl.find(kImStart) == std::string::npos) {
    return absl::UnimplementedError(absl::StrCat(
        path, ": chat_template is not ChatML (no \"<|im_start|>\"); only the ChatML template is supported"));
  }
  options.default_system = FindLiteralDefaultSystem(tmpl);
  // Qwen2.5 variants whose default prompt is not written as one literal still default to Qwen's.
  if (options.default_system.empty() && tmpl.find(kQwenMarker) != std::string::npos) {
    options.default_system = std::string(kQwenDefaultSystem);
  }
  return options;
}

}  // namespace verl
