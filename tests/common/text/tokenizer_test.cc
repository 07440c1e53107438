#include "common/text/tokenizer.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <map>
#include <string>
#include <thread>
#include <tuple>
#include <variant>
#include <vector>

#include "common/text/byte_level.h"
#include "common/text/chat_template.h"
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

// How HF tokenizers (0.22.2, the wheel tools/hf pins) segments text around added tokens with lstrip, rstrip and
// single_word, seen with `Tokenizer.add_tokens([AddedToken("<L>", lstrip=True), ...])` on GPT-2's tokenizer.json:
// lstrip/rstrip take Unicode whitespace (U+3000, U+00A0, U+2003), and single_word refuses a neighbour that is a word
// character of the regex class \w (letters and digits of any script, '_', combining marks) but not "。" or U+00A0.
TEST_CASE("added tokens' lstrip, rstrip and single_word as HF tokenizers applies them") {
  nlohmann::json json = HandTokenizerJson(false);
  const std::vector<std::tuple<std::string, const char*>> flagged = {
      {"<L>", "lstrip"}, {"<R>", "rstrip"}, {"<W>", "single_word"}};
  for (size_t i = 0; i < flagged.size(); ++i) {
    nlohmann::json t = json["added_tokens"][0];
    t["id"] = 304 + i;
    t["content"] = std::get<0>(flagged[i]);
    t["special"] = false;
    t[std::get<1>(flagged[i])] = true;
    json["added_tokens"].push_back(t);
  }
  testing::TempDir dir;
  absl::StatusOr<Tokenizer> loaded = Tokenizer::FromFile(dir.Write("tokenizer.json", json.dump()));
  INFO(loaded.status().ToString());
  REQUIRE(loaded.ok());
  const Tokenizer& tok = *loaded;
  constexpr int32_t L = 304, R = 305, W = 306;
  // The ids of `parts`: strings encoded as text, ints as added-token ids.
  auto ids = [&](std::initializer_list<std::variant<std::string, int32_t>> parts) {
    Ids out;
    for (const auto& p : parts) {
      if (const auto* text = std::get_if<std::string>(&p)) {
        const Ids piece = tok.Encode(*text);
        out.insert(out.end(), piece.begin(), piece.end());
      } else {
        out.push_back(std::get<int32_t>(p));
      }
    }
    return out;
  };
  const std::string ideographic_space = "\xE3\x80\x80", nbsp = "\xC2\xA0", em_space = "\xE2\x80\x83";
  for (const std::string& space : {std::string(" "), ideographic_space, nbsp, em_space + " "}) {
    INFO("space " << space);
    CHECK(tok.Encode("a" + space + "<L>b") == ids({"a", L, "b"}));
    CHECK(tok.Encode("<R>" + space + "b") == ids({R, "b"}));
  }
  CHECK(tok.Encode("<R>" + nbsp + nbsp + "b") == ids({R, "b"}));
  CHECK(tok.Encode("a\n\t <L>") == ids({"a", L}));
  // single_word: matched only between non-word characters.
  CHECK(tok.Encode("-<W>-") == ids({"-", W, "-"}));
  CHECK(tok.Encode("\xE3\x80\x82<W>\xE3\x80\x82") == ids({"\xE3\x80\x82", W, "\xE3\x80\x82"}));  // 。
  CHECK(tok.Encode(nbsp + "<W>") == ids({nbsp, W}));
  CHECK(tok.Encode("<W>") == ids({W}));
  for (const std::string& word : {std::string("x"), std::string("1"), std::string("_"), std::string("\xC3\xA9"),
                                  std::string("\xE6\x97\xA5"), std::string("\xCC\x80")}) {  // é, 日, U+0300
    INFO("word character " << word);
    CHECK(tok.Encode(word + "<W>") == ids({word + "<W>"}));
    CHECK(tok.Encode("<W>" + word) == ids({"<W>" + word}));
    const Ids glued = tok.Encode(word + "<W>");
    CHECK(std::count(glued.begin(), glued.end(), W) == 0);
  }
  // A byte that is not UTF-8 is no word character and no whitespace.
  CHECK(tok.Encode("\xFF<W>") == ids({"\xFF", W}));
  CHECK(tok.Encode("a\xA0<L>") == ids({"a\xA0", L}));
}

