#include "common/config/config_tree.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <set>
#include <string_view>

#include "common/config/config_schema.h"

namespace verl {
namespace {

std::string FormatDouble(double v) {
  if (std::isnan(v)) return ".nan";
  if (std::isinf(v)) return v > 0 ? ".inf" : "-.inf";
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  std::string s(buf, ec == std::errc() ? end : buf);
  // Keep a '.' so the text reads as a float everywhere (YAML 1.1 readers take "1e-06" for a string).
  if (s.find_first_of(".e") == std::string::npos) {
    s += ".0";
  } else if (const size_t e = s.find('e'); e != std::string::npos && s.find('.') == std::string::npos) {
    s.insert(e, ".0");
  }
  return s;
}

bool IsYamlKeyword(std::string_view s) {
  static const std::set<std::string, std::less<>> kWords = {
      "true", "false", "yes", "no", "on", "off", "null", "y", "n", "~"};
  std::string lower(s);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return kWords.count(lower) > 0;
}

// Plain only when the text cannot be read as anything but this string, in block and flow context alike.
bool CanBePlain(std::string_view s) {
  if (s.empty() || IsYamlKeyword(s)) return false;
  const char first = s.front();
  if (!(std::isalpha(static_cast<unsigned char>(first)) || first == '_' || first == '/' || first == '.')) {
    return false;
  }
  if (s == "." || s.substr(0, 2) == ".i" || s.substr(0, 2) == ".n" || s.substr(0, 2) == ".I" ||
      s.substr(0, 2) == ".N") {
    return false;
  }
  for (char c : s) {
    const bool ok = std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.' || c == '/' ||
                    c == '@' || c == '+';
    if (!ok) return false;
  }
  return true;
}

std::string FormatString(std::string_view s) {
  if (CanBePlain(s)) return std::string(s);
  std::string out = "\"";
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    // A literal "${" is written escaped, as the loader reads it ("\\${" in a double-quoted YAML string), so the
    // printed config loads back to the same text instead of an interpolation.
    if (c == '$' && i + 1 < s.size() && s[i + 1] == '{') {
      out += "\\\\$";
      continue;
    }
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default: out += c;
    }
  }
  out += '"';
  return out;
}

template <typename V, typename F>
std::string FormatList(const std::vector<V>& items, F format) {
  std::string out = "[";
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += ", ";
    out += format(items[i]);
  }
  out += "]";
  return out;
}

std::vector<std::string_view> SplitDots(std::string_view key) {
  std::vector<std::string_view> parts;
  while (true) {
    const size_t dot = key.find('.');
    parts.push_back(key.substr(0, dot));
    if (dot == std::string_view::npos) break;
    key.remove_prefix(dot + 1);
  }
  return parts;
}

}  // namespace

std::string FormatConfigValue(const ConfigValue& value) {
  struct Visitor {
    std::string operator()(std::monostate) const { return "null"; }
    std::string operator()(bool b) const { return b ? "true" : "false"; }
    std::string operator()(int64_t i) const { return std::to_string(i); }
    std::string operator()(double d) const { return FormatDouble(d); }
    std::string operator()(const std::string& s) const { return FormatString(s); }
    std::string operator()(const std::vector<std::string>& v) const {
      return FormatList(v, [](const std::string& s) { return FormatString(s); });
    }
    std::string operator()(const std::vector<double>& v) const { return FormatList(v, FormatDouble); }
  };
  return std::visit(Visitor{}, value);
}

absl::StatusOr<std::string> GetValueAsString(const ConfigTree& tree, const std::string& key) {
  auto it = tree.find(key);
  if (it == tree.end()) return absl::NotFoundError("no config key '" + key + "'");
  return FormatConfigValue(it->second);
}

std::string ConfigTreeToYaml(const ConfigTree& tree) {
  std::vector<std::string> order;
  std::set<std::string> seen;
  for (const ConfigKeySpec& spec : ConfigSchema()) {
    if (tree.count(std::string(spec.key)) > 0) {
      order.emplace_back(spec.key);
      seen.insert(std::string(spec.key));
    }
  }
  for (const auto& [key, value] : tree) {
    if (seen.count(key) == 0) order.push_back(key);
  }

  std::string out;
  std::vector<std::string_view> open;  // the sections currently open, outermost first
  for (const std::string& key : order) {
    const std::vector<std::string_view> parts = SplitDots(key);
    size_t common = 0;
    while (common < open.size() && common + 1 < parts.size() && open[common] == parts[common]) ++common;
    open.resize(common);
    for (size_t i = common; i + 1 < parts.size(); ++i) {
      out.append(2 * i, ' ').append(parts[i]).append(":\n");
      open.push_back(parts[i]);
    }
    out.append(2 * (parts.size() - 1), ' ')
        .append(parts.back())
        .append(": ")
        .append(FormatConfigValue(tree.at(key)))
        .append("\n");
  }
  return out;
}

}  // namespace verl
