#include <catch2/catch.hpp>

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/metrics/console_sink.h"
#include "common/metrics/jsonl_sink.h"
#include "common/metrics/metrics_util.h"
#include "common/metrics/multi_sink.h"
#include "tests/test_dir.h"

namespace verl {
namespace {

namespace fs = std::filesystem;

using TempDir = testing::TestDir;

std::vector<std::string> ReadLines(const fs::path& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

TEST_CASE("JsonlSink writes verl's file-logger lines that parse back", "[metrics]") {
  TempDir dir;
  const fs::path path = fs::path(dir.path()) / "outputs" / "proj" / "exp" / "metrics.jsonl";  // parents do not exist yet
  auto sink = JsonlSink::Open(path.string());
  INFO(sink.status().ToString());
  REQUIRE(sink.ok());
  REQUIRE((*sink)->Log(1, {{"actor/pg_loss", -0.012}, {"critic/score/mean", 0.5}}).ok());
  REQUIRE((*sink)->Log(2, {{"actor/pg_loss", std::numeric_limits<double>::quiet_NaN()},
                           {"perf/throughput", std::numeric_limits<double>::infinity()},
                           {"timing_s/step", 1.25}})
              .ok());
  // Flushed per line: readable before Close().
  std::vector<std::string> lines = ReadLines(path);
  REQUIRE(lines.size() == 2);
  CHECK(lines[0] == R"({"step":1,"data":{"actor/pg_loss":-0.012,"critic/score/mean":0.5}})");

  const auto second = nlohmann::json::parse(lines[1]);
  CHECK(second["step"] == 2);
  CHECK(second["data"]["actor/pg_loss"].is_null());
  CHECK(second["data"]["perf/throughput"].is_null());
  CHECK(second["data"]["timing_s/step"] == 1.25);
  REQUIRE((*sink)->Close().ok());
  CHECK((*sink)->Log(3, {}).code() == absl::StatusCode::kFailedPrecondition);

  SECTION("reopening appends, as a resumed job does") {
    auto again = JsonlSink::Open(path.string());
    REQUIRE(again.ok());
    REQUIRE((*again)->Log(3, {{"actor/pg_loss", 0.25}}).ok());
    REQUIRE((*again)->Close().ok());
    lines = ReadLines(path);
    REQUIRE(lines.size() == 3);
    const auto third = nlohmann::json::parse(lines[2]);
    CHECK(third["step"] == 3);
    CHECK(third["data"]["actor/pg_loss"] == 0.25);
  }
}

TEST_CASE("JsonlSink round-trips doubles exactly", "[metrics]") {
  const double v = 0.1 + 0.2;
  const auto parsed = nlohmann::json::parse(JsonlSink::FormatLine(7, {{"x", v}, {"y", 1e-300}}));
  CHECK(parsed["data"]["x"].get<double>() == v);
  CHECK(parsed["data"]["y"].get<double>() == 1e-300);
}

TEST_CASE("JsonlSink::KeepStepsUpTo drops later steps and a line torn by a crash, keeps the rest", "[metrics]") {
  TempDir dir;
  const fs::path path = fs::path(dir.path()) / "metrics.jsonl";
  std::ofstream(path) << JsonlSink::FormatLine(1, {{"x", 1}}) << "\n"
                      << "not json, kept: nothing a user wrote is lost\n"
                      << JsonlSink::FormatLine(2, {{"x", 2}}) << "\n"
                      << JsonlSink::FormatLine(3, {{"x", 3}}) << "\n"
                      << R"({"step":4,"data":{"actor/grad_n)";  // killed mid-write: no newline
  REQUIRE(JsonlSink::KeepStepsUpTo(path.string(), 2).ok());
  const std::vector<std::string> lines = ReadLines(path);
  REQUIRE(lines.size() == 3);
  CHECK(nlohmann::json::parse(lines[0])["step"] == 1);
  CHECK(lines[1] == "not json, kept: nothing a user wrote is lost");
  CHECK(nlohmann::json::parse(lines[2])["step"] == 2);
  // A missing file is nothing to trim.
  CHECK(JsonlSink::KeepStepsUpTo((fs::path(dir.path()) / "absent.jsonl").string(), 2).ok());
}

TEST_CASE("JsonlSink reports a path it cannot open", "[metrics]") {
  TempDir dir;
  const fs::path blocker = fs::path(dir.path()) / "file";
  std::ofstream(blocker) << "x";
  auto sink = JsonlSink::Open((blocker / "metrics.jsonl").string());  // parent is a regular file
  REQUIRE_FALSE(sink.ok());
  CHECK(std::string(sink.status().message()).find((blocker / "metrics.jsonl").string()) != std::string::npos);
}

TEST_CASE("ConsoleSink line format", "[metrics]") {
  std::ostringstream out;
  ConsoleSink sink(&out, 60);
  const std::map<std::string, double> metrics = {
      {"critic/score/mean", 0.43},   {"actor/pg_loss", -0.012}, {"actor/kl_loss", 0.0012},
      {"response_length/mean", 7.9}, {"timing_s/step", 1.21},   {"unshown/metric", 5.0},
  };
  REQUIRE(sink.Log(12, metrics).ok());
  CHECK(out.str() ==
        "step 12/60 [####----------------] 20% | score 0.43 | pg_loss -0.012 | kl 0.0012 | resp_len 7.9 | "
        "1.21 s/step | ETA 0:58\n");

  SECTION("missing keys are skipped; validation metrics are appended") {
    CHECK(sink.FormatLine(0, {{"val-core/openai/gsm8k/reward/mean@1", 0.25}}) ==
          "step 0/60 [--------------------] 0% | val openai/gsm8k/reward/mean@1 0.25");
  }
  SECTION("the last step") {
    CHECK(sink.FormatLine(60, {{"timing_s/step", 2.0}}) ==
          "step 60/60 [####################] 100% | 2 s/step | ETA 0:00");
  }
  SECTION("unknown total: no bar, no ETA") {
    ConsoleSink open_ended(&out, 0);
    CHECK(open_ended.FormatLine(3, {{"actor/entropy", 1.5}, {"timing_s/step", 3}}) ==
          "step 3 | entropy 1.5 | 3 s/step");
  }
  SECTION("custom fields and options") {
    ConsoleSink::Options options;
    options.bar_width = 4;
    options.show_val_core = false;
    ConsoleSink custom(&out, 4, {{"perf/throughput", "tok/s", true}}, options);
    CHECK(custom.FormatLine(2, {{"perf/throughput", 12345.6}, {"val-core/x", 1}}) ==
          "step 2/4 [##--] 50% | 12346 tok/s");
  }
}

TEST_CASE("ConsoleSink number and duration formatting", "[metrics]") {
  CHECK(ConsoleSink::FormatNumber(0.0) == "0");
  CHECK(ConsoleSink::FormatNumber(0.000012) == "1.2e-05");
  CHECK(ConsoleSink::FormatNumber(123.456) == "123");
  CHECK(ConsoleSink::FormatNumber(std::nan("")) == "nan");
  CHECK(ConsoleSink::FormatDuration(58.08) == "0:58");
  CHECK(ConsoleSink::FormatDuration(3725) == "1:02:05");
  CHECK(ConsoleSink::FormatDuration(-1) == "?");
}

TEST_CASE("MultiSink fans out", "[metrics]") {
  TempDir dir;
  std::ostringstream out;
  MultiSink multi;
  multi.Add(std::make_unique<ConsoleSink>(&out, 2));
  auto jsonl = JsonlSink::Open((fs::path(dir.path()) / "m.jsonl").string());
  REQUIRE(jsonl.ok());
  multi.Add(*std::move(jsonl));
  REQUIRE(multi.Log(1, {{"actor/pg_loss", 1.0}}).ok());
  REQUIRE(multi.Close().ok());
  CHECK(out.str() == "step 1/2 [##########----------] 50% | pg_loss 1\n");
  CHECK(ReadLines(fs::path(dir.path()) / "m.jsonl").size() == 1);
  CHECK_FALSE(multi.Log(2, {}).ok());
}

TEST_CASE("ReduceMeanMaxMin and SanitizeMetricName", "[metrics]") {
  const auto m = ReduceMeanMaxMin("critic/score", {1.0, 0.0, 0.5});
  REQUIRE(m.size() == 3);
  CHECK(m.at("critic/score/mean") == 0.5);
  CHECK(m.at("critic/score/max") == 1.0);
  CHECK(m.at("critic/score/min") == 0.0);
  CHECK(ReduceMeanMaxMin("x", {}).empty());
  CHECK(std::isnan(ReduceMeanMaxMin("x", {1.0, std::nan("")}).at("x/mean")));

  CHECK(SanitizeMetricName("actor/pg_loss") == "verl_actor_pg_loss");
  CHECK(SanitizeMetricName("timing_s/gen") == "verl_timing_s_gen");
  CHECK(SanitizeMetricName("val-core/openai/gsm8k/reward/mean@4") ==
        "verl_val_core_openai_gsm8k_reward_mean_at_4");
}

}  // namespace
}  // namespace verl

