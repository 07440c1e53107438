#ifndef VERL_COMMON_TEXT_CHAT_TEMPLATE_H_
#define VERL_COMMON_TEXT_CHAT_TEMPLATE_H_

#include <ctime>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/text/chat_message.h"
#include "common/text/jinja_template.h"
#include "common/text/tokenizer.h"

namespace verl {

// How to render a conversation: the model's own Jinja chat template when it has one (read from
// tokenizer_config.json), else the built-in ChatML rendering (Qwen2/Qwen2.5 and other "<|im_start|>" models).
struct ChatTemplateOptions {
  // Used only by the built-in ChatML rendering (no `jinja_template`): a system prompt prepended when the first
  // message is not a system message. Default: "" (none is added). Qwen2.5 uses "You are Qwen, created by Alibaba
  // Cloud. You are a helpful assistant." ChatTemplateOptionsFromTokenizerConfig also fills it, for information,
  // from the literal default prompt of a ChatML template.
  std::string default_system;

  // The model's chat template; when set it is rendered, as transformers' apply_chat_template(tokenize=False)
  // does, and the fields below are its context. Default: none (the built-in ChatML rendering).
  std::optional<JinjaTemplate> jinja_template;
  // Special tokens passed to the template as bos_token, eos_token, unk_token, pad_token (transformers passes its
  // special_tokens_map). Absent ones are undefined in the template.
  std::optional<std::string> bos_token;
  std::optional<std::string> eos_token;
  std::optional<std::string> unk_token;
  std::optional<std::string> pad_token;
  // Passed as date_string when set (Llama 3.x templates print it as "Today Date: ..."); else undefined and the
  // template picks its default (Llama 3.1: "26 Jul 2024"; Llama 3.2: strftime_now("%d %b %Y")).
  std::optional<std::string> date_string;
  // The local time strftime_now() formats. Default (empty): now, in the local time zone.
  std::function<std::tm()> now;
};

// Renders `messages` (then the assistant header when `add_generation_prompt`) as a prompt string:
//   - with options.jinja_template: the template with messages, add_generation_prompt, tools=None,
//     documents=None, the special tokens and date_string; equal to transformers' apply_chat_template(messages,
//     tokenize=False, add_generation_prompt=...). Errors (the template's raise_exception, e.g. roles that do not
//     alternate, or an unsupported construct) name the template's file, line and column;
//   - without: ChatML, "<|im_start|>{role}\n{content}<|im_end|>\n" per message (after default_system, if any),
//     then "<|im_start|>assistant\n" when `add_generation_prompt`. Never fails.
absl::StatusOr<std::string> RenderChatTemplate(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                                               const ChatTemplateOptions& options = {});

// RenderChatTemplate for callers that cannot report an error: on a template error it returns "" (an empty
// prompt). Callers that can should use RenderChatTemplate; ChatTemplateOptionsFromTokenizerConfig already checks
// that the template renders simple conversations.
std::string ApplyChatTemplate(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                              const ChatTemplateOptions& options = {});

// Reads the chat template and its context from a HF tokenizer_config.json:
//   - a chat_template.jinja in the same directory is the template (it takes priority, as in transformers);
//   - otherwise, the file does not exist, or has no (or a null) "chat_template": defaults (the built-in ChatML
//     rendering);
//   - "chat_template" is a string, or a list of {"name", "template"} of which the "default" one is used: it is
//     parsed into jinja_template (errors name the file, line and column; constructs outside the supported Jinja
//     subset are kUnimplemented), and bos_token / eos_token / unk_token / pad_token are read (strings or
//     {"content": ...} objects). The template is then test-rendered on one user message with the generation
//     prompt (how training prompts are rendered); a failure is returned as the error;
//   - for a ChatML template, default_system is its literal default system prompt, if any (Qwen2.5: "You are
//     Qwen, created by Alibaba Cloud. You are a helpful assistant.");
//   - unreadable file, malformed JSON, a chat_template of another type, a list without "default": an error naming
//     the file.
absl::StatusOr<ChatTemplateOptions> ChatTemplateOptionsFromTokenizerConfig(const std::string& tokenizer_config_json_path);

// Whether `options` can render prompts for `tokenizer`: a model's own template always can; the built-in ChatML
// rendering only for a tokenizer that has <|im_start|> and <|im_end|> as tokens (Qwen's and other ChatML models).
// Otherwise (a base model without a chat template: GPT-2, Llama base) an error naming `tokenizer_config_json_path`,
// where transformers' apply_chat_template, which verl calls, refuses too; silently rendering ChatML would train on
// markers the tokenizer splits into pieces.
absl::Status CheckChatTemplateFits(const ChatTemplateOptions& options, const Tokenizer& tokenizer,
                                   const std::string& tokenizer_config_json_path);

}  // namespace verl

#endif  // VERL_COMMON_TEXT_CHAT_TEMPLATE_H_
