#include "common/data/synthetic_tasks.h"

#include <array>
#include <random>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace verl {
namespace {

// The instruction verl's examples/data_preprocess/gsm8k.py appends to every question.
constexpr char kGsm8kInstruction[] = "Let's think step by step and output the final answer after \"####\".";

// A per-(seed, split) engine; std::seed_seq and mt19937_64 are fully specified by the standard.
std::mt19937_64 MakeEngine(uint64_t seed, const std::string& split) {
  uint32_t split_hash = 2166136261u;  // FNV-1a
  for (unsigned char c : split) split_hash = (split_hash ^ c) * 16777619u;
  std::seed_seq seq{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32), split_hash};
  return std::mt19937_64(seq);
}

// Uniform in [lo, hi] by rejection, identical across standard libraries.
int64_t Uniform(std::mt19937_64& rng, int64_t lo, int64_t hi) {
  const uint64_t range = static_cast<uint64_t>(hi - lo) + 1;
  const uint64_t threshold = (0 - range) % range;
  uint64_t r = rng();
  while (r < threshold) r = rng();
  return lo + static_cast<int64_t>(r % range);
}

Example RepeatLetter(std::mt19937_64& rng, const std::string& split, int64_t index) {
  const std::string letter(1, "abcd"[Uniform(rng, 0, 3)]);
  Example example;
  example.prompt = {{"user", absl::StrCat("Repeat the letter ", letter, ".")}};
  example.data_source = "verl_cpp/repeat_letter";
  example.ground_truth = letter;
  example.extra_info_json = nlohmann::json{{"split", split}, {"index", index}}.dump();
  example.row = index;
  return example;
}

Example Gsm8kSynthetic(std::mt19937_64& rng, const std::string& split, int64_t index) {
  struct Person {
    const char* name;
    const char* pronoun;
  };
  static constexpr std::array<Person, 6> kPeople = {
      {{"Tom", "he"}, {"Sara", "she"}, {"Ali", "he"}, {"Mia", "she"}, {"Ken", "he"}, {"Lena", "she"}}};
  static constexpr std::array<const char*, 6> kItems = {"apples", "pencils", "marbles", "stickers", "cookies", "books"};
  const Person& who = kPeople[Uniform(rng, 0, kPeople.size() - 1)];
  const std::string item = kItems[Uniform(rng, 0, kItems.size() - 1)];
  std::string question;
  std::string working;
  int64_t answer = 0;
  switch (Uniform(rng, 0, 3)) {
    case 0: {
      const int64_t a = Uniform(rng, 2, 50), b = Uniform(rng, 2, 50);
      answer = a + b;
      question = absl::StrCat(who.name, " has ", a, " ", item, " and buys ", b, " more. How many ", item, " does ",
                              who.pronoun, " have now?");
      working = absl::StrCat(a, " + ", b, " = ", answer);
      break;
    }
    case 1: {
      const int64_t b = Uniform(rng, 1, 30), a = b + Uniform(rng, 1, 30);
      answer = a - b;
      question = absl::StrCat(who.name, " has ", a, " ", item, " and gives ", b, " to a friend. How many ", item,
                              " does ", who.pronoun, " have left?");
      working = absl::StrCat(a, " - ", b, " = ", answer);
      break;
    }
    case 2: {
      const int64_t a = Uniform(rng, 2, 12), b = Uniform(rng, 2, 12);
      answer = a * b;
      question = absl::StrCat("A box holds ", a, " ", item, ". How many ", item, " are in ", b, " boxes?");
      working = absl::StrCat(a, " * ", b, " = ", answer);
      break;
    }
    default: {
      const int64_t each = Uniform(rng, 2, 12), friends = Uniform(rng, 2, 9);
      answer = each;
      question = absl::StrCat(who.name, " shares ", each * friends, " ", item, " equally among ", friends,
                              " friends. How many ", item, " does each friend get?");
      working = absl::StrCat(each * friends, " / ", friends, " = ", answer);
      break;
    }
  }
  Example example;
  example.prompt = {{"user", absl::StrCat(question, " ", kGsm8kInstruction)}};
  example.data_source = "openai/gsm8k";
  example.ground_truth = absl::StrCat(answer);
  example.extra_info_json = nlohmann::json{{"split", split},
                                           {"index", index},
                                           {"question", question},
                                           {"answer", absl::StrCat(working, "\n#### ", answer)}}
                                .dump();
  example.row = index;
  return example;
}

Example DigitSums(std::mt19937_64& rng, const std::string& split, int64_t index) {
  const int64_t a = Uniform(rng, 1, 9), b = Uniform(rng, 1, 9);
  Example example;
  example.prompt = {{"user", absl::StrCat("What is ", a, " + ", b, "? Give the final answer after \"####\".")}};
  example.data_source = "verl_cpp/digit_sums";
  example.ground_truth = absl::StrCat(a + b);
  example.extra_info_json = nlohmann::json{{"split", split}, {"index", index}, {"a", a}, {"b", b}}.dump();
  example.row = index;
  return example;
}

}  // namespace

std::vector<std::string> SyntheticTaskNames() { return {kRepeatLetterTask, kGsm8kSyntheticTask, kDigitSumsTask}; }

absl::StatusOr<std::vector<Example>> MakeSyntheticTask(const std::string& task, const std::string& split, int64_t size,
                                                       uint64_t seed) {
  Example (*make)(std::mt19937_64&, const std::string&, int64_t) = nullptr;
  if (task == kRepeatLetterTask) {
    make = RepeatLetter;
  } else if (task == kGsm8kSyntheticTask) {
    make = Gsm8kSynthetic;
  } else if (task == kDigitSumsTask) {
    make = DigitSums;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("unknown synthetic task '", task,
                                                   "' (known: ", absl::StrJoin(SyntheticTaskNames(), ", "), ")"));
  }
  if (size <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("synthetic task '", task, "': size must be positive, got ", size));
  }
  std::mt19937_64 rng = MakeEngine(seed, split);
  std::vector<Example> examples;
  examples.reserve(size);
  for (int64_t i = 0; i < size; ++i) examples.push_back(make(rng, split, i));
  return examples;
}

}  // namespace verl
