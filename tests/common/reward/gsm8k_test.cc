#include "common/reward/gsm8k.h"

#include <catch2/catch.hpp>
#include <optional>
#include <string>

namespace verl {
namespace {

// Expected values were checked against verl/utils/reward_score/gsm8k.py running under CPython.
std::optional<std::string> Strict(const std::string& s) { return Gsm8kExtractSolution(s, Gsm8kMethod::kStrict); }
std::optional<std::string> Flexible(const std::string& s) { return Gsm8kExtractSolution(s, Gsm8kMethod::kFlexible); }

std::string Repeat(const std::string& unit, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += unit;
  return out;
}

TEST_CASE("GSM8K strict extraction hits '#### N'") {
  CHECK(Strict("The answer is 3+4=7.\n#### 7") == "7");
  CHECK(Gsm8kComputeScore("The answer is 3+4=7.\n#### 7", "7") == 1.0);
  // The last of several marked answers wins.
  CHECK(Strict("#### 4\nWait, recount.\n#### 6") == "6");
  // Trailing dots are part of the match, as in verl.
  CHECK(Strict("#### 7.") == "7.");
}

TEST_CASE("GSM8K strict miss, flexible hit") {
  const std::string response = "so the total is 72 apples.";
  CHECK(Strict(response) == std::nullopt);
  CHECK(Flexible(response) == "72");  // the final "." is skipped
  CHECK(Gsm8kComputeScore(response, "72") == 0.0);
  CHECK(Gsm8kComputeScore(response, "72", Gsm8kMethod::kFlexible) == 1.0);
}

TEST_CASE("GSM8K removes commas and dollars in strict mode only") {
  CHECK(Strict("#### 1,234") == "1234");
  CHECK(Flexible("#### 1,234") == "1,234");
  CHECK(Strict("costs $1,234 total") == std::nullopt);
  CHECK(Flexible("costs $1,234 total") == "1,234");
  // "$" cannot follow "#### " in the strict pattern.
  CHECK(Strict("#### $5") == std::nullopt);
  CHECK(Flexible("#### $5") == "5");
  CHECK(Flexible("1.5, 2.5,") == "2.5,");
}

TEST_CASE("GSM8K looks only at the last 300 characters") {
  const std::string early_answer = "#### 5" + Repeat("x", 400);
  CHECK(Strict(early_answer) == std::nullopt);
  CHECK(Flexible(early_answer) == std::nullopt);
  CHECK(Gsm8kComputeScore(early_answer, "5") == 0.0);
  // Characters are code points, not bytes: "é" is two bytes but one character.
  CHECK(Strict("#### 5" + Repeat("é", 294)) == "5");             // 300 characters: all kept
  CHECK(Strict("#### 5" + Repeat("é", 295)) == std::nullopt);    // 301: the first '#' is cut
  CHECK(Flexible("#### 5" + Repeat("é", 295)) == "5");
}

TEST_CASE("GSM8K negative numbers") {
  CHECK(Strict("#### -3") == "-3");
  CHECK(Gsm8kComputeScore("#### -3", "-3") == 1.0);
  CHECK(Flexible("temperature fell to -12 degrees") == "-12");
  CHECK(Flexible("x-y 3--4") == "-4");
}

TEST_CASE("GSM8K flexible ignores a lone '.'") {
  CHECK(Flexible("I got 5. Then .") == "5.");
  // When every match is ".", verl's loop leaves the first one.
  CHECK(Flexible("only . here") == ".");
  CHECK(Flexible("no numbers") == std::nullopt);
}

TEST_CASE("GSM8K scores: wrong answer gets format_score, none gets 0") {
  CHECK(Gsm8kComputeScore("#### 8", "7") == 0.0);
  CHECK(Gsm8kComputeScore("#### 8", "7", Gsm8kMethod::kStrict, /*format_score=*/0.1) == 0.1);
  CHECK(Gsm8kComputeScore("no answer", "7", Gsm8kMethod::kStrict, /*format_score=*/0.1) == 0.0);
  CHECK(Gsm8kComputeScore("#### 7", "7", Gsm8kMethod::kStrict, 0.0, /*score=*/2.0) == 2.0);
}

}  // namespace
}  // namespace verl
