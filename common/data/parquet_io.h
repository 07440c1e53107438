#ifndef VERL_COMMON_DATA_PARQUET_IO_H_
#define VERL_COMMON_DATA_PARQUET_IO_H_

// Parquet side of common/data/dataset.h. Internal to verl_data: use LoadDataset / WriteParquet instead.

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"

namespace verl::data_internal {

// A Parquet file's top-level column names and, for each row, a JSON object holding the values of `columns`
// (those present in the file; nulls become JSON null, structs objects, lists arrays, other types their text).
struct ParquetRows {
  std::vector<std::string> column_names;
  std::vector<nlohmann::json> rows;
};

// Reads `path` (which must exist). Errors name the file; a value Arrow cannot decode also names row and column.
absl::StatusOr<ParquetRows> ReadParquetRows(const std::string& path, const std::vector<std::string>& columns);

}  // namespace verl::data_internal

#endif  // VERL_COMMON_DATA_PARQUET_IO_H_
