#include "common/text/nfc.h"

#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/stringpiece.h>

#include "common/text/byte_level.h"

namespace verl {

bool NormalizeNfc(std::string_view text, std::string* out) {
  bool ascii = true;
  for (char c : text) {
    if (static_cast<uint8_t>(c) >= 0x80) {
      ascii = false;
      break;
    }
  }
  if (ascii || !IsValidUtf8(text)) return false;
  UErrorCode error = U_ZERO_ERROR;
  const icu::Normalizer2* nfc = icu::Normalizer2::getNFCInstance(error);
  if (U_FAILURE(error) || nfc == nullptr) return false;
  const icu::StringPiece piece(text.data(), static_cast<int32_t>(text.size()));
  if (nfc->isNormalizedUTF8(piece, error) || U_FAILURE(error)) return false;
  std::string normalized;
  normalized.reserve(text.size());
  icu::StringByteSink<std::string> sink(&normalized);
  nfc->normalizeUTF8(0, piece, sink, nullptr, error);
  if (U_FAILURE(error)) return false;
  *out = std::move(normalized);
  return true;
}

}  // namespace verl
