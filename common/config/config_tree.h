#ifndef VERL_COMMON_CONFIG_CONFIG_TREE_H_
#define VERL_COMMON_CONFIG_CONFIG_TREE_H_

// The resolved configuration as a flat map from dotted key to typed value, and its rendering as nested YAML.
//
// A resolved tree holds every key of ConfigSchema() with defaults filled and `${...}` interpolations substituted.
// Values are immutable data; no thread-safety concerns beyond those of std::map.

#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"

namespace verl {

// monostate is YAML null (an unset optional). The alternative matches the key's ConfigType: kBool -> bool,
// kInt -> int64_t, kDouble -> double, kString -> string, kStringList -> vector<string>, kDoubleList -> vector<double>,
// kOptionalInt -> int64_t or monostate, kOptionalDouble -> double or monostate.
using ConfigValue =
    std::variant<std::monostate, bool, int64_t, double, std::string, std::vector<std::string>, std::vector<double>>;

using ConfigTree = std::map<std::string, ConfigValue>;

// The value as YAML flow text: `null`, `true`, `12`, `1.0e-06`, `0.2`, `token-mean`, `""`, `[console, jsonl]`.
// Doubles use the shortest text that reads back to the same value and always carry a '.' (or are .inf/.nan).
std::string FormatConfigValue(const ConfigValue& value);

// The value of `key` as FormatConfigValue text; NotFound when the tree lacks it.
absl::StatusOr<std::string> GetValueAsString(const ConfigTree& tree, const std::string& key);

// The whole tree as nested block YAML (sections in ConfigSchema() order, lists in flow style), ending in a newline.
// Reading the result back with the config loader gives the same tree. Keys not in the schema are appended in map order.
std::string ConfigTreeToYaml(const ConfigTree& tree);

}  // namespace verl

#endif  // VERL_COMMON_CONFIG_CONFIG_TREE_H_
