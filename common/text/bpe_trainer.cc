#include "common/text/bpe_trainer.h"

#include <cstdint>
#include <map>
#include <string_view>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status/status_macros.h"
#include "common/text/byte_level.h"
#include "common/text/nfc.h"
#include "common/text/regex_splitter.h"
#include "nlohmann/json.hpp"

namespace verl {
namespace {

using OrderedJson = nlohmann::ordered_json;

struct Word {
  std::vector<int32_t> symbols;
  int64_t count = 0;
};

// Counts the pre-tokenized words of `text` (bytes) into `counts`.
void CountWords(std::string_view text, const RegexSplitter& splitter, std::map<std::string, int64_t>* counts) {
  if (text.empty()) return;
  std::string normalized;
  if (NormalizeNfc(text, &normalized)) text = normalized;
  std::vector<std::string_view> pieces;
  splitter.Split(text, RegexSplitter::Behavior::kIsolated, &pieces);
  for (std::string_view piece : pieces) ++(*counts)[std::string(piece)];
}

}  // namespace

absl::StatusOr<std::string> TrainByteLevelBpeTokenizerJson(const std::vector<std::string>& corpus, int num_merges,
                                                          const std::vector<std::string>& special_tokens) {
  if (num_merges < 0) return absl::InvalidArgumentError(absl::StrCat("num_merges must be >= 0, got ", num_merges));
  absl::flat_hash_set<std::string> seen_special;
  for (size_t i = 0; i < special_tokens.size(); ++i) {
    if (special_tokens[i].empty()) {
      return absl::InvalidArgumentError(absl::StrCat("special_tokens[", i, "] is empty"));
    }
    if (!seen_special.insert(special_tokens[i]).second) {
      return absl::InvalidArgumentError(absl::StrCat("special_tokens[", i, "] \"", special_tokens[i], "\" is repeated"));
    }
  }
  ASSIGN_OR_RETURN(const RegexSplitter splitter, RegexSplitter::Create(kQwen2SplitPattern));

  // Word counts; a std::map keeps the iteration order (and so everything below) independent of hashing.
  std::map<std::string, int64_t> word_counts;
  for (const std::string& text : corpus) {
    std::string_view rest = text;
    while (!rest.empty()) {
      size_t cut = std::string_view::npos;
      size_t cut_len = 0;
      for (const std::string& special : special_tokens) {
        const size_t at = rest.find(special);
        if (at < cut || (at == cut && at != std::string_view::npos && special.size() > cut_len)) {
          cut = at;
          cut_len = special.size();
        }
      }
      CountWords(rest.substr(0, cut), splitter, &word_counts);
      if (cut == std::string_view::npos) break;
      rest.remove_prefix(cut + cut_len);
    }
  }

  // Vocabulary: id = byte value for the 256 byte symbols, merged tokens after them.
  std::vector<std::string> id_to_token;
  absl::flat_hash_map<std::string, int32_t> token_to_id;
  for (int b = 0; b < 256; ++b) {
    id_to_token.push_back(ByteLevelSymbol(static_cast<uint8_t>(b)));
    token_to_id.emplace(id_to_token.back(), b);
  }
  std::vector<Word> words;
  words.reserve(word_counts.size());
  for (const auto& [bytes, count] : word_counts) {
    Word w;
    w.count = count;
    for (char c : bytes) w.symbols.push_back(static_cast<uint8_t>(c));
    words.push_back(std::move(w));
  }

  std::vector<std::pair<int32_t, int32_t>> merges;
  for (int round = 0; round < num_merges; ++round) {
    absl::flat_hash_map<uint64_t, int64_t> pair_counts;
    for (const Word& w : words) {
      for (size_t i = 0; i + 1 < w.symbols.size(); ++i) {
        const uint64_t key = (static_cast<uint64_t>(w.symbols[i]) << 32) | static_cast<uint32_t>(w.symbols[i + 1]);
        pair_counts[key] += w.count;
      }
    }
    if (pair_counts.empty()) break;
    int32_t best_a = -1, best_b = -1;
    int64_t best_count = 0;
    for (const auto& [key, count] : pair_counts) {
      const auto a = static_cast<int32_t>(key >> 32);
      const auto b = static_cast<int32_t>(key & 0xFFFFFFFFu);
      bool better = count > best_count;
      if (!better && count == best_count) {
        const int order = id_to_token[a].compare(id_to_token[best_a]);
        better = order < 0 || (order == 0 && id_to_token[b] < id_to_token[best_b]);
      }
      if (better) {
        best_a = a;
        best_b = b;
        best_count = count;
      }
    }
    const std::string merged = id_to_token[best_a] + id_to_token[best_b];
    auto [it, inserted] = token_to_id.emplace(merged, static_cast<int32_t>(id_to_token.size()));
    if (inserted) id_to_token.push_back(merged);
    const int32_t new_id = it->second;
    merges.emplace_back(best_a, best_b);
    for (Word& w : words) {
      size_t out = 0;
      for (size_t i = 0; i < w.symbols.size(); ++i) {
        if (i + 1 < w.symbols.size() && w.symbols[i] == best_a && w.symbols[i + 1] == best_b) {
          w.symbols[out++] = new_id;
          ++i;
        } else {
          w.symbols[out++] = w.symbols[i];
        }
      }
      w.symbols.resize(out);
    }
  }

  for (size_t i = 0; i < special_tokens.size(); ++i) {
    if (token_to_id.contains(special_tokens[i])) {
      return absl::InvalidArgumentError(absl::StrCat("special_tokens[", i, "] \"", special_tokens[i],
                                                     "\" is also a vocabulary token"));
    }
  }

  const OrderedJson byte_level = {
      {"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}};
  OrderedJson root;
  root["version"] = "1.0";
  root["truncation"] = nullptr;
  root["padding"] = nullptr;
  OrderedJson added = OrderedJson::array();
  for (size_t i = 0; i < special_tokens.size(); ++i) {
    added.push_back({{"id", id_to_token.size() + i},
                     {"content", special_tokens[i]},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
  }
  root["added_tokens"] = std::move(added);
  root["normalizer"] = {{"type", "NFC"}};
  root["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"},
         {"pattern", {{"Regex", std::string(kQwen2SplitPattern)}}},
         {"behavior", "Isolated"},
         {"invert", false}},
        byte_level}}};
  root["post_processor"] = byte_level;
  root["decoder"] = byte_level;
  OrderedJson vocab = OrderedJson::object();
  for (size_t id = 0; id < id_to_token.size(); ++id) vocab[id_to_token[id]] = id;
  OrderedJson merge_list = OrderedJson::array();
  for (const auto& [a, b] : merges) merge_list.push_back(id_to_token[a] + " " + id_to_token[b]);
  root["model"] = {{"type", "BPE"},
                   {"dropout", nullptr},
                   {"unk_token", nullptr},
                   {"continuing_subword_prefix", nullptr},
                   {"end_of_word_suffix", nullptr},
                   {"fuse_unk", false},
                   {"byte_fallback", false},
                   {"ignore_merges", false},
                   {"vocab", std::move(vocab)},
                   {"merges", std::move(merge_list)}};
  return root.dump(2);
}

}  // namespace verl
