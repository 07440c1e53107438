#include "common/text/jinja_builtins.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status/status_macros.h"
#include "common/text/py_str_case.h"

namespace verl::jinja {
namespace {

using Kind = JinjaValue::Kind;

const std::set<std::string_view>& Filters() {
  static const auto* names = new std::set<std::string_view>{
      "abs",       "attr",   "capitalize", "count",  "d",          "default", "dictsort", "e",     "escape",
      "first",     "float",  "indent",     "int",    "items",      "join",    "last",     "length", "list",
      "lower",     "map",    "max",        "min",    "reject",     "rejectattr", "replace", "reverse", "round",
      "safe",      "select", "selectattr", "sort",   "string",     "sum",     "title",    "tojson", "trim",
      "unique",    "upper",  "wordcount"};
  return *names;
}

const std::set<std::string_view>& Tests() {
  static const auto* names = new std::set<std::string_view>{
      "boolean", "callable", "defined", "divisibleby", "eq",   "equalto", "escaped",  "even",   "false",
      "float",   "ge",       "greaterthan", "gt",      "in",   "integer", "iterable", "le",     "lessthan",
      "lower",   "lt",       "mapping", "ne",          "none", "number",  "odd",      "sameas", "sequence",
      "string",  "true",     "undefined", "upper",     "==",   "!=",      "<",        "<=",     ">",
      ">="};
  return *names;
}

absl::Status TypeError(std::string_view message) {
  return absl::InvalidArgumentError(absl::string_view(message.data(), message.size()));
}

absl::Status UndefinedError(const JinjaValue& v) {
  return absl::InvalidArgumentError(v.undefined_description().empty() ? "value is undefined"
                                                                      : v.undefined_description());
}

// Positional argument `index`, else keyword `name`, else undefined.
JinjaValue Arg(const JinjaCallArgs& args, size_t index, std::string_view name) {
  if (index < args.positional.size()) return args.positional[index];
  for (const auto& [k, v] : args.keyword) {
    if (k == name) return v;
  }
  return JinjaValue::Undefined("");
}

bool IsAsciiSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

// Python's str.isspace() for one code point (ASCII, NEL, NBSP and the Unicode spaces).
bool IsSpaceCodePoint(std::string_view cp) {
  if (cp.size() == 1) return IsAsciiSpace(cp[0]) || cp[0] == '\x1c' || cp[0] == '\x1d' || cp[0] == '\x1e' ||
                             cp[0] == '\x1f';
  static const std::set<std::string_view> kSpaces = {
      "\xc2\x85",     "\xc2\xa0",     "\xe1\x9a\x80", "\xe2\x80\x80", "\xe2\x80\x81", "\xe2\x80\x82",
      "\xe2\x80\x83", "\xe2\x80\x84", "\xe2\x80\x85", "\xe2\x80\x86", "\xe2\x80\x87", "\xe2\x80\x88",
      "\xe2\x80\x89", "\xe2\x80\x8a", "\xe2\x80\xa8", "\xe2\x80\xa9", "\xe2\x80\xaf", "\xe2\x81\x9f",
      "\xe3\x80\x80"};
  return kSpaces.count(cp) > 0;
}

// Python's str.strip / lstrip / rstrip: `chars` undefined or None strips whitespace.
absl::StatusOr<std::string> Strip(const std::string& s, const JinjaValue& chars, bool left, bool right) {
  std::vector<std::string_view> cps = SplitCodePoints(s);
  std::vector<std::string_view> set;
  const bool whitespace = chars.is_undefined() || chars.is_none();
  if (!whitespace) {
    if (!chars.is_string()) return TypeError("strip arg must be None or str");
    set = SplitCodePoints(chars.string_value());
  }
  auto strip_it = [&](std::string_view cp) {
    return whitespace ? IsSpaceCodePoint(cp) : std::find(set.begin(), set.end(), cp) != set.end();
  };
  size_t b = 0;
  size_t e = cps.size();
  if (left) {
    while (b < e && strip_it(cps[b])) ++b;
  }
  if (right) {
    while (e > b && strip_it(cps[e - 1])) --e;
  }
  if (b == e) return std::string();
  const char* begin = cps[b].data();
  const char* end = cps[e - 1].data() + cps[e - 1].size();
  return std::string(begin, end);
}

// Jinja's title filter (not str.title): the text split before and after runs of '-', whitespace and '({[<', each
// piece's first character upper-cased and the rest of it lower-cased ("it's a_b" -> "It's A_b").
std::string JinjaTitle(const std::string& s) {
  auto separator = [](std::string_view cp) {
    return IsSpaceCodePoint(cp) || (cp.size() == 1 && std::string_view("-({[<").find(cp[0]) != std::string_view::npos);
  };
  const std::vector<std::string_view> cps = SplitCodePoints(s);
  std::string out;
  for (size_t i = 0; i < cps.size();) {
    const bool sep = separator(cps[i]);
    size_t j = i + 1;
    while (j < cps.size() && separator(cps[j]) == sep) ++j;
    out += PyUpper(cps[i]);
    if (j > i + 1) {
      const char* rest = cps[i + 1].data();
      out += PyLower(std::string_view(rest, cps[j - 1].data() + cps[j - 1].size() - rest));
    }
    i = j;
  }
  return out;
}

std::string Replace(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
  if (from.empty()) return s;
  std::string out;
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    const size_t hit = s.find(from, pos);
    if (hit == std::string::npos) break;
    out.append(s, pos, hit - pos).append(to);
    pos = hit + from.size();
    ++done;
  }
  out.append(s, pos, std::string::npos);
  return out;
}

// Python's str.split(sep=None, maxsplit=-1).
absl::StatusOr<JinjaValue> Split(const std::string& s, const JinjaValue& sep, const JinjaValue& maxsplit_value) {
  int64_t maxsplit = -1;
  if (maxsplit_value.kind() == Kind::kInt) maxsplit = maxsplit_value.int_value();
  JinjaValue::List parts;
  if (sep.is_undefined() || sep.is_none()) {
    // On runs of whitespace as str.isspace() has it (Unicode: U+3000, U+00A0, ...), by code point.
    const std::vector<std::string_view> cps = SplitCodePoints(s);
    const size_t n = cps.size();
    auto text = [&](size_t begin, size_t end) {  // code points [begin, end), end > begin
      return JinjaValue::String(std::string(cps[begin].data(), cps[end - 1].data() + cps[end - 1].size()));
    };
    size_t i = 0;
    while (true) {
      while (i < n && IsSpaceCodePoint(cps[i])) ++i;
      if (i >= n) break;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
        parts.push_back(text(i, n));  // the rest as it is, trailing whitespace included (Python)
        break;
      }
      size_t j = i;
      while (j < n && !IsSpaceCodePoint(cps[j])) ++j;
      parts.push_back(text(i, j));
      i = j;
    }
    return JinjaValue::MakeList(std::move(parts));
  }
  if (!sep.is_string()) return TypeError("must be str or None, not " + sep.TypeName());
  const std::string& d = sep.string_value();
  if (d.empty()) return TypeError("empty separator");
  size_t pos = 0;
  while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
    const size_t hit = s.find(d, pos);
    if (hit == std::string::npos) break;
    parts.push_back(JinjaValue::String(s.substr(pos, hit - pos)));
    pos = hit + d.size();
  }
  parts.push_back(JinjaValue::String(s.substr(pos)));
  return JinjaValue::MakeList(std::move(parts));
}

