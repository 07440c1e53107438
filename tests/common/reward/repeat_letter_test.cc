#include "common/reward/repeat_letter.h"

#include <catch2/catch.hpp>

namespace verl {
namespace {

double Score(const std::string& response, const std::string& truth) { return RepeatLetterScore(response, truth).value(); }

TEST_CASE("repeat_letter scores by hand") {
  CHECK(Score("aaaaaaaa", "a") == 1.0);
  CHECK(Score("aaaaaaaaaaaa", "a") == 1.0);  // only the first 8 characters count
  CHECK(Score("abab", "a") == Approx((1 + 0.25 + 1 + 0.25) / 8.0));
  CHECK(Score("bbbbbbbb", "a") == Approx(0.25));
  CHECK(Score("dcba", "c") == Approx((0.25 + 1 + 0.25 + 0.25) / 8.0));
  CHECK(Score("xyz aaaa", "a") == Approx(0.5));
  CHECK(Score("AAAAAAAA", "a") == 0.0);  // case-sensitive
  CHECK(Score("", "d") == 0.0);
  CHECK(Score(" aaaaaaaa", "a") == Approx(7.0 / 8.0));  // no stripping
}

TEST_CASE("repeat_letter rejects a ground truth outside abcd") {
  CHECK(RepeatLetterScore("a", "e").status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(RepeatLetterScore("a", "ab").status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(RepeatLetterScore("a", "").status().code() == absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace verl
