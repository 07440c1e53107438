#ifndef VERL_COMMON_DATA_EXAMPLE_H_
#define VERL_COMMON_DATA_EXAMPLE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/text/chat_message.h"

namespace verl {

// One row of an RL prompt dataset in verl's layout (see common/data/README.md).
struct Example {
  // The chat prompt: the `prompt` column (or DatasetOptions::prompt_key).
  std::vector<ChatMessage> prompt;
  // Selects the reward scorer, e.g. "openai/gsm8k" (common/reward/scorer_registry.h).
  std::string data_source;
  // reward_model.ground_truth as text; "" when the row has none.
  std::string ground_truth;
  // extra_info as a compact JSON object with sorted keys; "{}" when the row has none.
  std::string extra_info_json = "{}";
  // 0-based position of the row in its file (blank JSONL lines are not counted).
  int64_t row = 0;

  bool operator==(const Example&) const = default;
};

}  // namespace verl

#endif  // VERL_COMMON_DATA_EXAMPLE_H_
