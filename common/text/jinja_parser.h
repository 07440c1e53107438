#ifndef VERL_COMMON_TEXT_JINJA_PARSER_H_
#define VERL_COMMON_TEXT_JINJA_PARSER_H_

#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/text/jinja_ast.h"
#include "common/text/jinja_lexer.h"

namespace verl {

// Builds the syntax tree of a template from its tokens (JinjaLexer), following Jinja2's grammar and operator
// precedence: conditional expressions, or, and, not, comparisons (== != < > <= >= in, not in), + -, ~, * / // %,
// **, unary - +, then postfix .attr, [item], [a:b:c], calls, | filters and `is` tests. Statements: if/elif/else,
// for (with targets, an `if` filter and else), set (names, tuples, ns.attr, block form), macro, break, continue,
// generation (rendered as its body), raw (handled by the lexer). Other statements (include, extends, import, block,
// call, filter, with, recursive loops) are kUnimplemented; syntax errors are kInvalidArgument. Both name
// "source_name:line:column".
class JinjaParser {
 public:
  static absl::StatusOr<jinja::NodeList> Parse(const std::vector<JinjaToken>& tokens, std::string_view source_name);
};

}  // namespace verl

#endif  // VERL_COMMON_TEXT_JINJA_PARSER_H_
