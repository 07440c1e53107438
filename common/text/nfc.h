#ifndef VERL_COMMON_TEXT_NFC_H_
#define VERL_COMMON_TEXT_NFC_H_

#include <string>
#include <string_view>

namespace verl {

// Unicode Normalization Form C (ICU's Normalizer2 NFC instance).
//
// Returns false, leaving *out untouched, when `text` is already NFC (always so for ASCII) or is not valid UTF-8 (it
// is then left as it is); otherwise sets *out to the NFC form and returns true. Thread-safe.
bool NormalizeNfc(std::string_view text, std::string* out);

}  // namespace verl

#endif  // VERL_COMMON_TEXT_NFC_H_
