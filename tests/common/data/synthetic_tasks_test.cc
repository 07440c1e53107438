#include "common/data/synthetic_tasks.h"

#include <catch2/catch.hpp>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

namespace verl {
namespace {

using nlohmann::json;

TEST_CASE("repeat_letter examples") {
  auto train = MakeSyntheticTask("repeat_letter", "train", 2048, 1);
  REQUIRE(train.ok());
  REQUIRE(train->size() == 2048);
  std::map<std::string, int> counts;
  for (size_t i = 0; i < train->size(); ++i) {
    const Example& e = (*train)[i];
    REQUIRE(e.prompt.size() == 1);
    CHECK(e.prompt[0].role == "user");
    CHECK(e.prompt[0].content == "Repeat the letter " + e.ground_truth + ".");
    CHECK(e.data_source == "verl_cpp/repeat_letter");
    CHECK(json::parse(e.extra_info_json) == json{{"split", "train"}, {"index", i}});
    CHECK(e.row == static_cast<int64_t>(i));
    ++counts[e.ground_truth];
  }
  REQUIRE(counts.size() == 4);
  for (const auto& [letter, count] : counts) {
    INFO(letter);
    CHECK(count > 420);  // expected 512 each
    CHECK(count < 600);
  }
}

TEST_CASE("Synthetic tasks are deterministic in the seed, and splits differ") {
  for (const std::string& task : SyntheticTaskNames()) {
    INFO(task);
    auto a = MakeSyntheticTask(task, "train", 50, 7);
    auto b = MakeSyntheticTask(task, "train", 50, 7);
    auto other_seed = MakeSyntheticTask(task, "train", 50, 8);
    auto test = MakeSyntheticTask(task, "test", 50, 7);
    REQUIRE(a.ok());
    CHECK(*a == *b);
    CHECK(*a != *other_seed);
    for (size_t i = 0; i < test->size(); ++i) (*test)[i].extra_info_json = (*a)[i].extra_info_json;
    CHECK(*a != *test);
  }
}

TEST_CASE("gsm8k_synthetic examples carry verl's instruction and a matching answer") {
  auto examples = MakeSyntheticTask("gsm8k_synthetic", "test", 200, 3);
  REQUIRE(examples.ok());
  for (const Example& e : *examples) {
    CHECK(e.data_source == "openai/gsm8k");
    CHECK_THAT(e.prompt[0].content,
               Catch::EndsWith("Let's think step by step and output the final answer after \"####\"."));
    const json extra = json::parse(e.extra_info_json);
    CHECK(extra["split"] == "test");
    CHECK_THAT(extra["answer"].get<std::string>(), Catch::EndsWith("\n#### " + e.ground_truth));
    CHECK(std::stoll(e.ground_truth) > 0);
  }
}

TEST_CASE("digit_sums covers every pair of digits with the sum as ground truth") {
  auto examples = MakeSyntheticTask("digit_sums", "train", 2000, 1);
  REQUIRE(examples.ok());
  std::set<std::pair<int, int>> pairs;
  for (const Example& e : *examples) {
    CHECK(e.data_source == "verl_cpp/digit_sums");
    const json extra = json::parse(e.extra_info_json);
    const int a = extra["a"].get<int>(), b = extra["b"].get<int>();
    CHECK(a >= 1);
    CHECK(a <= 9);
    CHECK(b >= 1);
    CHECK(b <= 9);
    CHECK(e.ground_truth == std::to_string(a + b));
    CHECK(e.prompt[0].content ==
          "What is " + std::to_string(a) + " + " + std::to_string(b) + "? Give the final answer after \"####\".");
    pairs.emplace(a, b);
  }
  CHECK(pairs.size() == 81);
}

TEST_CASE("Unknown synthetic task and bad size") {
  auto unknown = MakeSyntheticTask("nope", "train", 5, 1);
  REQUIRE(unknown.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(unknown.status().message()),
             Catch::Contains("'nope'") && Catch::Contains("repeat_letter, gsm8k_synthetic, digit_sums"));
  CHECK(MakeSyntheticTask("repeat_letter", "train", 0, 1).status().code() == absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace verl
