#include "common/data/dataset.h"

#include <charconv>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string_view>
#include <system_error>
#include <utility>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/data/atomic_write.h"
#include "common/data/parquet_io.h"
#include "common/status/status_macros.h"

namespace verl {
namespace {

using nlohmann::json;

constexpr char kDataSource[] = "data_source";
constexpr char kRewardModel[] = "reward_model";
constexpr char kExtraInfo[] = "extra_info";

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

std::string TypeName(const json& value) { return value.is_null() ? "null" : value.type_name(); }

// Text of a numeric ground truth: integers in decimal, floats in their shortest round-trip form (18.0 -> "18").
std::string NumberText(const json& value) {
  if (value.is_number_integer()) return value.dump();
  char buffer[64];
  auto [end, ec] = std::to_chars(buffer, buffer + sizeof(buffer), value.get<double>());
  return ec == std::errc() ? std::string(buffer, end) : value.dump();
}

absl::Status ColumnError(const std::string& where, std::string_view column, std::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat(where, ": column '", absl::string_view(column.data(), column.size()),
                                                 "': ", absl::string_view(problem.data(), problem.size())));
}

absl::StatusOr<std::vector<ChatMessage>> ParsePrompt(const json& value, const std::string& where,
                                                     const std::string& column) {
  if (value.is_string()) return std::vector<ChatMessage>{{"user", value.get<std::string>()}};
  constexpr char kExpected[] = "expected a list of {role, content}";
  if (!value.is_array()) return ColumnError(where, column, absl::StrCat(kExpected, ", got ", TypeName(value)));
  if (value.empty()) return ColumnError(where, column, absl::StrCat(kExpected, ", got an empty list"));
  std::vector<ChatMessage> messages;
  messages.reserve(value.size());
  for (size_t i = 0; i < value.size(); ++i) {
    const json& m = value[i];
    if (!m.is_object()) {
      return ColumnError(where, column, absl::StrCat(kExpected, ", element ", i, " is ", TypeName(m)));
    }
    auto role = m.find("role");
    auto content = m.find("content");
    if (role == m.end() || !role->is_string() || content == m.end() || !content->is_string()) {
      return ColumnError(where, column,
                         absl::StrCat(kExpected, ", element ", i, " lacks a string 'role' or 'content': ", m.dump()));
    }
    messages.push_back({role->get<std::string>(), content->get<std::string>()});
  }
  return messages;
}

absl::StatusOr<std::string> ParseGroundTruth(const json& row, const std::string& where) {
  auto it = row.find(kRewardModel);
  if (it == row.end() || it->is_null()) return std::string();
  if (!it->is_object()) {
    return ColumnError(where, kRewardModel, absl::StrCat("expected a struct {ground_truth, style}, got ", TypeName(*it)));
  }
  auto truth = it->find("ground_truth");
  if (truth == it->end() || truth->is_null()) return std::string();
  if (truth->is_string()) return truth->get<std::string>();
  if (truth->is_number()) return NumberText(*truth);
  return ColumnError(where, kRewardModel,
                     absl::StrCat("expected ground_truth to be a string or number, got ", TypeName(*truth)));
}

absl::StatusOr<std::string> ParseExtraInfo(const json& row, const std::string& where) {
  auto it = row.find(kExtraInfo);
  if (it == row.end() || it->is_null()) return std::string("{}");
  json object = *it;
  if (object.is_string()) {
    // Some pipelines store extra_info pre-serialised; accept it when it is a JSON object.
    object = json::parse(it->get<std::string>(), nullptr, /*allow_exceptions=*/false);
  }
  if (object.is_discarded() || !object.is_object()) {
    return ColumnError(where, kExtraInfo, absl::StrCat("expected a struct (JSON object), got ", TypeName(*it)));
  }
  // Fields that are null are dropped: WriteParquet stores absent keys as nulls, and this keeps round trips exact.
  for (auto field = object.begin(); field != object.end();) {
    field = field->is_null() ? object.erase(field) : std::next(field);
  }
  return object.dump(-1, ' ', /*ensure_ascii=*/false, json::error_handler_t::replace);
}

// Converts one row (an object keyed by column name) to an Example. `where` is "<file>: row N" or "<file>: line N".
absl::StatusOr<Example> RowToExample(const json& row, const std::string& where, const DatasetOptions& options) {
  Example example;
  const json& prompt = row.at(options.prompt_key);
  ASSIGN_OR_RETURN(example.prompt, ParsePrompt(prompt, where, options.prompt_key));
  const json& source = row.at(kDataSource);
  if (!source.is_string()) return ColumnError(where, kDataSource, absl::StrCat("expected a string, got ", TypeName(source)));
  example.data_source = source.get<std::string>();
  ASSIGN_OR_RETURN(example.ground_truth, ParseGroundTruth(row, where));
  ASSIGN_OR_RETURN(example.extra_info_json, ParseExtraInfo(row, where));
  return example;
}

// Returns an error naming the first required column absent from `present`, listing those present.
absl::Status CheckRequiredColumns(const std::vector<std::string>& present, const std::string& where,
                                  const DatasetOptions& options) {
  for (const std::string& required : {options.prompt_key, std::string(kDataSource)}) {
    bool found = false;
    for (const std::string& name : present) found = found || name == required;
    if (!found) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": missing required column '", required,
                                                     "' (columns present: ", absl::StrJoin(present, ", "), ")"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Example>> LoadParquet(const std::string& path, const DatasetOptions& options) {
  ASSIGN_OR_RETURN(data_internal::ParquetRows table,
                   data_internal::ReadParquetRows(path, {options.prompt_key, kDataSource, kRewardModel, kExtraInfo}));
  RETURN_IF_ERROR(CheckRequiredColumns(table.column_names, path, options));
  std::vector<Example> examples;
  examples.reserve(table.rows.size());
  for (size_t i = 0; i < table.rows.size(); ++i) {
    ASSIGN_OR_RETURN(Example example, RowToExample(table.rows[i], absl::StrCat(path, ": row ", i), options));
    example.row = static_cast<int64_t>(i);
    example.location = absl::StrCat("row ", i);
    examples.push_back(std::move(example));
  }
  return examples;
}

absl::StatusOr<std::vector<Example>> LoadJsonl(const std::string& path, const DatasetOptions& options) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::PermissionDeniedError(absl::StrCat(path, ": cannot open for reading"));
  std::vector<Example> examples;
  std::string line;
  for (int64_t line_number = 1; std::getline(in, line); ++line_number) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    const std::string where = absl::StrCat(path, ": line ", line_number);
    json row;
    try {
      row = json::parse(line);
    } catch (const json::parse_error& e) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": malformed JSON: ", e.what()));
    }
    if (!row.is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": expected a JSON object, got ", TypeName(row)));
    }
    std::vector<std::string> keys;
    for (const auto& [key, value] : row.items()) keys.push_back(key);
    RETURN_IF_ERROR(CheckRequiredColumns(keys, where, options));
    ASSIGN_OR_RETURN(Example example, RowToExample(row, where, options));
    example.row = static_cast<int64_t>(examples.size());
    example.location = absl::StrCat("line ", line_number);
    examples.push_back(std::move(example));
  }
  if (in.bad()) return absl::InternalError(absl::StrCat(path, ": read error"));
  return examples;
}

