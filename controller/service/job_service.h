#ifndef VERL_CONTROLLER_SERVICE_JOB_SERVICE_H_
#define VERL_CONTROLLER_SERVICE_JOB_SERVICE_H_

// The JobService of `verl-controller serve` (proto/verl/v1/job.proto): remote clients submit jobs, which are queued
// and run one at a time (oldest id first) on this controller's thread of jobs, each with a JobRunner exactly as
// `verl-controller --config` runs it (local workers when the config names none).
//
// State survives a restart (JobStore): a job that was running when the server stopped (or died) is queued again
// and, with trainer.resume_mode auto (the default), resumes from its last checkpoint; `restarts` counts this.
// Shutdown() (SIGTERM) interrupts the running job the same way rather than cancelling it.
//
// Every RPC first checks the bearer token (UNAUTHENTICATED otherwise). Submitted configs are validated at submit
// time (INVALID_ARGUMENT with the loader's message); paths in them are the server's paths.
//
// Each job's log (its console progress and the controller's log lines while it runs) is written to the store's
// log.txt through `log_tee`, a sink of the process's default spdlog logger that the service points at the running
// job's file.
//
// Thread-safety: the gRPC handlers run on the server's threads; all state is under one mutex.

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "common/metrics/prometheus_registry.h"
#include "controller/service/job_store.h"
#include "spdlog/sinks/dist_sink.h"
#include "verl/v1/job.grpc.pb.h"

namespace verl {

class JobRunner;

struct JobServiceOptions {
  std::string state_dir;              // required
  std::string token;                  // empty: no authentication (serve requires --insecure-no-auth for that)
  std::string default_worker_binary;  // as JobRunnerOptions
  // Where every job's metrics also go (served by serve's --metrics-listen), plus verl_jobs{state}; may be null.
  std::shared_ptr<PrometheusRegistry> prometheus;
  // A sink of the default logger; the running job's log file is added to it while the job runs. May be null.
  std::shared_ptr<spdlog::sinks::dist_sink_mt> log_tee;
};

class JobService final : public v1::JobService::Service {
 public:
  // Loads the jobs in the state directory (a job left running is queued again). Errors name the state file.
  static absl::StatusOr<std::unique_ptr<JobService>> Create(JobServiceOptions options);
  ~JobService() override;

  // Starts the thread that runs queued jobs.
  void Start();
  // Interrupts the running job (it stays queued, to resume on the next start), stops the job thread and ends every
  // watch and log stream. Idempotent. Call before shutting the gRPC server down.
  void Shutdown();

  grpc::Status SubmitJob(grpc::ServerContext* context, const v1::SubmitJobRequest* request, v1::Job* reply) override;
  grpc::Status GetJob(grpc::ServerContext* context, const v1::GetJobRequest* request, v1::Job* reply) override;
  grpc::Status ListJobs(grpc::ServerContext* context, const v1::ListJobsRequest* request,
                        v1::ListJobsResponse* reply) override;
  grpc::Status WatchJob(grpc::ServerContext* context, const v1::WatchJobRequest* request,
                        grpc::ServerWriter<v1::JobEvent>* writer) override;
  grpc::Status CancelJob(grpc::ServerContext* context, const v1::CancelJobRequest* request, v1::Job* reply) override;
  grpc::Status GetJobLogs(grpc::ServerContext* context, const v1::GetJobLogsRequest* request,
                          grpc::ServerWriter<v1::LogChunk>* writer) override;

  static bool IsEnded(v1::JobState state);
  static const char* StateName(v1::JobState state);  // "queued", "running", ...

 private:
  struct Entry {
    v1::Job job;
    std::vector<v1::StepMetrics> metrics;
    // The first step of each rewrite of `metrics` in this server's life (a recovery re-runs the steps after its
    // checkpoint and replaces their records), so a WatchJob stream sends the re-run steps again.
    std::vector<int64_t> rewrites_from;
  };

  explicit JobService(JobServiceOptions options, std::unique_ptr<JobStore> store);

  void RunLoop();
  void RunJob(const std::string& id);
  // Requires mu_: saves the job, updates the gauges and wakes the waiters. Logs (does not return) a store error:
  // the in-memory state stays authoritative for this run.
  void CommitLocked(const Entry& entry);
  void UpdateGaugesLocked();
  Entry* FindLocked(const std::string& id);
  static int64_t NowMs();

  const JobServiceOptions options_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::unique_ptr<JobStore> store_;          // guarded by mu_
  std::map<std::string, Entry> jobs_;        // guarded by mu_
  std::shared_ptr<JobRunner> running_;       // guarded by mu_
  std::string running_id_;                   // guarded by mu_
  bool cancel_running_ = false;              // guarded by mu_: the running job's cancel came from CancelJob
  bool shutting_down_ = false;               // guarded by mu_
  uint64_t version_ = 0;                     // guarded by mu_: bumped on every change, for the waiters
  std::thread thread_;
};

}  // namespace verl

#endif  // VERL_CONTROLLER_SERVICE_JOB_SERVICE_H_
