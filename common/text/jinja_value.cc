#include "common/text/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace verl {
namespace {

// ordered_json keeps the keys in document order, as Python's json.loads does.
JinjaValue FromNlohmann(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
      return JinjaValue::None();
    case nlohmann::ordered_json::value_t::boolean:
      return JinjaValue::Bool(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return JinjaValue::Int(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned:
      return JinjaValue::Int(static_cast<int64_t>(j.get<uint64_t>()));
    case nlohmann::ordered_json::value_t::number_float:
      return JinjaValue::Float(j.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return JinjaValue::String(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      JinjaValue::List items;
      items.reserve(j.size());
      for (const nlohmann::ordered_json& e : j) items.push_back(FromNlohmann(e));
      return JinjaValue::MakeList(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      JinjaValue::Dict items;
      items.reserve(j.size());
      for (auto it = j.begin(); it != j.end(); ++it) items.emplace_back(it.key(), FromNlohmann(it.value()));
      return JinjaValue::MakeDict(std::move(items));
    }
    default:
      return JinjaValue::None();
  }
}

std::string PythonStringRepr(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (const char ch : s) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (ch == quote || ch == '\\') {
      out.push_back('\\');
      out.push_back(ch);
    } else if (ch == '\n') {
      out += "\\n";
    } else if (ch == '\r') {
      out += "\\r";
    } else if (ch == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    } else {
      out.push_back(ch);
    }
  }
  out.push_back(quote);
  return out;
}

}  // namespace

std::string PythonFloatRepr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  // The shortest round-trip digits, in scientific form: "-1.2345e+02".
  const auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  std::string sign;
  if (!sci.empty() && sci[0] == '-') {
    sign = "-";
    sci.erase(0, 1);
  }
  const size_t e = sci.find('e');
  std::string digits = sci.substr(0, e);
  const int exp = std::stoi(sci.substr(e + 1));
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  std::string out;
  if (exp >= -5 + 1 && exp < 16) {
    // Fixed notation, as repr() uses for 1e-4 <= |d| < 1e16.
    if (exp >= 0) {
      if (static_cast<int>(digits.size()) <= exp + 1) {
        out = digits + std::string(exp + 1 - digits.size(), '0') + ".0";
      } else {
        out = digits.substr(0, exp + 1) + "." + digits.substr(exp + 1);
      }
    } else {
      out = "0." + std::string(-exp - 1, '0') + digits;
    }
  } else {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof(eb), "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    out += eb;
  }
  return sign + out;
}

JinjaValue JinjaValue::Undefined(std::string description) { return JinjaValue(UndefinedTag{std::move(description)}); }
JinjaValue JinjaValue::None() { return JinjaValue(nullptr); }
JinjaValue JinjaValue::Bool(bool b) { return JinjaValue(b); }
JinjaValue JinjaValue::Int(int64_t i) { return JinjaValue(i); }
JinjaValue JinjaValue::Float(double d) { return JinjaValue(d); }
JinjaValue JinjaValue::String(std::string s) { return JinjaValue(std::move(s)); }
JinjaValue JinjaValue::MakeList(List items) { return JinjaValue(std::make_shared<const List>(std::move(items))); }
JinjaValue JinjaValue::MakeDict(Dict items) { return JinjaValue(std::make_shared<const Dict>(std::move(items))); }
JinjaValue JinjaValue::MakeNamespace(Dict items) {
  return JinjaValue(NamespacePtr{std::make_shared<Namespace>(Namespace{std::move(items)})});
}
JinjaValue JinjaValue::Callable(std::string name, Function fn) {
  return JinjaValue(std::make_shared<const CallableImpl>(CallableImpl{std::move(name), std::move(fn)}));
}

absl::StatusOr<JinjaValue> JinjaValue::FromJson(std::string_view json_text) {
  try {
    return FromNlohmann(nlohmann::ordered_json::parse(json_text));
  } catch (const nlohmann::ordered_json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("malformed JSON: ", e.what()));
  }
}

JinjaValue::Kind JinjaValue::kind() const { return static_cast<Kind>(data_.index()); }

double JinjaValue::AsDouble() const {
  switch (kind()) {
    case Kind::kBool:
      return bool_value() ? 1.0 : 0.0;
    case Kind::kInt:
      return static_cast<double>(int_value());
    case Kind::kFloat:
      return float_value();
    default:
      return 0.0;
  }
}

