// The JobService's on-disk store (job.json per job and its metrics.jsonl) and what the service makes of it after a
// server restart.

#include "controller/service/job_store.h"

#include "controller/service/job_service.h"

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>

#include "tests/controller/test_util.h"

namespace verl {
namespace {

v1::StepMetrics Record(int64_t step) {
  v1::StepMetrics r;
  r.set_step(step);
  (*r.mutable_metrics())["critic/score/mean"] = 0.5 * static_cast<double>(step);
  return r;
}

TEST_CASE("JobStore: a metrics file torn by a crash is cut back to its records, so later ones are kept",
          "[controller][job_store]") {
  testing::TestDir dir("job_store");
  {
    auto store = JobStore::Open(dir.path());
    REQUIRE(store.ok());
    v1::Job job;
    job.set_id((*store)->NextId());
    REQUIRE((*store)->Save(job).ok());
    REQUIRE((*store)->AppendMetrics(job.id(), Record(1), {}, false).ok());
    // The server dies while writing step 2's record: half a line, no newline.
    std::ofstream((*store)->MetricsPath(job.id()), std::ios::app) << R"({"step": "2", "metr)";
  }
  std::string id;
  {
    auto store = JobStore::Open(dir.path());
    REQUIRE(store.ok());
    auto jobs = (*store)->LoadAll();
    REQUIRE(jobs.ok());
    REQUIRE(jobs->size() == 1);
    id = jobs->front().job.id();
    REQUIRE(jobs->front().metrics.size() == 1);
    // The job goes on from step 2 (no rewrite: nothing after its checkpoint was recorded).
    REQUIRE((*store)->AppendMetrics(id, Record(2), jobs->front().metrics, false).ok());
    REQUIRE((*store)->AppendMetrics(id, Record(3), jobs->front().metrics, false).ok());
  }
  auto store = JobStore::Open(dir.path());
  REQUIRE(store.ok());
  auto jobs = (*store)->LoadAll();
  REQUIRE(jobs.ok());
  REQUIRE(jobs->front().metrics.size() == 3);
  CHECK(jobs->front().metrics[1].step() == 2);
  CHECK(jobs->front().metrics[2].step() == 3);
}

TEST_CASE("JobService: a job being cancelled when the server stopped stays cancelled; a running one runs again",
          "[controller][job_store]") {
  testing::TestDir dir("job_service_restart");
  std::string cancelled_id, running_id;
  {
    auto store = JobStore::Open(dir.path());
    REQUIRE(store.ok());
    for (bool cancel : {true, false}) {
      v1::Job job;
      job.set_id((*store)->NextId());
      job.set_state(v1::JOB_STATE_RUNNING);
      job.set_cancel_requested(cancel);  // as CancelJob writes it before it replies
      REQUIRE((*store)->Save(job).ok());
      (cancel ? cancelled_id : running_id) = job.id();
    }
  }
  JobServiceOptions options;
  options.state_dir = dir.path();
  auto service = JobService::Create(options);  // not started: nothing runs
  INFO(service.status().ToString());
  REQUIRE(service.ok());
  grpc::ServerContext context;
  v1::Job job;
  v1::GetJobRequest get;
  get.set_job_id(cancelled_id);
  REQUIRE((*service)->GetJob(&context, &get, &job).ok());
  CHECK(job.state() == v1::JOB_STATE_CANCELLED);
  CHECK(job.end_time_ms() > 0);
  get.set_job_id(running_id);
  REQUIRE((*service)->GetJob(&context, &get, &job).ok());
  CHECK(job.state() == v1::JOB_STATE_QUEUED);
  CHECK(job.restarts() == 1);
  // And on disk: a second restart agrees.
  auto again = JobStore::Open(dir.path());
  REQUIRE(again.ok());
  auto jobs = (*again)->LoadAll();
  REQUIRE(jobs.ok());
  for (const auto& s : *jobs) {
    if (s.job.id() == cancelled_id) CHECK(s.job.state() == v1::JOB_STATE_CANCELLED);
  }
}

}  // namespace
}  // namespace verl
