#ifndef VERL_COMMON_DATA_SYNTHETIC_TASKS_H_
#define VERL_COMMON_DATA_SYNTHETIC_TASKS_H_

// Small generated datasets for quickstarts and tests (tools/make_dataset writes them to files):
//
//   repeat_letter     "Repeat the letter X." with X uniform over "abcd"; data_source "verl_cpp/repeat_letter",
//                     ground truth X, extra_info {"split", "index"}. Scored by common/reward/repeat_letter.h.
//   gsm8k_synthetic   one-step arithmetic word problems in GSM8K's style with verl's instruction suffix; data_source
//                     "openai/gsm8k", ground truth the integer answer, extra_info {"split", "index", "question",
//                     "answer"} where answer ends in "#### N" like GSM8K's. Scored by common/reward/gsm8k.h.
//   digit_sums        "What is a + b? Give the final answer after \"####\"." with a, b uniform over 1..9;
//                     data_source "verl_cpp/digit_sums", ground truth a + b, extra_info {"split", "index", "a", "b"}.
//                     Scored by verl's GSM8K scorer in its flexible mode (the last number of the response). The task
//                     a real 135M model (SmolLM2-135M-Instruct) gets right often enough for GRPO to have signal.
//
// Generation is deterministic in (task, split, size, seed) on every platform (mt19937_64 with our own bounded draws),
// and the two splits of one seed are independent streams.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/data/example.h"

namespace verl {

inline constexpr char kRepeatLetterTask[] = "repeat_letter";
inline constexpr char kGsm8kSyntheticTask[] = "gsm8k_synthetic";
inline constexpr char kDigitSumsTask[] = "digit_sums";

// The task names MakeSyntheticTask accepts.
std::vector<std::string> SyntheticTaskNames();

// Returns `size` examples of `task` for `split` (written into extra_info; any name, usually "train" or "test"), rows
// numbered 0..size-1. InvalidArgument for an unknown task (listing the known ones) or size <= 0.
absl::StatusOr<std::vector<Example>> MakeSyntheticTask(const std::string& task, const std::string& split, int64_t size,
                                                       uint64_t seed);

}  // namespace verl

#endif  // VERL_COMMON_DATA_SYNTHETIC_TASKS_H_
