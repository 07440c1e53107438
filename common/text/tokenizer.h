#ifndef VERL_COMMON_TEXT_TOKENIZER_H_
#define VERL_COMMON_TEXT_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace verl {

// A byte-level BPE tokenizer loaded from a HuggingFace `tokenizer.json` (the format of Qwen2/Qwen2.5 and Llama 3).
//
// Supported pieces of the HF pipeline (anything else is rejected at load time with kUnimplemented):
//   added_tokens   matched literally (leftmost, longest) before anything else; `lstrip`/`rstrip` honoured.
//   normalizer     null, NFC, or a Sequence of those.
//   pre_tokenizer  ByteLevel (use_regex true: the GPT-2 split pattern), Split with a Regex or String pattern
//                  (behavior Isolated or Removed, invert false), or a Sequence of those; a ByteLevel step is required.
//   model          BPE with merges given as "a b" strings or ["a", "b"] pairs; `ignore_merges`, `unk_token`,
//                  `fuse_unk` and `byte_fallback` honoured as HF does: a byte whose symbol is not in the vocab becomes
//                  the "<0xHH>" tokens of its symbol's UTF-8 bytes (byte_fallback, when all exist), else unk_token,
//                  else nothing. byte_fallback is inert when the vocabulary has all 256 byte symbols (Qwen2, Llama 3,
//                  GPT-2). continuing_subword_prefix, end_of_word_suffix and dropout are rejected.
//   decoder        ByteLevel (or a Sequence containing it).
// The post_processor is not applied: Encode never adds BOS/EOS; the chat template or the caller does.
//
// Thread-safety: all const methods may be called concurrently. Copies are cheap and share the immutable
// vocabulary and an internal, mutex-guarded cache of BPE results.
class Tokenizer {
 public:
  // Reads and parses `path`. Errors name the file: kNotFound when it cannot be opened, kInvalidArgument for
  // malformed JSON or inconsistent content (e.g. "bad merges entry index 7"), kUnimplemented for parts of the
  // HF format that are not supported (e.g. a WordPiece model).
  static absl::StatusOr<Tokenizer> FromFile(const std::string& path);

  // Parses the contents of a tokenizer.json; `origin_for_errors` (usually the path) prefixes every error.
  static absl::StatusOr<Tokenizer> FromJson(const std::string& json, const std::string& origin_for_errors);

  // Text to token ids. With `parse_special` the special added tokens (e.g. "<|im_end|>") found in the text are
  // emitted as their ids; without it they are tokenized as ordinary text (non-special added tokens still match,
  // as HF's split_special_tokens does). Arbitrary bytes are accepted, including invalid UTF-8.
  std::vector<int32_t> Encode(std::string_view text, bool parse_special = true) const;

  // What Decode does with bytes that do not form valid UTF-8 (a sequence cut inside a character, or a byte that
  // became unk_token while the rest of its character did not).
  enum class InvalidUtf8 {
    // Each maximal ill-formed subpart becomes U+FFFD, as HF tokenizers' ByteLevel decoder (and so transformers'
    // decode and verl) does. The result is always valid UTF-8 (safe for protobuf strings and JSON).
    kReplace,
    // The bytes are returned as they are: concatenating the decodes of consecutive chunks gives the decode of the
    // whole (for incremental decoding).
    kKeep,
  };

  // Token ids to text (ByteLevel decoding). Ids not in the vocabulary are skipped silently. Added tokens are emitted
  // verbatim.
  std::string Decode(const std::vector<int32_t>& ids, bool skip_special_tokens = false,
                     InvalidUtf8 invalid_utf8 = InvalidUtf8::kReplace) const;

  // `token` in the vocabulary's own spelling (byte-level symbols, e.g. "Ġthe"), or an added token's content.
  std::optional<int32_t> TokenToId(std::string_view token) const;
  // The vocabulary spelling of `id`; "" when `id` is not in the vocabulary.
  std::string IdToToken(int32_t id) const;
  // Max id + 1 over the model vocabulary and the added tokens (ids may have holes).
  int32_t vocab_size() const;
  // True for added tokens marked "special": true.
  bool IsSpecial(int32_t id) const;

  class Impl;

 private:
  explicit Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

// transformers' clean_up_tokenization, which its decode applies when the tokenizer's clean_up_tokenization_spaces is
// set (Llama 3.x ships it on): " ." -> ".", " ?" -> "?", " !" -> "!", " ," -> ",", " ' " -> "'", " n't" -> "n't",
// " 'm" -> "'m", " 's" -> "'s", " 've" -> "'ve", " 're" -> "'re", in that order.
std::string CleanUpTokenizationSpaces(std::string text);

// "clean_up_tokenization_spaces" of a HF tokenizer_config.json: false when the file or the key is absent or null
// (transformers' default since 4.45); an error naming the file when it is malformed or the value is not a bool.
absl::StatusOr<bool> ReadCleanUpTokenizationSpaces(const std::string& tokenizer_config_json_path);

}  // namespace verl

#endif  // VERL_COMMON_TEXT_TOKENIZER_H_
