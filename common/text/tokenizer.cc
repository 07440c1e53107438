#include "common/text/tokenizer.h"

#include <algorithm>
#include <array>
#include <climits>
#include <deque>
#include <fstream>
#include <queue>
#include <sstream>
#include <utility>

#include <unicode/uchar.h>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "absl/synchronization/mutex.h"
#include "common/status/status_macros.h"
#include "common/text/byte_level.h"
#include "common/text/nfc.h"
#include "common/text/regex_splitter.h"
#include "nlohmann/json.hpp"

namespace verl {
namespace {

using Json = nlohmann::json;

// Ids above this are rejected: the id tables are dense vectors.
constexpr int64_t kMaxTokenId = (int64_t{1} << 26) - 1;
// The BPE cache stops growing at this many entries (as HF's does); longer pieces are never cached.
constexpr size_t kCacheCapacity = 65536;
constexpr size_t kMaxCachedPieceBytes = 128;
// Words longer than this are merged with a heap (O(n log n)) instead of the quadratic scan.
constexpr size_t kHeapMergeThreshold = 64;

struct AddedToken {
  int32_t id = 0;
  std::string content;
  // What the text is matched against: the content, or for a `normalized` token its normalized form (NFC).
  std::string match;
  bool special = false;
  // HF's `normalized`: matched in the normalized text of what the other added tokens left, after them (HF's
  // AddedVocabulary: the tokens with normalized false split the raw text first; each piece between them is
  // normalized, then split by the normalized ones).
  bool normalized = false;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
};

struct PreTokenizerStep {
  bool byte_level = false;     // Otherwise a Split.
  bool add_prefix_space = false;  // ByteLevel only.
  std::optional<RegexSplitter> splitter;  // Split's pattern, or GPT-2's for ByteLevel with use_regex.
  RegexSplitter::Behavior behavior = RegexSplitter::Behavior::kIsolated;
};

struct Merge {
  int32_t rank;
  int32_t new_id;
};

uint64_t PairKey(int32_t a, int32_t b) { return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b); }

// The length of the well-formed UTF-8 sequence at s[i], or, when it is ill-formed, minus the length of its maximal
// subpart (the longest prefix of a well-formed sequence, at least 1): Unicode's "substitution of maximal subparts",
// which Rust's String::from_utf8_lossy (HF tokenizers) and Python's decode(errors="replace") follow.
int Utf8SequenceLength(std::string_view s, size_t i) {
  const auto at = [&](size_t k) { return static_cast<uint8_t>(s[k]); };
  const uint8_t b0 = at(i);
  if (b0 < 0x80) return 1;
  int n;
  uint8_t lo = 0x80, hi = 0xBF;  // Allowed range of the second byte.
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    n = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    n = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    n = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return -1;
  }
  for (int k = 1; k < n; ++k) {
    if (i + k >= s.size()) return -k;
    const uint8_t b = at(i + k);
    if (k == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) return -k;
  }
  return n;
}

void ReplaceInvalidUtf8(std::string* text) {
  size_t i = 0;
  while (i < text->size()) {  // Fast path: most decoded text is valid.
    const int n = Utf8SequenceLength(*text, i);
    if (n < 0) break;
    i += n;
  }
  if (i == text->size()) return;
  std::string out = text->substr(0, i);
  while (i < text->size()) {
    const int n = Utf8SequenceLength(*text, i);
    if (n > 0) {
      out.append(*text, i, n);
      i += n;
    } else {
      out += "\xEF\xBF\xBD";  // U+FFFD
      i += -n;
    }
  }
  *text = std::move(out);
}

// The code point that ends text[floor, end), and its first byte through *start; -1 (and *start = end) when there is
// none or the bytes before `end` are not well-formed UTF-8.
int32_t CodePointBefore(std::string_view text, size_t floor, size_t end, size_t* start) {
  *start = end;
  size_t lead = end;
  // Back over at most three continuation bytes to the character's first byte.
  do {
    if (lead <= floor) return -1;
    --lead;
  } while ((static_cast<uint8_t>(text[lead]) & 0xC0) == 0x80 && end - lead < 4);
  size_t next = lead;
  const std::optional<char32_t> c = DecodeUtf8Char(text.substr(0, end), &next);
  if (!c || next != end) return -1;
  *start = lead;
  return static_cast<int32_t>(*c);
}

