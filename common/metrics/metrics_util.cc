#include "common/metrics/metrics_util.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>

namespace verl {

std::map<std::string, double> ReduceMeanMaxMin(const std::string& prefix, const std::vector<double>& values) {
  std::map<std::string, double> out;
  AddMeanMaxMin(prefix, values, &out);
  return out;
}

void AddMeanMaxMin(const std::string& prefix, const std::vector<double>& values,
                   std::map<std::string, double>* metrics) {
  if (values.empty()) return;
  double sum = 0;
  double max = -std::numeric_limits<double>::infinity();
  double min = std::numeric_limits<double>::infinity();
  bool has_nan = false;
  for (double v : values) {
    if (std::isnan(v)) has_nan = true;
    sum += v;
    max = std::max(max, v);
    min = std::min(min, v);
  }
  const double nan = std::numeric_limits<double>::quiet_NaN();
  (*metrics)[prefix + "/mean"] = has_nan ? nan : sum / static_cast<double>(values.size());
  (*metrics)[prefix + "/max"] = has_nan ? nan : max;
  (*metrics)[prefix + "/min"] = has_nan ? nan : min;
}

std::string SanitizeMetricName(const std::string& name) {
  std::string out = "verl_";
  for (char c : name) {
    if (c == '@') {
      out += "_at_";
    } else if (std::isalnum(static_cast<unsigned char>(c)) || c == '_') {
      out += c;
    } else {
      out += '_';
    }
  }
  return out;
}

}  // namespace verl
