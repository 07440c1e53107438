#ifndef VERL_COMMON_METRICS_PROMETHEUS_REGISTRY_H_
#define VERL_COMMON_METRICS_PROMETHEUS_REGISTRY_H_

// The metrics a process exposes to Prometheus, rendered in the text exposition format 0.0.4
// (https://prometheus.io/docs/instrumenting/exposition_formats/). Thread-safe: every method may be called from any
// thread, including Render() from the HTTP server while the job updates values.
//
// Two kinds of content:
//  - Declared families (gauges, counters, histograms) with labelled series, for the process's own metrics
//    ("verl_step_duration_seconds", "verl_rpc_errors_total{method=...}", ...). Names must already be valid Prometheus
//    names; the registry does not rename them.
//  - Step metrics: the scalars a training step reports under verl's names ("actor/pg_loss", "timing_s/gen",
//    "val-core/x/reward/mean@1"), each exposed as a gauge holding its last reported value under
//    StepMetricBaseName(name) ("verl_actor_pg_loss", "verl_timing_seconds_gen", "verl_val_core_x_reward_mean_at_1").
//    A metric that a later step does not report keeps its last value (validation metrics appear every test_freq
//    steps). The HELP line carries the verl name, so the mapping can always be read back from a scrape.
//
// Name collisions are never silent. When two verl names sanitize to the same Prometheus name ("a/b" and "a.b"), or a
// verl name sanitizes to the name of a declared family, the verl name that claimed it first keeps it and every later
// one is exposed as "<name>_h<8 hex digits of FNV-1a(verl name)>" (stable across runs whatever the order), listed by
// NameCollisions() and counted by the gauge verl_metric_name_collisions.
//
// Non-finite values are exposed as Prometheus spells them: NaN, +Inf, -Inf.

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace verl {

// Label name -> value. Names must match [a-zA-Z_][a-zA-Z0-9_]* and not start with "__"; values are any UTF-8 (they
// are escaped when rendered). std::map keeps them sorted, so equal label sets are one series.
using PrometheusLabels = std::map<std::string, std::string>;

struct PrometheusRegistryOptions {
  // Render() appends the standard process metrics (process_start_time_seconds, process_resident_memory_bytes,
  // process_virtual_memory_bytes, process_cpu_seconds_total, process_open_fds, process_max_fds), read from /proc at
  // scrape time. Default: true.
  bool process_metrics = true;
};

class PrometheusRegistry {
 public:
  enum class Type { kGauge, kCounter, kHistogram };

  PrometheusRegistry() : PrometheusRegistry(PrometheusRegistryOptions()) {}
  explicit PrometheusRegistry(PrometheusRegistryOptions options);
  PrometheusRegistry(const PrometheusRegistry&) = delete;
  PrometheusRegistry& operator=(const PrometheusRegistry&) = delete;

  // Declares a family. InvalidArgument for an invalid name, a histogram's name ending in _bucket/_sum/_count, or
  // histogram buckets that are empty, unsorted, repeated or not finite (the +Inf bucket is implicit).
  // AlreadyExists when `name` is already declared with another type or other buckets, or is held by a step metric;
  // declaring the same family again is a no-op (the first help text stays). Counters should end in "_total".
  absl::Status DeclareGauge(const std::string& name, const std::string& help);
  absl::Status DeclareCounter(const std::string& name, const std::string& help);
  absl::Status DeclareHistogram(const std::string& name, const std::string& help, std::vector<double> buckets);

  // Sets the gauge series `name{labels}`. NotFound when `name` is not a declared gauge; InvalidArgument for a bad
  // label name. The series exists from its first update on.
  absl::Status SetGauge(const std::string& name, const PrometheusLabels& labels, double value);
  // Adds `delta` to the counter series `name{labels}`. InvalidArgument when `delta` is negative or NaN.
  absl::Status IncrementCounter(const std::string& name, const PrometheusLabels& labels, double delta = 1.0);
  // Records one observation in the histogram series `name{labels}`. NaN observations are refused (InvalidArgument).
  absl::Status ObserveHistogram(const std::string& name, const PrometheusLabels& labels, double value);
  // For a gauge whose label `label_name` enumerates states (verl_job_state{state=...}): among the series of `name`
  // whose other labels equal `labels`, sets the one with `label_name`=`active` to 1 and all others to 0, so each
  // state seen so far stays visible. NotFound / InvalidArgument as SetGauge.
  absl::Status SetStateGauge(const std::string& name, const PrometheusLabels& labels, const std::string& label_name,
                             const std::string& active);

  // Records a step's metrics (verl names -> values) under `labels` as described above. InvalidArgument for a bad
  // label name (nothing is recorded then).
  absl::Status SetStepMetrics(const PrometheusLabels& labels, const std::map<std::string, double>& metrics);

  // The name a verl step metric gets when nothing else holds it, so that `promtool check metrics` accepts it:
  // SanitizeMetricName(verl_name) ("verl_" + the name with '@' -> "_at_", other characters outside [a-zA-Z0-9_] ->
  // '_'), lower-cased; each '_'-separated unit token promtool refuses becomes its base unit and `*scale` (when not
  // null) the factor the value is multiplied by: s/sec -> seconds (x1), ms -> seconds (x1e-3), us, ns, m, h, d,
  // minutes, hours, days -> seconds; b -> bytes, kb/mb/gb/tb/pb -> bytes (binary multiples: verl's "_gb" are GiB),
  // kilobytes..., kibibytes..., bits -> bytes. A token naming a metric type (counter, gauge, histogram, summary,
  // untyped) gets an 's'; a name ending in _total, _count, _sum or _bucket gets "_value".
  //   "actor/pg_loss" -> "verl_actor_pg_loss"; "timing_s/gen" -> "verl_timing_seconds_gen";
  //   "timing_per_token_ms/gen" -> "verl_timing_per_token_seconds_gen" (x0.001);
  //   "perf/max_memory_allocated_gb" -> "verl_perf_max_memory_allocated_bytes" (x2^30).
  static std::string StepMetricBaseName(const std::string& verl_name, double* scale = nullptr);

  // The Prometheus name a verl step metric is exposed under; empty when it has not been reported yet.
  std::string StepMetricName(const std::string& verl_name) const;
  // One line per collision so far: "'a.b' -> verl_a_b_h1234abcd (verl_a_b is 'a/b')".
  std::vector<std::string> NameCollisions() const;

  // The whole exposition: families sorted by name, each with its HELP and TYPE lines, series sorted by labels.
  std::string Render() const;

  // The value of a gauge or counter series, or of a step metric by its verl name (as exposed, i.e. scaled to base
  // units), for tests. NotFound otherwise.
  absl::Status GetValue(const std::string& name, const PrometheusLabels& labels, double* value) const;

  // Content-Type of Render()'s output.
  static constexpr const char* kContentType = "text/plain; version=0.0.4; charset=utf-8";

  // [a-zA-Z_:][a-zA-Z0-9_:]*
  static bool IsValidMetricName(const std::string& name);
  // [a-zA-Z_][a-zA-Z0-9_]*, not starting with "__".
  static bool IsValidLabelName(const std::string& name);
  // A sample value as the text format writes it: shortest round-trip decimal, NaN, +Inf, -Inf.
  static std::string FormatValue(double value);

 private:
  struct Series {
    double value = 0;                     // gauge / counter
    std::vector<uint64_t> bucket_counts;  // histogram: per finite bucket, not cumulative
    uint64_t count = 0;
    double sum = 0;
  };
  struct StepName {
    std::string name;  // Prometheus name
    double scale = 1;  // exposed value = verl value * scale
  };
  struct Family {
    Type type = Type::kGauge;
    std::string help;
    std::vector<double> buckets;
    std::map<PrometheusLabels, Series> series;
  };

  absl::Status Declare(const std::string& name, const std::string& help, Type type, std::vector<double> buckets);
  // The family `name` of type `type`, or NotFound / FailedPrecondition naming the problem. Requires mu_.
  absl::Status Find(const std::string& name, Type type, Family** family);
  // Claims a Prometheus name for a verl name, disambiguating on collision. Requires mu_.
  const StepName& ClaimStepName(const std::string& verl_name);

  const PrometheusRegistryOptions options_;
  mutable std::mutex mu_;
  std::map<std::string, Family> families_;              // GUARDED_BY(mu_)
  std::map<std::string, StepName> step_names_;          // verl name -> Prometheus name; GUARDED_BY(mu_)
  std::map<std::string, std::string> step_owners_;      // Prometheus name -> verl name; GUARDED_BY(mu_)
  std::vector<std::string> collisions_;                 // GUARDED_BY(mu_)
};

}  // namespace verl

#endif  // VERL_COMMON_METRICS_PROMETHEUS_REGISTRY_H_