// The code point that starts at text[pos], and the byte after it through *next; -1 (and *next = pos) at the end or
// on bytes that are not well-formed UTF-8.
int32_t CodePointAt(std::string_view text, size_t pos, size_t* next) {
  *next = pos;
  if (pos >= text.size()) return -1;
  size_t after = pos;
  const std::optional<char32_t> c = DecodeUtf8Char(text, &after);
  if (!c) return -1;
  *next = after;
  return static_cast<int32_t>(*c);
}

// HF's whitespace for an added token's lstrip/rstrip: Unicode White_Space (Rust's char::is_whitespace).
bool IsStripSpace(int32_t c) { return c >= 0 && u_isUWhiteSpace(c); }

// HF's word characters around a single_word added token: the regex class \w (alphabetic, marks, decimal digits,
// connector punctuation such as '_', join controls), as seen from tokenizers: "é<W>" and "x\u0301" are words, "。" and
// U+00A0 are not.
bool IsWordChar(int32_t c) {
  if (c < 0) return false;
  constexpr uint32_t kWordCategories = U_GC_M_MASK | U_GC_ND_MASK | U_GC_PC_MASK;
  return u_hasBinaryProperty(c, UCHAR_ALPHABETIC) || (U_GET_GC_MASK(c) & kWordCategories) != 0 ||
         u_hasBinaryProperty(c, UCHAR_JOIN_CONTROL);
}

std::string TypeOf(const Json& j) {
  if (j.is_object() && j.contains("type") && j["type"].is_string()) return j["type"].get<std::string>();
  return j.is_object() ? "<no type>" : std::string("<") + j.type_name() + ">";
}

absl::StatusOr<bool> GetBool(const Json& obj, const char* key, bool default_value, const std::string& where) {
  if (!obj.contains(key) || obj[key].is_null()) return default_value;
  if (!obj[key].is_boolean()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ".", key, " must be a boolean, got ", obj[key].type_name()));
  }
  return obj[key].get<bool>();
}

}  // namespace

class Tokenizer::Impl {
 public:
  absl::Status Load(const Json& root);

  void Encode(std::string_view text, bool parse_special, std::vector<int32_t>* out) const;
  // Splits `text` by the added tokens with normalized == `normalized`, encoding each piece between them with
  // `piece`.
  template <typename PieceFn>
  void SplitOnAdded(std::string_view text, bool parse_special, bool normalized, std::vector<int32_t>* out,
                    PieceFn piece) const;
  // Pre-tokenization and BPE of normalized text holding no added token.
  void EncodeNormalized(std::string_view text, std::vector<int32_t>* out) const;
  void Bpe(std::string_view piece, std::vector<int32_t>* out) const;
  void MergeSmall(std::vector<int32_t>* symbols) const;
  void MergeLarge(std::vector<int32_t>* symbols) const;
  const Merge* FindMerge(int32_t a, int32_t b) const {
    auto it = merges_.find(PairKey(a, b));
    return it == merges_.end() ? nullptr : &it->second;
  }

  enum class IdKind : uint8_t { kNone, kVocab, kAdded, kSpecial };

  absl::flat_hash_map<std::string, int32_t> token_to_id_;  // Model vocab and added tokens, vocabulary spelling.
  std::vector<std::string> id_to_token_;
  std::vector<std::string> id_to_bytes_;  // What Decode emits for each id.
  std::vector<IdKind> id_kind_;
  absl::flat_hash_map<std::string, int32_t> bytes_to_id_;  // Model vocab by raw bytes (for ignore_merges).
  std::array<int32_t, 256> byte_to_id_{};                   // -1 when the byte's symbol is not in the vocab.
  absl::flat_hash_map<uint64_t, Merge> merges_;
  std::array<std::vector<int32_t>, 256> byte_fallback_ids_;  // Non-empty only for a missing byte symbol.
  bool ignore_merges_ = false;
  int32_t unk_id_ = -1;
  bool fuse_unk_ = false;
  bool nfc_ = false;
  std::vector<PreTokenizerStep> pre_steps_;
  std::vector<AddedToken> added_;                          // Longest match first.
  bool any_normalized_added_ = false;
  std::array<std::vector<int32_t>, 256> added_by_first_byte_;  // Indices into added_, longest first.

  mutable absl::Mutex cache_mu_;
  mutable absl::flat_hash_map<std::string, std::vector<int32_t>> cache_ ABSL_GUARDED_BY(cache_mu_);
};