// HF's two passes over added tokens (AddedVocabulary, tokenizers 0.22.2; the same tokens added with `normalized` set
// to a byte-level tokenizer with an NFC normalizer gave these segmentations): tokens with normalized false split the
// raw text first, literally; each piece between them is NFC-normalized, then split by the normalized tokens, whose
// content is normalized too. So "a<b>" is "a" then <b> even though the normalized "a<b>" is longer, a decomposed
// "o" + U+0308 in a non-normalized token matches only decomposed text, and in a normalized one either form.
TEST_CASE("added tokens with normalized true match the normalized text, after the others") {
  nlohmann::json json = HandTokenizerJson(false);
  const std::string o_diaeresis = "\xC3\xB6", o_combining = "o\xCC\x88", e_acute = "\xC3\xA9", e_combining = "e\xCC\x81";
  const std::vector<std::tuple<std::string, bool>> added = {{"<b>", false},
                                                            {"a<b>", true},
                                                            {e_combining + "!", true},
                                                            {"<" + o_combining + ">", false},
                                                            {"[" + o_combining + "]", true}};
  for (size_t i = 0; i < added.size(); ++i) {
    nlohmann::json t = json["added_tokens"][0];
    t["id"] = 304 + i;
    t["content"] = std::get<0>(added[i]);
    t["special"] = false;
    t["normalized"] = std::get<1>(added[i]);
    json["added_tokens"].push_back(t);
  }
  testing::TempDir dir;
  absl::StatusOr<Tokenizer> loaded = Tokenizer::FromFile(dir.Write("tokenizer.json", json.dump()));
  INFO(loaded.status().ToString());
  REQUIRE(loaded.ok());
  const Tokenizer& tok = *loaded;
  constexpr int32_t kB = 304, kAB = 305, kE = 306, kAngle = 307, kSquare = 308;
  auto text = [&](const std::string& s) { return tok.Encode(s); };
  auto join = [](Ids a, const Ids& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  CHECK(tok.Encode("a<b>") == join(text("a"), {kB}));
  CHECK(tok.Encode("xa<b>") == join(text("xa"), {kB}));
  CHECK(tok.Encode(e_acute + "!") == Ids{kE});
  CHECK(tok.Encode(e_combining + "!") == Ids{kE});
  CHECK(tok.Encode("<" + o_combining + ">") == Ids{kAngle});
  CHECK(tok.Encode("<" + o_diaeresis + ">") == join(join(text("<"), text(o_diaeresis)), text(">")));
  CHECK(tok.Encode("[" + o_combining + "]") == Ids{kSquare});
  CHECK(tok.Encode("[" + o_diaeresis + "]") == Ids{kSquare});
  // Between two non-normalized tokens, the normalized ones still match.
  CHECK(tok.Encode("<b>[" + o_diaeresis + "]<b>") == Ids{kB, kSquare, kB});
  // A file without the key: normalized unless special, HF's default.
  nlohmann::json no_key = HandTokenizerJson(false);
  nlohmann::json t = no_key["added_tokens"][0];
  t.erase("normalized");
  t["id"] = 304;
  t["content"] = "[" + o_combining + "]";
  t["special"] = false;
  no_key["added_tokens"].push_back(t);
  absl::StatusOr<Tokenizer> defaulted = Tokenizer::FromFile(dir.Write("defaulted.json", no_key.dump()));
  REQUIRE(defaulted.ok());
  CHECK(defaulted->Encode("[" + o_diaeresis + "]") == Ids{304});
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
  REQUIRE(tok.Decode({0xC3}) == "\xEF\xBF\xBD");  // Half of "ü": U+FFFD by default, as HF.
  REQUIRE(tok.Decode({0xC3}, false, Tokenizer::InvalidUtf8::kKeep) == "\xC3");  // or the byte, kept
  REQUIRE(tok.Decode({0xC3, 0xBC}) == "\xC3\xBC");
}

TEST_CASE("Decode replaces each maximal ill-formed UTF-8 subpart with U+FFFD, as HF tokenizers does") {
  // Expected values are HF tokenizers 0.22's decode of the same byte-symbol ids (identical to Python's
  // bytes.decode("utf-8", errors="replace")).
  const Tokenizer tok = HandTokenizer();
  const std::string r = "\xEF\xBF\xBD";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"\xF0\x9F\x98", r},                    // a 4-byte character cut after 3 bytes: one replacement
      {"\xF0\x9F\x98x", r + "x"},
      {"\xE0\x80\x80", r + r + r},            // overlong: E0 needs A0..BF next
      {"\xED\xA0\x80", r + r + r},            // a UTF-16 surrogate
      {"\xF4\x90\x80\x80", r + r + r + r},   // above U+10FFFF
      {"\xC0\xAF", r + r},
      {"a\xFF" "b", "a" + r + "b"},
      {"\xE2\x82\xAC\xE2", "\xE2\x82\xAC" + r},
      {"\x80\x80", r + r},
      {"ok\xF0\x9F\x98\x80", "ok\xF0\x9F\x98\x80"}};
  for (const auto& [bytes, expected] : cases) {
    Ids ids;
    for (char c : bytes) ids.push_back(static_cast<uint8_t>(c));  // the hand vocabulary: id = byte value
    INFO(nlohmann::json(expected).dump());
    CHECK(tok.Decode(ids) == expected);
    CHECK(tok.Decode(ids, false, Tokenizer::InvalidUtf8::kKeep) == bytes);
  }
}

