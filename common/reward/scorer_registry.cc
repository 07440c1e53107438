#include "common/reward/scorer_registry.h"

#include <mutex>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/reward/gsm8k.h"
#include "common/reward/repeat_letter.h"
#include "common/status/status_macros.h"

namespace verl {
namespace {

constexpr char kGsm8kDataSource[] = "openai/gsm8k";
constexpr char kDigitSumsDataSource[] = "verl_cpp/digit_sums";

void RegisterBuiltins(ScorerRegistry& registry) {
  // Registration into a fresh registry cannot collide, so the statuses are necessarily OK.
  registry
      .Register(kGsm8kDataSource,
                [](const std::string& solution, const std::string& ground_truth,
                   const std::string& /*extra_info_json*/) -> absl::StatusOr<double> {
                  return Gsm8kComputeScore(solution, ground_truth);
                })
      .IgnoreError();
  registry
      .Register(kDigitSumsDataSource,
                [](const std::string& solution, const std::string& ground_truth,
                   const std::string& /*extra_info_json*/) -> absl::StatusOr<double> {
                  return Gsm8kComputeScore(solution, ground_truth, Gsm8kMethod::kFlexible);
                })
      .IgnoreError();
  registry
      .Register(kRepeatLetterDataSource,
                [](const std::string& solution, const std::string& ground_truth,
                   const std::string& /*extra_info_json*/) { return RepeatLetterScore(solution, ground_truth); })
      .IgnoreError();
}

}  // namespace

ScorerRegistry& ScorerRegistry::Default() {
  static ScorerRegistry* registry = [] {
    auto* r = new ScorerRegistry();
    RegisterBuiltins(*r);
    return r;
  }();
  return *registry;
}

absl::Status ScorerRegistry::Register(const std::string& data_source, ScoreFunction score) {
  if (data_source.empty()) return absl::InvalidArgumentError("reward scorer: data_source must not be empty");
  if (!score) return absl::InvalidArgumentError(absl::StrCat("reward scorer '", data_source, "': null function"));
  std::unique_lock lock(mu_);
  if (!scorers_.emplace(data_source, std::move(score)).second) {
    return absl::AlreadyExistsError(absl::StrCat("reward scorer for data_source '", data_source, "' already registered"));
  }
  return absl::OkStatus();
}

absl::StatusOr<double> ScorerRegistry::Score(const std::string& data_source, const std::string& solution_str,
                                             const std::string& ground_truth,
                                             const std::string& extra_info_json) const {
  ScoreFunction score;
  {
    std::shared_lock lock(mu_);
    auto it = scorers_.find(data_source);
    if (it == scorers_.end()) {
      std::vector<std::string> known;
      for (const auto& [name, fn] : scorers_) known.push_back(name);
      return absl::NotFoundError(absl::StrCat("no reward scorer for data_source '", data_source,
                                              "' (known: ", absl::StrJoin(known, ", "), ")"));
    }
    score = it->second;  // copied so a slow scorer does not hold the lock
  }
  absl::StatusOr<double> result = score(solution_str, ground_truth, extra_info_json);
  if (!result.ok()) return Annotate(result.status(), absl::StrCat("reward scorer '", data_source, "'"));
  return result;
}

std::vector<std::string> ScorerRegistry::DataSources() const {
  std::shared_lock lock(mu_);
  std::vector<std::string> names;
  for (const auto& [name, fn] : scorers_) names.push_back(name);
  return names;
}

absl::StatusOr<double> ComputeScore(const std::string& data_source, const std::string& solution_str,
                                    const std::string& ground_truth, const std::string& extra_info_json) {
  return ScorerRegistry::Default().Score(data_source, solution_str, ground_truth, extra_info_json);
}

}  // namespace verl