namespace {

absl::Status ParseNormalizer(const Json& j, bool* nfc) {
  if (j.is_null()) return absl::OkStatus();
  const std::string type = TypeOf(j);
  if (type == "NFC") {
    *nfc = true;
    return absl::OkStatus();
  }
  if (type == "Sequence" && j.contains("normalizers") && j["normalizers"].is_array()) {
    for (const Json& n : j["normalizers"]) RETURN_IF_ERROR(ParseNormalizer(n, nfc));
    return absl::OkStatus();
  }
  return absl::UnimplementedError(
      absl::StrCat("normalizer type \"", type, "\" is not supported (supported: null, NFC, Sequence)"));
}

absl::Status ParsePreTokenizer(const Json& j, std::vector<PreTokenizerStep>* steps) {
  const std::string type = TypeOf(j);
  if (type == "Sequence") {
    if (!j.contains("pretokenizers") || !j["pretokenizers"].is_array()) {
      return absl::InvalidArgumentError("pre_tokenizer Sequence has no \"pretokenizers\" array");
    }
    for (const Json& p : j["pretokenizers"]) RETURN_IF_ERROR(ParsePreTokenizer(p, steps));
    return absl::OkStatus();
  }
  PreTokenizerStep step;
  if (type == "ByteLevel") {
    step.byte_level = true;
    ASSIGN_OR_RETURN(step.add_prefix_space, GetBool(j, "add_prefix_space", true, "pre_tokenizer.ByteLevel"));
    ASSIGN_OR_RETURN(const bool use_regex, GetBool(j, "use_regex", true, "pre_tokenizer.ByteLevel"));
    if (use_regex) {
      ASSIGN_OR_RETURN(RegexSplitter splitter, RegexSplitter::Create(kGpt2SplitPattern));
      step.splitter = std::move(splitter);
    }
    steps->push_back(std::move(step));
    return absl::OkStatus();
  }
  if (type == "Split") {
    if (!j.contains("pattern") || !j["pattern"].is_object()) {
      return absl::InvalidArgumentError("pre_tokenizer Split has no \"pattern\" object");
    }
    const Json& pattern = j["pattern"];
    bool literal;
    std::string text;
    if (pattern.contains("Regex") && pattern["Regex"].is_string()) {
      literal = false;
      text = pattern["Regex"].get<std::string>();
    } else if (pattern.contains("String") && pattern["String"].is_string()) {
      literal = true;
      text = pattern["String"].get<std::string>();
    } else {
      return absl::InvalidArgumentError("pre_tokenizer Split pattern needs a \"Regex\" or \"String\" string");
    }
    auto splitter = RegexSplitter::Create(text, literal);
    if (!splitter.ok()) return Annotate(splitter.status(), "pre_tokenizer Split pattern");
    step.splitter = std::move(*splitter);
    const std::string behavior = j.value("behavior", std::string("Isolated"));
    if (behavior == "Isolated") {
      step.behavior = RegexSplitter::Behavior::kIsolated;
    } else if (behavior == "Removed") {
      step.behavior = RegexSplitter::Behavior::kRemoved;
    } else {
      return absl::UnimplementedError(absl::StrCat("pre_tokenizer Split behavior \"", behavior,
                                                   "\" is not supported (supported: Isolated, Removed)"));
    }
    ASSIGN_OR_RETURN(const bool invert, GetBool(j, "invert", false, "pre_tokenizer.Split"));
    if (invert) return absl::UnimplementedError("pre_tokenizer Split with invert=true is not supported");
    steps->push_back(std::move(step));
    return absl::OkStatus();
  }
  return absl::UnimplementedError(
      absl::StrCat("pre_tokenizer type \"", type, "\" is not supported (supported: ByteLevel, Split, Sequence)"));
}

bool HasByteLevelDecoder(const Json& j) {
  const std::string type = TypeOf(j);
  if (type == "ByteLevel") return true;
  if (type == "Sequence" && j.contains("decoders") && j["decoders"].is_array()) {
    for (const Json& d : j["decoders"]) {
      if (HasByteLevelDecoder(d)) return true;
    }
  }
  return false;
}

}  // namespace

