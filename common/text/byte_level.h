#ifndef VERL_COMMON_TEXT_BYTE_LEVEL_H_
#define VERL_COMMON_TEXT_BYTE_LEVEL_H_

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace verl {

// GPT-2's byte-level alphabet (`bytes_to_unicode` in HF tokenizers / OpenAI's encoder.py): every byte is spelled as
// one printable Unicode character, so that BPE vocabularies can be written as text. Printable Latin-1 bytes map to
// themselves; the others (controls, space, 0x7F-0xA0, 0xAD) map to U+0100 onwards in byte order (space -> "Ġ").

// The UTF-8 spelling of the symbol for `byte`.
const std::string& ByteLevelSymbol(uint8_t byte);

// The byte spelled by code point `cp`, or nullopt when `cp` is not in the byte-level alphabet.
std::optional<uint8_t> ByteLevelSymbolToByte(char32_t cp);

// Spells raw bytes with byte-level symbols ("a b" -> "aĠb").
std::string BytesToByteLevel(std::string_view bytes);

// Reverses BytesToByteLevel. Returns nullopt when `token` is not valid UTF-8 or holds a character outside the
// byte-level alphabet.
std::optional<std::string> ByteLevelToBytes(std::string_view token);

// Decodes one UTF-8 character at `s[*pos]`, advancing *pos. Returns nullopt (advancing by one byte) when the bytes
// there are not a valid, shortest-form UTF-8 encoding of a scalar value.
std::optional<char32_t> DecodeUtf8Char(std::string_view s, size_t* pos);

// True when `s` is entirely valid UTF-8.
bool IsValidUtf8(std::string_view s);

}  // namespace verl

#endif  // VERL_COMMON_TEXT_BYTE_LEVEL_H_
