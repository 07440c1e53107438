#include "common/metrics/prometheus_sink.h"

#include <chrono>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/status/status_macros.h"

namespace verl {
namespace {

constexpr const char* kGlobalStep = "verl_training_global_step";
constexpr const char* kStepsLogged = "verl_training_steps_logged_total";
constexpr const char* kLastLog = "verl_training_last_log_timestamp_seconds";
constexpr const char* kStepDuration = "verl_step_duration_seconds";
constexpr const char* kTokens = "verl_training_tokens_total";
constexpr const char* kJobState = "verl_job_state";

double UnixSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

const std::vector<double>& PrometheusSink::StepDurationBuckets() {
  static const std::vector<double> buckets = {0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600};
  return buckets;
}

absl::StatusOr<std::unique_ptr<PrometheusSink>> PrometheusSink::Create(std::shared_ptr<PrometheusRegistry> registry,
                                                                        PrometheusLabels labels) {
  if (!registry) return absl::InvalidArgumentError("PrometheusSink: no registry");
  for (const auto& [name, value] : labels) {
    if (!PrometheusRegistry::IsValidLabelName(name)) {
      return absl::InvalidArgumentError(absl::StrCat("Prometheus sink: invalid label name '", name, "'"));
    }
  }
  // Training steps count from 1, and the step this process last logged, so "training/global_step" is a gauge
  // (the step metric) and this one mirrors it for jobs whose step metrics do not carry it.
  RETURN_IF_ERROR(registry->DeclareGauge(kGlobalStep, "verl metric 'training/global_step' (last reported value)"));
  RETURN_IF_ERROR(registry->DeclareCounter(kStepsLogged, "Training steps (and step-0 validations) logged"));
  RETURN_IF_ERROR(registry->DeclareGauge(kLastLog, "Unix time of the last logged step, in seconds"));
  RETURN_IF_ERROR(registry->DeclareHistogram(kStepDuration, "Duration of a training step (timing_s/step), seconds",
                                             StepDurationBuckets()));
  RETURN_IF_ERROR(registry->DeclareCounter(kTokens, "Tokens processed by training steps (perf/total_num_tokens)"));
  return std::unique_ptr<PrometheusSink>(new PrometheusSink(std::move(registry), std::move(labels)));
}

absl::Status PrometheusSink::Log(int64_t step, const std::map<std::string, double>& metrics) {
  if (closed_.load()) return absl::FailedPreconditionError("Prometheus sink is closed");
  // "training/global_step" is exposed by the declared gauge of the same sanitized name, not as a step metric.
  std::map<std::string, double> rest = metrics;
  double global_step = static_cast<double>(step);
  if (auto it = rest.find("training/global_step"); it != rest.end()) {
    global_step = it->second;
    rest.erase(it);
  }
  RETURN_IF_ERROR(registry_->SetStepMetrics(labels_, rest));
  RETURN_IF_ERROR(registry_->SetGauge(kGlobalStep, labels_, global_step));
  RETURN_IF_ERROR(registry_->IncrementCounter(kStepsLogged, labels_));
  RETURN_IF_ERROR(registry_->SetGauge(kLastLog, labels_, UnixSeconds()));
  if (auto it = metrics.find("timing_s/step"); it != metrics.end() && std::isfinite(it->second)) {
    RETURN_IF_ERROR(registry_->ObserveHistogram(kStepDuration, labels_, it->second));
  }
  if (auto it = metrics.find("perf/total_num_tokens"); it != metrics.end() && it->second >= 0) {
    RETURN_IF_ERROR(registry_->IncrementCounter(kTokens, labels_, it->second));
  }
  return absl::OkStatus();
}

absl::Status PrometheusSink::Close() {
  closed_.store(true);
  return absl::OkStatus();
}

absl::Status PrometheusSink::SetJobState(PrometheusRegistry& registry, const PrometheusLabels& labels,
                                         const std::string& state) {
  RETURN_IF_ERROR(registry.DeclareGauge(kJobState, "1 for the job's current state, 0 for the states it left"));
  return registry.SetStateGauge(kJobState, labels, "state", state);
}

}  // namespace verl
