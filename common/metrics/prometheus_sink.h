#ifndef VERL_COMMON_METRICS_PROMETHEUS_SINK_H_
#define VERL_COMMON_METRICS_PROMETHEUS_SINK_H_

// trainer.logger=prometheus: each Log() publishes the step's metrics to a PrometheusRegistry, where the process's
// MetricsHttpServer serves them on /metrics. Per step:
//  - every verl metric as a gauge under its sanitized name (PrometheusRegistry::SetStepMetrics), with `labels`;
//  - verl_training_global_step: the step (from the "training/global_step" metric when the step reports it, which is
//    what the controller does, else `step`);
//  - verl_training_steps_logged_total: Log() calls, counter;
//  - verl_training_last_log_timestamp_seconds: Unix time of the last Log();
//  - verl_step_duration_seconds: histogram of "timing_s/step" (when reported);
//  - verl_training_tokens_total: sum of "perf/total_num_tokens" (when reported).
// The job state gauge (verl_job_state{state="..."}, 1 for the current state, 0 for the states seen before) is set
// with SetJobState(registry, labels, state), which works whether or not a sink is open.
//
// The registry outlives the sink (the controller keeps serving the last values after the job ends); Close() only
// makes later Log() calls fail, as for every sink. Thread-safe like the registry.

#include <atomic>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/metrics/metric_sink.h"
#include "common/metrics/prometheus_registry.h"

namespace verl {

class PrometheusSink : public MetricSink {
 public:
  // Declares the sink's families in `registry` (idempotent, so several sinks may share a registry). `labels` are
  // added to every series the sink writes, e.g. {{"experiment", "quickstart"}, {"project", "verl_cpp"}}; avoid
  // "job" and "instance", which Prometheus reserves for the scrape target (it renames them exported_job, ...).
  // InvalidArgument for an invalid label name; AlreadyExists when a family name is taken with another type.
  static absl::StatusOr<std::unique_ptr<PrometheusSink>> Create(std::shared_ptr<PrometheusRegistry> registry,
                                                                PrometheusLabels labels);

  absl::Status Log(int64_t step, const std::map<std::string, double>& metrics) override;
  absl::Status Close() override;

  // Sets verl_job_state{labels..., state=`state`} to 1 and the other states seen so far to 0 (declaring the family
  // when needed). State names are the controller's (JobStateName: "init", "step/rollout", "done", ...).
  static absl::Status SetJobState(PrometheusRegistry& registry, const PrometheusLabels& labels,
                                  const std::string& state);

  // Bucket bounds of verl_step_duration_seconds, in seconds.
  static const std::vector<double>& StepDurationBuckets();

 private:
  PrometheusSink(std::shared_ptr<PrometheusRegistry> registry, PrometheusLabels labels)
      : registry_(std::move(registry)), labels_(std::move(labels)) {}

  const std::shared_ptr<PrometheusRegistry> registry_;
  const PrometheusLabels labels_;
  std::atomic<bool> closed_{false};
};

}  // namespace verl

#endif  // VERL_COMMON_METRICS_PROMETHEUS_SINK_H_
