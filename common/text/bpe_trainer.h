#ifndef VERL_COMMON_TEXT_BPE_TRAINER_H_
#define VERL_COMMON_TEXT_BPE_TRAINER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace verl {

// Trains a small byte-level BPE tokenizer (Qwen2-style) on `corpus` and returns it as a complete HuggingFace
// tokenizer.json string, loadable by verl::Tokenizer and by HF `tokenizers`.
//
// Training: each text is NFC-normalized, split with the Qwen2 regex, and each piece counted as a word of bytes
// (occurrences of the special tokens in the corpus are cut out first). Each round merges the adjacent pair with the
// highest frequency-weighted count, ties broken by the lexicographically smallest pair (byte-level spellings, left
// then right); training stops after `num_merges` rounds or when no pair is left. Deterministic: the same inputs give
// the same bytes.
//
// Output: vocab = the 256 byte symbols (id = byte value), then merged tokens in merge order (a merge whose result
// already exists reuses its id); `special_tokens` follow as added_tokens with consecutive ids, "special": true;
// normalizer NFC; pre_tokenizer Sequence[Split(Qwen2 regex, Isolated), ByteLevel(use_regex=false)]; ByteLevel
// post-processor and decoder; model BPE with merges as "a b" strings.
//
// kInvalidArgument for num_merges < 0, an empty or repeated special token, or one that spells a vocab token.
absl::StatusOr<std::string> TrainByteLevelBpeTokenizerJson(const std::vector<std::string>& corpus, int num_merges,
                                                          const std::vector<std::string>& special_tokens);

}  // namespace verl

#endif  // VERL_COMMON_TEXT_BPE_TRAINER_H_
