#include "common/text/bpe_trainer.h"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "common/text/tokenizer.h"
#include "nlohmann/json.hpp"
#include "tests/common/text/text_test_util.h"

namespace verl {
namespace {

using Ids = std::vector<int32_t>;
const std::vector<std::string> kSpecial = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};

std::vector<std::string> SmallCorpus() {
  return {"The quick brown fox jumps over the lazy dog.\n",
          "<|im_start|>user\nWhat is 12 + 30?<|im_end|>\n<|im_start|>assistant\nThe answer is 42.<|im_end|>\n",
          "the theory of the thing: there, then, these.\n",
          "Caf\xC3\xA9 na\xC3\xAFve \xE4\xB8\xAD\xE6\x96\x87 \xF0\x9F\x98\x80 -- \xC3\xBC\xC3\xBC\xC3\xBC\n",
          "    indented code(x) = y * 2;\n\n"};
}

TEST_CASE("trainer picks merges by weighted count, ties by lexicographic pair") {
  // Words: "ab" x1, " ab" x2, " cd" x1. Rounds: "a b" (3), "Ġ ab" (2), then "Ġ c", "c d" tie at 1 and "c" < "Ġ"
  // bytewise, so "c d", then "Ġ cd"; then no pair is left although 10 merges were asked for.
  absl::StatusOr<std::string> json = TrainByteLevelBpeTokenizerJson({"ab ab ab cd"}, 10, kSpecial);
  REQUIRE(json.ok());
  const nlohmann::json j = nlohmann::json::parse(*json);
  REQUIRE(j["model"]["merges"] ==
          nlohmann::json({"a b", "\xC4\xA0 ab", "c d", "\xC4\xA0 cd"}));
  REQUIRE(j["model"]["vocab"]["ab"] == 256);
  REQUIRE(j["model"]["vocab"]["\xC4\xA0" "cd"] == 259);
  REQUIRE(j["model"]["vocab"].size() == 260);
  REQUIRE(j["model"]["vocab"]["!"] == '!');
  REQUIRE(j["model"]["vocab"]["\xC4\x80"] == 0);  // Byte 0 is "Ā" U+0100.
  REQUIRE(j["added_tokens"].size() == 3);
  REQUIRE(j["added_tokens"][0]["id"] == 260);
  REQUIRE(j["added_tokens"][2]["content"] == "<|im_end|>");
  REQUIRE(j["added_tokens"][2]["id"] == 262);
  REQUIRE(j["added_tokens"][2]["special"] == true);
  REQUIRE(j["pre_tokenizer"]["pretokenizers"][0]["behavior"] == "Isolated");
  REQUIRE(j["pre_tokenizer"]["pretokenizers"][1]["use_regex"] == false);
  REQUIRE(j["decoder"]["type"] == "ByteLevel");
  REQUIRE(j["normalizer"]["type"] == "NFC");

  absl::StatusOr<Tokenizer> tok = Tokenizer::FromJson(*json, "trained");
  REQUIRE(tok.ok());
  REQUIRE(tok->Encode("ab ab cd") == Ids{256, 257, 259});
  REQUIRE(tok->Encode("ab<|im_end|>") == Ids{256, 262});
  REQUIRE(tok->vocab_size() == 263);
  REQUIRE(tok->IsSpecial(261));
}

TEST_CASE("trained tokenizer loads from a file and round-trips") {
  absl::StatusOr<std::string> json = TrainByteLevelBpeTokenizerJson(SmallCorpus(), 40, kSpecial);
  REQUIRE(json.ok());
  testing::TempDir dir;
  absl::StatusOr<Tokenizer> tok = Tokenizer::FromFile(dir.Write("tokenizer.json", *json));
  INFO(tok.status().ToString());
  REQUIRE(tok.ok());
  REQUIRE(tok->vocab_size() == 256 + 40 + 3);
  REQUIRE(tok->TokenToId("<|endoftext|>") == 296);
  REQUIRE(tok->TokenToId("<|im_end|>") == 298);
  for (const std::string& text : SmallCorpus()) {
    const Ids ids = tok->Encode(text);
    REQUIRE(ids.size() < text.size());  // The merges compress the training text.
    REQUIRE(tok->Decode(ids) == text);
  }
  const std::string unseen = "<|im_start|>system\nZebras \xE2\x9C\x93 99 bottles\t\r\n<|im_end|>";
  REQUIRE(tok->Decode(tok->Encode(unseen)) == unseen);
  REQUIRE(tok->Decode(tok->Encode(unseen), /*skip_special_tokens=*/true) == "system\nZebras \xE2\x9C\x93 99 bottles\t\r\n");
}

TEST_CASE("trainer is deterministic and ignores corpus order") {
  const auto first = TrainByteLevelBpeTokenizerJson(SmallCorpus(), 40, kSpecial);
  const auto second = TrainByteLevelBpeTokenizerJson(SmallCorpus(), 40, kSpecial);
  std::vector<std::string> reversed = SmallCorpus();
  std::reverse(reversed.begin(), reversed.end());
  const auto third = TrainByteLevelBpeTokenizerJson(reversed, 40, kSpecial);
  REQUIRE(first.ok());
  REQUIRE(second.ok());
  REQUIRE(third.ok());
  REQUIRE(*first == *second);
  REQUIRE(*first == *third);
}

TEST_CASE("special tokens in the corpus are not learned") {
  absl::StatusOr<std::string> json =
      TrainByteLevelBpeTokenizerJson({"<|im_end|><|im_end|>", "<|endoftext|>"}, 5, kSpecial);
  REQUIRE(json.ok());
  REQUIRE(nlohmann::json::parse(*json)["model"]["merges"].empty());
}

TEST_CASE("trainer rejects bad arguments") {
  REQUIRE(TrainByteLevelBpeTokenizerJson({"x"}, -1, kSpecial).status().code() ==
          absl::StatusCode::kInvalidArgument);
  REQUIRE_THAT(std::string(TrainByteLevelBpeTokenizerJson({"x"}, 1, {"<a>", "<a>"}).status().message()),
               Catch::Contains("repeated"));
  REQUIRE(TrainByteLevelBpeTokenizerJson({"x"}, 1, {""}).status().code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(TrainByteLevelBpeTokenizerJson({"x"}, 1, {"x"}).status().code() == absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace verl
