#include "common/metrics/prometheus_registry.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/metrics/metrics_util.h"
#include "common/metrics/process_metrics.h"

namespace verl {
namespace {

constexpr const char* kCollisionsGauge = "verl_metric_name_collisions";

bool IsAlpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }

const char* TypeName(PrometheusRegistry::Type type) {
  switch (type) {
    case PrometheusRegistry::Type::kGauge: return "gauge";
    case PrometheusRegistry::Type::kCounter: return "counter";
    case PrometheusRegistry::Type::kHistogram: return "histogram";
  }
  return "untyped";
}

// Copies `s`, replacing each byte that is not part of a well-formed UTF-8 sequence with '?': Prometheus requires
// UTF-8 in label values and HELP text.
std::string ValidUtf8(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t len = 0;
    if (c < 0x80) {
      len = 1;
    } else if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
    }
    bool ok = len > 0 && i + len <= s.size();
    for (size_t k = 1; ok && k < len; ++k) ok = (static_cast<unsigned char>(s[i + k]) & 0xC0) == 0x80;
    if (ok && len >= 3) {
      // Reject overlong forms, surrogates and code points above U+10FFFF.
      const auto c1 = static_cast<unsigned char>(s[i + 1]);
      if ((c == 0xE0 && c1 < 0xA0) || (c == 0xED && c1 > 0x9F) || (c == 0xF0 && c1 < 0x90) ||
          (c == 0xF4 && c1 > 0x8F)) {
        ok = false;
      }
    }
    if (ok) {
      out.append(s, i, len);
      i += len;
    } else {
      out += '?';
      ++i;
    }
  }
  return out;
}

std::string EscapeHelp(const std::string& s) {
  std::string out;
  for (char c : ValidUtf8(s)) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string EscapeLabelValue(const std::string& s) {
  std::string out;
  for (char c : ValidUtf8(s)) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

// {a="1",b="2"} with `extra` (le="...") last; empty when there are no labels.
std::string FormatLabels(const PrometheusLabels& labels, const std::string& extra = "") {
  if (labels.empty() && extra.empty()) return "";
  std::string out = "{";
  bool first = true;
  for (const auto& [k, v] : labels) {
    if (!first) out += ',';
    first = false;
    absl::StrAppend(&out, k, "=\"", EscapeLabelValue(v), "\"");
  }
  if (!extra.empty()) {
    if (!first) out += ',';
    out += extra;
  }
  out += '}';
  return out;
}

absl::Status CheckLabels(const std::string& metric, const PrometheusLabels& labels) {
  for (const auto& [k, v] : labels) {
    if (!PrometheusRegistry::IsValidLabelName(k)) {
      return absl::InvalidArgumentError(absl::StrCat("metric ", metric, ": invalid Prometheus label name '", k,
                                                     "' (must match [a-zA-Z_][a-zA-Z0-9_]* and not start with __)"));
    }
  }
  return absl::OkStatus();
}

uint32_t Fnv1a(const std::string& s) {
  uint32_t h = 2166136261u;
  for (char c : s) {
    h ^= static_cast<unsigned char>(c);
    h *= 16777619u;
  }
  return h;
}

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

struct UnitRename {
  const char* token;
  const char* replacement;
  double scale;
};

// Unit tokens promtool's linter refuses (abbreviations and non-base units), spelled as the base unit with the
// factor that converts the value. verl's "_gb" memory metrics are GiB (bytes / 1024**3), hence binary multiples.
constexpr UnitRename kUnitRenames[] = {
    {"s", "seconds", 1},           {"sec", "seconds", 1},
    {"ms", "seconds", 1e-3},       {"milliseconds", "seconds", 1e-3},
    {"us", "seconds", 1e-6},       {"microseconds", "seconds", 1e-6},
    {"ns", "seconds", 1e-9},       {"nanoseconds", "seconds", 1e-9},
    {"m", "seconds", 60},          {"minutes", "seconds", 60},
    {"h", "seconds", 3600},        {"hours", "seconds", 3600},
    {"d", "seconds", 86400},       {"days", "seconds", 86400},
    {"weeks", "seconds", 604800},  {"bits", "bytes", 0.125},
    {"b", "bytes", 1},             {"kb", "bytes", 1024.0},
    {"kilobytes", "bytes", 1e3},   {"kibibytes", "bytes", 1024.0},
    {"mb", "bytes", 1048576.0},    {"megabytes", "bytes", 1e6},
    {"mebibytes", "bytes", 1048576.0},
    {"gb", "bytes", 1073741824.0}, {"gigabytes", "bytes", 1e9},
    {"gibibytes", "bytes", 1073741824.0},
    {"tb", "bytes", 1099511627776.0}, {"terabytes", "bytes", 1e12},
    {"tebibytes", "bytes", 1099511627776.0},
    {"pb", "bytes", 1125899906842624.0},
};

// Metric type names promtool refuses as a name token.
constexpr const char* kTypeTokens[] = {"counter", "gauge", "histogram", "summary", "untyped"};

}  // namespace

std::string PrometheusRegistry::StepMetricBaseName(const std::string& verl_name, double* scale) {
  std::string sanitized = SanitizeMetricName(verl_name);
  for (char& c : sanitized) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  double factor = 1;
  std::string out;
  size_t begin = 0;
  while (true) {
    const size_t end = sanitized.find('_', begin);
    std::string token = sanitized.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
    for (const UnitRename& r : kUnitRenames) {
      if (token == r.token) {
        token = r.replacement;
        factor *= r.scale;
        break;
      }
    }
    for (const char* type : kTypeTokens) {
      if (token == type) token += 's';
    }
    if (begin > 0) out += '_';
    out += token;
    if (end == std::string::npos) break;
    begin = end + 1;
  }
  for (const char* suffix : {"_total", "_count", "_sum", "_bucket"}) {
    if (EndsWith(out, suffix)) out += "_value";  // reserved for counters and histograms
  }
  if (scale != nullptr) *scale = factor;
  return out;
}

PrometheusRegistry::PrometheusRegistry(PrometheusRegistryOptions options) : options_(options) {
  Family& f = families_[kCollisionsGauge];
  f.type = Type::kGauge;
  f.help = "Number of verl metric names exposed under a disambiguated name because their sanitized name was taken";
  f.series[{}].value = 0;
}

bool PrometheusRegistry::IsValidMetricName(const std::string& name) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    if (!(IsAlpha(c) || c == '_' || c == ':' || (i > 0 && IsDigit(c)))) return false;
  }
  return true;
}

