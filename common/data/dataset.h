#ifndef VERL_COMMON_DATA_DATASET_H_
#define VERL_COMMON_DATA_DATASET_H_

// Loading and writing RL prompt datasets in verl's layout (see common/data/README.md):
//
//   prompt        list<struct<content: string, role: string>>   (a plain string is one user message)
//   data_source   string
//   reward_model  struct<ground_truth: string, style: string>    (optional; numbers are accepted as ground truth)
//   extra_info    struct of scalar fields                        (optional; becomes a JSON object string)
//
// Files are Parquet (`.parquet`, as written by verl's examples/data_preprocess scripts) or JSON Lines (`.jsonl`, one
// object per line with the same keys). Other columns/keys are ignored. Thread-compatible: no shared state.

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/data/example.h"

namespace verl {

struct DatasetOptions {
  // Name of the column holding the chat prompt (verl's data.prompt_key). Default "prompt".
  std::string prompt_key = "prompt";
};

// Loads every row of `path`, choosing the reader by extension (.parquet or .jsonl).
// Errors (all name the file; row errors also name the row or line and the column):
//   NotFound          the file does not exist;
//   InvalidArgument   unknown extension, missing required column (prompt_key, data_source; the message lists the
//                     columns present), a value of the wrong type, malformed JSON, or a dataset with no rows;
//   Internal/other    I/O or Parquet decoding failures reported by Arrow.
// Parquet rows are numbered from 0 ("row 17"); JSONL errors give the 1-based line number ("line 18").
absl::StatusOr<std::vector<Example>> LoadDataset(const std::string& path, const DatasetOptions& options = {});

// Writes `examples` as Parquet in the layout above so that verl (pandas/pyarrow/datasets) reads it back.
// reward_model.style is written as "rule". extra_info is written as a struct whose fields are the union of the
// rows' JSON keys (a row lacking a key gets null there); a key holding only integers becomes int64, integers and
// floats double, booleans bool, strings string; any other mix, nested objects or arrays are stored as their JSON
// text in a string field. When no row has extra_info fields the column is omitted (it loads back as "{}").
// The file is written to a temporary sibling and renamed into place, so readers never see a partial file.
// An empty `examples` is InvalidArgument; a malformed extra_info_json is InvalidArgument naming the row.
absl::Status WriteParquet(const std::string& path, const std::vector<Example>& examples);

// Writes `examples` as JSON Lines with the keys prompt, data_source, reward_model {ground_truth, style}, extra_info.
// Atomic like WriteParquet. An empty `examples` or malformed extra_info_json is InvalidArgument.
absl::Status WriteJsonl(const std::string& path, const std::vector<Example>& examples);

}  // namespace verl

#endif  // VERL_COMMON_DATA_DATASET_H_