absl::Status Tokenizer::Impl::Load(const Json& root) {
  if (!root.is_object()) return absl::InvalidArgumentError("top level is not a JSON object");

  // Model.
  if (!root.contains("model") || !root["model"].is_object()) {
    return absl::InvalidArgumentError("missing \"model\" object");
  }
  const Json& model = root["model"];
  if (model.contains("type") && !(model["type"].is_string() && model["type"].get<std::string>() == "BPE")) {
    return absl::UnimplementedError(
        absl::StrCat("model type \"", TypeOf(model), "\" is not supported (only byte-level BPE)"));
  }
  if (!model.contains("vocab") || !model["vocab"].is_object()) {
    return absl::InvalidArgumentError("missing \"model.vocab\" object");
  }
  if (!model.contains("merges") || !model["merges"].is_array()) {
    return absl::InvalidArgumentError("missing \"model.merges\" array");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (model.contains(key) && !model[key].is_null() && !(model[key].is_string() && model[key].get<std::string>().empty())) {
      return absl::UnimplementedError(absl::StrCat("model.", key, " is not supported"));
    }
  }
  // byte_fallback only acts on a byte whose symbol is missing from the vocabulary (see Bpe); with the ByteLevel
  // pre-tokenizer required below, a complete byte alphabet makes it inert. SentencePiece-style vocabularies, where it
  // matters, have no ByteLevel step and are rejected there.
  ASSIGN_OR_RETURN(const bool byte_fallback, GetBool(model, "byte_fallback", false, "model"));
  ASSIGN_OR_RETURN(fuse_unk_, GetBool(model, "fuse_unk", false, "model"));
  if (model.contains("dropout") && !model["dropout"].is_null() &&
      !(model["dropout"].is_number() && model["dropout"].get<double>() == 0.0)) {
    return absl::UnimplementedError("model.dropout is not supported");
  }
  ASSIGN_OR_RETURN(ignore_merges_, GetBool(model, "ignore_merges", false, "model"));

  int64_t max_id = -1;
  std::vector<std::pair<std::string, int32_t>> vocab;
  vocab.reserve(model["vocab"].size());
  for (const auto& [token, id_json] : model["vocab"].items()) {
    if (!id_json.is_number_integer()) {
      return absl::InvalidArgumentError(absl::StrCat("model.vocab[\"", token, "\"] is not an integer id"));
    }
    const int64_t id = id_json.get<int64_t>();
    if (id < 0 || id > kMaxTokenId) {
      return absl::InvalidArgumentError(absl::StrCat("model.vocab[\"", token, "\"] has id ", id, " out of range [0, ",
                                                     kMaxTokenId, "]"));
    }
    max_id = std::max(max_id, id);
    vocab.emplace_back(token, static_cast<int32_t>(id));
  }

  // Added tokens.
  if (root.contains("added_tokens") && !root["added_tokens"].is_null()) {
    if (!root["added_tokens"].is_array()) return absl::InvalidArgumentError("\"added_tokens\" is not an array");
    size_t index = 0;
    for (const Json& t : root["added_tokens"]) {
      const std::string where = absl::StrCat("added_tokens[", index++, "]");
      if (!t.is_object() || !t.contains("id") || !t["id"].is_number_integer() || !t.contains("content") ||
          !t["content"].is_string()) {
        return absl::InvalidArgumentError(absl::StrCat(where, " needs an integer \"id\" and a string \"content\""));
      }
      const int64_t id = t["id"].get<int64_t>();
      if (id < 0 || id > kMaxTokenId) {
        return absl::InvalidArgumentError(absl::StrCat(where, " has id ", id, " out of range"));
      }
      AddedToken token;
      token.id = static_cast<int32_t>(id);
      token.content = t["content"].get<std::string>();
      if (token.content.empty()) return absl::InvalidArgumentError(absl::StrCat(where, " has empty content"));
      ASSIGN_OR_RETURN(token.special, GetBool(t, "special", false, where));
      ASSIGN_OR_RETURN(token.lstrip, GetBool(t, "lstrip", false, where));
      ASSIGN_OR_RETURN(token.rstrip, GetBool(t, "rstrip", false, where));
      ASSIGN_OR_RETURN(token.single_word, GetBool(t, "single_word", false, where));
      // HF's default for a token without the key: normalized unless special (AddedToken::from).
      ASSIGN_OR_RETURN(token.normalized, GetBool(t, "normalized", !token.special, where));
      max_id = std::max(max_id, id);
      added_.push_back(std::move(token));
    }
  }

  // Id tables are dense, indexed by id: an id far beyond the number of tokens (a corrupt or hostile file; found by
  // tokenizer_json_fuzz, which made a 66-million-entry table out of one bad id) is refused rather than allocated.
  const int64_t count = static_cast<int64_t>(vocab.size() + added_.size());
  if (max_id >= 4 * count + 65536) {
    return absl::InvalidArgumentError(absl::StrCat("token ids are too sparse: the largest id is ", max_id, " for ",
                                                   count, " tokens (model.vocab and added_tokens)"));
  }
  const size_t size = static_cast<size_t>(max_id + 1);
  id_to_token_.assign(size, std::string());
  id_to_bytes_.assign(size, std::string());
  id_kind_.assign(size, IdKind::kNone);
  token_to_id_.reserve(vocab.size() + added_.size());
  bytes_to_id_.reserve(vocab.size());
  for (auto& [token, id] : vocab) {
    std::optional<std::string> bytes = ByteLevelToBytes(token);
    std::string raw = bytes ? std::move(*bytes) : token;
    if (id_kind_[id] == IdKind::kNone) {
      id_to_token_[id] = token;
      id_to_bytes_[id] = raw;
      id_kind_[id] = IdKind::kVocab;
    }
    bytes_to_id_.emplace(std::move(raw), id);
    token_to_id_.emplace(std::move(token), id);
  }
  byte_to_id_.fill(-1);
  for (int b = 0; b < 256; ++b) {
    const std::string symbol = ByteLevelSymbol(static_cast<uint8_t>(b));
    auto it = token_to_id_.find(symbol);
    if (it != token_to_id_.end()) {
      byte_to_id_[b] = it->second;
    } else if (byte_fallback) {
      // As HF: the UTF-8 bytes of the missing *symbol* (not the byte itself) as "<0xHH>" tokens, all or nothing.
      std::vector<int32_t> ids;
      for (char u : symbol) {
        auto fallback = token_to_id_.find(absl::StrFormat("<0x%02X>", static_cast<uint8_t>(u)));
        if (fallback == token_to_id_.end()) break;
        ids.push_back(fallback->second);
      }
      if (ids.size() == symbol.size()) byte_fallback_ids_[b] = std::move(ids);
    }
  }
  if (model.contains("unk_token") && model["unk_token"].is_string()) {
    auto it = token_to_id_.find(model["unk_token"].get<std::string>());
    if (it == token_to_id_.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("model.unk_token \"", model["unk_token"].get<std::string>(), "\" is not in model.vocab"));
    }
    unk_id_ = it->second;
  }

  // Merges: "a b" strings (one space) or ["a", "b"] pairs. As in HF, a repeated pair keeps its last rank.
  const Json& merges = model["merges"];
  merges_.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const Json& m = merges[i];
    std::string a, b;
    if (m.is_string()) {
      const std::string& line = m.get_ref<const std::string&>();
      const size_t space = line.find(' ');
      if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos) {
        return absl::InvalidArgumentError(
            absl::StrCat("bad merges entry index ", i, ": \"", line, "\" is not two tokens separated by one space"));
      }
      a = line.substr(0, space);
      b = line.substr(space + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      a = m[0].get<std::string>();
      b = m[1].get<std::string>();
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("bad merges entry index ", i, ": expected \"a b\" or [\"a\", \"b\"], got ", m.dump()));
    }
    auto ia = token_to_id_.find(a);
    auto ib = token_to_id_.find(b);
    auto inew = token_to_id_.find(a + b);
    if (ia == token_to_id_.end() || ib == token_to_id_.end() || inew == token_to_id_.end()) {
      const std::string& missing = ia == token_to_id_.end() ? a : ib == token_to_id_.end() ? b : a + b;
      return absl::InvalidArgumentError(
          absl::StrCat("bad merges entry index ", i, ": token \"", missing, "\" is not in model.vocab"));
    }
    merges_[PairKey(ia->second, ib->second)] = Merge{static_cast<int32_t>(i), inew->second};
  }

  // Added tokens override the model's spelling of their id; matched longest first.
  for (const AddedToken& t : added_) {
    token_to_id_[t.content] = t.id;
    id_to_token_[t.id] = t.content;
    id_to_bytes_[t.id] = t.content;
    id_kind_[t.id] = t.special ? IdKind::kSpecial : IdKind::kAdded;
  }

  // Pipeline.
  if (root.contains("normalizer")) RETURN_IF_ERROR(ParseNormalizer(root["normalizer"], &nfc_));

  for (AddedToken& t : added_) {
    any_normalized_added_ = any_normalized_added_ || t.normalized;
    t.match = t.content;
    std::string nfc;
    if (t.normalized && nfc_ && NormalizeNfc(t.content, &nfc)) t.match = std::move(nfc);
  }
  std::stable_sort(added_.begin(), added_.end(),
                   [](const AddedToken& x, const AddedToken& y) { return x.match.size() > y.match.size(); });
  for (size_t i = 0; i < added_.size(); ++i) {
    added_by_first_byte_[static_cast<uint8_t>(added_[i].match[0])].push_back(static_cast<int32_t>(i));
  }
  if (!root.contains("pre_tokenizer") || root["pre_tokenizer"].is_null()) {
    return absl::UnimplementedError("missing \"pre_tokenizer\": only byte-level BPE (a ByteLevel step) is supported");
  }
  RETURN_IF_ERROR(ParsePreTokenizer(root["pre_tokenizer"], &pre_steps_));
  if (std::none_of(pre_steps_.begin(), pre_steps_.end(), [](const PreTokenizerStep& s) { return s.byte_level; })) {
    return absl::UnimplementedError("pre_tokenizer has no ByteLevel step: only byte-level BPE is supported");
  }
  if (!root.contains("decoder") || !HasByteLevelDecoder(root["decoder"])) {
    return absl::UnimplementedError(absl::StrCat("decoder type \"", root.contains("decoder") ? TypeOf(root["decoder"]) : "<missing>",
                                                 "\" is not supported (only ByteLevel)"));
  }
  return absl::OkStatus();
}

