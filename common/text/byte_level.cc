#include "common/text/byte_level.h"

#include <vector>

namespace verl {
namespace {

struct ByteLevelTables {
  std::array<std::string, 256> symbol;      // byte -> UTF-8 spelling
  std::array<int16_t, 324> code_point_byte;  // code point (< 324) -> byte, or -1

  ByteLevelTables() {
    code_point_byte.fill(-1);
    std::array<char32_t, 256> cp{};
    std::array<bool, 256> printable{};
    for (int b = '!'; b <= '~'; ++b) printable[b] = true;
    for (int b = 0xA1; b <= 0xAC; ++b) printable[b] = true;
    for (int b = 0xAE; b <= 0xFF; ++b) printable[b] = true;
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) cp[b] = printable[b] ? static_cast<char32_t>(b) : next++;
    for (int b = 0; b < 256; ++b) {
      code_point_byte[cp[b]] = static_cast<int16_t>(b);
      std::string& s = symbol[b];
      if (cp[b] < 0x80) {
        s.push_back(static_cast<char>(cp[b]));
      } else {  // All code points are < 0x800: two bytes.
        s.push_back(static_cast<char>(0xC0 | (cp[b] >> 6)));
        s.push_back(static_cast<char>(0x80 | (cp[b] & 0x3F)));
      }
    }
  }
};

const ByteLevelTables& Tables() {
  static const ByteLevelTables* tables = new ByteLevelTables();
  return *tables;
}

}  // namespace

const std::string& ByteLevelSymbol(uint8_t byte) { return Tables().symbol[byte]; }

std::optional<uint8_t> ByteLevelSymbolToByte(char32_t cp) {
  if (cp >= Tables().code_point_byte.size()) return std::nullopt;
  int16_t b = Tables().code_point_byte[cp];
  if (b < 0) return std::nullopt;
  return static_cast<uint8_t>(b);
}

std::string BytesToByteLevel(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) out += ByteLevelSymbol(static_cast<uint8_t>(c));
  return out;
}

std::optional<std::string> ByteLevelToBytes(std::string_view token) {
  std::string out;
  out.reserve(token.size());
  size_t pos = 0;
  while (pos < token.size()) {
    std::optional<char32_t> cp = DecodeUtf8Char(token, &pos);
    if (!cp) return std::nullopt;
    std::optional<uint8_t> b = ByteLevelSymbolToByte(*cp);
    if (!b) return std::nullopt;
    out.push_back(static_cast<char>(*b));
  }
  return out;
}

std::optional<char32_t> DecodeUtf8Char(std::string_view s, size_t* pos) {
  const size_t i = *pos;
  const auto byte = [&](size_t k) { return static_cast<uint8_t>(s[k]); };
  const uint8_t b0 = byte(i);
  *pos = i + 1;
  if (b0 < 0x80) return b0;
  int len;
  char32_t cp;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2;
    cp = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3;
    cp = b0 & 0x0F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4;
    cp = b0 & 0x07;
  } else {
    return std::nullopt;
  }
  if (i + len > s.size()) return std::nullopt;
  for (int k = 1; k < len; ++k) {
    const uint8_t b = byte(i + k);
    if ((b & 0xC0) != 0x80) return std::nullopt;
    cp = (cp << 6) | (b & 0x3F);
  }
  if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) || (cp >= 0xD800 && cp <= 0xDFFF)) {
    return std::nullopt;
  }
  *pos = i + len;
  return cp;
}

bool IsValidUtf8(std::string_view s) {
  size_t pos = 0;
  while (pos < s.size()) {
    if (static_cast<uint8_t>(s[pos]) < 0x80) {
      ++pos;
      continue;
    }
    if (!DecodeUtf8Char(s, &pos)) return false;
  }
  return true;
}

}  // namespace verl