absl::StatusOr<bool> AffixMatch(const std::string& s, const JinjaValue& affix, bool prefix) {
  auto one = [&](const JinjaValue& a) -> absl::StatusOr<bool> {
    if (!a.is_string()) return TypeError("startswith/endswith argument must be str or a tuple of str");
    const std::string& t = a.string_value();
    if (t.size() > s.size()) return false;
    return prefix ? s.compare(0, t.size(), t) == 0 : s.compare(s.size() - t.size(), t.size(), t) == 0;
  };
  if (affix.is_list()) {
    for (const JinjaValue& a : affix.list()) {
      ASSIGN_OR_RETURN(bool m, one(a));
      if (m) return true;
    }
    return false;
  }
  return one(affix);
}

JinjaValue Method(std::string name, JinjaValue::Function fn) { return JinjaValue::Callable(std::move(name), std::move(fn)); }

// The methods templates call on strings. Python's full str API is not provided; these are the ones chat
// templates use.
std::optional<JinjaValue> StringMethod(const std::string& s, const std::string& name) {
  auto str_fn = [s, name](std::function<absl::StatusOr<JinjaValue>(const std::string&, JinjaCallArgs&)> f) {
    return Method("str." + name, [s, f](JinjaCallArgs& a) { return f(s, a); });
  };
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const bool l = name != "rstrip";
    const bool r = name != "lstrip";
    return str_fn([l, r](const std::string& v, JinjaCallArgs& a) -> absl::StatusOr<JinjaValue> {
      ASSIGN_OR_RETURN(std::string out, Strip(v, Arg(a, 0, "chars"), l, r));
      return JinjaValue::String(std::move(out));
    });
  }
  if (name == "split") {
    return str_fn([](const std::string& v, JinjaCallArgs& a) { return Split(v, Arg(a, 0, "sep"), Arg(a, 1, "maxsplit")); });
  }
  if (name == "startswith" || name == "endswith") {
    const bool prefix = name == "startswith";
    return str_fn([prefix](const std::string& v, JinjaCallArgs& a) -> absl::StatusOr<JinjaValue> {
      ASSIGN_OR_RETURN(bool m, AffixMatch(v, Arg(a, 0, "prefix"), prefix));
      return JinjaValue::Bool(m);
    });
  }
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") {
    std::string (*const map)(std::string_view) = name == "upper"   ? PyUpper
                                                 : name == "lower" ? PyLower
                                                 : name == "title" ? PyTitle
                                                                   : PyCapitalize;
    return str_fn([map](const std::string& v, JinjaCallArgs&) -> absl::StatusOr<JinjaValue> {
      return JinjaValue::String(map(v));
    });
  }
  if (name == "replace") {
    return str_fn([](const std::string& v, JinjaCallArgs& a) -> absl::StatusOr<JinjaValue> {
      const JinjaValue from = Arg(a, 0, "old");
      const JinjaValue to = Arg(a, 1, "new");
      const JinjaValue count = Arg(a, 2, "count");
      if (!from.is_string() || !to.is_string()) return TypeError("replace() arguments must be str");
      return JinjaValue::String(Replace(v, from.string_value(), to.string_value(),
                                        count.kind() == Kind::kInt ? count.int_value() : -1));
    });
  }
  if (name == "find" || name == "count") {
    const bool find = name == "find";
    return str_fn([find](const std::string& v, JinjaCallArgs& a) -> absl::StatusOr<JinjaValue> {
      const JinjaValue sub = Arg(a, 0, "sub");
      if (!sub.is_string()) return TypeError("must be str, not " + sub.TypeName());
      const std::string& t = sub.string_value();
      if (find) {
        const size_t hit = v.find(t);
        if (hit == std::string::npos) return JinjaValue::Int(-1);
        return JinjaValue::Int(static_cast<int64_t>(SplitCodePoints(std::string_view(v).substr(0, hit)).size()));
      }
      if (t.empty()) return JinjaValue::Int(static_cast<int64_t>(SplitCodePoints(v).size()) + 1);
      int64_t n = 0;
      for (size_t p = v.find(t); p != std::string::npos; p = v.find(t, p + t.size())) ++n;
      return JinjaValue::Int(n);
    });
  }
  if (name == "join") {
    return str_fn([](const std::string& sep, JinjaCallArgs& a) -> absl::StatusOr<JinjaValue> {
      ASSIGN_OR_RETURN(std::vector<JinjaValue> items, Iterate(Arg(a, 0, "iterable")));
      std::string out;
      for (size_t i = 0; i < items.size(); ++i) {
        if (!items[i].is_string()) return TypeError("sequence item: expected str instance, " + items[i].TypeName() + " found");
        if (i > 0) out += sep;
        out += items[i].string_value();
      }
      return JinjaValue::String(std::move(out));
    });
  }
  if (name == "isdigit" || name == "isspace" || name == "isalpha" || name == "isalnum" || name == "islower" ||
      name == "isupper") {
    return str_fn([name](const std::string& v, JinjaCallArgs&) -> absl::StatusOr<JinjaValue> {
      if (v.empty()) return JinjaValue::Bool(false);
      if (name == "isspace") {  // Unicode whitespace, by code point, as strip() and split() see it
        const std::vector<std::string_view> cps = SplitCodePoints(v);
        return JinjaValue::Bool(std::all_of(cps.begin(), cps.end(), IsSpaceCodePoint));
      }
      if (name == "isdigit") return JinjaValue::Bool(PyIsDigit(v));
      if (name == "isalpha") return JinjaValue::Bool(PyIsAlpha(v));
      if (name == "isalnum") return JinjaValue::Bool(PyIsAlnum(v));
      return JinjaValue::Bool(name == "islower" ? PyIsLower(v) : PyIsUpper(v));
    });
  }
  return std::nullopt;
}