// A vocabulary missing the symbols of bytes 0x04 and 0xF1 (the latter's symbol is U+00F1, UTF-8 C3 B1), with
// byte-fallback tokens <0xC3>=256 and <0xB1>=257, <unk>=258 and "ab"=259.
nlohmann::json MissingBytesJson(bool byte_fallback, bool unk, bool fuse_unk) {
  nlohmann::json vocab = nlohmann::json::object();
  for (const auto& [b, symbol] : ReferenceByteSymbols()) {
    if (b != 0x04 && b != 0xF1) vocab[symbol] = b;
  }
  vocab["<0xC3>"] = 256;
  vocab["<0xB1>"] = 257;
  vocab["<unk>"] = 258;
  vocab["ab"] = 259;
  const nlohmann::json byte_level = {
      {"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", true}};
  return {{"normalizer", nullptr},
          {"pre_tokenizer", byte_level},
          {"decoder", byte_level},
          {"model",
           {{"type", "BPE"},
            {"unk_token", unk ? nlohmann::json("<unk>") : nlohmann::json(nullptr)},
            {"fuse_unk", fuse_unk},
            {"byte_fallback", byte_fallback},
            {"vocab", vocab},
            {"merges", nlohmann::json::array({nlohmann::json::array({"a", "b"})})}}}};
}

TEST_CASE("byte_fallback is accepted with a ByteLevel pre-tokenizer and is inert with all 256 byte symbols") {
  nlohmann::json j = HandTokenizerJson(false);
  j["model"]["byte_fallback"] = true;
  auto with = Tokenizer::FromJson(j.dump(), "b.json");
  INFO(with.status().ToString());
  REQUIRE(with.ok());
  const Tokenizer without = HandTokenizer();
  for (const std::string text : {"hello world", "\xE4\xB8\xAD\xE6\x96\x87 \xF0\x9F\x98\x80 <0x41>", "\x04\xF1\xFF",
                                 "<|im_start|>user\nhello<|im_end|>\n"}) {
    CHECK(with->Encode(text) == without.Encode(text));
  }
  // A SentencePiece-style pipeline (no ByteLevel step) is still rejected.
  j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "\xE2\x96\x81"}};
  REQUIRE(Tokenizer::FromJson(j.dump(), "b.json").status().code() == absl::StatusCode::kUnimplemented);
}