bool PrometheusRegistry::IsValidLabelName(const std::string& name) {
  if (name.empty() || name.rfind("__", 0) == 0) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    if (!(IsAlpha(c) || c == '_' || (i > 0 && IsDigit(c)))) return false;
  }
  return true;
}

std::string PrometheusRegistry::FormatValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  char buf[64];
  const auto result = std::to_chars(buf, buf + sizeof(buf), value);
  return std::string(buf, result.ptr);
}

absl::Status PrometheusRegistry::Declare(const std::string& name, const std::string& help, Type type,
                                         std::vector<double> buckets) {
  if (!IsValidMetricName(name)) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid Prometheus metric name '", name, "' (must match [a-zA-Z_:][a-zA-Z0-9_:]*)"));
  }
  if (type == Type::kHistogram) {
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      if (EndsWith(name, suffix)) {
        return absl::InvalidArgumentError(
            absl::StrCat("histogram ", name, ": the name must not end in ", suffix, " (the series names add it)"));
      }
    }
    if (buckets.empty()) return absl::InvalidArgumentError(absl::StrCat("histogram ", name, ": no buckets"));
    for (size_t i = 0; i < buckets.size(); ++i) {
      if (!std::isfinite(buckets[i]) || (i > 0 && buckets[i] <= buckets[i - 1])) {
        return absl::InvalidArgumentError(absl::StrCat("histogram ", name, ": bucket ", i, " (",
                                                       FormatValue(buckets[i]),
                                                       ") must be finite and greater than the one before it"));
      }
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (auto owner = step_owners_.find(name); owner != step_owners_.end()) {
    return absl::AlreadyExistsError(
        absl::StrCat("metric ", name, " is already exposed for the verl step metric '", owner->second, "'"));
  }
  auto it = families_.find(name);
  if (it != families_.end()) {
    if (it->second.type != type || it->second.buckets != buckets) {
      return absl::AlreadyExistsError(absl::StrCat("metric ", name, " is already declared as a ",
                                                   TypeName(it->second.type),
                                                   it->second.type == type ? " with other buckets" : ""));
    }
    return absl::OkStatus();
  }
  Family& f = families_[name];
  f.type = type;
  f.help = help;
  f.buckets = std::move(buckets);
  return absl::OkStatus();
}