std::optional<JinjaValue> DictMethod(const JinjaValue& d, const std::string& name) {
  if (name == "items" || name == "keys" || name == "values") {
    return Method("dict." + name, [d, name](JinjaCallArgs&) -> absl::StatusOr<JinjaValue> {
      JinjaValue::List out;
      for (const auto& [k, v] : d.dict()) {
        if (name == "items") {
          out.push_back(JinjaValue::MakeList({JinjaValue::String(k), v}));
        } else {
          out.push_back(name == "keys" ? JinjaValue::String(k) : v);
        }
      }
      return JinjaValue::MakeList(std::move(out));
    });
  }
  if (name == "get") {
    return Method("dict.get", [d](JinjaCallArgs& a) -> absl::StatusOr<JinjaValue> {
      const JinjaValue key = Arg(a, 0, "key");
      JinjaValue def = Arg(a, 1, "default");
      if (def.is_undefined()) def = JinjaValue::None();
      if (!key.is_string()) return def;
      const JinjaValue* v = d.Find(key.string_value());
      return v != nullptr ? *v : def;
    });
  }
  return std::nullopt;
}

int64_t Normalize(int64_t i, int64_t n) { return i < 0 ? i + n : i; }

absl::StatusOr<int64_t> Length(const JinjaValue& v) {
  switch (v.kind()) {
    case Kind::kUndefined:
      return 0;
    case Kind::kString:
      return static_cast<int64_t>(SplitCodePoints(v.string_value()).size());
    case Kind::kList:
      return static_cast<int64_t>(v.list().size());
    case Kind::kDict:
      return static_cast<int64_t>(v.dict().size());
    default:
      return TypeError("object of type '" + v.TypeName() + "' has no len()");
  }
}

void AppendJsonString(const std::string& s, bool ensure_ascii, std::string* out) {
  out->push_back('"');
  for (size_t i = 0; i < s.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    switch (c) {
      case '"': *out += "\\\""; continue;
      case '\\': *out += "\\\\"; continue;
      case '\n': *out += "\\n"; continue;
      case '\r': *out += "\\r"; continue;
      case '\t': *out += "\\t"; continue;
      case '\b': *out += "\\b"; continue;
      case '\f': *out += "\\f"; continue;
      default: break;
    }
    char buf[16];
    if (c < 0x20) {
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      *out += buf;
    } else if (c >= 0x80 && ensure_ascii) {
      // Decode one UTF-8 sequence and write it as \uXXXX (a surrogate pair above the BMP).
      uint32_t cp = c;
      int extra = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC0 ? 1 : 0;
      cp = extra == 3 ? c & 0x07 : extra == 2 ? c & 0x0F : extra == 1 ? c & 0x1F : c;
      for (int k = 0; k < extra && i + 1 < s.size(); ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[++i]) & 0x3F);
      if (cp >= 0x10000) {
        cp -= 0x10000;
        std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
      } else {
        std::snprintf(buf, sizeof(buf), "\\u%04x", cp);
      }
      *out += buf;
    } else {
      out->push_back(static_cast<char>(c));
    }
  }
  out->push_back('"');
}

