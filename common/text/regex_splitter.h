#ifndef VERL_COMMON_TEXT_REGEX_SPLITTER_H_
#define VERL_COMMON_TEXT_REGEX_SPLITTER_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace verl {

// Qwen2/Qwen2.5's pre-tokenizer split pattern (HF `Split` with behavior Isolated).
inline constexpr std::string_view kQwen2SplitPattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// GPT-2's pattern, used by HF's ByteLevel pre-tokenizer when use_regex is true.
inline constexpr std::string_view kGpt2SplitPattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Splits text with a PCRE2 regex compiled in UTF + UCP mode (JIT-compiled when available). Invalid UTF-8 in the
// subject is tolerated (PCRE2_MATCH_INVALID_UTF): it never matches a character class, so it lands between matches.
//
// Thread-safety: Split may be called concurrently; the compiled pattern is immutable and per-thread match state is
// kept in thread-local storage. Copies share the compiled pattern.
class RegexSplitter {
 public:
  enum class Behavior {
    kIsolated,  // Matches and the text between them all become pieces.
    kRemoved,   // Only the text between matches becomes pieces.
  };

  // Compiles `pattern` (a regex, or a literal string when `literal`). kInvalidArgument names the offset and
  // PCRE2's message when it does not compile.
  static absl::StatusOr<RegexSplitter> Create(std::string_view pattern, bool literal = false);

  // Appends the non-empty pieces of `text` to `out`; the pieces are views into `text`.
  void Split(std::string_view text, Behavior behavior, std::vector<std::string_view>* out) const;

  class Code;

 private:
  explicit RegexSplitter(std::shared_ptr<const Code> code) : code_(std::move(code)) {}
  std::shared_ptr<const Code> code_;
};

}  // namespace verl

#endif  // VERL_COMMON_TEXT_REGEX_SPLITTER_H_
