#include "common/data/dataset.h"

#include <arrow/api.h>
#include <arrow/io/file.h>
#include <parquet/arrow/reader.h>
#include <parquet/arrow/writer.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tests/test_dir.h"

namespace verl {
namespace {

using nlohmann::json;
using testing::TestDir;

std::string Message(const absl::Status& status) { return std::string(status.message()); }

std::vector<Example> SampleExamples() {
  std::vector<Example> examples(3);
  examples[0].prompt = {{"system", "You are terse."}, {"user", "What is 2+2? Réponds en français ✓"}};
  examples[0].data_source = "openai/gsm8k";
  examples[0].ground_truth = "4";
  examples[0].extra_info_json = json{{"split", "train"}, {"index", 0}, {"weight", 0.5}, {"hard", false}}.dump();
  examples[1].prompt = {{"user", "Repeat the letter b."}};
  examples[1].data_source = "verl_cpp/repeat_letter";
  examples[1].ground_truth = "b";
  examples[1].extra_info_json = json{{"split", "train"}, {"index", 1}}.dump();  // fewer keys than row 0
  examples[2].prompt = {{"user", ""}};
  examples[2].data_source = "x";
  examples[2].ground_truth = "";
  examples[2].extra_info_json = "{}";
  for (size_t i = 0; i < examples.size(); ++i) examples[i].row = static_cast<int64_t>(i);
  return examples;
}

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

// Writes `table` as Parquet with `rows_per_group` rows per row group, so that it loads as a chunked table.
void WriteArrowTable(const std::string& path, const std::shared_ptr<arrow::Table>& table, int64_t rows_per_group) {
  auto sink = arrow::io::FileOutputStream::Open(path).ValueOrDie();
  REQUIRE(parquet::arrow::WriteTable(*table, arrow::default_memory_pool(), sink, rows_per_group).ok());
  REQUIRE(sink->Close().ok());
}

std::shared_ptr<arrow::Array> StringArray(const std::vector<std::optional<std::string>>& values) {
  arrow::StringBuilder builder;
  for (const auto& v : values) {
    if (v.has_value()) {
      REQUIRE(builder.Append(*v).ok());
    } else {
      REQUIRE(builder.AppendNull().ok());
    }
  }
  return builder.Finish().ValueOrDie();
}

TEST_CASE("Parquet round trip keeps every field") {
  TestDir dir;
  const std::string path = dir.file("train.parquet");
  const std::vector<Example> examples = SampleExamples();
  REQUIRE(WriteParquet(path, examples).ok());

  auto loaded = LoadDataset(path);
  REQUIRE(loaded.ok());
  REQUIRE(loaded->size() == examples.size());
  for (size_t i = 0; i < examples.size(); ++i) {
    INFO("row " << i);
    CHECK((*loaded)[i].prompt == examples[i].prompt);
    CHECK((*loaded)[i].data_source == examples[i].data_source);
    CHECK((*loaded)[i].ground_truth == examples[i].ground_truth);
    CHECK((*loaded)[i].row == static_cast<int64_t>(i));
    CHECK(json::parse((*loaded)[i].extra_info_json) == json::parse(examples[i].extra_info_json));
  }
  // No temporary file is left next to the output.
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) files += entry.is_regular_file();
  CHECK(files == 1);
}

TEST_CASE("Parquet layout is verl's: list<struct<content, role>>, reward_model struct, extra_info struct") {
  TestDir dir;
  const std::string path = dir.file("layout.parquet");
  REQUIRE(WriteParquet(path, SampleExamples()).ok());
  auto input = arrow::io::ReadableFile::Open(path).ValueOrDie();
  auto reader = parquet::arrow::OpenFile(input, arrow::default_memory_pool()).ValueOrDie();
  std::shared_ptr<arrow::Table> table = reader->ReadTable().ValueOrDie();
  const auto& schema = *table->schema();
  const auto& prompt_type = *schema.GetFieldByName("prompt")->type();
  REQUIRE(prompt_type.id() == arrow::Type::LIST);
  CHECK(static_cast<const arrow::ListType&>(prompt_type).value_type()->ToString() ==
        "struct<content: string, role: string>");
  CHECK(schema.GetFieldByName("data_source")->type()->id() == arrow::Type::STRING);
  CHECK(schema.GetFieldByName("reward_model")->type()->ToString() == "struct<ground_truth: string, style: string>");
  CHECK(schema.GetFieldByName("extra_info")->type()->ToString() ==
        "struct<hard: bool, index: int64, split: string, weight: double>");
}

TEST_CASE("Parquet extra_info with mixed or nested values") {
  TestDir dir;
  const std::string path = dir.file("mixed.parquet");
  std::vector<Example> examples = SampleExamples();
  examples[0].extra_info_json = json{{"v", 1}, {"nested", {{"a", 1}}}}.dump();
  examples[1].extra_info_json = json{{"v", 2.5}, {"nested", "text"}}.dump();
  REQUIRE(WriteParquet(path, examples).ok());
  auto loaded = LoadDataset(path);
  REQUIRE(loaded.ok());
  // Integers mixed with floats become doubles; nested values come back as their JSON text.
  CHECK(json::parse((*loaded)[0].extra_info_json) == json{{"v", 1.0}, {"nested", R"({"a":1})"}});
  CHECK(json::parse((*loaded)[1].extra_info_json) == json{{"v", 2.5}, {"nested", "text"}});
  CHECK((*loaded)[2].extra_info_json == "{}");
}

TEST_CASE("Parquet without extra_info keys omits the column and loads as {}") {
  TestDir dir;
  const std::string path = dir.file("plain.parquet");
  std::vector<Example> examples = SampleExamples();
  for (Example& e : examples) e.extra_info_json = "{}";
  REQUIRE(WriteParquet(path, examples).ok());
  auto loaded = LoadDataset(path);
  REQUIRE(loaded.ok());
  for (const Example& e : *loaded) CHECK(e.extra_info_json == "{}");
}

TEST_CASE("JSONL round trip is exact") {
  TestDir dir;
  const std::string path = dir.file("train.jsonl");
  const std::vector<Example> examples = SampleExamples();
  REQUIRE(WriteJsonl(path, examples).ok());
  auto loaded = LoadDataset(path);
  REQUIRE(loaded.ok());
  CHECK(*loaded == examples);
}

TEST_CASE("Parquet written elsewhere: string prompt, numeric ground truth, several row groups, custom prompt key") {
  TestDir dir;
  const std::string path = dir.file("foreign.parquet");
  const int n = 7;
  std::vector<std::optional<std::string>> prompts, sources;
  arrow::Int64Builder truth_builder;
  for (int i = 0; i < n; ++i) {
    prompts.push_back("question " + std::to_string(i));
    sources.push_back("openai/gsm8k");
    REQUIRE(truth_builder.Append(100 + i).ok());
  }
  auto truth = truth_builder.Finish().ValueOrDie();
  auto reward_model = arrow::StructArray::Make({truth}, {arrow::field("ground_truth", arrow::int64())}).ValueOrDie();
  auto table = arrow::Table::Make(
      arrow::schema({arrow::field("question", arrow::utf8()), arrow::field("data_source", arrow::utf8()),
                     arrow::field("reward_model", reward_model->type())}),
      {StringArray(prompts), StringArray(sources), reward_model});
  WriteArrowTable(path, table, /*rows_per_group=*/3);

  auto loaded = LoadDataset(path, {.prompt_key = "question"});
  REQUIRE(loaded.ok());
  REQUIRE(loaded->size() == n);
  for (int i = 0; i < n; ++i) {
    const Example& e = (*loaded)[i];
    CHECK(e.prompt == std::vector<ChatMessage>{{"user", "question " + std::to_string(i)}});
    CHECK(e.ground_truth == std::to_string(100 + i));
    CHECK(e.extra_info_json == "{}");
    CHECK(e.row == i);
  }

  // The default prompt key is missing here: the error names it and lists the columns present.
  auto missing = LoadDataset(path);
  REQUIRE(missing.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(Message(missing.status()), Catch::Contains(path) && Catch::Contains("missing required column 'prompt'") &&
                                            Catch::Contains("question, data_source, reward_model"));
}

TEST_CASE("Parquet with large strings, dictionary columns and nested extra_info") {
  TestDir dir;
  const std::string path = dir.file("types.parquet");
  arrow::LargeStringBuilder content_builder, role_builder;
  REQUIRE(content_builder.AppendValues({"hello", "again"}).ok());
  REQUIRE(role_builder.AppendValues({"user", "user"}).ok());
  auto messages = arrow::StructArray::Make({content_builder.Finish().ValueOrDie(), role_builder.Finish().ValueOrDie()},
                                           {arrow::field("content", arrow::large_utf8()),
                                            arrow::field("role", arrow::large_utf8())})
                      .ValueOrDie();
  arrow::Int32Builder offsets;
  REQUIRE(offsets.AppendValues({0, 1, 2}).ok());
  auto prompt = arrow::ListArray::FromArrays(*offsets.Finish().ValueOrDie(), *messages).ValueOrDie();
  arrow::StringDictionaryBuilder source_builder;
  REQUIRE(source_builder.Append("openai/gsm8k").ok());
  REQUIRE(source_builder.Append("openai/gsm8k").ok());
  auto sources = source_builder.Finish().ValueOrDie();
  arrow::DoubleBuilder weight_builder;
  REQUIRE(weight_builder.AppendValues({1.5, 2.0}).ok());
  auto inner = arrow::StructArray::Make({weight_builder.Finish().ValueOrDie()}, {arrow::field("w", arrow::float64())})
                   .ValueOrDie();
  auto extra = arrow::StructArray::Make({inner, StringArray({"a", std::nullopt})},
                                        {arrow::field("inner", inner->type()), arrow::field("tag", arrow::utf8())})
                   .ValueOrDie();
  auto table = arrow::Table::Make(
      arrow::schema({arrow::field("prompt", prompt->type()), arrow::field("data_source", sources->type()),
                     arrow::field("extra_info", extra->type())}),
      {prompt, sources, extra});
  WriteArrowTable(path, table, 1);

  auto loaded = LoadDataset(path);
  REQUIRE(loaded.ok());
  REQUIRE(loaded->size() == 2);
  CHECK((*loaded)[1].prompt == std::vector<ChatMessage>{{"user", "again"}});
  CHECK((*loaded)[1].data_source == "openai/gsm8k");
  CHECK((*loaded)[0].extra_info_json == R"({"inner":{"w":1.5},"tag":"a"})");
  CHECK((*loaded)[1].extra_info_json == R"({"inner":{"w":2.0}})");  // null fields are dropped
}

TEST_CASE("Floating ground truth is written in its shortest form") {
  TestDir dir;
  const std::string path = dir.file("float.jsonl");
  WriteText(path, R"({"prompt": "q", "data_source": "s", "reward_model": {"ground_truth": 18.0}})" "\n"
                  R"({"prompt": "q", "data_source": "s", "reward_model": {"ground_truth": 0.25}})" "\n");
  auto loaded = LoadDataset(path);
  REQUIRE(loaded.ok());
  CHECK((*loaded)[0].ground_truth == "18");
  CHECK((*loaded)[1].ground_truth == "0.25");
}

TEST_CASE("Loading errors name the file, the row and the column") {
  TestDir dir;

  SECTION("missing file") {
    auto result = LoadDataset(dir.file("nope.parquet"));
    REQUIRE(result.status().code() == absl::StatusCode::kNotFound);
    CHECK_THAT(Message(result.status()), Catch::Contains("nope.parquet"));
  }

  SECTION("unknown extension") {
    WriteText(dir.file("data.csv"), "a,b\n");
    auto result = LoadDataset(dir.file("data.csv"));
    REQUIRE(result.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(Message(result.status()), Catch::Contains("data.csv") && Catch::Contains(".jsonl"));
  }

  SECTION("not a Parquet file") {
    WriteText(dir.file("bad.parquet"), "this is not parquet");
    auto result = LoadDataset(dir.file("bad.parquet"));
    REQUIRE(!result.ok());
    CHECK_THAT(Message(result.status()), Catch::Contains("bad.parquet"));
  }

  SECTION("Parquet null data_source at row 2") {
    const std::string path = dir.file("null.parquet");
    auto table = arrow::Table::Make(
        arrow::schema({arrow::field("prompt", arrow::utf8()), arrow::field("data_source", arrow::utf8())}),
        {StringArray({"a", "b", "c"}), StringArray({"s", "s", std::nullopt})});
    WriteArrowTable(path, table, 2);
    auto result = LoadDataset(path);
    REQUIRE(result.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(Message(result.status()) == path + ": row 2: column 'data_source': expected a string, got null");
  }

  SECTION("Parquet prompt messages without a role") {
    const std::string path = dir.file("norole.parquet");
    auto content = StringArray({"hi"});
    auto messages = arrow::StructArray::Make({content}, {arrow::field("content", arrow::utf8())}).ValueOrDie();
    arrow::Int32Builder offset_builder;
    REQUIRE(offset_builder.AppendValues({0, 1}).ok());
    auto prompt = arrow::ListArray::FromArrays(*offset_builder.Finish().ValueOrDie(), *messages).ValueOrDie();
    auto table = arrow::Table::Make(
        arrow::schema({arrow::field("prompt", prompt->type()), arrow::field("data_source", arrow::utf8())}),
        {prompt, StringArray({"s"})});
    WriteArrowTable(path, table, 10);
    auto result = LoadDataset(path);
    REQUIRE(result.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(Message(result.status()),
               Catch::StartsWith(path + ": row 0: column 'prompt': expected a list of {role, content}"));
  }

  SECTION("JSONL malformed line names its line number") {
    const std::string path = dir.file("bad.jsonl");
    WriteText(path, R"({"prompt": "a", "data_source": "s"})" "\n\n" R"({"prompt": "b", "data_source": )" "\n");
    auto result = LoadDataset(path);
    REQUIRE(result.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(Message(result.status()), Catch::StartsWith(path + ": line 3: malformed JSON"));
  }

  SECTION("JSONL wrong type") {
    const std::string path = dir.file("type.jsonl");
    WriteText(path, R"({"prompt": "a", "data_source": "s"})" "\n" R"({"prompt": 5, "data_source": "s"})" "\n");
    auto result = LoadDataset(path);
    REQUIRE(result.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(Message(result.status()) ==
          path + ": line 2: column 'prompt': expected a list of {role, content}, got number");
  }

  SECTION("JSONL bad ground truth and extra_info") {
    const std::string path = dir.file("gt.jsonl");
    WriteText(path, R"({"prompt": "a", "data_source": "s", "reward_model": {"ground_truth": [1]}})" "\n");
    CHECK_THAT(Message(LoadDataset(path).status()),
               Catch::Contains("line 1: column 'reward_model': expected ground_truth to be a string or number"));
    WriteText(path, R"({"prompt": "a", "data_source": "s", "extra_info": 3})" "\n");
    CHECK_THAT(Message(LoadDataset(path).status()), Catch::Contains("line 1: column 'extra_info'"));
  }

  SECTION("JSONL missing column lists the keys present") {
    const std::string path = dir.file("missing.jsonl");
    WriteText(path, R"({"prompt": "a", "source": "s"})" "\n");
    auto result = LoadDataset(path);
    CHECK_THAT(Message(result.status()),
               Catch::Contains("line 1: missing required column 'data_source' (columns present: prompt, source)"));
  }

  SECTION("empty dataset") {
    const std::string path = dir.file("empty.jsonl");
    WriteText(path, "\n  \n");
    auto result = LoadDataset(path);
    REQUIRE(result.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(Message(result.status()) == path + ": dataset has no rows");
  }
}

TEST_CASE("Writing errors") {
  TestDir dir;
  std::vector<Example> examples = SampleExamples();
  CHECK(WriteParquet(dir.file("e.parquet"), {}).code() == absl::StatusCode::kInvalidArgument);
  CHECK(WriteJsonl(dir.file("e.jsonl"), {}).code() == absl::StatusCode::kInvalidArgument);
  examples[1].extra_info_json = "[1, 2]";
  CHECK_THAT(Message(WriteParquet(dir.file("x.parquet"), examples)), Catch::Contains("row 1: extra_info_json"));
  CHECK_THAT(Message(WriteJsonl(dir.file("x.jsonl"), examples)), Catch::Contains("row 1: extra_info_json"));
  const std::string nowhere = dir.file("no/such/dir/x.parquet");
  CHECK(!WriteParquet(nowhere, SampleExamples()).ok());
  CHECK(!WriteJsonl(dir.file("no/such/dir/x.jsonl"), SampleExamples()).ok());
  CHECK(!std::filesystem::exists(dir.file("x.parquet")));
  CHECK(!std::filesystem::exists(dir.file("x.jsonl")));
}

}  // namespace
}  // namespace verl
