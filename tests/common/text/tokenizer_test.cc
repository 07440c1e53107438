#include "common/text/tokenizer.h"

#include <catch2/catch.hpp>

#include <map>
#include <string>
#include <thread>
#include <vector>

#include "common/text/byte_level.h"
#include "common/text/regex_splitter.h"
#include "nlohmann/json.hpp"
#include "tests/common/text/text_test_util.h"

namespace verl {
namespace {

using Ids = std::vector<int32_t>;

// GPT-2's bytes_to_unicode, written out independently of common/text/byte_level.cc.
std::map<int, std::string> ReferenceByteSymbols() {
  std::vector<int> printable;
  for (int b = '!'; b <= '~'; ++b) printable.push_back(b);
  for (int b = 0xA1; b <= 0xAC; ++b) printable.push_back(b);
  for (int b = 0xAE; b <= 0xFF; ++b) printable.push_back(b);
  std::map<int, int> code_point;
  for (int b : printable) code_point[b] = b;
  int next = 256;
  for (int b = 0; b < 256; ++b) {
    if (!code_point.count(b)) code_point[b] = next++;
  }
  std::map<int, std::string> out;
  for (auto [b, cp] : code_point) {
    std::string s;
    if (cp < 0x80) {
      s.push_back(static_cast<char>(cp));
    } else {
      s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
    out[b] = s;
  }
  return out;
}

// A hand-made Qwen2-style tokenizer: the 256 byte symbols (id = byte value), eleven merges (ids 256..266), a hole,
// then added tokens 300..303 ("<tool>" is not special).
const char* const kMerges[] = {"h e", "l l", "he ll", "hell o", "\xC4\xA0 w", "o r", "\xC4\xA0w or",
                               "\xC3\x83 \xC2\xBC",  // "Ã ¼": the two byte symbols of "ü" (C3 BC).
                               "1 2", "a a", "aa aa"};

nlohmann::json HandTokenizerJson(bool merges_as_pairs) {
  nlohmann::json vocab = nlohmann::json::object();
  for (const auto& [b, symbol] : ReferenceByteSymbols()) vocab[symbol] = b;
  nlohmann::json merges = nlohmann::json::array();
  int id = 256;
  for (const char* m : kMerges) {
    const std::string line = m;
    const size_t space = line.find(' ');
    vocab[line.substr(0, space) + line.substr(space + 1)] = id++;
    if (merges_as_pairs) {
      merges.push_back({line.substr(0, space), line.substr(space + 1)});
    } else {
      merges.push_back(line);
    }
  }
  nlohmann::json added = nlohmann::json::array();
  const std::vector<std::pair<std::string, bool>> tokens = {
      {"<|endoftext|>", true}, {"<|im_start|>", true}, {"<|im_end|>", true}, {"<tool>", false}};
  for (size_t i = 0; i < tokens.size(); ++i) {
    added.push_back({{"id", 300 + i},
                     {"content", tokens[i].first},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", tokens[i].second}});
  }
  const nlohmann::json byte_level = {
      {"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}};
  return {{"version", "1.0"},
          {"added_tokens", added},
          {"normalizer", {{"type", "NFC"}}},
          {"pre_tokenizer",
           {{"type", "Sequence"},
            {"pretokenizers",
             {{{"type", "Split"},
               {"pattern", {{"Regex", std::string(kQwen2SplitPattern)}}},
               {"behavior", "Isolated"},
               {"invert", false}},
              byte_level}}}},
          {"post_processor", nullptr},
          {"decoder", byte_level},
          {"model",
           {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"vocab", vocab}, {"merges", merges}}}};
}

Tokenizer HandTokenizer(bool merges_as_pairs = false) {
  testing::TempDir dir;
  const std::string path = dir.Write("tokenizer.json", HandTokenizerJson(merges_as_pairs).dump());
  absl::StatusOr<Tokenizer> tok = Tokenizer::FromFile(path);
  INFO(tok.status().ToString());
  REQUIRE(tok.ok());
  return *tok;
}

std::vector<std::string> SplitQwen2(std::string_view text) {
  absl::StatusOr<RegexSplitter> splitter = RegexSplitter::Create(kQwen2SplitPattern);
  REQUIRE(splitter.ok());
  std::vector<std::string_view> pieces;
  splitter->Split(text, RegexSplitter::Behavior::kIsolated, &pieces);
  return {pieces.begin(), pieces.end()};
}

TEST_CASE("byte-level alphabet matches GPT-2's bytes_to_unicode") {
  const auto reference = ReferenceByteSymbols();
  for (int b = 0; b < 256; ++b) REQUIRE(ByteLevelSymbol(static_cast<uint8_t>(b)) == reference.at(b));
  REQUIRE(ByteLevelSymbol(' ') == "\xC4\xA0");     // "Ġ" U+0120
  REQUIRE(ByteLevelSymbol('\n') == "\xC4\x8A");    // "Ċ" U+010A
  REQUIRE(ByteLevelSymbol(0xAD) == "\xC5\x83");    // "Ń" U+0143
  REQUIRE(ByteLevelToBytes("\xC4\xA0w") == std::string(" w"));
  REQUIRE_FALSE(ByteLevelToBytes(" w").has_value());  // A plain space is not a byte-level symbol.
}

TEST_CASE("Qwen2 regex splits tricky strings like HF tokenizers") {
  REQUIRE(SplitQwen2("Hello world!!\n\n  x") == std::vector<std::string>{"Hello", " world", "!!\n\n", " ", " x"});
  REQUIRE(SplitQwen2("it's 123 \xC3\xBCn\xC3\xAF" "c\xC3\xB6" "d\xC3\xA9") ==
          std::vector<std::string>{"it", "'s", " ", "1", "2", "3", " \xC3\xBCn\xC3\xAF" "c\xC3\xB6" "d\xC3\xA9"});
  REQUIRE(SplitQwen2("I'LL don't") == std::vector<std::string>{"I", "'LL", " don", "'t"});
  REQUIRE(SplitQwen2("  \n\n x") == std::vector<std::string>{"  \n\n", " x"});
  REQUIRE(SplitQwen2("a\tb  c\r\n") == std::vector<std::string>{"a", "\tb", " ", " c", "\r\n"});
  REQUIRE(SplitQwen2("2024") == std::vector<std::string>{"2", "0", "2", "4"});
  // Invalid UTF-8 does not stop the split and no byte is lost.
  const std::string invalid = "ab\xFF\xC3(cd";
  std::string joined;
  for (const std::string& piece : SplitQwen2(invalid)) joined += piece;
  REQUIRE(joined == invalid);
}

TEST_CASE("Encode matches hand-computed BPE merges") {
  const Tokenizer tok = HandTokenizer();
  REQUIRE(tok.Encode("hello") == Ids{259});
  REQUIRE(tok.Encode("hell") == Ids{258});
  REQUIRE(tok.Encode("hello world") == Ids{259, 262, 'l', 'd'});
  REQUIRE(tok.Encode("Hello world!!\n\n  x") ==
          Ids{'H', 'e', 257, 'o', 262, 'l', 'd', '!', '!', '\n', '\n', ' ', ' ', 'x'});
  REQUIRE(tok.Encode("123") == Ids{'1', '2', '3'});  // The merge "1 2" never applies: digits are split one by one.
  REQUIRE(tok.Encode("\xC3\xBC") == Ids{263});        // "ü"
  REQUIRE(tok.Encode("\xC3\x9C") == Ids{0xC3, 0x9C});  // "Ü" has no merge.
  REQUIRE(tok.Encode("u\xCC\x88") == Ids{263});       // "u" + U+0308 is NFC-normalized to "ü".
  REQUIRE(tok.Encode("it's 123 \xC3\xBCn\xC3\xAF" "c\xC3\xB6" "d\xC3\xA9") ==
          Ids{'i', 't', '\'', 's', ' ', '1', '2', '3', ' ', 263, 'n', 0xC3, 0xAF, 'c', 0xC3, 0xB6, 'd', 0xC3, 0xA9});
  REQUIRE(tok.Encode("").empty());
}

TEST_CASE("merges as [a, b] pairs load like \"a b\" strings") {
  const Tokenizer strings = HandTokenizer(false);
  const Tokenizer pairs = HandTokenizer(true);
  for (const char* text : {"hello world", "Hello world!!\n\n  x", "\xC3\xBC\xC3\xBC aaaaa 12"}) {
    REQUIRE(strings.Encode(text) == pairs.Encode(text));
  }
}

TEST_CASE("long words merge by rank, leftmost first") {
  const Tokenizer tok = HandTokenizer();
  // 63 symbols take the quadratic path, 200 and 201 the heap path; both must give leftmost-first merges.
  Ids expected63(15, 266);
  expected63.push_back(265);
  expected63.push_back('a');
  REQUIRE(tok.Encode(std::string(63, 'a')) == expected63);
  REQUIRE(tok.Encode(std::string(200, 'a')) == Ids(50, 266));
  Ids expected201(50, 266);
  expected201.push_back('a');
  REQUIRE(tok.Encode(std::string(201, 'a')) == expected201);
  REQUIRE(tok.Decode(tok.Encode(std::string(201, 'a'))) == std::string(201, 'a'));
}

TEST_CASE("special tokens in the middle of text") {
  const Tokenizer tok = HandTokenizer();
  REQUIRE(tok.Encode("hello<|im_end|>world") == Ids{259, 302, 'w', 261, 'l', 'd'});
  REQUIRE(tok.Encode("<|im_start|>user\nhello<|im_end|>\n") ==
          Ids{301, 'u', 's', 'e', 'r', '\n', 259, 302, '\n'});
  REQUIRE(tok.Encode("<|im_end|><|im_end|>") == Ids{302, 302});
  REQUIRE(tok.Encode("<|im_end") == Ids{'<', '|', 'i', 'm', '_', 'e', 'n', 'd'});
  // Without parse_special the special tokens are plain text; the non-special "<tool>" still matches.
  REQUIRE(tok.Encode("<|im_end|>", /*parse_special=*/false) ==
          Ids{'<', '|', 'i', 'm', '_', 'e', 'n', 'd', '|', '>'});
  REQUIRE(tok.Encode("a<tool>b", false) == Ids{'a', 303, 'b'});
  REQUIRE(tok.Encode("a<tool>b", true) == Ids{'a', 303, 'b'});
}

TEST_CASE("Decode reverses Encode") {
  const Tokenizer tok = HandTokenizer();
  for (const std::string text :
       {"hello world", "Hello world!!\n\n  x\t\r\n", "x = f(a, b) -> {'k': [1, 2]}", "",
        "it's 123 \xC3\xBCn\xC3\xAF" "c\xC3\xB6" "d\xC3\xA9",
        "\xE4\xB8\xAD\xE6\x96\x87 \xF0\x9F\x98\x80 \xD0\x9F\xD1\x80\xD0\xB8\xD0\xB2\xD0\xB5\xD1\x82",  // 中文 😀 Привет
        "<|im_start|>user\nhello<|im_end|>\n"}) {
    INFO(text);
    REQUIRE(tok.Decode(tok.Encode(text)) == text);
  }
}

TEST_CASE("Decode skips special tokens on request and unknown ids always") {
  const Tokenizer tok = HandTokenizer();
  REQUIRE(tok.Decode({259, 302, 119}) == "hello<|im_end|>w");
  REQUIRE(tok.Decode({259, 302, 119}, /*skip_special_tokens=*/true) == "hellow");
  REQUIRE(tok.Decode({'a', 303, 'b'}, true) == "a<tool>b");  // Not special: kept.
  REQUIRE(tok.Decode({259, 280, -1, 304, 1 << 30, 119}) == "hellow");  // A hole, negatives, beyond the vocab.
  REQUIRE(tok.Decode({0xC3}) == "\xC3");  // Half of "ü": the byte is kept, not replaced.
  REQUIRE(tok.Decode({0xC3, 0xBC}) == "\xC3\xBC");
}

TEST_CASE("vocabulary queries") {
  const Tokenizer tok = HandTokenizer();
  REQUIRE(tok.vocab_size() == 304);
  REQUIRE(tok.TokenToId("\xC4\xA0wor") == 262);  // "Ġwor"
  REQUIRE(tok.TokenToId("<tool>") == 303);
  REQUIRE(tok.TokenToId("<|endoftext|>") == 300);
  REQUIRE_FALSE(tok.TokenToId("nope").has_value());
  REQUIRE(tok.IdToToken(262) == "\xC4\xA0wor");
  REQUIRE(tok.IdToToken(301) == "<|im_start|>");
  REQUIRE(tok.IdToToken(280).empty());
  REQUIRE(tok.IdToToken(-5).empty());
  REQUIRE(tok.IsSpecial(302));
  REQUIRE_FALSE(tok.IsSpecial(303));
  REQUIRE_FALSE(tok.IsSpecial(259));
  REQUIRE_FALSE(tok.IsSpecial(100000));
}

TEST_CASE("GPT-2 style ByteLevel pre-tokenizer with add_prefix_space") {
  nlohmann::json j = HandTokenizerJson(false);
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", true}};
  absl::StatusOr<Tokenizer> tok = Tokenizer::FromJson(j.dump(), "gpt2-style");
  REQUIRE(tok.ok());
  // "hello" gets a prefix space: " hello" has no merge for "Ġ h", so it stays "Ġ" + "hello".
  REQUIRE(tok->Encode("hello world") == Ids{' ', 259, 262, 'l', 'd'});
  REQUIRE(tok->Encode(" hello") == Ids{' ', 259});
  REQUIRE(tok->Encode("123") == Ids{' ', 264, '3'});  // GPT-2's " ?\p{N}+" keeps " 123" whole, so "1 2" merges.
}

TEST_CASE("concurrent Encode calls agree") {
  const Tokenizer tok = HandTokenizer();
  const std::string text = "hello world, it's 123 \xC3\xBC<|im_end|> aaaaaaa hell";
  const Ids expected = tok.Encode(text);
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      const Tokenizer copy = tok;  // Copies share the cache.
      for (int i = 0; i < 300; ++i) {
        if (copy.Encode(text + std::to_string(i % 7)).size() < expected.size()) ++mismatches[t];
        if (copy.Encode(text) != expected) ++mismatches[t];
      }
    });
  }
  for (std::thread& t : threads) t.join();
  REQUIRE(mismatches == std::vector<int>(4, 0));
}

TEST_CASE("load errors name the file and the problem") {
  testing::TempDir dir;
  SECTION("missing file") {
    const std::string path = dir.Path("no_such_tokenizer.json");
    absl::StatusOr<Tokenizer> tok = Tokenizer::FromFile(path);
    REQUIRE(tok.status().code() == absl::StatusCode::kNotFound);
    REQUIRE_THAT(std::string(tok.status().message()), Catch::Contains(path));
  }
  SECTION("malformed JSON") {
    const std::string path = dir.Write("broken.json", "{\"model\": {\"type\": \"BPE\",");
    absl::StatusOr<Tokenizer> tok = Tokenizer::FromFile(path);
    REQUIRE(tok.status().code() == absl::StatusCode::kInvalidArgument);
    REQUIRE_THAT(std::string(tok.status().message()), Catch::Contains(path) && Catch::Contains("malformed JSON"));
  }
  SECTION("missing model") {
    absl::StatusOr<Tokenizer> tok = Tokenizer::FromJson(R"({"added_tokens": []})", "/m/tokenizer.json");
    REQUIRE(tok.status().code() == absl::StatusCode::kInvalidArgument);
    REQUIRE_THAT(std::string(tok.status().message()),
                 Catch::StartsWith("/m/tokenizer.json: ") && Catch::Contains("missing \"model\""));
  }
  SECTION("unsupported model type") {
    nlohmann::json j = HandTokenizerJson(false);
    j["model"]["type"] = "WordPiece";
    absl::StatusOr<Tokenizer> tok = Tokenizer::FromJson(j.dump(), "wp.json");
    REQUIRE(tok.status().code() == absl::StatusCode::kUnimplemented);
    REQUIRE_THAT(std::string(tok.status().message()), Catch::Contains("wp.json") && Catch::Contains("WordPiece"));
  }
  SECTION("bad merges entries") {
    nlohmann::json j = HandTokenizerJson(false);
    j["model"]["merges"][3] = "hello";
    absl::StatusOr<Tokenizer> tok = Tokenizer::FromJson(j.dump(), "m.json");
    REQUIRE_THAT(std::string(tok.status().message()), Catch::Contains("bad merges entry index 3"));
    j = HandTokenizerJson(false);
    j["model"]["merges"][5] = "q zz";
    tok = Tokenizer::FromJson(j.dump(), "m.json");
    REQUIRE_THAT(std::string(tok.status().message()),
                 Catch::Contains("bad merges entry index 5") && Catch::Contains("\"zz\""));
    j = HandTokenizerJson(false);
    j["model"]["merges"][0] = 7;
    tok = Tokenizer::FromJson(j.dump(), "m.json");
    REQUIRE_THAT(std::string(tok.status().message()), Catch::Contains("bad merges entry index 0"));
  }
  SECTION("unsupported pipeline parts") {
    nlohmann::json j = HandTokenizerJson(false);
    j["normalizer"] = {{"type", "Lowercase"}};
    REQUIRE_THAT(std::string(Tokenizer::FromJson(j.dump(), "n.json").status().message()),
                 Catch::Contains("Lowercase"));
    j = HandTokenizerJson(false);
    j["pre_tokenizer"] = {{"type", "Metaspace"}};
    REQUIRE(Tokenizer::FromJson(j.dump(), "p.json").status().code() == absl::StatusCode::kUnimplemented);
    j = HandTokenizerJson(false);
    j["model"]["byte_fallback"] = true;
    REQUIRE(Tokenizer::FromJson(j.dump(), "b.json").status().code() == absl::StatusCode::kUnimplemented);
    j = HandTokenizerJson(false);
    j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(unclosed";
    REQUIRE_THAT(std::string(Tokenizer::FromJson(j.dump(), "r.json").status().message()),
                 Catch::Contains("r.json") && Catch::Contains("regex"));
  }
}

}  // namespace
}  // namespace verl
