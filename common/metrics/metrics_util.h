#ifndef VERL_COMMON_METRICS_METRICS_UTIL_H_
#define VERL_COMMON_METRICS_METRICS_UTIL_H_

// Small helpers for verl-style metric names.

#include <map>
#include <string>
#include <vector>

namespace verl {

// {prefix/mean, prefix/max, prefix/min} of `values` (verl's naming, e.g. "critic/score/mean"); empty when `values`
// is empty. A NaN among the values makes all three NaN.
std::map<std::string, double> ReduceMeanMaxMin(const std::string& prefix, const std::vector<double>& values);

// Adds ReduceMeanMaxMin(prefix, values) to `*metrics`, overwriting equal keys.
void AddMeanMaxMin(const std::string& prefix, const std::vector<double>& values, std::map<std::string, double>* metrics);

// A Prometheus metric name ([a-zA-Z_:][a-zA-Z0-9_:]*) for a verl metric: "verl_" + the name with '@' spelled "_at_"
// and every other character outside [a-zA-Z0-9_] replaced by '_'.
//   "actor/pg_loss" -> "verl_actor_pg_loss"; "val-core/gsm8k/acc/mean@4" -> "verl_val_core_gsm8k_acc_mean_at_4".
std::string SanitizeMetricName(const std::string& name);

}  // namespace verl

#endif  // VERL_COMMON_METRICS_METRICS_UTIL_H_
