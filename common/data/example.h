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
  // Where the row is, for messages: "row N" (0-based) in a parquet file, "line N" (1-based, as an editor shows it)
  // in a JSONL file.
  std::string location;

  // The same row's content; `location` (where it was read from) is not compared.
  bool operator==(const Example& o) const {
    return prompt == o.prompt && data_source == o.data_source && ground_truth == o.ground_truth &&
           extra_info_json == o.extra_info_json && row == o.row;
  }
};

}  // namespace verl

#endif  // VERL_COMMON_DATA_EXAMPLE_H_