absl::Status DumpJson(const JinjaValue& v, const JsonDumpOptions& o, int level, std::string* out) {
  const std::string item_sep = o.item_separator.value_or(o.indent >= 0 ? "," : ", ");
  const std::string key_sep = o.key_separator.value_or(": ");
  auto newline = [&](int lvl) {
    if (o.indent < 0) return;
    out->push_back('\n');
    out->append(static_cast<size_t>(o.indent) * lvl, ' ');
  };
  switch (v.kind()) {
    case Kind::kNone:
      *out += "null";
      return absl::OkStatus();
    case Kind::kBool:
      *out += v.bool_value() ? "true" : "false";
      return absl::OkStatus();
    case Kind::kInt:
      *out += std::to_string(v.int_value());
      return absl::OkStatus();
    case Kind::kFloat: {
      const double d = v.float_value();
      if (std::isnan(d)) {
        *out += "NaN";
      } else if (std::isinf(d)) {
        *out += d > 0 ? "Infinity" : "-Infinity";
      } else {
        *out += PythonFloatRepr(d);
      }
      return absl::OkStatus();
    }
    case Kind::kString:
      AppendJsonString(v.string_value(), o.ensure_ascii, out);
      return absl::OkStatus();
    case Kind::kList: {
      if (v.list().empty()) {
        *out += "[]";
        return absl::OkStatus();
      }
      out->push_back('[');
      for (size_t i = 0; i < v.list().size(); ++i) {
        if (i > 0) *out += item_sep;
        newline(level + 1);
        RETURN_IF_ERROR(DumpJson(v.list()[i], o, level + 1, out));
      }
      newline(level);
      out->push_back(']');
      return absl::OkStatus();
    }
    case Kind::kDict: {
      if (v.dict().empty()) {
        *out += "{}";
        return absl::OkStatus();
      }
      std::vector<const std::pair<std::string, JinjaValue>*> items;
      for (const auto& kv : v.dict()) items.push_back(&kv);
      if (o.sort_keys) {
        std::stable_sort(items.begin(), items.end(), [](auto* a, auto* b) { return a->first < b->first; });
      }
      out->push_back('{');
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) *out += item_sep;
        newline(level + 1);
        AppendJsonString(items[i]->first, o.ensure_ascii, out);
        *out += key_sep;
        RETURN_IF_ERROR(DumpJson(items[i]->second, o, level + 1, out));
      }
      newline(level);
      out->push_back('}');
      return absl::OkStatus();
    }
    default:
      return TypeError("Object of type " + v.TypeName() + " is not JSON serializable");
  }
}

absl::StatusOr<JinjaValue> ToInt(const JinjaValue& v, const JinjaValue& def_value, const JinjaValue& base_value) {
  const JinjaValue def = def_value.is_undefined() ? JinjaValue::Int(0) : def_value;
  const int base = base_value.kind() == Kind::kInt ? static_cast<int>(base_value.int_value()) : 10;
  switch (v.kind()) {
    case Kind::kInt:
      return v;
    case Kind::kBool:
      return JinjaValue::Int(v.bool_value() ? 1 : 0);
    case Kind::kFloat:
      if (!std::isfinite(v.float_value())) return def;
      return JinjaValue::Int(static_cast<int64_t>(v.float_value()));
    case Kind::kString: {
      std::string s = v.string_value();
      s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
      while (!s.empty() && IsAsciiSpace(s.back())) s.pop_back();
      size_t b = 0;
      while (b < s.size() && IsAsciiSpace(s[b])) ++b;
      s = s.substr(b);
      if (s.empty()) return def;
      char* end = nullptr;
      const long long i = std::strtoll(s.c_str(), &end, base);
      if (*end == '\0') return JinjaValue::Int(i);
      const double d = std::strtod(s.c_str(), &end);
      if (*end == '\0' && std::isfinite(d)) return JinjaValue::Int(static_cast<int64_t>(d));
      return def;
    }
    default:
      return def;
  }
}

absl::StatusOr<JinjaValue> ToFloat(const JinjaValue& v, const JinjaValue& def_value) {
  const JinjaValue def = def_value.is_undefined() ? JinjaValue::Float(0.0) : def_value;
  if (v.is_number()) return JinjaValue::Float(v.AsDouble());
  if (v.is_string()) {
    const std::string& s = v.string_value();
    char* end = nullptr;
    const double d = std::strtod(s.c_str(), &end);
    if (!s.empty() && *end == '\0') return JinjaValue::Float(d);
  }
  return def;
}

// Sort key comparison for sort / dictsort / min / max: strings compared lower-cased unless case_sensitive.
absl::StatusOr<bool> SortLess(const JinjaValue& a, const JinjaValue& b, bool case_sensitive) {
  if (!case_sensitive && a.is_string() && b.is_string()) {
    return PyLower(a.string_value()) < PyLower(b.string_value());
  }
  return JinjaValue::Less(a, b);
}

absl::StatusOr<JinjaValue> AttributePath(const JinjaValue& v, const std::string& path) {
  JinjaValue cur = v;
  size_t pos = 0;
  while (true) {
    const size_t dot = path.find('.', pos);
    const std::string part = path.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
    if (cur.is_undefined()) return cur;
    if (!part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      ASSIGN_OR_RETURN(cur, GetItem(cur, JinjaValue::Int(std::strtoll(part.c_str(), nullptr, 10))));
    } else {
      ASSIGN_OR_RETURN(cur, GetItem(cur, JinjaValue::String(part)));
    }
    if (dot == std::string::npos) return cur;
    pos = dot + 1;
  }
}

absl::StatusOr<JinjaValue> SortFilter(const JinjaValue& value, const JinjaCallArgs& args) {
  ASSIGN_OR_RETURN(std::vector<JinjaValue> items, Iterate(value));
  const bool reverse = Arg(args, 0, "reverse").Truthy();
  const bool case_sensitive = Arg(args, 1, "case_sensitive").Truthy();
  const JinjaValue attribute = Arg(args, 2, "attribute");
  std::vector<std::pair<JinjaValue, JinjaValue>> keyed;
  for (const JinjaValue& v : items) {
    JinjaValue key = v;
    if (attribute.is_string()) {
      ASSIGN_OR_RETURN(key, AttributePath(v, attribute.string_value()));
    }
    keyed.emplace_back(key, v);
  }
  absl::Status error;
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
    absl::StatusOr<bool> less = reverse ? SortLess(b.first, a.first, case_sensitive)
                                        : SortLess(a.first, b.first, case_sensitive);
    if (!less.ok()) {
      error = less.status();
      return false;
    }
    return *less;
  });
  RETURN_IF_ERROR(error);
  JinjaValue::List out;
  for (auto& [k, v] : keyed) out.push_back(std::move(v));
  return JinjaValue::MakeList(std::move(out));
}

