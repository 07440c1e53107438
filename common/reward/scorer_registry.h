#ifndef VERL_COMMON_REWARD_SCORER_REGISTRY_H_
#define VERL_COMMON_REWARD_SCORER_REGISTRY_H_

// Rule-based reward scorers keyed by a dataset row's data_source, like verl's default_compute_score.
//
// Built in (see common/reward/README.md):
//   "openai/gsm8k"             gsm8k.h, strict extraction, score 1 / format score 0 (verl's defaults)
//   "verl_cpp/digit_sums"      gsm8k.h, flexible extraction (the last number), score 1 / format score 0
//   "verl_cpp/repeat_letter"   repeat_letter.h

#include <functional>
#include <map>
#include <shared_mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace verl {

// Scores one response. `extra_info_json` is the row's extra_info as a JSON object string ("{}" when none).
using ScoreFunction = std::function<absl::StatusOr<double>(
    const std::string& solution_str, const std::string& ground_truth, const std::string& extra_info_json)>;

// Maps data_source -> ScoreFunction. Thread-safe: Register and Score may be called concurrently.
class ScorerRegistry {
 public:
  // An empty registry (tests, or a job that wants only its own scorers).
  ScorerRegistry() = default;

  // The process-wide registry, holding the built-in scorers. Never destroyed.
  static ScorerRegistry& Default();

  // Adds a scorer. AlreadyExists when `data_source` is taken; InvalidArgument for an empty name or null function.
  absl::Status Register(const std::string& data_source, ScoreFunction score);

  // Runs the scorer of `data_source`. NotFound naming data_source and listing the known ones when none is
  // registered; otherwise whatever the scorer returns (errors are prefixed with the data_source).
  absl::StatusOr<double> Score(const std::string& data_source, const std::string& solution_str,
                               const std::string& ground_truth, const std::string& extra_info_json) const;

  // Registered data sources, sorted.
  std::vector<std::string> DataSources() const;

 private:
  mutable std::shared_mutex mu_;
  std::map<std::string, ScoreFunction> scorers_;  // guarded by mu_
};

// ScorerRegistry::Default().Score(...): verl's default_compute_score.
absl::StatusOr<double> ComputeScore(const std::string& data_source, const std::string& solution_str,
                                    const std::string& ground_truth, const std::string& extra_info_json = "{}");

}  // namespace verl

#endif  // VERL_COMMON_REWARD_SCORER_REGISTRY_H_
