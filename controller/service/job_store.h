#ifndef VERL_CONTROLLER_SERVICE_JOB_STORE_H_
#define VERL_CONTROLLER_SERVICE_JOB_STORE_H_

// The JobService's jobs on disk, so that they survive a restart of `verl-controller serve`:
//
//   <state_dir>/jobs/<id>/job.json        the v1::Job as JSON (protobuf's JSON mapping), replaced atomically
//                                          (common/data/atomic_write.h: temporary file, fsync, rename) on every change
//   <state_dir>/jobs/<id>/metrics.jsonl   one v1::StepMetrics per line, as JSON, in step order
//   <state_dir>/jobs/<id>/log.txt         the job's log (written by the service while the job runs)
//
// Ids are "job-" and six or more digits, handed out in submission order (the next id is one more than the largest
// found on disk). Errors name the file.
//
// Thread-safety: not thread-safe; the JobService serialises calls under its mutex.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "verl/v1/job.pb.h"

namespace verl {

class JobStore {
 public:
  struct StoredJob {
    v1::Job job;
    std::vector<v1::StepMetrics> metrics;
  };

  // Creates <state_dir>/jobs when needed. InvalidArgument for an empty path; Internal naming the directory when it
  // cannot be created.
  static absl::StatusOr<std::unique_ptr<JobStore>> Open(const std::string& state_dir);

  // Every job found on disk, in id order, with its metrics. A job.json that does not parse, or whose id differs from
  // its directory, is InvalidArgument naming the file (nothing is skipped silently). A metrics.jsonl line that does
  // not parse (e.g. cut short by a crash) ends that job's history there, with a warning, and the file is cut back to
  // the records before it (so records appended later do not join the torn line).
  absl::StatusOr<std::vector<StoredJob>> LoadAll();

  // A new id, one more than the largest seen (on disk or handed out).
  std::string NextId();

  absl::Status Save(const v1::Job& job);
  // Appends one record to metrics.jsonl. With `rewrite`, the file is first replaced by `kept` (a job resumed from a
  // checkpoint repeats the steps after it, so the service drops their old records).
  absl::Status AppendMetrics(const std::string& job_id, const v1::StepMetrics& record,
                             const std::vector<v1::StepMetrics>& kept, bool rewrite);

  std::string JobDir(const std::string& job_id) const;
  std::string LogPath(const std::string& job_id) const { return JobDir(job_id) + "/log.txt"; }
  std::string MetricsPath(const std::string& job_id) const { return JobDir(job_id) + "/metrics.jsonl"; }

 private:
  explicit JobStore(std::string jobs_dir) : jobs_dir_(std::move(jobs_dir)) {}

  std::string jobs_dir_;
  int64_t last_id_ = 0;
};

}  // namespace verl

#endif  // VERL_CONTROLLER_SERVICE_JOB_STORE_H_