// select / reject / selectattr / rejectattr.
absl::StatusOr<JinjaValue> SelectFilter(std::string_view name, const JinjaValue& value, const JinjaCallArgs& args) {
  const bool attr = name == "selectattr" || name == "rejectattr";
  const bool keep_when = name == "select" || name == "selectattr";
  size_t next = 0;
  std::string attribute;
  if (attr) {
    const JinjaValue a = Arg(args, next++, "attribute");
    if (!a.is_string()) return TypeError(std::string(name) + " needs an attribute name");
    attribute = a.string_value();
  }
  std::string test;
  if (next < args.positional.size()) {
    const JinjaValue t = args.positional[next++];
    if (!t.is_string()) return TypeError(std::string(name) + ": the test name must be a string");
    test = t.string_value();
    if (!IsKnownTest(test)) return TypeError("no test named '" + test + "'");
  }
  JinjaCallArgs test_args;
  for (size_t i = next; i < args.positional.size(); ++i) test_args.positional.push_back(args.positional[i]);
  ASSIGN_OR_RETURN(std::vector<JinjaValue> items, Iterate(value));
  JinjaValue::List out;
  for (const JinjaValue& item : items) {
    JinjaValue subject = item;
    if (attr) {
      ASSIGN_OR_RETURN(subject, AttributePath(item, attribute));
    }
    bool pass = subject.Truthy();
    if (!test.empty()) {
      ASSIGN_OR_RETURN(pass, ApplyTest(test, subject, test_args));
    }
    if (pass == keep_when) out.push_back(item);
  }
  return JinjaValue::MakeList(std::move(out));
}

absl::StatusOr<JinjaValue> MapFilter(const JinjaValue& value, const JinjaCallArgs& args) {
  ASSIGN_OR_RETURN(std::vector<JinjaValue> items, Iterate(value));
  JinjaValue::List out;
  const JinjaValue attribute = Arg(args, 99, "attribute");
  if (attribute.is_string()) {
    const JinjaValue def = Arg(args, 99, "default");
    for (const JinjaValue& item : items) {
      ASSIGN_OR_RETURN(JinjaValue v, AttributePath(item, attribute.string_value()));
      out.push_back(v.is_undefined() && !def.is_undefined() ? def : v);
    }
    return JinjaValue::MakeList(std::move(out));
  }
  if (args.positional.empty() || !args.positional[0].is_string()) {
    return TypeError("map needs a filter name or attribute=");
  }
  const std::string filter = args.positional[0].string_value();
  if (!IsKnownFilter(filter)) return TypeError("no filter named '" + filter + "'");
  JinjaCallArgs rest;
  rest.positional.assign(args.positional.begin() + 1, args.positional.end());
  rest.keyword = args.keyword;
  for (const JinjaValue& item : items) {
    ASSIGN_OR_RETURN(JinjaValue v, ApplyFilter(filter, item, rest));
    out.push_back(std::move(v));
  }
  return JinjaValue::MakeList(std::move(out));
}

std::string HtmlEscape(const std::string& s) {
  std::string out;
  for (const char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

}  // namespace

std::vector<std::string_view> SplitCodePoints(std::string_view s) {
  std::vector<std::string_view> out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 1;
    if (i + n > s.size()) n = 1;
    for (size_t k = 1; k < n; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) {
        n = 1;
        break;
      }
    }
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

bool IsKnownFilter(std::string_view name) { return Filters().count(name) > 0; }
bool IsKnownTest(std::string_view name) { return Tests().count(name) > 0; }

absl::StatusOr<JinjaValue> GetAttribute(const JinjaValue& obj, const std::string& name) {
  switch (obj.kind()) {
    case Kind::kUndefined:
      return UndefinedError(obj);
    case Kind::kString:
      if (std::optional<JinjaValue> m = StringMethod(obj.string_value(), name)) return *m;
      break;
    case Kind::kDict: {
      if (std::optional<JinjaValue> m = DictMethod(obj, name)) return *m;
      if (const JinjaValue* v = obj.Find(name)) return *v;
      break;
    }
    case Kind::kNamespace:
      if (const JinjaValue* v = obj.Find(name)) return *v;
      break;
    default:
      break;
  }
  return JinjaValue::Undefined(absl::StrCat("'", obj.TypeName(), " object' has no attribute '", name, "'"));
}

absl::StatusOr<JinjaValue> GetItem(const JinjaValue& obj, const JinjaValue& key) {
  if (obj.is_undefined()) return UndefinedError(obj);
  if (key.kind() == Kind::kInt || key.kind() == Kind::kBool) {
    const int64_t raw = key.kind() == Kind::kInt ? key.int_value() : key.bool_value();
    if (obj.is_list()) {
      const int64_t n = static_cast<int64_t>(obj.list().size());
      const int64_t i = Normalize(raw, n);
      if (i >= 0 && i < n) return obj.list()[static_cast<size_t>(i)];
    } else if (obj.is_string()) {
      std::vector<std::string_view> cps = SplitCodePoints(obj.string_value());
      const int64_t n = static_cast<int64_t>(cps.size());
      const int64_t i = Normalize(raw, n);
      if (i >= 0 && i < n) return JinjaValue::String(std::string(cps[static_cast<size_t>(i)]));
    }
    return JinjaValue::Undefined(absl::StrCat("'", obj.TypeName(), " object' has no element ", raw));
  }
  if (key.is_string()) {
    if (obj.is_dict()) {
      if (const JinjaValue* v = obj.Find(key.string_value())) return *v;
    }
    return GetAttribute(obj, key.string_value());
  }
  return JinjaValue::Undefined(absl::StrCat("'", obj.TypeName(), " object' has no element ", key.Repr()));
}

absl::StatusOr<JinjaValue> GetSlice(const JinjaValue& obj, const std::optional<int64_t>& start_opt,
                                    const std::optional<int64_t>& stop_opt, const std::optional<int64_t>& step_opt) {
  if (obj.is_undefined()) return UndefinedError(obj);
  const int64_t step = step_opt.value_or(1);
  if (step == 0) return TypeError("slice step cannot be zero");
  std::vector<std::string_view> cps;
  int64_t n = 0;
  if (obj.is_list()) {
    n = static_cast<int64_t>(obj.list().size());
  } else if (obj.is_string()) {
    cps = SplitCodePoints(obj.string_value());
    n = static_cast<int64_t>(cps.size());
  } else {
    return TypeError("'" + obj.TypeName() + "' object is not subscriptable");
  }
  // Python's slice.indices().
  auto clamp = [&](std::optional<int64_t> v, int64_t dflt) -> int64_t {
    if (!v) return dflt;
    int64_t i = *v;
    if (i < 0) {
      i += n;
      if (i < 0) i = step < 0 ? -1 : 0;
    } else if (i >= n) {
      i = step < 0 ? n - 1 : n;
    }
    return i;
  };
  const int64_t start = clamp(start_opt, step < 0 ? n - 1 : 0);
  const int64_t stop = clamp(stop_opt, step < 0 ? -1 : n);
  std::vector<size_t> idx;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) idx.push_back(static_cast<size_t>(i));
  if (obj.is_list()) {
    JinjaValue::List out;
    for (size_t i : idx) out.push_back(obj.list()[i]);
    return JinjaValue::MakeList(std::move(out));
  }
  std::string out;
  for (size_t i : idx) out += cps[i];
  return JinjaValue::String(std::move(out));
}

