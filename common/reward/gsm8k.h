#ifndef VERL_COMMON_REWARD_GSM8K_H_
#define VERL_COMMON_REWARD_GSM8K_H_

// verl's GSM8K rule scorer (verl/utils/reward_score/gsm8k.py), reproduced exactly:
//
// extract_solution keeps only the last 300 characters (Unicode code points, as Python counts) of the response, then
//   strict:   all matches of `#### (\-?[0-9\.\,]+)`; the last one's group, with ',' and '$' removed; none if no match.
//   flexible: all matches of `(\-?[0-9\.\,]+)`; the last that is not "" or "." (when every match is ".", the first
//             match, which is what verl's loop leaves behind); none if no match. Commas are NOT removed here,
//             as in verl.
// compute_score: 0 when nothing was extracted, `score` when the extracted text equals ground_truth exactly, else
// `format_score`.
//
// Thread-safe: the compiled patterns are shared read-only.

#include <optional>
#include <string>

namespace verl {

enum class Gsm8kMethod { kStrict, kFlexible };

// verl's extract_solution(solution_str, method).
std::optional<std::string> Gsm8kExtractSolution(const std::string& solution_str,
                                                Gsm8kMethod method = Gsm8kMethod::kStrict);

// verl's compute_score(solution_str, ground_truth, method, format_score, score).
double Gsm8kComputeScore(const std::string& solution_str, const std::string& ground_truth,
                         Gsm8kMethod method = Gsm8kMethod::kStrict, double format_score = 0.0, double score = 1.0);

}  // namespace verl

#endif  // VERL_COMMON_REWARD_GSM8K_H_
