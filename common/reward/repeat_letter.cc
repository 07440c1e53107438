#include "common/reward/repeat_letter.h"

#include <algorithm>
#include <string_view>

#include "absl/strings/str_cat.h"

namespace verl {
namespace {

constexpr std::string_view kLetters = "abcd";
constexpr size_t kSlots = 8;

}  // namespace

absl::StatusOr<double> RepeatLetterScore(const std::string& response, const std::string& ground_truth) {
  if (ground_truth.size() != 1 || kLetters.find(ground_truth[0]) == std::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat("repeat_letter: ground truth must be one of a, b, c, d; got '",
                                                   ground_truth, "'"));
  }
  double total = 0.0;
  for (size_t i = 0; i < std::min(response.size(), kSlots); ++i) {
    if (response[i] == ground_truth[0]) {
      total += 1.0;
    } else if (kLetters.find(response[i]) != std::string_view::npos) {
      total += 0.25;
    }
  }
  return total / static_cast<double>(kSlots);
}

}  // namespace verl
