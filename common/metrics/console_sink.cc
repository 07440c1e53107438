#include "common/metrics/console_sink.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string_view>

#include "absl/strings/str_cat.h"

namespace verl {

std::vector<ConsoleField> ConsoleSink::DefaultFields() {
  return {
      {"critic/score/mean", "score", false},  {"actor/pg_loss", "pg_loss", false},
      {"actor/kl_loss", "kl", false},         {"actor/entropy", "entropy", false},
      {"response_length/mean", "resp_len", false}, {"timing_s/step", "s/step", true},
  };
}

ConsoleSink::ConsoleSink(std::ostream* out, int64_t total_steps, std::vector<ConsoleField> fields)
    : ConsoleSink(out, total_steps, std::move(fields), Options()) {}

ConsoleSink::ConsoleSink(std::ostream* out, int64_t total_steps, std::vector<ConsoleField> fields, Options options)
    : out_(out), total_steps_(total_steps), fields_(std::move(fields)), options_(std::move(options)) {}

std::string ConsoleSink::FormatNumber(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  char buf[64];
  if (std::fabs(value) >= 1000 && std::fabs(value) < 1e15) {
    std::snprintf(buf, sizeof(buf), "%.0f", value);
  } else {
    std::snprintf(buf, sizeof(buf), "%.3g", value);
  }
  return buf;
}

std::string ConsoleSink::FormatDuration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const int64_t total = static_cast<int64_t>(std::llround(seconds));
  const int64_t h = total / 3600, m = (total % 3600) / 60, s = total % 60;
  char buf[64];
  if (h > 0) {
    std::snprintf(buf, sizeof(buf), "%lld:%02lld:%02lld", static_cast<long long>(h), static_cast<long long>(m),
                  static_cast<long long>(s));
  } else {
    std::snprintf(buf, sizeof(buf), "%lld:%02lld", static_cast<long long>(m), static_cast<long long>(s));
  }
  return buf;
}

std::string ConsoleSink::FormatLine(int64_t step, const std::map<std::string, double>& metrics) const {
  std::string line = absl::StrCat("step ", step);
  if (total_steps_ > 0) {
    const double frac = std::clamp(static_cast<double>(step) / static_cast<double>(total_steps_), 0.0, 1.0);
    const int width = std::max(options_.bar_width, 0);
    const int filled = static_cast<int>(std::floor(frac * width));
    absl::StrAppend(&line, "/", total_steps_);
    if (width > 0) absl::StrAppend(&line, " [", std::string(filled, '#'), std::string(width - filled, '-'), "]");
    absl::StrAppend(&line, " ", static_cast<int>(std::floor(frac * 100)), "%");
  }
  for (const ConsoleField& field : fields_) {
    auto it = metrics.find(field.key);
    if (it == metrics.end()) continue;
    if (field.value_first) {
      absl::StrAppend(&line, " | ", FormatNumber(it->second), " ", field.label);
    } else {
      absl::StrAppend(&line, " | ", field.label, " ", FormatNumber(it->second));
    }
  }
  if (options_.show_val_core) {
    static constexpr std::string_view kValCore = "val-core/";
    for (auto it = metrics.lower_bound(std::string(kValCore));
         it != metrics.end() && it->first.compare(0, kValCore.size(), kValCore) == 0; ++it) {
      absl::StrAppend(&line, " | val ", it->first.substr(kValCore.size()), " ", FormatNumber(it->second));
    }
  }
  if (total_steps_ > 0) {
    auto it = metrics.find(options_.eta_key);
    if (it != metrics.end()) {
      const int64_t left = std::max<int64_t>(total_steps_ - step, 0);
      absl::StrAppend(&line, " | ETA ", FormatDuration(it->second * static_cast<double>(left)));
    }
  }
  return line;
}

absl::Status ConsoleSink::Log(int64_t step, const std::map<std::string, double>& metrics) {
  if (closed_) return absl::FailedPreconditionError("console metric sink is closed");
  *out_ << FormatLine(step, metrics) << '\n';
  out_->flush();
  if (!*out_) return absl::DataLossError(absl::StrCat("error writing step ", step, " to the console"));
  return absl::OkStatus();
}

absl::Status ConsoleSink::Close() {
  if (!closed_) {
    closed_ = true;
    out_->flush();
  }
  return absl::OkStatus();
}

}  // namespace verl
