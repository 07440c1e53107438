#ifndef VERL_COMMON_CONFIG_CONFIG_SCHEMA_H_
#define VERL_COMMON_CONFIG_CONFIG_SCHEMA_H_

// The one declared table of every job configuration key: dotted name, type, default, allowed values, doc.
//
// Key names and defaults follow verl's `ppo_trainer.yaml` wherever the concept exists in both, so a verl user's
// overrides carry over; `origin` says which keys are verl's, which keep verl's name with our default, and which are
// ours. docs/config.md is written from this table. Thread-safe: the table is immutable.

#include <string>
#include <string_view>
#include <vector>

namespace verl {

// The value type of a key. Optional types accept YAML `null` (std::nullopt in JobConfig).
enum class ConfigType {
  kBool,
  kInt,             // int64
  kDouble,          // also accepts integer literals
  kString,          // `null` is read as ""
  kStringList,      // a YAML sequence of scalars; a single scalar is a one-element list
  kDoubleList,      // a YAML sequence of numbers
  kOptionalInt,     // int64 or null
  kOptionalDouble,  // double or null
};

// Where a key comes from.
enum class ConfigOrigin {
  kVerl,         // verl's name and verl's default
  kVerlChanged,  // verl's name, a different default or value set (see the doc line)
  kOurs,         // no verl equivalent
};

struct ConfigKeySpec {
  std::string_view key;           // dotted, e.g. "actor_rollout_ref.actor.optim.lr"
  ConfigType type;
  std::string_view default_yaml;  // the default as YAML text: "512", "[console, jsonl]", "null", "\"\""
  std::string_view allowed;       // "" (any) or "a|b|c": the only accepted values (strings and string-list items)
  bool required;                  // must be set to a non-empty value
  ConfigOrigin origin;
  std::string_view doc;           // one line
};

// All keys, grouped by section in the order they are printed by --print-config.
const std::vector<ConfigKeySpec>& ConfigSchema();

// The spec of `key`, or nullptr when `key` is not a leaf key of the schema.
const ConfigKeySpec* FindConfigKey(std::string_view key);

// True when `prefix` names a section ("data", "actor_rollout_ref.actor.optim"), i.e. some key starts with "prefix.".
bool IsConfigSection(std::string_view prefix);

// The allowed values of `spec` split on '|'; empty when any value is accepted.
std::vector<std::string> AllowedValues(const ConfigKeySpec& spec);

// "bool", "int", "double", "string", "string list", "double list", "optional int (null allowed)", ...
std::string_view ConfigTypeName(ConfigType type);

// "verl", "verl (changed default)", "ours".
std::string_view ConfigOriginName(ConfigOrigin origin);

// The closest valid key to the unknown `key`, by edit distance over whole dotted keys and over their last component
// (so "trainer.lr" finds "actor_rollout_ref.actor.optim.lr"); "" when nothing is close enough.
std::string SuggestConfigKey(std::string_view key);

// The closest of `candidates` to `value` by edit distance; "" when nothing is close enough.
std::string SuggestClosest(std::string_view value, const std::vector<std::string>& candidates);

// Levenshtein distance between two strings.
int EditDistance(std::string_view a, std::string_view b);

}  // namespace verl

#endif  // VERL_COMMON_CONFIG_CONFIG_SCHEMA_H_