void Tokenizer::Impl::Encode(std::string_view text, bool parse_special, std::vector<int32_t>* out) const {
  SplitOnAdded(text, parse_special, /*normalized=*/false, out, [&](std::string_view raw) {
    std::string nfc;
    std::string_view normalized = raw;
    if (nfc_ && NormalizeNfc(raw, &nfc)) normalized = nfc;
    if (!any_normalized_added_) {
      EncodeNormalized(normalized, out);
      return;
    }
    SplitOnAdded(normalized, parse_special, /*normalized=*/true, out,
                 [&](std::string_view rest) { EncodeNormalized(rest, out); });
  });
}

template <typename PieceFn>
void Tokenizer::Impl::SplitOnAdded(std::string_view text, bool parse_special, bool normalized,
                                   std::vector<int32_t>* out, PieceFn piece) const {
  size_t segment_start = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    const AddedToken* match = nullptr;
    for (int32_t index : added_by_first_byte_[static_cast<uint8_t>(text[pos])]) {
      const AddedToken& t = added_[index];
      if (t.normalized != normalized || (t.special && !parse_special)) continue;
      if (text.compare(pos, t.match.size(), t.match) != 0) continue;
      if (t.single_word) {
        size_t unused = 0;
        if (IsWordChar(CodePointBefore(text, 0, pos, &unused)) ||
            IsWordChar(CodePointAt(text, pos + t.match.size(), &unused))) {
          continue;
        }
      }
      match = &t;
      break;
    }
    if (match == nullptr) {
      ++pos;
      continue;
    }
    size_t start = pos;
    if (match->lstrip) {
      size_t before = start;
      while (IsStripSpace(CodePointBefore(text, segment_start, start, &before))) start = before;
    }
    if (start > segment_start) piece(text.substr(segment_start, start - segment_start));
    out->push_back(match->id);
    pos += match->match.size();
    if (match->rstrip) {
      size_t after = pos;
      while (IsStripSpace(CodePointAt(text, pos, &after))) pos = after;
    }
    segment_start = pos;
  }
  if (segment_start < text.size()) piece(text.substr(segment_start));
}

