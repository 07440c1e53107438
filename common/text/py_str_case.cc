#include "common/text/py_str_case.h"

#include <unicode/locid.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "common/text/byte_level.h"

namespace verl {
namespace {

// One character of the text: its code point, or -1 for a byte that is not valid UTF-8 (kept as it is).
struct Char {
  int32_t cp;
  std::string_view bytes;
};

std::vector<Char> Chars(std::string_view s) {
  std::vector<Char> out;
  out.reserve(s.size());
  size_t pos = 0;
  while (pos < s.size()) {
    const size_t begin = pos;
    const std::optional<char32_t> cp = DecodeUtf8Char(s, &pos);
    out.push_back({cp ? static_cast<int32_t>(*cp) : -1, s.substr(begin, pos - begin)});
  }
  return out;
}

bool Has(int32_t cp, UProperty property) { return cp >= 0 && u_hasBinaryProperty(cp, property); }
bool IsCased(int32_t cp) { return Has(cp, UCHAR_CASED); }
bool IsTitle(int32_t cp) { return cp >= 0 && u_charType(cp) == U_TITLECASE_LETTER; }
int NumericType(int32_t cp) { return cp < 0 ? U_NT_NONE : u_getIntPropertyValue(cp, UCHAR_NUMERIC_TYPE); }

enum class Mapping { kUpper, kLower, kTitle };

// The full case mapping of one character, appended to *out.
void AppendMapped(const Char& c, Mapping mapping, std::string* out) {
  if (c.cp < 0x80) {  // ASCII (and invalid bytes, kept)
    char b = c.bytes[0];
    if (c.cp >= 0) {
      if (mapping == Mapping::kLower && b >= 'A' && b <= 'Z') b = static_cast<char>(b - 'A' + 'a');
      if (mapping != Mapping::kLower && b >= 'a' && b <= 'z') b = static_cast<char>(b - 'a' + 'A');
    }
    out->push_back(b);
    return;
  }
  icu::UnicodeString u(static_cast<UChar32>(c.cp));
  const icu::Locale& root = icu::Locale::getRoot();
  if (mapping == Mapping::kUpper) u.toUpper(root);
  if (mapping == Mapping::kLower) u.toLower(root);
  // One character as its own segment, title-cased as it is (no break iterator, no skipping to a cased letter).
  if (mapping == Mapping::kTitle) {
    u.toTitle(nullptr, root, U_TITLECASE_WHOLE_STRING | U_TITLECASE_NO_BREAK_ADJUSTMENT | U_TITLECASE_NO_LOWERCASE);
  }
  u.toUTF8String(*out);
}

// CPython's lower-casing of chars[i] within chars: a capital sigma is final ('ς') when a cased character comes before
// it and none after it (case-ignorable characters skipped both ways), as Unicode's Final_Sigma condition.
void AppendLower(const std::vector<Char>& chars, size_t i, std::string* out) {
  constexpr int32_t kCapitalSigma = 0x3A3;
  if (chars[i].cp != kCapitalSigma) {
    AppendMapped(chars[i], Mapping::kLower, out);
    return;
  }
  size_t j = i;
  while (j > 0 && Has(chars[j - 1].cp, UCHAR_CASE_IGNORABLE)) --j;
  bool final_sigma = j > 0 && IsCased(chars[j - 1].cp);
  if (final_sigma) {
    size_t k = i + 1;
    while (k < chars.size() && Has(chars[k].cp, UCHAR_CASE_IGNORABLE)) ++k;
    final_sigma = k == chars.size() || !IsCased(chars[k].cp);
  }
  out->append(final_sigma ? "\xcf\x82" : "\xcf\x83");  // U+03C2, U+03C3
}

template <typename Pred>
bool AllOf(std::string_view s, Pred pred) {
  if (s.empty()) return false;
  for (const Char& c : Chars(s)) {
    if (!pred(c.cp)) return false;
  }
  return true;
}

// str.islower() (want_lower) or str.isupper().
bool CasedAs(std::string_view s, bool want_lower) {
  const UProperty same = want_lower ? UCHAR_LOWERCASE : UCHAR_UPPERCASE;
  const UProperty other = want_lower ? UCHAR_UPPERCASE : UCHAR_LOWERCASE;
  bool cased = false;
  for (const Char& c : Chars(s)) {
    if (Has(c.cp, other) || IsTitle(c.cp)) return false;
    cased = cased || Has(c.cp, same);
  }
  return cased;
}

}  // namespace

std::string PyUpper(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (const Char& c : Chars(s)) AppendMapped(c, Mapping::kUpper, &out);
  return out;
}

std::string PyLower(std::string_view s) {
  const std::vector<Char> chars = Chars(s);
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < chars.size(); ++i) AppendLower(chars, i, &out);
  return out;
}

std::string PyTitle(std::string_view s) {
  const std::vector<Char> chars = Chars(s);
  std::string out;
  out.reserve(s.size());
  bool previous_cased = false;
  for (size_t i = 0; i < chars.size(); ++i) {
    if (previous_cased) {
      AppendLower(chars, i, &out);
    } else {
      AppendMapped(chars[i], Mapping::kTitle, &out);
    }
    previous_cased = IsCased(chars[i].cp);
  }
  return out;
}

std::string PyCapitalize(std::string_view s) {
  const std::vector<Char> chars = Chars(s);
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < chars.size(); ++i) {
    if (i == 0) {
      AppendMapped(chars[i], Mapping::kTitle, &out);
    } else {
      AppendLower(chars, i, &out);
    }
  }
  return out;
}

bool PyIsDigit(std::string_view s) {
  return AllOf(s, [](int32_t cp) {
    const int type = NumericType(cp);
    return type == U_NT_DECIMAL || type == U_NT_DIGIT;
  });
}

bool PyIsAlpha(std::string_view s) {
  return AllOf(s, [](int32_t cp) { return cp >= 0 && (U_GET_GC_MASK(cp) & U_GC_L_MASK) != 0; });
}

bool PyIsAlnum(std::string_view s) {
  return AllOf(s, [](int32_t cp) {
    return cp >= 0 && ((U_GET_GC_MASK(cp) & U_GC_L_MASK) != 0 || NumericType(cp) != U_NT_NONE);
  });
}

bool PyIsLower(std::string_view s) { return CasedAs(s, true); }
bool PyIsUpper(std::string_view s) { return CasedAs(s, false); }

}  // namespace verl
