#include "common/text/regex_splitter.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "absl/strings/str_cat.h"

namespace verl {

class RegexSplitter::Code {
 public:
  explicit Code(pcre2_code* code) : code_(code) {}
  ~Code() { pcre2_code_free(code_); }
  Code(const Code&) = delete;
  Code& operator=(const Code&) = delete;
  const pcre2_code* get() const { return code_; }

 private:
  pcre2_code* code_;
};

namespace {

// Per-thread match state: one match-data block (only the whole match is read) and a JIT stack larger than PCRE2's
// 32 KiB default, so long whitespace runs do not hit the JIT stack limit.
struct ThreadMatchState {
  pcre2_match_data* match_data = pcre2_match_data_create(1, nullptr);
  pcre2_jit_stack* jit_stack = pcre2_jit_stack_create(32 * 1024, 1024 * 1024, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  ThreadMatchState() {
    if (jit_stack != nullptr && context != nullptr) pcre2_jit_stack_assign(context, nullptr, jit_stack);
  }
  ~ThreadMatchState() {
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(jit_stack);
    pcre2_match_data_free(match_data);
  }
  ThreadMatchState(const ThreadMatchState&) = delete;
  ThreadMatchState& operator=(const ThreadMatchState&) = delete;
};

ThreadMatchState& MatchState() {
  thread_local ThreadMatchState state;
  return state;
}

// Length of the UTF-8 character starting at s[pos] (1 for a stray byte), used to step past empty matches.
size_t CharLength(std::string_view s, size_t pos) {
  const uint8_t b = static_cast<uint8_t>(s[pos]);
  size_t len = b < 0xC0 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
  return std::min(len, s.size() - pos);
}

}  // namespace

absl::StatusOr<RegexSplitter> RegexSplitter::Create(std::string_view pattern, bool literal) {
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  uint32_t options = PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF;
  if (literal) options |= PCRE2_LITERAL;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options, &error_code,
                                   &error_offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error_code, message, sizeof(message));
    return absl::InvalidArgumentError(absl::StrCat("regex does not compile at offset ", error_offset, ": ",
                                                   reinterpret_cast<const char*>(message)));
  }
  // JIT is an optimization only: when it is unavailable pcre2_match interprets the pattern.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  return RegexSplitter(std::make_shared<const Code>(code));
}

void RegexSplitter::Split(std::string_view text, Behavior behavior, std::vector<std::string_view>* out) const {
  ThreadMatchState& state = MatchState();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t emitted = 0;  // Start of the text not yet emitted.
  size_t offset = 0;   // Where the next search starts.
  while (offset < text.size()) {
    const int rc = pcre2_match(code_->get(), subject, text.size(), offset, 0, state.match_data, state.context);
    if (rc < 0) break;  // PCRE2_ERROR_NOMATCH, or an error: the rest is one gap.
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(state.match_data);
    const size_t start = ovector[0];
    const size_t end = ovector[1];
    if (end == start) {  // Empty match: nothing to emit; step one character.
      offset = start + CharLength(text, start);
      continue;
    }
    if (start > emitted) out->push_back(text.substr(emitted, start - emitted));
    if (behavior == Behavior::kIsolated) out->push_back(text.substr(start, end - start));
    emitted = end;
    offset = end;
  }
  if (emitted < text.size()) out->push_back(text.substr(emitted));
}

}  // namespace verl
