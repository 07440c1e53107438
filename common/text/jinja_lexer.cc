#include "common/text/jinja_lexer.h"

#include <algorithm>
#include <cctype>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace verl {
namespace {

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
bool IsNameStart(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool IsNameChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Undoes Python "unicode-escape" escapes in the body of a string literal.
std::string DecodeStringLiteral(std::string_view body) {
  std::string out;
  out.reserve(body.size());
  for (size_t i = 0; i < body.size(); ++i) {
    const char c = body[i];
    if (c != '\\' || i + 1 >= body.size()) {
      out.push_back(c);
      continue;
    }
    const char e = body[i + 1];
    auto hex = [&](size_t digits) -> bool {
      if (i + 2 + digits > body.size()) return false;
      uint32_t cp = 0;
      for (size_t k = 0; k < digits; ++k) {
        const int h = HexValue(body[i + 2 + k]);
        if (h < 0) return false;
        cp = cp * 16 + static_cast<uint32_t>(h);
      }
      AppendUtf8(cp, &out);
      i += 1 + digits;
      return true;
    };
    switch (e) {
      case '\n': ++i; break;  // a backslash-newline continues the line
      case '\\': out.push_back('\\'); ++i; break;
      case '\'': out.push_back('\''); ++i; break;
      case '"': out.push_back('"'); ++i; break;
      case 'a': out.push_back('\a'); ++i; break;
      case 'b': out.push_back('\b'); ++i; break;
      case 'f': out.push_back('\f'); ++i; break;
      case 'n': out.push_back('\n'); ++i; break;
      case 'r': out.push_back('\r'); ++i; break;
      case 't': out.push_back('\t'); ++i; break;
      case 'v': out.push_back('\v'); ++i; break;
      case 'x':
        if (!hex(2)) out.push_back('\\');
        break;
      case 'u':
        if (!hex(4)) out.push_back('\\');
        break;
      case 'U':
        if (!hex(8)) out.push_back('\\');
        break;
      default:
        if (e >= '0' && e <= '7') {
          uint32_t cp = 0;
          size_t k = 0;
          while (k < 3 && i + 1 + k < body.size() && body[i + 1 + k] >= '0' && body[i + 1 + k] <= '7') {
            cp = cp * 8 + static_cast<uint32_t>(body[i + 1 + k] - '0');
            ++k;
          }
          AppendUtf8(cp, &out);
          i += k;
        } else {
          out.push_back('\\');  // unknown escapes keep the backslash, as in Python
        }
    }
  }
  return out;
}

// Jinja normalizes "\r\n" and "\r" to "\n" and drops one trailing newline.
std::string NormalizeSource(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out.push_back(source[i]);
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

class Scanner {
 public:
  Scanner(std::string src, std::string_view name) : src_(std::move(src)), name_(name) {}

  absl::StatusOr<std::vector<JinjaToken>> Run() {
    bool line_starting = true;
    while (pos_ < src_.size()) {
      size_t tag = FindTagStart(pos_);
      std::string text = src_.substr(pos_, tag == std::string::npos ? std::string::npos : tag - pos_);
      if (tag == std::string::npos) {
        Emit(JinjaToken::Type::kData, std::move(text));
        break;
      }
      const char kind = src_[tag + 1];  // '{', '%' or '#'
      const char sign = tag + 2 < src_.size() && (src_[tag + 2] == '-' || src_[tag + 2] == '+') ? src_[tag + 2] : 0;
      if (sign == '-') {
        size_t end = text.size();
        while (end > 0 && IsSpace(text[end - 1])) --end;
        text.resize(end);
      } else if (sign != '+' && kind != '{') {
        // lstrip_blocks: drop the spaces before a block or comment tag that starts its line.
        const size_t nl = text.rfind('\n');
        const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
        if (l_pos > 0 || line_starting) {
          bool blank = l_pos < text.size();
          for (size_t i = l_pos; i < text.size() && blank; ++i) blank = IsSpace(text[i]);
          if (blank) text.resize(l_pos);
        }
      }
      AdvanceTo(tag);
      // Data is emitted with the position of the tag; data positions are not used in errors.
      Emit(JinjaToken::Type::kData, std::move(text));
      const size_t tag_begin = tag;
      AdvanceTo(tag + 2 + (sign ? 1 : 0));
      if (kind == '#') {
        const size_t close = src_.find("#}", pos_);
        if (close == std::string::npos) return Error(tag_begin, "unterminated comment: missing '#}'");
        const char end_sign = close > pos_ && (src_[close - 1] == '-' || src_[close - 1] == '+') ? src_[close - 1] : 0;
        AdvanceTo(close + 2);
        line_starting = AfterTagEnd(end_sign, /*trim=*/true);
        continue;
      }
      if (kind == '%' && TryRaw(tag_begin, &line_starting)) {
        if (!raw_error_.ok()) return raw_error_;
        continue;
      }
      const JinjaToken::Type begin = kind == '%' ? JinjaToken::Type::kBlockBegin : JinjaToken::Type::kVariableBegin;
      tokens_.push_back({begin, kind == '%' ? "{%" : "{{", LineOf(tag_begin), ColumnOf(tag_begin)});
      absl::StatusOr<bool> ls = LexTag(kind, tag_begin);
      if (!ls.ok()) return ls.status();
      line_starting = *ls;
    }
    tokens_.push_back({JinjaToken::Type::kEnd, "", line_, column_});
    return std::move(tokens_);
  }

 private:
  size_t FindTagStart(size_t from) const {
    for (size_t i = src_.find('{', from); i != std::string::npos; i = src_.find('{', i + 1)) {
      if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    }
    return std::string::npos;
  }

  void Emit(JinjaToken::Type type, std::string text) {
    if (type == JinjaToken::Type::kData && text.empty()) return;
    tokens_.push_back({type, std::move(text), line_, column_});
  }

  void AdvanceTo(size_t target) {
    for (; pos_ < target && pos_ < src_.size(); ++pos_) {
      if (src_[pos_] == '\n') {
        ++line_;
        column_ = 1;
      } else {
        ++column_;
      }
    }
  }
  int LineOf(size_t p) const {
    int line = 1;
    for (size_t i = 0; i < p && i < src_.size(); ++i) line += src_[i] == '\n';
    return line;
  }
  int ColumnOf(size_t p) const {
    const size_t nl = p == 0 ? std::string::npos : src_.rfind('\n', p - 1);
    return static_cast<int>(p - (nl == std::string::npos ? 0 : nl + 1)) + 1;
  }

  absl::Status Error(size_t at, const std::string& message) const {
    return absl::InvalidArgumentError(absl::StrCat(name_, ":", LineOf(at), ":", ColumnOf(at), ": ", message));
  }

  // After the end of a tag at pos_: "-" strips all following whitespace, "+" nothing, otherwise one newline is
  // dropped when `trim` (trim_blocks). Returns whether the consumed text ended with a newline.
  bool AfterTagEnd(char end_sign, bool trim) {
    bool newline = false;
    if (end_sign == '-') {
      while (pos_ < src_.size() && IsSpace(src_[pos_])) {
        newline = src_[pos_] == '\n';
        AdvanceTo(pos_ + 1);
      }
    } else if (end_sign != '+' && trim && pos_ < src_.size() && src_[pos_] == '\n') {
      AdvanceTo(pos_ + 1);
      newline = true;
    }
    return newline;
  }

  // {% raw %}...{% endraw %}: the body is data. Returns false when the tag is not "raw".
  bool TryRaw(size_t tag_begin, bool* line_starting) {
    size_t p = pos_;
    while (p < src_.size() && IsSpace(src_[p])) ++p;
    if (src_.compare(p, 3, "raw") != 0 || (p + 3 < src_.size() && IsNameChar(src_[p + 3]))) return false;
    p += 3;
    while (p < src_.size() && IsSpace(src_[p])) ++p;
    char sign = 0;
    if (p < src_.size() && src_[p] == '-') sign = '-', ++p;
    if (src_.compare(p, 2, "%}") != 0) return false;
    AdvanceTo(p + 2);
    AfterTagEnd(sign, /*trim=*/false);  // Jinja does not trim the newline after {% raw %}
    // Find {%[-+]? endraw [-+]?%}.
    for (size_t i = src_.find("{%", pos_); i != std::string::npos; i = src_.find("{%", i + 2)) {
      size_t q = i + 2;
      const char open_sign = q < src_.size() && (src_[q] == '-' || src_[q] == '+') ? src_[q] : 0;
      if (open_sign) ++q;
      while (q < src_.size() && IsSpace(src_[q])) ++q;
      if (src_.compare(q, 6, "endraw") != 0) continue;
      q += 6;
      while (q < src_.size() && IsSpace(src_[q])) ++q;
      char close_sign = 0;
      if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) close_sign = src_[q++];
      if (src_.compare(q, 2, "%}") != 0) continue;
      std::string body = src_.substr(pos_, i - pos_);
      if (open_sign == '-') {
        while (!body.empty() && IsSpace(body.back())) body.pop_back();
      } else if (open_sign != '+') {
        const size_t nl = body.rfind('\n');
        if (nl != std::string::npos &&
            std::all_of(body.begin() + static_cast<std::ptrdiff_t>(nl) + 1, body.end(), IsSpace)) {
          body.resize(nl + 1);
        }
      }
      Emit(JinjaToken::Type::kData, std::move(body));
      AdvanceTo(q + 2);
      *line_starting = AfterTagEnd(close_sign, /*trim=*/true);
      return true;
    }
    raw_error_ = Error(tag_begin, "unterminated raw block: missing '{% endraw %}'");
    return true;
  }

  // Tokens of a {{ }} or {% %} tag up to and including its end. Returns whether the end consumed a newline.
  absl::StatusOr<bool> LexTag(char kind, size_t tag_begin) {
    const std::string end = kind == '%' ? "%}" : "}}";
    const JinjaToken::Type end_type = kind == '%' ? JinjaToken::Type::kBlockEnd : JinjaToken::Type::kVariableEnd;
    int depth = 0;  // open brackets: an end delimiter inside {...} or [...] is not the end of the tag
    while (true) {
      while (pos_ < src_.size() && IsSpace(src_[pos_])) AdvanceTo(pos_ + 1);
      if (pos_ >= src_.size()) {
        return Error(tag_begin, absl::StrCat("unterminated tag: missing '", end, "'"));
      }
      if (depth == 0) {
        char sign = 0;
        size_t p = pos_;
        if ((src_[p] == '-' || (src_[p] == '+' && kind == '%')) && src_.compare(p + 1, 2, end) == 0) {
          sign = src_[p];
          ++p;
        }
        if (src_.compare(p, 2, end) == 0) {
          tokens_.push_back({end_type, end, line_, column_});
          AdvanceTo(p + 2);
          return AfterTagEnd(sign, /*trim=*/kind == '%');
        }
      }
      const char c = src_[pos_];
      const int line = line_;
      const int col = column_;
      if (IsNameStart(c)) {
        size_t p = pos_;
        while (p < src_.size() && IsNameChar(src_[p])) ++p;
        tokens_.push_back({JinjaToken::Type::kName, src_.substr(pos_, p - pos_), line, col});
        AdvanceTo(p);
      } else if (IsDigit(c)) {
        size_t p = pos_;
        auto digits = [&] {
          while (p < src_.size() && (IsDigit(src_[p]) || (src_[p] == '_' && p + 1 < src_.size() &&
                                                          IsDigit(src_[p + 1])))) {
            ++p;
          }
        };
        digits();
        bool is_float = false;
        if (p + 1 < src_.size() && src_[p] == '.' && IsDigit(src_[p + 1])) {
          is_float = true;
          ++p;
          digits();
        }
        if (p < src_.size() && (src_[p] == 'e' || src_[p] == 'E')) {
          size_t q = p + 1;
          if (q < src_.size() && (src_[q] == '+' || src_[q] == '-')) ++q;
          if (q < src_.size() && IsDigit(src_[q])) {
            is_float = true;
            p = q;
            digits();
          }
        }
        std::string text;
        for (size_t i = pos_; i < p; ++i) {
          if (src_[i] != '_') text.push_back(src_[i]);
        }
        tokens_.push_back({is_float ? JinjaToken::Type::kFloat : JinjaToken::Type::kInt, text, line, col});
        AdvanceTo(p);
      } else if (c == '\'' || c == '"') {
        size_t p = pos_ + 1;
        while (p < src_.size() && src_[p] != c) p += src_[p] == '\\' ? 2 : 1;
        if (p >= src_.size()) return Error(pos_, "unterminated string literal");
        tokens_.push_back({JinjaToken::Type::kString,
                           DecodeStringLiteral(std::string_view(src_).substr(pos_ + 1, p - pos_ - 1)), line, col});
        AdvanceTo(p + 1);
      } else {
        static constexpr std::string_view kTwo[] = {"//", "**", "==", "!=", ">=", "<="};
        std::string op;
        for (std::string_view t : kTwo) {
          if (src_.compare(pos_, 2, t) == 0) op = std::string(t);
        }
        if (op.empty()) {
          if (std::string_view("+-*/%~[](){}<>=.:|,;").find(c) == std::string_view::npos) {
            return Error(pos_, absl::StrCat("unexpected character '", std::string(1, c), "' in tag"));
          }
          op = std::string(1, c);
        }
        if (op == "(" || op == "[" || op == "{") ++depth;
        if ((op == ")" || op == "]" || op == "}") && depth > 0) --depth;
        tokens_.push_back({JinjaToken::Type::kOperator, op, line, col});
        AdvanceTo(pos_ + op.size());
      }
    }
  }

  std::string src_;
  std::string name_;
  size_t pos_ = 0;
  int line_ = 1;
  int column_ = 1;
  std::vector<JinjaToken> tokens_;
  absl::Status raw_error_;
};

}  // namespace

absl::StatusOr<std::vector<JinjaToken>> JinjaLexer::Tokenize(std::string_view source, std::string_view source_name) {
  Scanner scanner(NormalizeSource(source), source_name);
  return scanner.Run();
}

}  // namespace verl
