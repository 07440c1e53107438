#ifndef VERL_COMMON_TEXT_JINJA_BUILTINS_H_
#define VERL_COMMON_TEXT_JINJA_BUILTINS_H_

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/text/jinja_value.h"

// The filters, tests, attribute lookup and methods of the Jinja subset (common/text/jinja_template.h). Errors carry
// no position; the renderer prefixes "file:line:column". Strings are UTF-8 and are indexed, sliced, counted and
// iterated by code point as in Python; case conversions (upper, lower, title, capitalize) change ASCII letters only.
namespace verl::jinja {

// Whether a filter / test of this name exists (the parser rejects unknown ones up front).
bool IsKnownFilter(std::string_view name);
bool IsKnownTest(std::string_view name);

// `value | name(args)`. Filters that take a test (select, reject, selectattr, rejectattr) use ApplyTest; `map`
// with a filter name uses ApplyFilter.
absl::StatusOr<JinjaValue> ApplyFilter(std::string_view name, const JinjaValue& value, const JinjaCallArgs& args);
// `value is name(args)`.
absl::StatusOr<bool> ApplyTest(std::string_view name, const JinjaValue& value, const JinjaCallArgs& args);

// `obj.name`: a method of a str or dict (bound as a callable), else the dict's item or the namespace's attribute;
// undefined when missing. An error when `obj` is undefined.
absl::StatusOr<JinjaValue> GetAttribute(const JinjaValue& obj, const std::string& name);
// `obj[key]`: a dict item, a list or str element (negative indices count from the end), else a method as for
// GetAttribute; undefined when missing. An error when `obj` is undefined.
absl::StatusOr<JinjaValue> GetItem(const JinjaValue& obj, const JinjaValue& key);
// `obj[start:stop:step]` on a list or str, with Python's rules for missing and negative bounds.
absl::StatusOr<JinjaValue> GetSlice(const JinjaValue& obj, const std::optional<int64_t>& start,
                                    const std::optional<int64_t>& stop, const std::optional<int64_t>& step);
// The items a for loop visits: a list's elements, a dict's keys, a str's characters; nothing for undefined.
absl::StatusOr<std::vector<JinjaValue>> Iterate(const JinjaValue& value);
// `needle in haystack`.
absl::StatusOr<bool> Contains(const JinjaValue& haystack, const JinjaValue& needle);

// Python's json.dumps(value, ensure_ascii, indent, separators, sort_keys), as transformers' tojson filter calls it.
// `indent` < 0 means None. Undefined, namespaces and functions are not serializable (an error).
struct JsonDumpOptions {
  bool ensure_ascii = false;
  int indent = -1;
  std::optional<std::string> item_separator;
  std::optional<std::string> key_separator;
  bool sort_keys = false;
};
absl::StatusOr<std::string> ToJson(const JinjaValue& value, const JsonDumpOptions& options);

// The UTF-8 code points of `s`, each as its bytes. Invalid bytes stand alone.
std::vector<std::string_view> SplitCodePoints(std::string_view s);

}  // namespace verl::jinja

#endif  // VERL_COMMON_TEXT_JINJA_BUILTINS_H_
