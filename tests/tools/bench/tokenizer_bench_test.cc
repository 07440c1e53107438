// Runs verl-bench-tokenizer as a subprocess: training mode writes a tokenizer the library loads, and the benchmark's
// token counts and id dump agree with the library's own Encode.

#include <catch2/catch.hpp>

#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/text/tokenizer.h"
#include "tests/test_dir.h"
#include "tests/tools/run_command.h"

namespace verl::testing {
namespace {

RunResult Bench(const std::vector<std::string>& args, const TestDir& dir) {
  return RunCommand(std::string(VERL_BINARY_DIR) + "/bin/verl-bench-tokenizer", args, dir);
}

const char* kCorpus =
    "The policy gradient moves the policy toward higher reward.\n"
    "  indented   code(x, y) = 12345 + 678;\n"
    "机器学习 🙂 emoji and CJK\n"
    "\n"
    "the the the reward reward policy\n"
    "no trailing newline";

TEST_CASE("verl-bench-tokenizer: trains a tokenizer and counts exactly the library's tokens", "[tools][bench]") {
  TestDir dir("tokbench");
  WriteFile(dir.file("corpus.txt"), kCorpus);
  RunResult train =
      Bench({"--train-merges", "40", "--corpus", dir.file("corpus.txt"), "--out", dir.file("tok.json")}, dir);
  INFO(train.err);
  REQUIRE(train.exit_code == 0);
  auto tok = Tokenizer::FromFile(dir.file("tok.json"));
  INFO(tok.status().ToString());
  REQUIRE(tok.ok());

  // Whole text: one Encode.
  RunResult whole = Bench({"--tokenizer", dir.file("tok.json"), "--corpus", dir.file("corpus.txt"), "--min-seconds",
                           "0.05", "--ids-out", dir.file("whole.ids")},
                          dir);
  INFO(whole.err);
  REQUIRE(whole.exit_code == 0);
  const nlohmann::json w = nlohmann::json::parse(whole.out);
  const std::vector<int32_t> expected = tok->Encode(kCorpus);
  CHECK(w["tokens"] == expected.size());
  CHECK(w["vocab"] == tok->vocab_size());
  CHECK(w["mode"] == "whole");
  CHECK(w["mb"].get<double>() == Approx(std::string(kCorpus).size() / 1e6));
  CHECK(w["iterations"].get<int64_t>() >= 1);
  CHECK(w["seconds"].get<double>() >= 0.05);
  CHECK(w["tokens_per_s"].get<double>() > 0);
  std::ostringstream ids;
  for (size_t i = 0; i < expected.size(); ++i) ids << (i ? " " : "") << expected[i];
  CHECK(ReadFile(dir.file("whole.ids")) == ids.str() + "\n");

  // Per line, "\n" kept: one ids line per text line (6 here: the last line has no newline).
  RunResult lines = Bench({"--tokenizer", dir.file("tok.json"), "--corpus", dir.file("corpus.txt"), "--mode",
                           "lines", "--min-seconds", "0", "--ids-out", dir.file("lines.ids")},
                          dir);
  INFO(lines.err);
  REQUIRE(lines.exit_code == 0);
  const nlohmann::json l = nlohmann::json::parse(lines.out);
  CHECK(l["texts"] == 6);
  std::istringstream in(ReadFile(dir.file("lines.ids")));
  std::istringstream text(kCorpus);
  std::string id_line, text_line;
  int64_t total = 0;
  int count = 0;
  while (std::getline(in, id_line)) {
    REQUIRE(std::getline(text, text_line));
    if (!text.eof()) text_line += "\n";
    std::ostringstream want;
    const std::vector<int32_t> e = tok->Encode(text_line);
    for (size_t i = 0; i < e.size(); ++i) want << (i ? " " : "") << e[i];
    CHECK(id_line == want.str());
    total += static_cast<int64_t>(e.size());
    ++count;
  }
  CHECK(count == 6);
  CHECK(l["tokens"] == total);
}

TEST_CASE("verl-bench-tokenizer: usage errors exit 2, runtime errors exit 1", "[tools][bench]") {
  TestDir dir("tokbench_err");
  WriteFile(dir.file("corpus.txt"), kCorpus);
  RunResult r = Bench({"--corpus", dir.file("corpus.txt"), "--frobnicate", "1"}, dir);
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("--frobnicate") != std::string::npos);

  r = Bench({"--tokenizer", dir.file("tok.json"), "--corpus", dir.file("corpus.txt"), "--mode", "words"}, dir);
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("--mode") != std::string::npos);

  r = Bench({"--tokenizer", dir.file("tok.json"), "--corpus", dir.file("missing.txt")}, dir);
  CHECK(r.exit_code == 1);
  CHECK(r.err.find("missing.txt") != std::string::npos);

  r = Bench({"--tokenizer", dir.file("no_tokenizer.json"), "--corpus", dir.file("corpus.txt")}, dir);
  CHECK(r.exit_code == 1);
  CHECK(r.err.find("no_tokenizer.json") != std::string::npos);
}

}  // namespace
}  // namespace verl::testing