absl::Status PrometheusRegistry::DeclareGauge(const std::string& name, const std::string& help) {
  return Declare(name, help, Type::kGauge, {});
}

absl::Status PrometheusRegistry::DeclareCounter(const std::string& name, const std::string& help) {
  return Declare(name, help, Type::kCounter, {});
}

absl::Status PrometheusRegistry::DeclareHistogram(const std::string& name, const std::string& help,
                                                  std::vector<double> buckets) {
  return Declare(name, help, Type::kHistogram, std::move(buckets));
}

absl::Status PrometheusRegistry::Find(const std::string& name, Type type, Family** family) {
  auto it = families_.find(name);
  if (it == families_.end() || step_owners_.count(name) > 0) {
    return absl::NotFoundError(absl::StrCat("Prometheus ", TypeName(type), " ", name, " is not declared"));
  }
  if (it->second.type != type) {
    return absl::FailedPreconditionError(
        absl::StrCat("metric ", name, " is a ", TypeName(it->second.type), ", not a ", TypeName(type)));
  }
  *family = &it->second;
  return absl::OkStatus();
}

absl::Status PrometheusRegistry::SetGauge(const std::string& name, const PrometheusLabels& labels, double value) {
  if (absl::Status s = CheckLabels(name, labels); !s.ok()) return s;
  std::lock_guard<std::mutex> lock(mu_);
  Family* f = nullptr;
  if (absl::Status s = Find(name, Type::kGauge, &f); !s.ok()) return s;
  f->series[labels].value = value;
  return absl::OkStatus();
}

absl::Status PrometheusRegistry::IncrementCounter(const std::string& name, const PrometheusLabels& labels,
                                                  double delta) {
  if (!(delta >= 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("counter ", name, ": increment ", FormatValue(delta), " (counters only go up)"));
  }
  if (absl::Status s = CheckLabels(name, labels); !s.ok()) return s;
  std::lock_guard<std::mutex> lock(mu_);
  Family* f = nullptr;
  if (absl::Status s = Find(name, Type::kCounter, &f); !s.ok()) return s;
  f->series[labels].value += delta;
  return absl::OkStatus();
}

absl::Status PrometheusRegistry::ObserveHistogram(const std::string& name, const PrometheusLabels& labels,
                                                  double value) {
  if (std::isnan(value)) return absl::InvalidArgumentError(absl::StrCat("histogram ", name, ": NaN observation"));
  if (absl::Status s = CheckLabels(name, labels); !s.ok()) return s;
  if (labels.count("le") > 0) {
    return absl::InvalidArgumentError(absl::StrCat("histogram ", name, ": the label 'le' is reserved"));
  }
  std::lock_guard<std::mutex> lock(mu_);
  Family* f = nullptr;
  if (absl::Status s = Find(name, Type::kHistogram, &f); !s.ok()) return s;
  Series& series = f->series[labels];
  series.bucket_counts.resize(f->buckets.size());
  const auto bucket = std::lower_bound(f->buckets.begin(), f->buckets.end(), value) - f->buckets.begin();
  if (static_cast<size_t>(bucket) < f->buckets.size()) ++series.bucket_counts[bucket];
  ++series.count;
  series.sum += value;
  return absl::OkStatus();
}

absl::Status PrometheusRegistry::SetStateGauge(const std::string& name, const PrometheusLabels& labels,
                                               const std::string& label_name, const std::string& active) {
  PrometheusLabels with_state = labels;
  with_state[label_name] = active;
  if (absl::Status s = CheckLabels(name, with_state); !s.ok()) return s;
  std::lock_guard<std::mutex> lock(mu_);
  Family* f = nullptr;
  if (absl::Status s = Find(name, Type::kGauge, &f); !s.ok()) return s;
  for (auto& [series_labels, series] : f->series) {
    auto state = series_labels.find(label_name);
    if (state == series_labels.end()) continue;
    PrometheusLabels others = series_labels;
    others.erase(label_name);
    if (others == labels) series.value = 0;
  }
  f->series[with_state].value = 1;
  return absl::OkStatus();
}

