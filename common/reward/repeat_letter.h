#ifndef VERL_COMMON_REWARD_REPEAT_LETTER_H_
#define VERL_COMMON_REWARD_REPEAT_LETTER_H_

// Scorer of the synthetic quickstart task "verl_cpp/repeat_letter" (common/data/synthetic_tasks.h): the prompt asks
// the model to repeat one letter of "abcd"; the ground truth is that letter.
//
// The score is the mean over 8 slots, one per byte of the response's first 8 bytes (missing bytes score 0):
// 1.0 for the ground-truth letter, 0.25 for another letter of "abcd", 0 otherwise. Matching is case-sensitive and
// the response is taken as is (no whitespace stripping). The reward is dense on purpose, so that a randomly
// initialised tiny model gets some signal from its first step. Thread-safe (pure function).

#include <string>

#include "absl/status/statusor.h"

namespace verl {

inline constexpr char kRepeatLetterDataSource[] = "verl_cpp/repeat_letter";

// Score in [0, 1]. InvalidArgument when ground_truth is not exactly one of "a", "b", "c", "d".
absl::StatusOr<double> RepeatLetterScore(const std::string& response, const std::string& ground_truth);

}  // namespace verl

#endif  // VERL_COMMON_REWARD_REPEAT_LETTER_H_