void Tokenizer::Impl::EncodeNormalized(std::string_view text, std::vector<int32_t>* out) const {
  if (text.empty()) return;
  std::vector<std::string_view> pieces{text};
  std::vector<std::string_view> next;
  std::deque<std::string> storage;  // Pieces that got a prefix space; deque keeps views stable.
  for (const PreTokenizerStep& step : pre_steps_) {
    next.clear();
    for (std::string_view piece : pieces) {
      if (step.byte_level && step.add_prefix_space && (piece.empty() || piece[0] != ' ')) {
        storage.push_back(absl::StrCat(" ", absl::string_view(piece.data(), piece.size())));
        piece = storage.back();
      }
      if (step.splitter) {
        step.splitter->Split(piece, step.behavior, &next);
      } else if (!piece.empty()) {
        next.push_back(piece);
      }
    }
    pieces.swap(next);
  }
  for (std::string_view piece : pieces) Bpe(piece, out);
}

void Tokenizer::Impl::Bpe(std::string_view piece, std::vector<int32_t>* out) const {
  if (piece.empty()) return;
  const absl::string_view key(piece.data(), piece.size());
  if (ignore_merges_) {
    auto it = bytes_to_id_.find(key);
    if (it != bytes_to_id_.end()) {
      out->push_back(it->second);
      return;
    }
  }
  const bool cacheable = piece.size() > 1 && piece.size() <= kMaxCachedPieceBytes;
  if (cacheable) {
    absl::ReaderMutexLock lock(&cache_mu_);
    auto it = cache_.find(key);
    if (it != cache_.end()) {
      out->insert(out->end(), it->second.begin(), it->second.end());
      return;
    }
  }
  // Bytes without a symbol, as HF's BPE does it: byte-fallback tokens when the vocabulary has them, else unk_token
  // (consecutive ones fused into one with fuse_unk), else nothing. An unk is held back until the next known symbol
  // or the end, so byte-fallback tokens right after it come before it, exactly as in HF.
  std::vector<int32_t> symbols;
  symbols.reserve(piece.size());
  bool pending_unk = false;
  for (char c : piece) {
    const auto b = static_cast<uint8_t>(c);
    const int32_t id = byte_to_id_[b];
    if (id >= 0) {
      if (pending_unk) symbols.push_back(unk_id_);
      pending_unk = false;
      symbols.push_back(id);
    } else if (!byte_fallback_ids_[b].empty()) {
      symbols.insert(symbols.end(), byte_fallback_ids_[b].begin(), byte_fallback_ids_[b].end());
    } else if (unk_id_ >= 0) {
      if (pending_unk && !fuse_unk_) symbols.push_back(unk_id_);
      pending_unk = true;
    }
  }
  if (pending_unk) symbols.push_back(unk_id_);
  if (symbols.size() > kHeapMergeThreshold) {
    MergeLarge(&symbols);
  } else {
    MergeSmall(&symbols);
  }
  out->insert(out->end(), symbols.begin(), symbols.end());
  if (cacheable) {
    absl::MutexLock lock(&cache_mu_);
    if (cache_.size() < kCacheCapacity) cache_.emplace(std::string(piece), std::move(symbols));
  }
}