const PrometheusRegistry::StepName& PrometheusRegistry::ClaimStepName(const std::string& verl_name) {
  auto known = step_names_.find(verl_name);
  if (known != step_names_.end()) return known->second;
  double scale = 1;
  const std::string base = StepMetricBaseName(verl_name, &scale);
  std::string name = base;
  if (families_.count(base) > 0) {
    name = absl::StrFormat("%s_h%08x", base, Fnv1a(verl_name));
    auto owner = step_owners_.find(base);
    collisions_.push_back(absl::StrCat("'", verl_name, "' -> ", name, " (", base, " is ",
                                       owner != step_owners_.end() ? absl::StrCat("'", owner->second, "'")
                                                                   : std::string("a declared metric"),
                                       ")"));
    families_[kCollisionsGauge].series[{}].value = static_cast<double>(collisions_.size());
    // Two disambiguated names can only meet again on a 32-bit hash collision; count up until free.
    for (int k = 2; families_.count(name) > 0; ++k) name = absl::StrFormat("%s_h%08x_%d", base, Fnv1a(verl_name), k);
  }
  step_owners_[name] = verl_name;
  Family& f = families_[name];
  f.type = Type::kGauge;
  f.help = absl::StrCat("verl metric '", verl_name, "' (last reported value",
                        scale == 1 ? std::string() : absl::StrCat(", times ", FormatValue(scale), " for base units"),
                        ")");
  return step_names_.emplace(verl_name, StepName{name, scale}).first->second;
}

absl::Status PrometheusRegistry::SetStepMetrics(const PrometheusLabels& labels,
                                                const std::map<std::string, double>& metrics) {
  if (absl::Status s = CheckLabels("(step metrics)", labels); !s.ok()) return s;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [verl_name, value] : metrics) {
    const StepName& step = ClaimStepName(verl_name);
    families_[step.name].series[labels].value = step.scale == 1 ? value : value * step.scale;
  }
  return absl::OkStatus();
}

std::string PrometheusRegistry::StepMetricName(const std::string& verl_name) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = step_names_.find(verl_name);
  return it == step_names_.end() ? std::string() : it->second.name;
}

std::vector<std::string> PrometheusRegistry::NameCollisions() const {
  std::lock_guard<std::mutex> lock(mu_);
  return collisions_;
}

absl::Status PrometheusRegistry::GetValue(const std::string& name, const PrometheusLabels& labels,
                                          double* value) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string prom_name = name;
  if (auto step = step_names_.find(name); step != step_names_.end()) prom_name = step->second.name;
  auto f = families_.find(prom_name);
  if (f != families_.end() && f->second.type != Type::kHistogram) {
    auto s = f->second.series.find(labels);
    if (s != f->second.series.end()) {
      *value = s->second.value;
      return absl::OkStatus();
    }
  }
  return absl::NotFoundError(absl::StrCat("no series ", name, FormatLabels(labels)));
}

std::string PrometheusRegistry::Render() const {
  std::string out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [name, f] : families_) {
      if (f.series.empty()) continue;  // a family with no series yet would be a HELP/TYPE pair with no samples
      absl::StrAppend(&out, "# HELP ", name, " ", EscapeHelp(f.help), "\n# TYPE ", name, " ", TypeName(f.type), "\n");
      for (const auto& [labels, s] : f.series) {
        if (f.type != Type::kHistogram) {
          absl::StrAppend(&out, name, FormatLabels(labels), " ", FormatValue(s.value), "\n");
          continue;
        }
        uint64_t cumulative = 0;
        for (size_t i = 0; i < f.buckets.size(); ++i) {
          cumulative += i < s.bucket_counts.size() ? s.bucket_counts[i] : 0;
          absl::StrAppend(&out, name, "_bucket",
                          FormatLabels(labels, absl::StrCat("le=\"", FormatValue(f.buckets[i]), "\"")), " ",
                          cumulative, "\n");
        }
        absl::StrAppend(&out, name, "_bucket", FormatLabels(labels, "le=\"+Inf\""), " ", s.count, "\n");
        absl::StrAppend(&out, name, "_sum", FormatLabels(labels), " ", FormatValue(s.sum), "\n");
        absl::StrAppend(&out, name, "_count", FormatLabels(labels), " ", s.count, "\n");
      }
    }
  }
  if (options_.process_metrics) out += RenderProcessMetrics(ReadProcessMetrics());
  return out;
}

}  // namespace verl