TEST_CASE("bytes without a symbol: byte_fallback, unk_token and fuse_unk as HF tokenizers does") {
  // Inputs: U+40000 is F1 80 80 80; 0x04 is a control byte. Expected ids are HF tokenizers 0.22's for the same
  // tokenizer.json. Note the HF order when an unk is pending: byte-fallback tokens come before it.
  const std::vector<std::string> texts = {"ab\xF1\x80\x80\x80" "ab", "\x04\x04" "ab", "a\x04\xF1\x80\x80\x80\x04" "b",
                                          "\x04\xF1\x80\x80\x80", "\xF1\x80\x80\x80\x04\x04", "x\x04\x04\x04"};
  struct Config {
    bool byte_fallback, unk, fuse_unk;
    std::vector<Ids> expected;
  };
  const std::vector<Config> configs = {
      {true, false, false,
       {{259, 256, 257, 128, 128, 128, 259}, {259}, {97, 256, 257, 128, 128, 128, 98}, {256, 257, 128, 128, 128},
        {256, 257, 128, 128, 128}, {120}}},
      {true, true, false,
       {{259, 256, 257, 128, 128, 128, 259}, {258, 258, 259}, {97, 256, 257, 258, 128, 128, 128, 258, 98},
        {256, 257, 258, 128, 128, 128}, {256, 257, 128, 128, 128, 258, 258}, {120, 258, 258, 258}}},
      {true, true, true,
       {{259, 256, 257, 128, 128, 128, 259}, {258, 259}, {97, 256, 257, 258, 128, 128, 128, 258, 98},
        {256, 257, 258, 128, 128, 128}, {256, 257, 128, 128, 128, 258}, {120, 258}}},
      {false, true, true,
       {{259, 258, 128, 128, 128, 259}, {258, 259}, {97, 258, 128, 128, 128, 258, 98}, {258, 128, 128, 128},
        {258, 128, 128, 128, 258}, {120, 258}}},
      {false, true, false,
       {{259, 258, 128, 128, 128, 259}, {258, 258, 259}, {97, 258, 258, 128, 128, 128, 258, 98},
        {258, 258, 128, 128, 128}, {258, 128, 128, 128, 258, 258}, {120, 258, 258, 258}}},
      {false, false, false,
       {{259, 128, 128, 128, 259}, {259}, {97, 128, 128, 128, 98}, {128, 128, 128}, {128, 128, 128}, {120}}}};
  for (const Config& c : configs) {
    auto tok = Tokenizer::FromJson(MissingBytesJson(c.byte_fallback, c.unk, c.fuse_unk).dump(), "missing.json");
    INFO(tok.status().ToString());
    REQUIRE(tok.ok());
    for (size_t i = 0; i < texts.size(); ++i) {
      INFO("byte_fallback=" << c.byte_fallback << " unk=" << c.unk << " fuse_unk=" << c.fuse_unk << " text " << i);
      CHECK(tok->Encode(texts[i]) == c.expected[i]);
    }
    // HF's ByteLevel decoder spells the fallback tokens out and replaces the lone continuation bytes.
    const std::string r = "\xEF\xBF\xBD";
    CHECK(tok->Decode(c.expected[0]) ==
          "ab" + std::string(c.byte_fallback ? "<0xC3><0xB1>" : c.unk ? "<unk>" : "") + r + r + r + "ab");
  }
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
  SECTION("an id far beyond the number of tokens is refused, not allocated") {
    // Found by tokenizer_json_fuzz: one id of 66,666,265 made the dense id tables take more than 4 GB.
    nlohmann::json j = HandTokenizerJson(false);
    j["model"]["vocab"]["zz"] = 66666265;
    absl::StatusOr<Tokenizer> tok = Tokenizer::FromJson(j.dump(), "sparse.json");
    REQUIRE(tok.status().code() == absl::StatusCode::kInvalidArgument);
    REQUIRE_THAT(std::string(tok.status().message()),
                 Catch::Contains("sparse.json") && Catch::Contains("too sparse") && Catch::Contains("66666265"));
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
    j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(unclosed";
    REQUIRE_THAT(std::string(Tokenizer::FromJson(j.dump(), "r.json").status().message()),
                 Catch::Contains("r.json") && Catch::Contains("regex"));
  }
}

TEST_CASE("the built-in ChatML rendering is used only for a tokenizer with ChatML tokens") {
  testing::TempDir dir;
  const std::string config = dir.Write("tokenizer_config.json", R"({"model_max_length": 32768})");
  absl::StatusOr<ChatTemplateOptions> none = ChatTemplateOptionsFromTokenizerConfig(config);
  REQUIRE(none.ok());
  REQUIRE_FALSE(none->jinja_template.has_value());
  CHECK(CheckChatTemplateFits(*none, HandTokenizer(), config).ok());  // Qwen-like: <|im_start|>, <|im_end|>

  nlohmann::json base = HandTokenizerJson(false);  // a base model's tokenizer: no ChatML markers
  base["added_tokens"].erase(2);
  base["added_tokens"].erase(1);
  absl::StatusOr<Tokenizer> plain = Tokenizer::FromJson(base.dump(), "base.json");
  REQUIRE(plain.ok());
  const absl::Status refused = CheckChatTemplateFits(*none, *plain, config);
  CHECK(refused.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(refused.message()), Catch::Contains(config) && Catch::Contains("no chat_template"));

  // With its own template the same tokenizer is fine.
  const std::string with =
      dir.Write("with.json", nlohmann::json{{"chat_template", "{{ messages[0].content }}"}}.dump());
  absl::StatusOr<ChatTemplateOptions> own = ChatTemplateOptionsFromTokenizerConfig(with);
  REQUIRE(own.ok());
  CHECK(CheckChatTemplateFits(*own, *plain, with).ok());
}

TEST_CASE("clean_up_tokenization_spaces as transformers' decode applies it") {
  // The strings transformers' clean_up_tokenization gives (checked with transformers 4.57).
  CHECK(CleanUpTokenizationSpaces("#### 1 ,000") == "#### 1,000");
  CHECK(CleanUpTokenizationSpaces("The answer is 72 .") == "The answer is 72.");
  CHECK(CleanUpTokenizationSpaces("Really ? Yes ! I do n't know , he 's sure we 're fine and I 'm ok , you 've") ==
        "Really? Yes! I don't know, he's sure we're fine and I'm ok, you've");
  CHECK(CleanUpTokenizationSpaces("a ' b") == "a'b");
  CHECK(CleanUpTokenizationSpaces("  . .") == " ..");  // non-overlapping, left to right, as str.replace
  CHECK(CleanUpTokenizationSpaces("nothing here") == "nothing here");

  testing::TempDir dir;
  CHECK(*ReadCleanUpTokenizationSpaces(dir.Path("absent.json")) == false);
  CHECK(*ReadCleanUpTokenizationSpaces(dir.Write("a.json", R"({"model_max_length": 8})")) == false);
  CHECK(*ReadCleanUpTokenizationSpaces(dir.Write("b.json", R"({"clean_up_tokenization_spaces": true})")) == true);
  CHECK(*ReadCleanUpTokenizationSpaces(dir.Write("c.json", R"({"clean_up_tokenization_spaces": null})")) == false);
  const std::string bad = dir.Write("d.json", R"({"clean_up_tokenization_spaces": "yes"})");
  CHECK_THAT(std::string(ReadCleanUpTokenizationSpaces(bad).status().message()),
             Catch::Contains(bad) && Catch::Contains("true or false"));
}

}  // namespace
}  // namespace verl