const JinjaValue* JinjaValue::Find(std::string_view key) const {
  const Dict* d = nullptr;
  if (kind() == Kind::kDict) d = &dict();
  if (kind() == Kind::kNamespace) d = &namespace_attrs();
  if (d == nullptr) return nullptr;
  for (const auto& [k, v] : *d) {
    if (k == key) return &v;
  }
  return nullptr;
}

bool JinjaValue::Truthy() const {
  switch (kind()) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return bool_value();
    case Kind::kInt:
      return int_value() != 0;
    case Kind::kFloat:
      return float_value() != 0.0;
    case Kind::kString:
      return !string_value().empty();
    case Kind::kList:
      return !list().empty();
    case Kind::kDict:
      return !dict().empty();
    case Kind::kNamespace:
    case Kind::kCallable:
      return true;
  }
  return false;
}

std::string JinjaValue::ToString() const {
  switch (kind()) {
    case Kind::kUndefined:
      return "";
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return bool_value() ? "True" : "False";
    case Kind::kInt:
      return std::to_string(int_value());
    case Kind::kFloat:
      return PythonFloatRepr(float_value());
    case Kind::kString:
      return string_value();
    case Kind::kList: {
      std::string out = "[";
      for (size_t i = 0; i < list().size(); ++i) {
        if (i > 0) out += ", ";
        out += list()[i].Repr();
      }
      return out + "]";
    }
    case Kind::kDict:
    case Kind::kNamespace: {
      const Dict& d = kind() == Kind::kDict ? dict() : namespace_attrs();
      std::string out = kind() == Kind::kDict ? "{" : "<Namespace {";
      for (size_t i = 0; i < d.size(); ++i) {
        if (i > 0) out += ", ";
        out += PythonStringRepr(d[i].first) + ": " + d[i].second.Repr();
      }
      return out + (kind() == Kind::kDict ? "}" : "}>");
    }
    case Kind::kCallable:
      return "<function " + callable_name() + ">";
  }
  return "";
}

std::string JinjaValue::Repr() const {
  if (kind() == Kind::kString) return PythonStringRepr(string_value());
  if (kind() == Kind::kUndefined) return "Undefined";
  return ToString();
}

bool JinjaValue::Equals(const JinjaValue& other) const {
  if (is_number() && other.is_number()) {
    if (kind() != Kind::kFloat && other.kind() != Kind::kFloat) {
      const int64_t a = kind() == Kind::kBool ? bool_value() : int_value();
      const int64_t b = other.kind() == Kind::kBool ? other.bool_value() : other.int_value();
      return a == b;
    }
    return AsDouble() == other.AsDouble();
  }
  if (kind() != other.kind()) return false;
  switch (kind()) {
    case Kind::kUndefined:
    case Kind::kNone:
      return true;
    case Kind::kString:
      return string_value() == other.string_value();
    case Kind::kList: {
      if (list().size() != other.list().size()) return false;
      for (size_t i = 0; i < list().size(); ++i) {
        if (!list()[i].Equals(other.list()[i])) return false;
      }
      return true;
    }
    case Kind::kDict: {
      if (dict().size() != other.dict().size()) return false;
      for (const auto& [k, v] : dict()) {
        const JinjaValue* o = other.Find(k);
        if (o == nullptr || !v.Equals(*o)) return false;
      }
      return true;
    }
    case Kind::kNamespace:
      return std::get<NamespacePtr>(data_).ns == std::get<NamespacePtr>(other.data_).ns;
    case Kind::kCallable:
      return std::get<CallablePtr>(data_) == std::get<CallablePtr>(other.data_);
    default:
      return false;
  }
}

absl::StatusOr<bool> JinjaValue::Less(const JinjaValue& a, const JinjaValue& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind() == Kind::kInt && b.kind() == Kind::kInt) return a.int_value() < b.int_value();
    return a.AsDouble() < b.AsDouble();
  }
  if (a.is_string() && b.is_string()) return a.string_value() < b.string_value();
  if (a.is_list() && b.is_list()) {
    const List& x = a.list();
    const List& y = b.list();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (x[i].Equals(y[i])) continue;
      return Less(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("'<' not supported between instances of '", a.TypeName(), "' and '", b.TypeName(), "'"));
}

std::string JinjaValue::TypeName() const {
  switch (kind()) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kList:
      return "list";
    case Kind::kDict:
      return "dict";
    case Kind::kNamespace:
      return "Namespace";
    case Kind::kCallable:
      return "function";
  }
  return "object";
}

}  // namespace verl
