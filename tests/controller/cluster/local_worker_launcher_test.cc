#include "controller/cluster/local_worker_launcher.h"

#include <signal.h>

#include <filesystem>
#include <string>

#include <catch2/catch.hpp>

#include "controller/cluster/worker_client.h"
#include "tests/controller/test_util.h"

namespace verl {
namespace {

using testing::Bin;
using testing::Clock;
using testing::ProcessRunning;
using testing::SecondsSince;
using testing::TestDir;
using testing::WaitFor;
using testing::WriteScript;

TEST_CASE("LocalWorkerLauncher starts a real verl-worker that answers Health", "[controller][launcher]") {
  TestDir dir("launch_ok");
  LocalWorkerLauncher launcher;
  auto launched = launcher.Launch(Bin("verl-worker"), 1, dir.file("logs"), 30);
  REQUIRE(launched.ok());
  REQUIRE(launched->size() == 1);
  const LaunchedWorker& w = launched->front();
  CHECK(w.worker_id == "worker-0");
  CHECK(w.address.rfind("127.0.0.1:", 0) == 0);
  CHECK(w.address != "127.0.0.1:0");
  CHECK(w.log_path == dir.file("logs") + "/worker-0.log");
  CHECK(ProcessRunning(w.pid));
  CHECK(launcher.CheckAlive().ok());

  WorkerClient client(w.worker_id, w.address, 10, [&launcher] { return launcher.CheckAlive(); });
  auto health = client.WaitHealthy(10);
  REQUIRE(health.ok());
  CHECK(health->worker_id() == "worker-0");
  CHECK(health->pid() == w.pid);
  CHECK(health->num_ranks() == 1);
  CHECK(health->device() == "cpu");
}

TEST_CASE("LocalWorkerLauncher fails fast when the worker exits before it is ready", "[controller][launcher]") {
  TestDir dir("launch_boom");
  const std::string script = WriteScript(dir.file("boom.sh"), "echo boom >&2\nexit 3\n");
  LocalWorkerLauncher launcher;
  const auto start = Clock::now();
  auto launched = launcher.Launch(script, 1, dir.file("logs"), 30);
  const double elapsed = SecondsSince(start);
  REQUIRE_FALSE(launched.ok());
  CHECK(elapsed < 5);  // well before the 30 s start timeout
  CHECK(launched.status().code() == absl::StatusCode::kUnavailable);
  const std::string message(launched.status().message());
  CHECK_THAT(message, Catch::Contains("worker-0") && Catch::Contains("exited with status 3") &&
                          Catch::Contains("boom") && Catch::Contains(dir.file("logs") + "/worker-0.log"));
}

TEST_CASE("LocalWorkerLauncher reports a missing binary as NotFound", "[controller][launcher]") {
  TestDir dir("launch_missing");
  LocalWorkerLauncher launcher;
  const std::string binary = dir.file("no-such-worker");
  auto launched = launcher.Launch(binary, 1, dir.file("logs"), 5);
  REQUIRE_FALSE(launched.ok());
  CHECK(launched.status().code() == absl::StatusCode::kNotFound);
  CHECK_THAT(std::string(launched.status().message()), Catch::Contains(binary));
}

TEST_CASE("LocalWorkerLauncher gives up on a worker that never becomes ready", "[controller][launcher]") {
  TestDir dir("launch_sleepy");
  // The script records its pid, which exec keeps, so the test can check that the launcher cleans up after it.
  const std::string pid_file = dir.file("sleepy.pid");
  const std::string script = WriteScript(dir.file("sleepy.sh"), "echo $$ > " + pid_file + "\nexec sleep 60\n");
  {
    LocalWorkerLauncher launcher;
    const auto start = Clock::now();
    auto launched = launcher.Launch(script, 1, dir.file("logs"), 1.0);
    const double elapsed = SecondsSince(start);
    REQUIRE_FALSE(launched.ok());
    CHECK(launched.status().code() == absl::StatusCode::kDeadlineExceeded);
    CHECK_THAT(std::string(launched.status().message()), Catch::Contains("worker-0") && Catch::Contains("1 s"));
    CHECK(elapsed >= 0.9);
    CHECK(elapsed < 4);
    CHECK(launcher.workers().empty());
  }
  // The launcher's destructor stopped the process it could not use.
  const pid_t pid = static_cast<pid_t>(std::stol(testing::ReadFile(pid_file)));
  CHECK_FALSE(ProcessRunning(pid));
}

TEST_CASE("LocalWorkerLauncher notices a killed worker, and the client says so promptly",
          "[controller][launcher]") {
  TestDir dir("launch_kill");
  LocalWorkerLauncher launcher;
  auto launched = launcher.Launch(Bin("verl-worker"), 1, dir.file("logs"), 30);
  REQUIRE(launched.ok());
  const LaunchedWorker w = launched->front();
  // A long RPC deadline: the failure must come from the dead connection plus the liveness check, not the deadline.
  WorkerClient client(w.worker_id, w.address, 30, [&launcher] { return launcher.CheckAlive(); });
  REQUIRE(client.WaitHealthy(10).ok());

  REQUIRE(::kill(w.pid, SIGKILL) == 0);
  SECTION("the client's error names the dead worker") {
    // No CheckAlive first: the client's liveness callback is what must notice the death.
    const auto start = Clock::now();
    auto r = client.Generate(v1::GenerateRequest());
    const double elapsed = SecondsSince(start);
    REQUIRE_FALSE(r.ok());
    CHECK(elapsed < 5);
    CHECK(r.status().code() == absl::StatusCode::kUnavailable);
    CHECK_THAT(std::string(r.status().message()),
               Catch::Contains("Generate") && Catch::Contains("worker-0") && Catch::Contains("signal 9") &&
                   Catch::Contains(w.address));
  }
  SECTION("the heartbeat's error names the exit too") {
    // The job logs a heartbeat's failure in place of the step's: it must not lose the signal.
    const absl::Status ping = client.Ping(30);
    REQUIRE_FALSE(ping.ok());
    CHECK(ping.code() == absl::StatusCode::kUnavailable);
    CHECK_THAT(std::string(ping.message()),
               Catch::Contains("heartbeat") && Catch::Contains("worker-0") && Catch::Contains("signal 9"));
  }
  SECTION("CheckAlive names the worker, its address and the signal") {
    REQUIRE(WaitFor([&] { return !launcher.CheckAlive().ok(); }, 5));
    absl::Status alive = launcher.CheckAlive();
    CHECK(alive.code() == absl::StatusCode::kUnavailable);
    CHECK_THAT(std::string(alive.message()),
               Catch::Contains("worker-0") && Catch::Contains("signal 9") && Catch::Contains(w.address));
    // Every later call keeps reporting the same death.
    auto r = client.ComputeLogProbs(v1::ComputeLogProbsRequest());
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(std::string(r.status().message()), Catch::Contains("signal 9"));
  }
}

TEST_CASE("LocalWorkerLauncher::StopAll stops every worker and is idempotent", "[controller][launcher]") {
  TestDir dir("launch_stop");
  LocalWorkerLauncher launcher;
  auto launched = launcher.Launch(Bin("verl-worker"), 2, dir.file("logs"), 30);
  REQUIRE(launched.ok());
  REQUIRE(launched->size() == 2);
  CHECK(launched->at(0).worker_id == "worker-0");
  CHECK(launched->at(1).worker_id == "worker-1");
  CHECK(launched->at(0).address != launched->at(1).address);
  const pid_t a = launched->at(0).pid;
  const pid_t b = launched->at(1).pid;
  REQUIRE(ProcessRunning(a));
  REQUIRE(ProcessRunning(b));

  auto start = Clock::now();
  launcher.StopAll(5.0);
  CHECK(SecondsSince(start) < 4);  // the workers honour SIGTERM; no SIGKILL after the grace period
  CHECK_FALSE(ProcessRunning(a));
  CHECK_FALSE(ProcessRunning(b));
  // Reaped, not zombies: the pids are gone from the process table.
  CHECK(::kill(a, 0) != 0);
  CHECK(::kill(b, 0) != 0);
  absl::Status alive = launcher.CheckAlive();
  CHECK_FALSE(alive.ok());
  CHECK_THAT(std::string(alive.message()), Catch::Contains("exited with status 0"));

  start = Clock::now();
  launcher.StopAll(5.0);
  CHECK(SecondsSince(start) < 0.5);
}

TEST_CASE("CountDriverGpus counts the driver's GPU entries, 0 without the driver", "[controller][launcher]") {
  TestDir dir("driver_gpus");
  const std::string gpus = dir.file("gpus");
  CHECK(CountDriverGpus(gpus) == 0);  // no such directory: no driver
  std::filesystem::create_directories(gpus + "/0000:18:00.0");
  std::filesystem::create_directories(gpus + "/0000:2a:00.0");
  CHECK(CountDriverGpus(gpus) == 2);
}

}  // namespace
}  // namespace verl