// Repeatedly merges the adjacent pair of lowest rank (leftmost among equals). `ranks[i]` caches the rank of
// (symbols[i], symbols[i + 1]) so each round costs one scan of integers and at most two hash lookups.
void Tokenizer::Impl::MergeSmall(std::vector<int32_t>* symbols_ptr) const {
  std::vector<int32_t>& symbols = *symbols_ptr;
  if (symbols.size() < 2) return;
  std::array<int32_t, kHeapMergeThreshold> ranks;
  std::array<int32_t, kHeapMergeThreshold> new_ids;
  const auto update = [&](size_t i) {
    const Merge* m = FindMerge(symbols[i], symbols[i + 1]);
    ranks[i] = m ? m->rank : INT32_MAX;
    new_ids[i] = m ? m->new_id : -1;
  };
  size_t n = symbols.size();
  for (size_t i = 0; i + 1 < n; ++i) update(i);
  while (n > 1) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < n; ++i) {
      if (ranks[i] < ranks[best]) best = i;
    }
    if (ranks[best] == INT32_MAX) break;
    symbols[best] = new_ids[best];
    for (size_t i = best + 1; i + 1 < n; ++i) {
      symbols[i] = symbols[i + 1];
      ranks[i] = ranks[i + 1];
      new_ids[i] = new_ids[i + 1];
    }
    --n;
    symbols.resize(n);
    if (best > 0) update(best - 1);
    if (best + 1 < n) update(best);
  }
}

// Same result as MergeSmall in O(n log n): a heap of candidate merges ordered by (rank, position) over a linked
// list of symbols; entries made stale by an earlier merge are skipped when popped.
void Tokenizer::Impl::MergeLarge(std::vector<int32_t>* symbols_ptr) const {
  std::vector<int32_t>& symbols = *symbols_ptr;
  const int32_t n = static_cast<int32_t>(symbols.size());
  std::vector<int32_t> prev(n), next(n);
  for (int32_t i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  struct Candidate {
    int32_t rank;
    int32_t pos;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  for (int32_t i = 0; i + 1 < n; ++i) {
    if (const Merge* m = FindMerge(symbols[i], symbols[i + 1])) queue.push({m->rank, i});
  }
  constexpr int32_t kRemoved = -1;
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    if (symbols[top.pos] == kRemoved || next[top.pos] < 0) continue;
    const int32_t right = next[top.pos];
    const Merge* m = FindMerge(symbols[top.pos], symbols[right]);
    if (m == nullptr || m->rank != top.rank) continue;  // Stale: a neighbour changed since it was queued.
    symbols[top.pos] = m->new_id;
    symbols[right] = kRemoved;
    next[top.pos] = next[right];
    if (next[right] >= 0) prev[next[right]] = top.pos;
    if (prev[top.pos] >= 0) {
      if (const Merge* l = FindMerge(symbols[prev[top.pos]], symbols[top.pos])) queue.push({l->rank, prev[top.pos]});
    }
    if (next[top.pos] >= 0) {
      if (const Merge* r = FindMerge(symbols[top.pos], symbols[next[top.pos]])) queue.push({r->rank, top.pos});
    }
  }
  size_t kept = 0;
  for (int32_t i = 0; i < n; ++i) {
    if (symbols[i] != kRemoved) symbols[kept++] = symbols[i];
  }
  symbols.resize(kept);
}

absl::StatusOr<Tokenizer> Tokenizer::FromFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open tokenizer file"));
  std::ostringstream contents;
  contents << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat(path, ": error while reading"));
  return FromJson(contents.str(), path);
}

