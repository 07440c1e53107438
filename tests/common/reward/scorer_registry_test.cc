#include "common/reward/scorer_registry.h"

#include <catch2/catch.hpp>
#include <string>

namespace verl {
namespace {

TEST_CASE("Built-in scorers are reachable through ComputeScore") {
  CHECK(ComputeScore("openai/gsm8k", "so 3 + 4 = 7\n#### 7", "7", "{}").value() == 1.0);
  CHECK(ComputeScore("openai/gsm8k", "the answer is 7", "7", "{}").value() == 0.0);  // strict, like verl
  // digit_sums: verl's flexible mode, the last number counts.
  CHECK(ComputeScore("verl_cpp/digit_sums", "3 + 4 = 7", "7", "{}").value() == 1.0);
  CHECK(ComputeScore("verl_cpp/digit_sums", "3 + 4 = 7, or 8", "7", "{}").value() == 0.0);
  CHECK(ComputeScore("verl_cpp/digit_sums", "seven", "7", "{}").value() == 0.0);
  // verl's flexible regex keeps a closing period on the number: "7." is not "7".
  CHECK(ComputeScore("verl_cpp/digit_sums", "3 + 4 = 7.", "7", "{}").value() == 0.0);
  CHECK(ComputeScore("verl_cpp/repeat_letter", "aaaaaaaa", "a", "{}").value() == 1.0);
  CHECK(ComputeScore("verl_cpp/repeat_letter", "abab", "a").value() == Approx(0.3125));
}

TEST_CASE("Unknown data_source is NotFound naming it and the known ones") {
  auto result = ComputeScore("lighteval/MATH", "x", "y", "{}");
  REQUIRE(result.status().code() == absl::StatusCode::kNotFound);
  const std::string message(result.status().message());
  CHECK_THAT(message, Catch::Contains("'lighteval/MATH'") && Catch::Contains("openai/gsm8k") &&
                          Catch::Contains("verl_cpp/repeat_letter"));
}

TEST_CASE("Scorer errors are prefixed with the data_source") {
  auto result = ComputeScore("verl_cpp/repeat_letter", "a", "z", "{}");
  REQUIRE(result.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(result.status().message()), Catch::StartsWith("reward scorer 'verl_cpp/repeat_letter': "));
}

TEST_CASE("A registry accepts custom scorers once") {
  ScorerRegistry registry;
  CHECK(registry.DataSources().empty());
  auto length = [](const std::string& s, const std::string&, const std::string& extra) -> absl::StatusOr<double> {
    return static_cast<double>(s.size() + extra.size());
  };
  REQUIRE(registry.Register("my/length", length).ok());
  CHECK(registry.Register("my/length", length).code() == absl::StatusCode::kAlreadyExists);
  CHECK(registry.Register("", length).code() == absl::StatusCode::kInvalidArgument);
  CHECK(registry.Register("my/null", nullptr).code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(registry.Register("a/first", length).ok());
  CHECK(registry.DataSources() == std::vector<std::string>{"a/first", "my/length"});
  CHECK(registry.Score("my/length", "abc", "", "{}").value() == 5.0);
  CHECK(registry.Score("openai/gsm8k", "", "", "{}").status().code() == absl::StatusCode::kNotFound);
  CHECK(ScorerRegistry::Default().DataSources() ==
        std::vector<std::string>{"openai/gsm8k", "verl_cpp/digit_sums", "verl_cpp/repeat_letter"});
}

}  // namespace
}  // namespace verl
