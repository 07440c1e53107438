#include "common/data/parquet_io.h"

#include <arrow/api.h>
#include <arrow/io/file.h>
#include <parquet/arrow/reader.h>
#include <parquet/arrow/writer.h>

#include <cstdint>
#include <exception>
#include <limits>
#include <memory>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/data/atomic_write.h"
#include "common/data/dataset.h"
#include "common/status/status_macros.h"

namespace verl {
namespace data_internal {
namespace {

using nlohmann::json;

absl::string_view AbslView(std::string_view s) { return absl::string_view(s.data(), s.size()); }

// Maps an Arrow status onto the canonical code closest to it, prefixed with `context`.
absl::Status FromArrow(const arrow::Status& status, std::string_view context) {
  if (status.ok()) return absl::OkStatus();
  const std::string message = absl::StrCat(AbslView(context), ": ", status.ToString());
  if (status.IsInvalid() || status.IsTypeError()) return absl::InvalidArgumentError(message);
  if (status.IsKeyError()) return absl::NotFoundError(message);
  if (status.IsNotImplemented()) return absl::UnimplementedError(message);
  if (status.IsOutOfMemory() || status.IsCapacityError()) return absl::ResourceExhaustedError(message);
  return absl::InternalError(message);
}

#define VERL_RETURN_IF_ARROW_ERROR_(expr, context)                  \
  do {                                                              \
    const ::arrow::Status verl_arrow_status_ = (expr);              \
    if (!verl_arrow_status_.ok()) return FromArrow(verl_arrow_status_, (context)); \
  } while (0)

template <typename ArrayType>
json ListToJson(const ArrayType& list, int64_t i);
json ValueToJson(const arrow::Array& array, int64_t i);

template <typename ArrayType>
json NumberToJson(const arrow::Array& array, int64_t i) {
  return json(static_cast<const ArrayType&>(array).Value(i));
}

template <typename ArrayType>
json StringToJson(const arrow::Array& array, int64_t i) {
  return json(std::string(static_cast<const ArrayType&>(array).GetView(i)));
}

// Variable-length lists and list views: iterate the child values in place, without slicing.
template <typename ArrayType>
json ListToJson(const ArrayType& list, int64_t i) {
  json out = json::array();
  const int64_t begin = list.value_offset(i);
  const int64_t end = begin + list.value_length(i);
  for (int64_t j = begin; j < end; ++j) out.push_back(ValueToJson(*list.values(), j));
  return out;
}

json ValueToJson(const arrow::Array& array, int64_t i) {
  if (array.IsNull(i)) return nullptr;
  switch (array.type_id()) {
    case arrow::Type::NA:
      return nullptr;
    case arrow::Type::BOOL:
      return json(static_cast<const arrow::BooleanArray&>(array).Value(i));
    case arrow::Type::INT8:
      return NumberToJson<arrow::Int8Array>(array, i);
    case arrow::Type::INT16:
      return NumberToJson<arrow::Int16Array>(array, i);
    case arrow::Type::INT32:
      return NumberToJson<arrow::Int32Array>(array, i);
    case arrow::Type::INT64:
      return NumberToJson<arrow::Int64Array>(array, i);
    case arrow::Type::UINT8:
      return NumberToJson<arrow::UInt8Array>(array, i);
    case arrow::Type::UINT16:
      return NumberToJson<arrow::UInt16Array>(array, i);
    case arrow::Type::UINT32:
      return NumberToJson<arrow::UInt32Array>(array, i);
    case arrow::Type::UINT64:
      return NumberToJson<arrow::UInt64Array>(array, i);
    case arrow::Type::FLOAT:
      return NumberToJson<arrow::FloatArray>(array, i);
    case arrow::Type::DOUBLE:
      return NumberToJson<arrow::DoubleArray>(array, i);
    case arrow::Type::STRING:
    case arrow::Type::BINARY:
      return StringToJson<arrow::BinaryArray>(array, i);
    case arrow::Type::LARGE_STRING:
    case arrow::Type::LARGE_BINARY:
      return StringToJson<arrow::LargeBinaryArray>(array, i);
    case arrow::Type::STRING_VIEW:
    case arrow::Type::BINARY_VIEW:
      return StringToJson<arrow::BinaryViewArray>(array, i);
    case arrow::Type::LIST:
      return ListToJson(static_cast<const arrow::ListArray&>(array), i);
    case arrow::Type::LARGE_LIST:
      return ListToJson(static_cast<const arrow::LargeListArray&>(array), i);
    case arrow::Type::LIST_VIEW:
      return ListToJson(static_cast<const arrow::ListViewArray&>(array), i);
    case arrow::Type::LARGE_LIST_VIEW:
      return ListToJson(static_cast<const arrow::LargeListViewArray&>(array), i);
    case arrow::Type::FIXED_SIZE_LIST: {
      const auto& list = static_cast<const arrow::FixedSizeListArray&>(array);
      json out = json::array();
      for (int64_t j = list.value_offset(i); j < list.value_offset(i) + list.value_length(i); ++j) {
        out.push_back(ValueToJson(*list.values(), j));
      }
      return out;
    }
    case arrow::Type::MAP: {
      // String-keyed maps become objects (what a Python dict would be); others arrays of [key, value].
      const auto& map = static_cast<const arrow::MapArray&>(array);
      const bool string_keys = map.keys()->type_id() == arrow::Type::STRING ||
                               map.keys()->type_id() == arrow::Type::LARGE_STRING;
      json out = string_keys ? json::object() : json::array();
      const int64_t begin = map.value_offset(i);
      for (int64_t j = begin; j < begin + map.value_length(i); ++j) {
        json key = ValueToJson(*map.keys(), j);
        json value = ValueToJson(*map.items(), j);
        if (string_keys && key.is_string()) {
          out[key.get<std::string>()] = std::move(value);
        } else {
          out.push_back(json::array({std::move(key), std::move(value)}));
        }
      }
      return out;
    }
    case arrow::Type::STRUCT: {
      const auto& st = static_cast<const arrow::StructArray&>(array);
      json out = json::object();
      for (int k = 0; k < st.num_fields(); ++k) {
        out[st.struct_type()->field(k)->name()] = ValueToJson(*st.field(k), i);
      }
      return out;
    }
    case arrow::Type::DICTIONARY: {
      const auto& dict = static_cast<const arrow::DictionaryArray&>(array);
      return ValueToJson(*dict.dictionary(), dict.GetValueIndex(i));
    }
    default: {
      // Dates, timestamps, decimals, ...: their Arrow text, which is what a user would read.
      auto scalar = array.GetScalar(i);
      return scalar.ok() ? json((*scalar)->ToString()) : json(nullptr);
    }
  }
}

// How one extra_info field is stored in Parquet; see WriteParquet's contract in dataset.h.
enum class FieldKind { kNull, kBool, kInt, kDouble, kString };

FieldKind KindOf(const json& value) {
  switch (value.type()) {
    case json::value_t::null:
      return FieldKind::kNull;
    case json::value_t::boolean:
      return FieldKind::kBool;
    case json::value_t::number_integer:
      return FieldKind::kInt;
    case json::value_t::number_unsigned:
      return value.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ? FieldKind::kInt
                                                                                                : FieldKind::kDouble;
    case json::value_t::number_float:
      return FieldKind::kDouble;
    default:
      return FieldKind::kString;
  }
}

FieldKind Merge(FieldKind a, FieldKind b) {
  if (a == FieldKind::kNull) return b;
  if (b == FieldKind::kNull || a == b) return a;
  if ((a == FieldKind::kInt && b == FieldKind::kDouble) || (a == FieldKind::kDouble && b == FieldKind::kInt)) {
    return FieldKind::kDouble;
  }
  return FieldKind::kString;
}

std::shared_ptr<arrow::DataType> ArrowTypeOf(FieldKind kind) {
  switch (kind) {
    case FieldKind::kBool:
      return arrow::boolean();
    case FieldKind::kInt:
      return arrow::int64();
    case FieldKind::kDouble:
      return arrow::float64();
    default:
      return arrow::utf8();
  }
}

arrow::Status AppendField(arrow::ArrayBuilder* builder, FieldKind kind, const json& value) {
  if (value.is_null()) return builder->AppendNull();
  switch (kind) {
    case FieldKind::kBool:
      return static_cast<arrow::BooleanBuilder*>(builder)->Append(value.get<bool>());
    case FieldKind::kInt:
      return static_cast<arrow::Int64Builder*>(builder)->Append(value.get<int64_t>());
    case FieldKind::kDouble:
      return static_cast<arrow::DoubleBuilder*>(builder)->Append(value.get<double>());
    default:
      return static_cast<arrow::StringBuilder*>(builder)->Append(value.is_string() ? value.get<std::string>()
                                                                                  : value.dump());
  }
}

// Builds the extra_info struct column; returns nullptr when no row has any field.
arrow::Result<std::shared_ptr<arrow::Array>> BuildExtraInfo(const std::vector<json>& extras) {
  std::vector<std::string> keys;
  std::vector<FieldKind> kinds;
  for (const json& extra : extras) {
    for (const auto& [key, value] : extra.items()) {
      size_t k = 0;
      while (k < keys.size() && keys[k] != key) ++k;
      if (k == keys.size()) {
        keys.push_back(key);
        kinds.push_back(FieldKind::kNull);
      }
      kinds[k] = Merge(kinds[k], KindOf(value));
    }
  }
  if (keys.empty()) return std::shared_ptr<arrow::Array>();

  arrow::MemoryPool* pool = arrow::default_memory_pool();
  arrow::FieldVector fields;
  std::vector<std::shared_ptr<arrow::ArrayBuilder>> children;
  for (size_t k = 0; k < keys.size(); ++k) {
    fields.push_back(arrow::field(keys[k], ArrowTypeOf(kinds[k])));
    ARROW_ASSIGN_OR_RAISE(auto child, arrow::MakeBuilder(fields.back()->type(), pool));
    children.push_back(std::shared_ptr<arrow::ArrayBuilder>(std::move(child)));
  }
  arrow::StructBuilder builder(arrow::struct_(fields), pool, children);
  for (const json& extra : extras) {
    if (extra.empty()) {
      ARROW_RETURN_NOT_OK(builder.AppendNull());
      continue;
    }
    ARROW_RETURN_NOT_OK(builder.Append());
    for (size_t k = 0; k < keys.size(); ++k) {
      auto it = extra.find(keys[k]);
      ARROW_RETURN_NOT_OK(AppendField(children[k].get(), kinds[k], it == extra.end() ? json(nullptr) : *it));
    }
  }
  return builder.Finish();
}

arrow::Result<std::shared_ptr<arrow::Table>> BuildTable(const std::vector<Example>& examples,
                                                        const std::vector<json>& extras) {
  arrow::MemoryPool* pool = arrow::default_memory_pool();

  auto content = std::make_shared<arrow::StringBuilder>(pool);
  auto role = std::make_shared<arrow::StringBuilder>(pool);
  auto message_type = arrow::struct_({arrow::field("content", arrow::utf8()), arrow::field("role", arrow::utf8())});
  auto message = std::make_shared<arrow::StructBuilder>(
      message_type, pool, std::vector<std::shared_ptr<arrow::ArrayBuilder>>{content, role});
  arrow::ListBuilder prompt(pool, message);

  arrow::StringBuilder data_source(pool);

  auto ground_truth = std::make_shared<arrow::StringBuilder>(pool);
  auto style = std::make_shared<arrow::StringBuilder>(pool);
  arrow::StructBuilder reward_model(
      arrow::struct_({arrow::field("ground_truth", arrow::utf8()), arrow::field("style", arrow::utf8())}), pool,
      {ground_truth, style});

  for (const Example& example : examples) {
    ARROW_RETURN_NOT_OK(prompt.Append());
    for (const ChatMessage& m : example.prompt) {
      ARROW_RETURN_NOT_OK(message->Append());
      ARROW_RETURN_NOT_OK(content->Append(m.content));
      ARROW_RETURN_NOT_OK(role->Append(m.role));
    }
    ARROW_RETURN_NOT_OK(data_source.Append(example.data_source));
    ARROW_RETURN_NOT_OK(reward_model.Append());
    ARROW_RETURN_NOT_OK(ground_truth->Append(example.ground_truth));
    ARROW_RETURN_NOT_OK(style->Append("rule"));
  }

  arrow::FieldVector fields;
  arrow::ArrayVector columns;
  fields.push_back(arrow::field("prompt", arrow::list(message_type)));
  ARROW_ASSIGN_OR_RAISE(columns.emplace_back(), prompt.Finish());
  fields.push_back(arrow::field("data_source", arrow::utf8()));
  ARROW_ASSIGN_OR_RAISE(columns.emplace_back(), data_source.Finish());
  ARROW_ASSIGN_OR_RAISE(auto reward_model_array, reward_model.Finish());
  fields.push_back(arrow::field("reward_model", reward_model_array->type()));
  columns.push_back(std::move(reward_model_array));
  ARROW_ASSIGN_OR_RAISE(auto extra_info, BuildExtraInfo(extras));
  if (extra_info != nullptr) {
    fields.push_back(arrow::field("extra_info", extra_info->type()));
    columns.push_back(std::move(extra_info));
  }
  return arrow::Table::Make(arrow::schema(fields), columns);
}

absl::Status WriteTableFile(const std::string& path, const arrow::Table& table) {
  auto sink = arrow::io::FileOutputStream::Open(path);
  VERL_RETURN_IF_ARROW_ERROR_(sink.status(), path);
  VERL_RETURN_IF_ARROW_ERROR_(
      parquet::arrow::WriteTable(table, arrow::default_memory_pool(), *sink, /*chunk_size=*/64 * 1024), path);
  VERL_RETURN_IF_ARROW_ERROR_((*sink)->Close(), path);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ParquetRows> ReadParquetRows(const std::string& path, const std::vector<std::string>& columns) {
  try {
    auto input = arrow::io::ReadableFile::Open(path);
    VERL_RETURN_IF_ARROW_ERROR_(input.status(), path);
    auto reader = parquet::arrow::OpenFile(*input, arrow::default_memory_pool());
    VERL_RETURN_IF_ARROW_ERROR_(reader.status(), path);
    // Only the wanted columns are read (a dataset may carry large ones the loader never looks at).
    std::shared_ptr<arrow::Schema> schema;
    VERL_RETURN_IF_ARROW_ERROR_((*reader)->GetSchema(&schema), path);
    ParquetRows out;
    out.column_names = schema->field_names();
    out.rows.assign((*reader)->parquet_reader()->metadata()->num_rows(), json::object());
    for (const std::string& name : columns) {
      const int index = schema->GetFieldIndex(name);
      if (index < 0) continue;
      std::shared_ptr<arrow::ChunkedArray> column;
      VERL_RETURN_IF_ARROW_ERROR_((*reader)->ReadColumn(index, &column), absl::StrCat(path, ": column '", name, "'"));
      if (column->length() != static_cast<int64_t>(out.rows.size())) {
        return absl::InvalidArgumentError(absl::StrCat(path, ": column '", name, "' has ", column->length(),
                                                       " values, the file ", out.rows.size(), " rows"));
      }
      int64_t base = 0;
      for (const std::shared_ptr<arrow::Array>& chunk : column->chunks()) {
        for (int64_t i = 0; i < chunk->length(); ++i) out.rows[base + i][name] = ValueToJson(*chunk, i);
        base += chunk->length();
      }
    }
    return out;
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(path, ": cannot read Parquet: ", e.what()));
  }
}

}  // namespace data_internal

absl::Status WriteParquet(const std::string& path, const std::vector<Example>& examples) {
  using nlohmann::json;
  if (examples.empty()) return absl::InvalidArgumentError(absl::StrCat(path, ": refusing to write an empty dataset"));
  std::vector<json> extras;
  extras.reserve(examples.size());
  for (size_t i = 0; i < examples.size(); ++i) {
    json extra = json::parse(examples[i].extra_info_json, nullptr, /*allow_exceptions=*/false);
    if (extra.is_discarded() || !extra.is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": row ", i, ": extra_info_json is not a JSON object: ", examples[i].extra_info_json));
    }
    extras.push_back(std::move(extra));
  }
  try {
    auto table = data_internal::BuildTable(examples, extras);
    if (!table.ok()) return data_internal::FromArrow(table.status(), path);
    return WriteAtomically(path, [&](const std::string& temp_path) {
      return data_internal::WriteTableFile(temp_path, **table);
    });
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(path, ": cannot write Parquet: ", e.what()));
  }
}

}  // namespace verl