json ExampleToJson(const Example& example, const json& extra_info) {
  json prompt = json::array();
  for (const ChatMessage& m : example.prompt) prompt.push_back({{"content", m.content}, {"role", m.role}});
  return {{"prompt", std::move(prompt)},
          {kDataSource, example.data_source},
          {kRewardModel, {{"ground_truth", example.ground_truth}, {"style", "rule"}}},
          {kExtraInfo, extra_info}};
}

}  // namespace

absl::StatusOr<std::vector<Example>> LoadDataset(const std::string& path, const DatasetOptions& options) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return absl::NotFoundError(absl::StrCat(path, ": no such file"));
  if (std::filesystem::is_directory(path, ec)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": is a directory, expected a .parquet or .jsonl file"));
  }
  absl::StatusOr<std::vector<Example>> examples;
  if (EndsWith(path, ".parquet")) {
    examples = LoadParquet(path, options);
  } else if (EndsWith(path, ".jsonl")) {
    examples = LoadJsonl(path, options);
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": unknown dataset format (expected a .parquet or .jsonl extension)"));
  }
  if (examples.ok() && examples->empty()) return absl::InvalidArgumentError(absl::StrCat(path, ": dataset has no rows"));
  return examples;
}

absl::Status WriteJsonl(const std::string& path, const std::vector<Example>& examples) {
  if (examples.empty()) return absl::InvalidArgumentError(absl::StrCat(path, ": refusing to write an empty dataset"));
  std::string text;
  for (size_t i = 0; i < examples.size(); ++i) {
    json extra = json::parse(examples[i].extra_info_json, nullptr, /*allow_exceptions=*/false);
    if (extra.is_discarded() || !extra.is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": row ", i, ": extra_info_json is not a JSON object: ", examples[i].extra_info_json));
    }
    // Replace invalid UTF-8 rather than throw: the file stays loadable and the problem is visible in it.
    text += ExampleToJson(examples[i], extra).dump(-1, ' ', /*ensure_ascii=*/false, json::error_handler_t::replace);
    text += '\n';
  }
  return WriteAtomically(path, [&](const std::string& temp_path) -> absl::Status {
    std::ofstream out(temp_path, std::ios::binary | std::ios::trunc);
    if (!out) return absl::PermissionDeniedError(absl::StrCat(path, ": cannot open ", temp_path, " for writing"));
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    out.close();
    if (!out) return absl::InternalError(absl::StrCat(path, ": write to ", temp_path, " failed"));
    return absl::OkStatus();
  });
}

}  // namespace verl