absl::StatusOr<Tokenizer> Tokenizer::FromJson(const std::string& json, const std::string& origin_for_errors) {
  Json root;
  try {
    root = Json::parse(json);
  } catch (const Json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(origin_for_errors, ": malformed JSON: ", e.what()));
  }
  auto impl = std::make_shared<Impl>();
  absl::Status status;
  try {
    status = impl->Load(root);
  } catch (const Json::exception& e) {  // A value of an unexpected type that the checks above let through.
    status = absl::InvalidArgumentError(absl::StrCat("unexpected JSON structure: ", e.what()));
  }
  if (!status.ok()) return Annotate(status, origin_for_errors);
  return Tokenizer(std::move(impl));
}

std::vector<int32_t> Tokenizer::Encode(std::string_view text, bool parse_special) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  impl_->Encode(text, parse_special, &ids);
  return ids;
}

std::string Tokenizer::Decode(const std::vector<int32_t>& ids, bool skip_special_tokens,
                              InvalidUtf8 invalid_utf8) const {
  std::string text;
  for (int32_t id : ids) {
    if (id < 0 || static_cast<size_t>(id) >= impl_->id_kind_.size()) continue;
    const Impl::IdKind kind = impl_->id_kind_[id];
    if (kind == Impl::IdKind::kNone || (skip_special_tokens && kind == Impl::IdKind::kSpecial)) continue;
    text += impl_->id_to_bytes_[id];
  }
  if (invalid_utf8 == InvalidUtf8::kReplace) ReplaceInvalidUtf8(&text);
  return text;
}

std::optional<int32_t> Tokenizer::TokenToId(std::string_view token) const {
  auto it = impl_->token_to_id_.find(absl::string_view(token.data(), token.size()));
  if (it == impl_->token_to_id_.end()) return std::nullopt;
  return it->second;
}

std::string Tokenizer::IdToToken(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= impl_->id_to_token_.size()) return "";
  return impl_->id_to_token_[id];
}

int32_t Tokenizer::vocab_size() const { return static_cast<int32_t>(impl_->id_kind_.size()); }

bool Tokenizer::IsSpecial(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < impl_->id_kind_.size() &&
         impl_->id_kind_[id] == Impl::IdKind::kSpecial;
}

std::string CleanUpTokenizationSpaces(std::string text) {
  // One pair at a time, as transformers chains str.replace (a single pair is left to right, non-overlapping).
  static constexpr std::pair<std::string_view, std::string_view> kReplacements[] = {
      {" .", "."},     {" ?", "?"},   {" !", "!"},   {" ,", ","},     {" ' ", "'"},
      {" n't", "n't"}, {" 'm", "'m"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"},
  };
  for (const auto& [from, to] : kReplacements) {
    text = absl::StrReplaceAll(text, {{absl::string_view(from.data(), from.size()),
                                       absl::string_view(to.data(), to.size())}});
  }
  return text;
}

absl::StatusOr<bool> ReadCleanUpTokenizationSpaces(const std::string& tokenizer_config_json_path) {
  std::ifstream in(tokenizer_config_json_path);
  if (!in) return false;
  Json config;
  try {
    config = Json::parse(in);
  } catch (const Json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(tokenizer_config_json_path, ": malformed JSON: ", e.what()));
  }
  if (!config.is_object() || !config.contains("clean_up_tokenization_spaces")) return false;
  const Json& value = config["clean_up_tokenization_spaces"];
  if (value.is_null()) return false;
  if (!value.is_boolean()) {
    return absl::InvalidArgumentError(absl::StrCat(
        tokenizer_config_json_path, ": clean_up_tokenization_spaces must be true or false, got ", value.dump()));
  }
  return value.get<bool>();
}

}  // namespace verl
