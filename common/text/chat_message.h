#ifndef VERL_COMMON_TEXT_CHAT_MESSAGE_H_
#define VERL_COMMON_TEXT_CHAT_MESSAGE_H_

#include <string>

namespace verl {

// One turn of a chat prompt, as in verl's parquet `prompt` column: {"role": "user", "content": "..."}.
struct ChatMessage {
  std::string role;
  std::string content;
  bool operator==(const ChatMessage&) const = default;
};

}  // namespace verl

#endif  // VERL_COMMON_TEXT_CHAT_MESSAGE_H_
