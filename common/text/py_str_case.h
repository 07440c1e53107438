#ifndef VERL_COMMON_TEXT_PY_STR_CASE_H_
#define VERL_COMMON_TEXT_PY_STR_CASE_H_

#include <string>
#include <string_view>

namespace verl {

// Python's str case methods and character-class predicates over UTF-8 text, by code point, with ICU's Unicode data
// (chat templates call them through Jinja: `'x'.upper()`, `| capitalize`, `is lower`). As CPython has them:
// - PyUpper / PyLower: the full case mappings (SpecialCasing's unconditional ones: 'ß'.upper() is 'SS'); PyLower maps
//   'Σ' to the final 'ς' by Unicode's Final_Sigma condition, case-ignorable characters skipped, as CPython does.
// - PyTitle (str.title): a cased character's title-case mapping after an uncased one, its lower-case one after a
//   cased one; PyCapitalize (str.capitalize, Python 3.8+): the first character title-cased, the rest lower-cased.
// - PyIsDigit / PyIsAlpha / PyIsAlnum / PyIsLower / PyIsUpper: str.isdigit() etc. (false for ""): digit is
//   Numeric_Type Decimal or Digit; alpha the letter categories (Lu, Ll, Lt, Lm, Lo); alnum alpha or any Numeric_Type;
//   lower/upper need one cased character and none of the other case nor title case (the Lowercase and Uppercase
//   properties, category Lt).
// Bytes that are not valid UTF-8 are kept as they are and count as uncased, non-alphanumeric characters.
std::string PyUpper(std::string_view s);
std::string PyLower(std::string_view s);
std::string PyTitle(std::string_view s);
std::string PyCapitalize(std::string_view s);
bool PyIsDigit(std::string_view s);
bool PyIsAlpha(std::string_view s);
bool PyIsAlnum(std::string_view s);
bool PyIsLower(std::string_view s);
bool PyIsUpper(std::string_view s);

}  // namespace verl

#endif  // VERL_COMMON_TEXT_PY_STR_CASE_H_