absl::StatusOr<std::vector<JinjaValue>> Iterate(const JinjaValue& value) {
  std::vector<JinjaValue> out;
  switch (value.kind()) {
    case Kind::kUndefined:
      return out;
    case Kind::kList:
      return value.list();
    case Kind::kDict:
      for (const auto& [k, v] : value.dict()) out.push_back(JinjaValue::String(k));
      return out;
    case Kind::kString:
      for (std::string_view cp : SplitCodePoints(value.string_value())) out.push_back(JinjaValue::String(std::string(cp)));
      return out;
    default:
      return TypeError("'" + value.TypeName() + "' object is not iterable");
  }
}

absl::StatusOr<bool> Contains(const JinjaValue& haystack, const JinjaValue& needle) {
  switch (haystack.kind()) {
    case Kind::kUndefined:
      return false;
    case Kind::kString:
      if (!needle.is_string()) {
        return TypeError("'in <string>' requires string as left operand, not " + needle.TypeName());
      }
      return haystack.string_value().find(needle.string_value()) != std::string::npos;
    case Kind::kList:
      for (const JinjaValue& v : haystack.list()) {
        if (v.Equals(needle)) return true;
      }
      return false;
    case Kind::kDict:
    case Kind::kNamespace:
      return needle.is_string() && haystack.Find(needle.string_value()) != nullptr;
    default:
      return TypeError("argument of type '" + haystack.TypeName() + "' is not iterable");
  }
}

absl::StatusOr<std::string> ToJson(const JinjaValue& value, const JsonDumpOptions& options) {
  std::string out;
  RETURN_IF_ERROR(DumpJson(value, options, 0, &out));
  return out;
}

absl::StatusOr<bool> ApplyTest(std::string_view name, const JinjaValue& v, const JinjaCallArgs& args) {
  const JinjaValue arg = Arg(args, 0, "value");
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "boolean") return v.kind() == Kind::kBool;
  if (name == "true") return v.kind() == Kind::kBool && v.bool_value();
  if (name == "false") return v.kind() == Kind::kBool && !v.bool_value();
  if (name == "integer") return v.kind() == Kind::kInt;
  if (name == "float") return v.kind() == Kind::kFloat;
  if (name == "number") return v.is_number();
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.is_dict();
  if (name == "iterable") return v.is_list() || v.is_dict() || v.is_string() || v.is_undefined();
  if (name == "sequence") return v.is_list() || v.is_dict() || v.is_string() || v.is_undefined();
  if (name == "callable") return v.kind() == Kind::kCallable;
  if (name == "escaped") return false;
  if (name == "lower" || name == "upper") {
    return name == "lower" ? PyIsLower(v.ToString()) : PyIsUpper(v.ToString());  // Jinja: str(value).islower()
  }
  if (name == "even" || name == "odd" || name == "divisibleby") {
    if (v.kind() != Kind::kInt) return TypeError("test '" + std::string(name) + "' needs an integer");
    if (name == "divisibleby") {
      if (arg.kind() != Kind::kInt || arg.int_value() == 0) return TypeError("divisibleby needs a non-zero integer");
      return v.int_value() % arg.int_value() == 0;
    }
    return (v.int_value() % 2 == 0) == (name == "even");
  }
  if (name == "sameas") {
    if (v.is_none() || arg.is_none() || v.kind() == Kind::kBool) return v.kind() == arg.kind() && v.Equals(arg);
    return v.kind() == arg.kind() && v.Equals(arg) && !v.is_string() && !v.is_list() && !v.is_dict();
  }
  if (name == "eq" || name == "equalto" || name == "==") return v.Equals(arg);
  if (name == "ne" || name == "!=") return !v.Equals(arg);
  if (name == "lt" || name == "lessthan" || name == "<") return JinjaValue::Less(v, arg);
  if (name == "gt" || name == "greaterthan" || name == ">") return JinjaValue::Less(arg, v);
  if (name == "le" || name == "<=") {
    ASSIGN_OR_RETURN(bool gt, JinjaValue::Less(arg, v));
    return !gt;
  }
  if (name == "ge" || name == ">=") {
    ASSIGN_OR_RETURN(bool lt, JinjaValue::Less(v, arg));
    return !lt;
  }
  if (name == "in") return Contains(arg, v);
  return TypeError("no test named '" + std::string(name) + "'");
}