#include "common/metrics/crc32c.h"
#include "common/metrics/tensorboard_sink.h"
#include "tests/test_dir.h"

namespace verl {
namespace {

TEST_CASE("CRC-32C matches the standard check value", "[metrics][tensorboard]") {
  const char* check = "123456789";
  CHECK(Crc32c(check, 9) == 0xE3069283u);
  CHECK(Crc32c("", 0) == 0u);
  const uint32_t crc = Crc32c(check, 9);
  CHECK(MaskedCrc32c(check, 9) == static_cast<uint32_t>(((crc >> 15) | (crc << 17)) + 0xa282ead8u));
}

TEST_CASE("TensorBoard event files round-trip scalars and detect corruption", "[metrics][tensorboard]") {
  testing::TestDir dir("tensorboard");
  std::string path;
  {
    auto sink = TensorBoardSink::Open(dir.file("tb"));
    REQUIRE(sink.ok());
    path = (*sink)->path();
    REQUIRE((*sink)->Log(1, {{"critic/score/mean", 0.25}, {"actor/pg_loss", -0.5}}).ok());
    REQUIRE((*sink)->Log(2, {{"critic/score/mean", 0.75}, {"bad", std::nan("")}}).ok());
    REQUIRE((*sink)->Log(3, {{"critic/score/min", 0.0}}).ok());  // zeros must reach the file too
    REQUIRE((*sink)->LogText(3, "val/generations", "**Input:** 1 + 1\n\n**Output:** 2\n\n").ok());
  }
  auto scalars = ReadTensorBoardScalars(path);
  INFO(scalars.status().ToString());
  REQUIRE(scalars.ok());
  REQUIRE(scalars->size() == 4);  // the NaN is skipped; the text is no scalar
  auto texts = ReadTensorBoardTexts(path);
  REQUIRE(texts.ok());
  REQUIRE(texts->size() == 1);
  CHECK((*texts)[0].step == 3);
  CHECK((*texts)[0].tag == "val/generations");
  CHECK((*texts)[0].text == "**Input:** 1 + 1\n\n**Output:** 2\n\n");
  CHECK((*scalars)[3].step == 3);
  CHECK((*scalars)[3].tag == "critic/score/min");
  CHECK((*scalars)[3].value == 0.0f);
  CHECK((*scalars)[0].step == 1);
  CHECK((*scalars)[0].tag == "actor/pg_loss");
  CHECK((*scalars)[0].value == -0.5f);
  CHECK((*scalars)[2].step == 2);
  CHECK((*scalars)[2].tag == "critic/score/mean");
  CHECK((*scalars)[2].value == 0.75f);

  // Flip one byte of the last record's data: the reader names the file and the offset.
  std::string bytes = testing::ReadFile(path);
  bytes[bytes.size() - 6] ^= 0x5a;
  testing::WriteFile(path, bytes);
  auto corrupt = ReadTensorBoardScalars(path);
  REQUIRE(corrupt.status().code() == absl::StatusCode::kDataLoss);
  CHECK(std::string(corrupt.status().message()).find(path) != std::string::npos);
}

}  // namespace
}  // namespace verl
