#ifndef VERL_CONTROLLER_JOB_JOB_RUNNER_H_
#define VERL_CONTROLLER_JOB_JOB_RUNNER_H_

// Runs one PPO/GRPO job as a state machine over gRPC calls to workers:
//
//   kInit -> kLoading -> (kValidating)
//         -> kStep{Rollout, Reward, OldLogProb, (RefLogProb), (Values), Advantage, (CriticUpdate), ActorUpdate}
//         -> (kValidating) -> (kCheckpointing) -> next step ... -> kDone       (or kFailed / kCancelled)
//
// Every transition is logged with its duration; per-step durations are reported as verl's timing_s/<stage> metrics.
// The controller moves prompt token ids, per-sample scalars and metrics; batch tensors stay on the workers.
//
// Before any worker starts, the runner checks the model directory and datasets and fails with a message naming the
// file and the problem. With no cluster.worker_addresses it launches local verl-worker processes and stops them when
// the job ends, fails or is cancelled.
//
// Thread-safety: Run() on one thread; RequestCancel() from any thread (or a signal-handling thread).

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/config/job_config.h"
#include "common/metrics/prometheus_registry.h"

namespace verl {

enum class JobState {
  kInit,
  kLoading,
  kValidating,
  kStepRollout,
  kStepReward,
  kStepOldLogProb,
  kStepRefLogProb,
  kStepValues,
  kStepAdvantage,
  kStepCriticUpdate,
  kStepActorUpdate,
  kCheckpointing,
  kDone,
  kFailed,
  kCancelled,
};
const char* JobStateName(JobState state);

struct JobRunnerOptions {
  // Where verl-worker is looked for when cluster.worker_binary is empty (the controller's own directory).
  std::string default_worker_binary;
  std::ostream* console = nullptr;  // progress output; nullptr: std::cout

  // Hooks for the JobService, called on Run()'s thread; they must not call back into the runner or block long.
  // on_state: every state change. on_metrics: every metrics record the sinks get (validation before training is
  // step 0), after the sinks. on_total_steps: once the number of steps is known.
  std::function<void(JobState)> on_state;
  std::function<void(int64_t step, const std::map<std::string, double>& metrics)> on_metrics;
  std::function<void(int64_t total_steps)> on_total_steps;

  // When set, every metrics record also goes into this registry (labels: project, experiment and
  // `prometheus_labels`) and trainer.logger=prometheus uses it instead of starting its own /metrics endpoint: a
  // serving controller has one endpoint for all its jobs.
  std::shared_ptr<PrometheusRegistry> prometheus;
  PrometheusLabels prometheus_labels;
};

class JobRunner {
 public:
  JobRunner(JobConfig config, JobRunnerOptions options);
  ~JobRunner();
  JobRunner(const JobRunner&) = delete;
  JobRunner& operator=(const JobRunner&) = delete;

  // Runs the job to the end. OK when every step ran; Cancelled after RequestCancel(); otherwise the first error.
  absl::Status Run();

  // Makes Run() stop: the RPC in flight is cancelled, then the workers are stopped and Run returns Cancelled.
  void RequestCancel();

  JobState state() const { return state_.load(); }
  // A copy of the last step's metrics (for tests and the service). Thread-safe.
  std::map<std::string, double> last_metrics() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
  std::atomic<bool> cancel_requested_{false};
  std::atomic<JobState> state_{JobState::kInit};
};

}  // namespace verl

#endif  // VERL_CONTROLLER_JOB_JOB_RUNNER_H_
