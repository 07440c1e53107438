#ifndef VERL_COMMON_TEXT_JINJA_TEMPLATE_H_
#define VERL_COMMON_TEXT_JINJA_TEMPLATE_H_

#include <ctime>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "common/text/jinja_value.h"

namespace verl {

namespace jinja {
struct Program;
}  // namespace jinja

// Options of one render.
struct JinjaRenderOptions {
  // The local time strftime_now(format) formats. Default (empty): the system clock in the local time zone, as
  // transformers' datetime.now(). Tests inject a fixed time.
  std::function<std::tm()> now;
};

// A Jinja2 template, in the subset HuggingFace chat templates use, rendered as transformers renders them
// (ImmutableSandboxedEnvironment with trim_blocks=True, lstrip_blocks=True and the loopcontrols extension; its
// tojson filter, raise_exception(message) and strftime_now(format) globals; {% generation %} blocks render their
// body).
//
// Supported:
//   - {{ }}, {% %}, {# #}, "-" and "+" whitespace control, trim_blocks / lstrip_blocks, {% raw %};
//   - if / elif / else; for (one or several targets, `if` filter, else, break, continue, loop.index, index0,
//     revindex, revindex0, first, last, length, previtem, nextitem); set (name, tuple, ns.attr, block form);
//     macro (positional, keyword and default arguments); generation;
//   - literals (strings with Python escapes, ints, floats, true/false/none in either case, lists, tuples, dicts),
//     names, .attr, [item], slices ([1:], [::-1]), calls with keyword arguments, if-else expressions, and / or /
//     not, == != < > <= >= in / not in (chained), + - * / // % **, ~, unary - +;
//   - filters: abs attr capitalize count d default dictsort e escape first float indent int items join last length
//     list lower map max min reject rejectattr replace reverse round safe select selectattr sort string sum title
//     tojson trim unique upper wordcount;
//   - tests: boolean callable defined divisibleby eq equalto escaped even false float ge greaterthan gt in integer
//     iterable le lessthan lower lt mapping ne none number odd sameas sequence string true undefined upper;
//   - globals: namespace(...), range(...), dict(...), raise_exception(msg), strftime_now(fmt); str methods
//     (strip lstrip rstrip split startswith endswith upper lower title capitalize replace find count join
//     isdigit isspace isalpha isalnum islower isupper) and dict methods (items keys values get).
// Not supported: include / extends / import / block / call / filter / with tags, recursive loops, loop.cycle,
// *args / **kwargs, % string formatting, str.format, and the filters and tests not listed (an unknown one is an
// error when parsing). Undefined values behave like Jinja's default Undefined: they print as "", are false and
// iterate as empty, but attribute access, arithmetic and calls on them fail.
//
// A template is immutable after Parse; copies share it; Render may be called from several threads at once.
class JinjaTemplate {
 public:
  // Parses `source`. `source_name` (e.g. "/models/x/tokenizer_config.json") starts every error message, as
  // "source_name:line:column: problem". Syntax errors are kInvalidArgument, unsupported features kUnimplemented.
  static absl::StatusOr<JinjaTemplate> Parse(std::string_view source, std::string source_name);

  // Renders with `variables` (name -> value) as the template's context. Errors (raise_exception, an operation on
  // an undefined value, a type error) are kInvalidArgument naming source_name, line and column.
  absl::StatusOr<std::string> Render(const JinjaValue::Dict& variables, const JinjaRenderOptions& options = {}) const;

  const std::string& source_name() const;

 private:
  explicit JinjaTemplate(std::shared_ptr<const jinja::Program> program) : program_(std::move(program)) {}
  std::shared_ptr<const jinja::Program> program_;
};

}  // namespace verl

#endif  // VERL_COMMON_TEXT_JINJA_TEMPLATE_H_
