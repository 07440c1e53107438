#define PCRE2_CODE_UNIT_WIDTH 8
#include "common/reward/gsm8k.h"

#include <pcre2.h>

#include <cstddef>
#include <string_view>
#include <vector>

namespace verl {
namespace {

// verl only looks at the tail of long responses (_SOLUTION_CLIP_CHARS).
constexpr size_t kSolutionClipChars = 300;

// A compiled PCRE2 pattern. The patterns are ASCII-only and never match a byte of a multi-byte UTF-8 sequence, so
// byte-mode matching finds exactly the matches Python's `re` finds on the decoded string.
class Pattern {
 public:
  explicit Pattern(const char* pattern) {
    int error = 0;
    PCRE2_SIZE offset = 0;
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern), PCRE2_ZERO_TERMINATED, 0, &error, &offset, nullptr);
  }
  ~Pattern() { pcre2_code_free(code_); }
  Pattern(const Pattern&) = delete;
  Pattern& operator=(const Pattern&) = delete;

  // Like Python's re.findall for a pattern with one group: group 1 of every non-overlapping match, left to right.
  // The patterns here cannot match the empty string, so the search simply resumes at each match's end.
  std::vector<std::string_view> FindAllGroup1(std::string_view text) const {
    std::vector<std::string_view> out;
    if (code_ == nullptr) return out;
    pcre2_match_data* match = pcre2_match_data_create_from_pattern(code_, nullptr);
    if (match == nullptr) return out;
    PCRE2_SIZE start = 0;
    while (start <= text.size()) {
      const int rc = pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), start, 0, match,
                                 nullptr);
      if (rc < 2) break;
      const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match);
      out.push_back(text.substr(ovector[2], ovector[3] - ovector[2]));
      if (ovector[1] <= start) break;  // an empty match would loop forever; cannot happen with these patterns
      start = ovector[1];
    }
    pcre2_match_data_free(match);
    return out;
  }

 private:
  pcre2_code* code_ = nullptr;
};

const Pattern& StrictPattern() {
  static const Pattern pattern(R"(#### (\-?[0-9\.\,]+))");
  return pattern;
}

const Pattern& FlexiblePattern() {
  static const Pattern pattern(R"((\-?[0-9\.\,]+))");
  return pattern;
}

// The last `n` code points of UTF-8 `s`, i.e. Python's s[-n:] on the decoded string. Code points are counted by
// their lead bytes; in invalid UTF-8 a stray continuation byte goes with the code point before it.
std::string_view LastCodePoints(std::string_view s, size_t n) {
  size_t count = 0;
  for (size_t i = s.size(); i > 0; --i) {
    if ((static_cast<unsigned char>(s[i - 1]) & 0xC0) != 0x80 && ++count == n) return s.substr(i - 1);
  }
  return s;
}

std::string RemoveChars(std::string_view s, std::string_view chars) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    if (chars.find(c) == std::string_view::npos) out.push_back(c);
  }
  return out;
}

}  // namespace

std::optional<std::string> Gsm8kExtractSolution(const std::string& solution_str, Gsm8kMethod method) {
  const std::string_view text = LastCodePoints(solution_str, kSolutionClipChars);
  if (method == Gsm8kMethod::kStrict) {
    const std::vector<std::string_view> solutions = StrictPattern().FindAllGroup1(text);
    if (solutions.empty()) return std::nullopt;
    return RemoveChars(solutions.back(), ",$");
  }
  const std::vector<std::string_view> answers = FlexiblePattern().FindAllGroup1(text);
  if (answers.empty()) return std::nullopt;
  // verl: `for final_answer in reversed(answer): if final_answer not in ["", "."]: break` -- when nothing qualifies
  // the loop variable is left at the first element.
  for (auto it = answers.rbegin(); it != answers.rend(); ++it) {
    if (!it->empty() && *it != ".") return std::string(*it);
  }
  return std::string(answers.front());
}

double Gsm8kComputeScore(const std::string& solution_str, const std::string& ground_truth, Gsm8kMethod method,
                         double format_score, double score) {
  const std::optional<std::string> answer = Gsm8kExtractSolution(solution_str, method);
  if (!answer.has_value()) return 0.0;
  return *answer == ground_truth ? score : format_score;
}

}  // namespace verl
