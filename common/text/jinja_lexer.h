#ifndef VERL_COMMON_TEXT_JINJA_LEXER_H_
#define VERL_COMMON_TEXT_JINJA_LEXER_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace verl {

// One token of a Jinja template. Data tokens hold the literal text between tags after whitespace control; string
// tokens hold the decoded value of the literal (escapes undone); names, numbers and operators hold their text.
struct JinjaToken {
  enum class Type {
    kData,
    kVariableBegin,  // {{
    kVariableEnd,    // }}
    kBlockBegin,     // {%
    kBlockEnd,       // %}
    kName,
    kString,
    kInt,
    kFloat,
    kOperator,
    kEnd,  // end of the template
  };
  Type type;
  std::string text;
  int line = 1;    // 1-based, of the token's first character
  int column = 1;  // 1-based, in bytes
};

// Splits a template into tokens the way Jinja2 does with the options transformers uses for chat templates:
// trim_blocks (the first newline after a block or comment tag is dropped), lstrip_blocks (spaces and tabs from the
// start of a line up to a block or comment tag are dropped), "-" / "+" whitespace control on tags, comments
// removed, {% raw %} kept as data, newlines normalized to "\n" and one trailing newline of the source dropped
// (keep_trailing_newline=False). String literals are decoded like Python's (\n, \t, \\, \', \xNN, \uNNNN, ...;
// unknown escapes keep their backslash).
class JinjaLexer {
 public:
  // Errors (an unterminated tag, comment or string, an unexpected character) are kInvalidArgument naming
  // "source_name:line:column".
  static absl::StatusOr<std::vector<JinjaToken>> Tokenize(std::string_view source, std::string_view source_name);
};

}  // namespace verl

#endif  // VERL_COMMON_TEXT_JINJA_LEXER_H_
