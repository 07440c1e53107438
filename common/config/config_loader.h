#ifndef VERL_COMMON_CONFIG_CONFIG_LOADER_H_
#define VERL_COMMON_CONFIG_CONFIG_LOADER_H_

// Loads a job configuration: a YAML file plus Hydra-style command-line overrides, checked against ConfigSchema().
//
//   ASSIGN_OR_RETURN(JobConfig job, LoadJobConfig("configs/quickstart.yaml", {"data.train_batch_size=8"}));
//
// Steps, each reporting every problem it finds (one per line of the Status message) before the next step runs:
//  1. Read the YAML file: a missing file is NotFound naming it; a syntax error is InvalidArgument with file:line:col.
//     Nested maps are flattened to dotted keys (a dotted key written in the file, `data.seed: 3`, works too).
//  2. Apply overrides in order: `key=value` and `+key=value` / `++key=value` set a key (values are YAML scalars or flow
//     sequences such as `[console,jsonl]`; `null` unsets an optional key); `~key` removes a key (or a whole section)
//     so its default applies. Every key must be in the schema, with or without `+`, since the schema is the base
//     config that the file and the overrides change.
//  3. Unknown keys are errors that suggest the closest valid key ("did you mean ..."), naming file:line:col or the
//     command-line override.
//  4. Defaults fill the keys not given; `${a.b}` interpolations are substituted (`\${` is a literal "${"); values are
//     converted to the key's type (errors name the key, the expected type and the given value) and enums are checked.
//  5. ValidateJobConfig checks the cross-key rules.
// Nothing is read from disk but the YAML file: paths in the config are not checked here. Thread-safe (no shared state).

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/config/config_tree.h"
#include "common/config/job_config.h"

namespace verl {

// The resolved tree (every key, defaults filled, interpolations substituted) and the struct filled from it.
struct LoadedConfig {
  ConfigTree tree;
  JobConfig job;
};

// Steps 1-4 on YAML text: `source_name` names the text in errors (a path, or "<submitted job>"); empty text means an
// empty file. Does not run ValidateJobConfig.
absl::StatusOr<ConfigTree> ResolveConfigTree(const std::string& yaml_text, const std::string& source_name,
                                             const std::vector<std::string>& overrides);

// Steps 1-5 on YAML text (for a job submitted over RPC).
absl::StatusOr<LoadedConfig> LoadConfigFromString(const std::string& yaml_text, const std::string& source_name,
                                                  const std::vector<std::string>& overrides);

// Steps 1-5 on a file. An empty `yaml_path` means no file: defaults plus overrides.
absl::StatusOr<LoadedConfig> LoadConfig(const std::string& yaml_path, const std::vector<std::string>& overrides);

// LoadConfig(...).job.
absl::StatusOr<JobConfig> LoadJobConfig(const std::string& yaml_path, const std::vector<std::string>& overrides);

// The fully resolved and validated configuration as nested YAML, every key present (for --print-config). Loading the
// returned text gives the same configuration.
absl::StatusOr<std::string> ResolvedConfigYaml(const std::string& yaml_path,
                                               const std::vector<std::string>& overrides);

}  // namespace verl

#endif  // VERL_COMMON_CONFIG_CONFIG_LOADER_H_
