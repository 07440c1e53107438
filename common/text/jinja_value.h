#ifndef VERL_COMMON_TEXT_JINJA_VALUE_H_
#define VERL_COMMON_TEXT_JINJA_VALUE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"

namespace verl {

class JinjaValue;

// Positional and keyword arguments of a call from a template: f(a, b, key=c).
struct JinjaCallArgs {
  std::vector<JinjaValue> positional;
  std::vector<std::pair<std::string, JinjaValue>> keyword;
};

// A value of the Jinja subset (common/text/jinja_template.h), with Python semantics where templates can observe
// them: truthiness, str() (None, True, 1.5, ['a', 1], {'k': 'v'}), ==, <, and json.dumps.
//
// Lists and dicts are immutable and shared on copy (as in transformers' ImmutableSandboxedEnvironment, where
// templates cannot mutate them). Dicts keep insertion order and have string keys only. A namespace() is the one
// mutable object: copies share it, so `{% set ns.x = 1 %}` inside a loop is seen after it. Undefined carries a
// description used in error messages ("'foo' is undefined").
class JinjaValue {
 public:
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kNamespace, kCallable };
  using List = std::vector<JinjaValue>;
  using Dict = std::vector<std::pair<std::string, JinjaValue>>;
  using Function = std::function<absl::StatusOr<JinjaValue>(JinjaCallArgs&)>;

  // Undefined, described as "'name' is undefined".
  JinjaValue() : JinjaValue(Undefined("")) {}
  static JinjaValue Undefined(std::string description);
  static JinjaValue None();
  static JinjaValue Bool(bool b);
  static JinjaValue Int(int64_t i);
  static JinjaValue Float(double d);
  static JinjaValue String(std::string s);
  static JinjaValue MakeList(List items);
  static JinjaValue MakeDict(Dict items);
  static JinjaValue MakeNamespace(Dict items);
  // `name` is how errors and str() name the function.
  static JinjaValue Callable(std::string name, Function fn);

  // Converts parsed JSON text (objects, arrays, strings, numbers, true/false/null). An error names the problem.
  static absl::StatusOr<JinjaValue> FromJson(std::string_view json_text);

  Kind kind() const;
  bool is_undefined() const { return kind() == Kind::kUndefined; }
  bool is_none() const { return kind() == Kind::kNone; }
  bool is_string() const { return kind() == Kind::kString; }
  bool is_number() const { return kind() == Kind::kInt || kind() == Kind::kFloat || kind() == Kind::kBool; }
  bool is_list() const { return kind() == Kind::kList; }
  bool is_dict() const { return kind() == Kind::kDict; }

  // Accessors; each requires the matching kind (checked by the caller).
  bool bool_value() const { return std::get<bool>(data_); }
  int64_t int_value() const { return std::get<int64_t>(data_); }
  double float_value() const { return std::get<double>(data_); }
  // Int, float or bool as a double.
  double AsDouble() const;
  const std::string& string_value() const { return std::get<std::string>(data_); }
  const List& list() const { return *std::get<std::shared_ptr<const List>>(data_); }
  const Dict& dict() const { return *std::get<std::shared_ptr<const Dict>>(data_); }
  // The namespace's attributes; shared by all copies of this value.
  Dict& namespace_attrs() const { return std::get<NamespacePtr>(data_).ns->attrs; }
  const std::string& callable_name() const { return std::get<CallablePtr>(data_)->name; }
  const Function& callable_fn() const { return std::get<CallablePtr>(data_)->fn; }
  const std::string& undefined_description() const { return std::get<UndefinedTag>(data_).description; }

  // Dict (or namespace) lookup by key; null when absent or not a dict.
  const JinjaValue* Find(std::string_view key) const;

  // Python truthiness: undefined, None, False, 0, 0.0, "", [], {} are false.
  bool Truthy() const;
  // Python str(): strings as is, undefined as "", None, True, 3, 2.5, 1e+16, ['a', 1], {'k': None}.
  std::string ToString() const;
  // Python repr(): strings quoted ('a', "it's"), everything else as ToString.
  std::string Repr() const;
  // Python ==: numbers across int/float/bool, lists and dicts element-wise; undefined equals only undefined.
  bool Equals(const JinjaValue& other) const;
  // Python <, for two numbers, two strings or two lists; otherwise an error naming both types.
  static absl::StatusOr<bool> Less(const JinjaValue& a, const JinjaValue& b);
  // The Python type name errors use: "str", "int", "list", "dict", "NoneType", "Undefined", ...
  std::string TypeName() const;

 private:
  struct UndefinedTag {
    std::string description;
  };
  struct Namespace {
    Dict attrs;
  };
  struct NamespacePtr {
    std::shared_ptr<Namespace> ns;
  };
  struct CallableImpl {
    std::string name;
    Function fn;
  };
  using CallablePtr = std::shared_ptr<const CallableImpl>;
  using Data = std::variant<UndefinedTag, std::nullptr_t, bool, int64_t, double, std::string,
                            std::shared_ptr<const List>, std::shared_ptr<const Dict>, NamespacePtr, CallablePtr>;

  explicit JinjaValue(Data data) : data_(std::move(data)) {}

  Data data_;
};

// Python's repr() of a float: the shortest text that reads back the same, "1.0", "0.1", "1e-05", "1e+16", "inf".
std::string PythonFloatRepr(double d);

}  // namespace verl

#endif  // VERL_COMMON_TEXT_JINJA_VALUE_H_
