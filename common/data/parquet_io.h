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

// Reads `columns` of `path` (which must exist; the others are not read). Errors name the file, and the column where
// one cannot be read. Types without a JSON form (dates, decimals, ...) become their Arrow text.
absl::StatusOr<ParquetRows> ReadParquetRows(const std::string& path, const std::vector<std::string>& columns);

}  // namespace verl::data_internal

#endif  // VERL_COMMON_DATA_PARQUET_IO_H_