absl::StatusOr<JinjaValue> ApplyFilter(std::string_view name, const JinjaValue& v, const JinjaCallArgs& args) {
  if (name == "default" || name == "d") {
    JinjaValue def = Arg(args, 0, "default_value");
    if (def.is_undefined()) def = JinjaValue::String("");
    const bool boolean = Arg(args, 1, "boolean").Truthy();
    return v.is_undefined() || (boolean && !v.Truthy()) ? def : v;
  }
  if (name == "length" || name == "count") {
    ASSIGN_OR_RETURN(int64_t n, Length(v));
    return JinjaValue::Int(n);
  }
  if (name == "string") return JinjaValue::String(v.ToString());
  if (name == "safe") return v;
  if (name == "e" || name == "escape") return JinjaValue::String(HtmlEscape(v.ToString()));
  if (name == "trim") {
    ASSIGN_OR_RETURN(std::string s, Strip(v.ToString(), Arg(args, 0, "chars"), true, true));
    return JinjaValue::String(std::move(s));
  }
  if (name == "upper") return JinjaValue::String(PyUpper(v.ToString()));
  if (name == "lower") return JinjaValue::String(PyLower(v.ToString()));
  if (name == "capitalize") return JinjaValue::String(PyCapitalize(v.ToString()));
  if (name == "title") return JinjaValue::String(JinjaTitle(v.ToString()));
  if (name == "replace") {
    const JinjaValue from = Arg(args, 0, "old");
    const JinjaValue to = Arg(args, 1, "new");
    const JinjaValue count = Arg(args, 2, "count");
    if (!from.is_string() || !to.is_string()) return TypeError("replace needs two strings");
    return JinjaValue::String(Replace(v.ToString(), from.string_value(), to.string_value(),
                                      count.kind() == Kind::kInt ? count.int_value() : -1));
  }
  if (name == "wordcount") {
    ASSIGN_OR_RETURN(JinjaValue words, Split(v.ToString(), JinjaValue::None(), JinjaValue::Undefined("")));
    return JinjaValue::Int(static_cast<int64_t>(words.list().size()));
  }
  if (name == "indent") {
    const JinjaValue width_v = Arg(args, 0, "width");
    const std::string pad = width_v.is_string() ? width_v.string_value()
                                                : std::string(width_v.kind() == Kind::kInt ? width_v.int_value() : 4, ' ');
    const bool first = Arg(args, 1, "first").Truthy();
    const bool blank = Arg(args, 2, "blank").Truthy();
    const std::string s = v.ToString();
    std::string out;
    size_t pos = 0;
    bool first_line = true;
    while (pos <= s.size()) {
      const size_t nl = s.find('\n', pos);
      const std::string line = s.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
      if ((!first_line || first) && (blank || !line.empty())) out += pad;
      out += line;
      if (nl == std::string::npos) break;
      out += "\n";
      pos = nl + 1;
      first_line = false;
    }
    return JinjaValue::String(std::move(out));
  }
  if (name == "tojson") {
    JsonDumpOptions o;
    const JinjaValue ensure_ascii = Arg(args, 99, "ensure_ascii");
    o.ensure_ascii = !ensure_ascii.is_undefined() && ensure_ascii.Truthy();
    const JinjaValue indent = Arg(args, 0, "indent");
    if (indent.kind() == Kind::kInt) o.indent = static_cast<int>(indent.int_value());
    const JinjaValue separators = Arg(args, 99, "separators");
    if (separators.is_list() && separators.list().size() == 2 && separators.list()[0].is_string() &&
        separators.list()[1].is_string()) {
      o.item_separator = separators.list()[0].string_value();
      o.key_separator = separators.list()[1].string_value();
    }
    o.sort_keys = Arg(args, 99, "sort_keys").Truthy();
    ASSIGN_OR_RETURN(std::string json, ToJson(v, o));
    return JinjaValue::String(std::move(json));
  }
  if (name == "int") return ToInt(v, Arg(args, 0, "default"), Arg(args, 1, "base"));
  if (name == "float") return ToFloat(v, Arg(args, 0, "default"));
  if (name == "abs") {
    if (v.kind() == Kind::kInt) return JinjaValue::Int(v.int_value() < 0 ? -v.int_value() : v.int_value());
    if (v.is_number()) return JinjaValue::Float(std::fabs(v.AsDouble()));
    return TypeError("bad operand type for abs(): '" + v.TypeName() + "'");
  }
  if (name == "round") {
    if (!v.is_number()) return TypeError("round needs a number");
    const JinjaValue p = Arg(args, 0, "precision");
    const JinjaValue method = Arg(args, 1, "method");
    const double scale = std::pow(10.0, p.kind() == Kind::kInt ? static_cast<double>(p.int_value()) : 0.0);
    const double x = v.AsDouble() * scale;
    const std::string m = method.is_string() ? method.string_value() : "common";
    double r = m == "ceil" ? std::ceil(x) : m == "floor" ? std::floor(x) : std::nearbyint(x);
    return JinjaValue::Float(r / scale);
  }
  if (name == "first" || name == "last") {
    if (v.is_list() && v.kind() == Kind::kList && !v.list().empty()) {
      return name == "first" ? v.list().front() : v.list().back();
    }
    if (v.is_string() || v.is_dict() || v.is_list() || v.is_undefined()) {
      ASSIGN_OR_RETURN(std::vector<JinjaValue> items, Iterate(v));
      if (!items.empty()) return name == "first" ? items.front() : items.back();
      return JinjaValue::Undefined(absl::StrCat("No ", std::string(name), " item, sequence was empty."));
    }
    return TypeError("'" + v.TypeName() + "' object is not iterable");
  }
  if (name == "list") {
    ASSIGN_OR_RETURN(std::vector<JinjaValue> items, Iterate(v));
    return JinjaValue::MakeList(std::move(items));
  }
  if (name == "reverse") {
    if (v.is_string()) {
      std::vector<std::string_view> cps = SplitCodePoints(v.string_value());
      std::string out;
      for (auto it = cps.rbegin(); it != cps.rend(); ++it) out += *it;
      return JinjaValue::String(std::move(out));
    }
    ASSIGN_OR_RETURN(std::vector<JinjaValue> items, Iterate(v));
    std::reverse(items.begin(), items.end());
    return JinjaValue::MakeList(std::move(items));
  }
  if (name == "items") {
    if (v.is_undefined()) return JinjaValue::MakeList({});
    if (!v.is_dict()) return TypeError("Can only get item pairs from a mapping.");
    JinjaValue::List out;
    for (const auto& [k, val] : v.dict()) out.push_back(JinjaValue::MakeList({JinjaValue::String(k), val}));
    return JinjaValue::MakeList(std::move(out));
  }
  if (name == "dictsort") {
    if (!v.is_dict()) return TypeError("dictsort needs a mapping");
    const bool case_sensitive = Arg(args, 0, "case_sensitive").Truthy();
    const JinjaValue by = Arg(args, 1, "by");
    const bool by_value = by.is_string() && by.string_value() == "value";
    const bool reverse = Arg(args, 2, "reverse").Truthy();
    JinjaValue::List pairs;
    for (const auto& [k, val] : v.dict()) pairs.push_back(JinjaValue::MakeList({JinjaValue::String(k), val}));
    absl::Status error;
    std::stable_sort(pairs.begin(), pairs.end(), [&](const JinjaValue& a, const JinjaValue& b) {
      const JinjaValue& x = a.list()[by_value ? 1 : 0];
      const JinjaValue& y = b.list()[by_value ? 1 : 0];
      absl::StatusOr<bool> less = reverse ? SortLess(y, x, case_sensitive) : SortLess(x, y, case_sensitive);
      if (!less.ok()) error = less.status();
      return less.ok() && *less;
    });
    RETURN_IF_ERROR(error);
    return JinjaValue::MakeList(std::move(pairs));
  }
  if (name == "sort") return SortFilter(v, args);
  if (name == "unique") {
    ASSIGN_OR_RETURN(std::vector<JinjaValue> items, Iterate(v));
    JinjaValue::List out;
    for (const JinjaValue& item : items) {
      bool seen = false;
      for (const JinjaValue& o : out) seen = seen || o.Equals(item);
      if (!seen) out.push_back(item);
    }
    return JinjaValue::MakeList(std::move(out));
  }
  if (name == "min" || name == "max") {
    ASSIGN_OR_RETURN(std::vector<JinjaValue> items, Iterate(v));
    if (items.empty()) return JinjaValue::Undefined(absl::StrCat("No ", std::string(name), " item, sequence was empty."));
    const bool case_sensitive = Arg(args, 0, "case_sensitive").Truthy();
    JinjaValue best = items[0];
    for (size_t i = 1; i < items.size(); ++i) {
      ASSIGN_OR_RETURN(bool less, name == "min" ? SortLess(items[i], best, case_sensitive)
                                                : SortLess(best, items[i], case_sensitive));
      if (less) best = items[i];
    }
    return best;
  }
  if (name == "sum") {
    ASSIGN_OR_RETURN(std::vector<JinjaValue> items, Iterate(v));
    const JinjaValue attribute = Arg(args, 0, "attribute");
    const JinjaValue start = Arg(args, 1, "start");
    bool is_float = start.kind() == Kind::kFloat;
    int64_t isum = start.kind() == Kind::kInt ? start.int_value() : 0;
    double fsum = start.is_number() ? start.AsDouble() : 0.0;
    for (JinjaValue item : items) {
      if (attribute.is_string()) {
        ASSIGN_OR_RETURN(item, AttributePath(item, attribute.string_value()));
      }
      if (!item.is_number()) return TypeError("unsupported operand type(s) for +: 'int' and '" + item.TypeName() + "'");
      if (item.kind() == Kind::kFloat) is_float = true;
      isum += item.kind() == Kind::kBool ? item.bool_value() : item.kind() == Kind::kInt ? item.int_value() : 0;
      fsum += item.AsDouble();
    }
    return is_float ? JinjaValue::Float(fsum) : JinjaValue::Int(isum);
  }
  if (name == "join") {
    ASSIGN_OR_RETURN(std::vector<JinjaValue> items, Iterate(v));
    const JinjaValue sep = Arg(args, 0, "d");
    const JinjaValue attribute = Arg(args, 1, "attribute");
    std::string out;
    for (size_t i = 0; i < items.size(); ++i) {
      if (i > 0) out += sep.is_undefined() ? "" : sep.ToString();
      JinjaValue item = items[i];
      if (attribute.is_string()) {
        ASSIGN_OR_RETURN(item, AttributePath(item, attribute.string_value()));
      }
      out += item.ToString();
    }
    return JinjaValue::String(std::move(out));
  }
  if (name == "attr") {
    const JinjaValue attr = Arg(args, 0, "name");
    if (!attr.is_string()) return TypeError("attr needs a name");
    return GetAttribute(v, attr.string_value());
  }
  if (name == "map") return MapFilter(v, args);
  if (name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr") {
    return SelectFilter(name, v, args);
  }
  return TypeError("no filter named '" + std::string(name) + "'");
}

}  // namespace verl::jinja
