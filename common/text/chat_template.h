#ifndef VERL_COMMON_TEXT_CHAT_TEMPLATE_H_
#define VERL_COMMON_TEXT_CHAT_TEMPLATE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/text/chat_message.h"

namespace verl {

// Options of the ChatML template (Qwen2/Qwen2.5 and other "<|im_start|>" models).
struct ChatTemplateOptions {
  // System prompt prepended when the first message is not a system message. Default: "" (none is added).
  // Qwen2.5 uses "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
  std::string default_system;
};

// Renders `messages` as ChatML: "<|im_start|>{role}\n{content}<|im_end|>\n" per message, then
// "<|im_start|>assistant\n" when `add_generation_prompt`. Tools, multimodal content and "thinking" markup are not
// rendered. Matches HF's apply_chat_template(tokenize=False) for Qwen2.5 on plain text conversations.
std::string ApplyChatTemplate(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                              const ChatTemplateOptions& options = {});

// Reads the chat template options from a HF tokenizer_config.json:
//   - the file does not exist, or has no "chat_template": defaults;
//   - the template is ChatML with a built-in system prompt for conversations that have none (Qwen2.5's
//     "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."): default_system is that prompt;
//   - the template is not ChatML (no "<|im_start|>"): kUnimplemented naming the file;
//   - unreadable file or malformed JSON: an error naming the file.
absl::StatusOr<ChatTemplateOptions> ChatTemplateOptionsFromTokenizerConfig(const std::string& tokenizer_config_json_path);

}  // namespace verl

#endif  // VERL_COMMON_TEXT_CHAT_TEMPLATE_H_
