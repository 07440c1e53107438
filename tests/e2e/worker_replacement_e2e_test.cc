// A worker the controller did not start (listed in cluster.worker_addresses, as on another node or in a pod) is
// killed for real (SIGKILL) in the middle of a data-parallel job on two hand-started daemons; a replacement is started
// at the same address a little later, as a supervisor or Kubernetes would. The controller must wait for it, set both
// workers up again (the survivor included), resume from the last checkpoint and finish, with every step recorded once
// and the same metrics as an uninterrupted run.

#include <signal.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/e2e/e2e_util.h"

namespace verl {
namespace {

namespace fs = std::filesystem;
using testing::Bin;
using testing::ChildProcess;
using testing::HandStartedWorker;
using testing::ReadMetricsJsonl;
using testing::ReadFile;
using testing::TestDir;

const std::string kConfig = std::string(VERL_SOURCE_DIR) + "/configs/quickstart.yaml";
constexpr int kSteps = 30;

std::vector<std::string> JobArgv(const TestDir& dir, const std::string& name, const std::vector<std::string>& workers) {
  return {Bin("verl-controller"),
          "--config",
          kConfig,
          "actor_rollout_ref.model.path=" + dir.file("model"),
          "data.train_files=" + dir.file("data/train.parquet"),
          "data.val_files=" + dir.file("data/test.parquet"),
          "trainer.log_dir=" + dir.file(name + "/logs"),
          "trainer.default_local_dir=" + dir.file(name + "/ckpt"),
          "trainer.total_training_steps=" + std::to_string(kSteps),
          "trainer.test_freq=1000",
          "trainer.save_freq=4",
          "trainer.logger=[jsonl]",
          "trainer.nnodes=2",
          "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=64",
          "cluster.worker_addresses=[" + workers[0] + "," + workers[1] + "]",
          "cluster.heartbeat_interval_s=0.5",
          "cluster.heartbeat_timeout_s=3",
          "cluster.comm_timeout_s=20",
          "cluster.rpc_timeout_s=60",
          "cluster.max_worker_restarts=1",
          "cluster.worker_replacement_timeout_s=60"};
}

// The uninterrupted run on two hand-started daemons.
std::map<int, nlohmann::json> Baseline(const TestDir& dir, const std::vector<std::string>& extra = {}) {
  HandStartedWorker a(dir, "base-a"), b(dir, "base-b");
  std::vector<std::string> argv = JobArgv(dir, "baseline", {a.address, b.address});
  argv.insert(argv.end(), extra.begin(), extra.end());
  testing::RunResult r = testing::Run(argv, dir.path(), 300);
  INFO(r.err.substr(r.err.size() > 3000 ? r.err.size() - 3000 : 0));
  REQUIRE(r.exit_code == 0);
  std::map<int, nlohmann::json> steps = ReadMetricsJsonl(dir.file("baseline/logs/metrics.jsonl"));
  REQUIRE(steps.size() == kSteps + 1);
  fs::remove_all(dir.file("baseline"));
  return steps;
}

// Every step recorded once, equal to `baseline`.
void RequireSameAsBaseline(const std::string& metrics_path, const std::map<int, nlohmann::json>& baseline) {
  std::map<int, int> counts;
  const std::map<int, nlohmann::json> steps = ReadMetricsJsonl(metrics_path, &counts);
  REQUIRE(steps.size() == kSteps + 1);
  for (const auto& [step, n] : counts) {
    INFO("step " << step);
    CHECK(n == 1);
  }
  CHECK(steps.at(kSteps)["training/worker_restarts"].get<double>() == 1.0);
  for (const auto& [step, m] : baseline) {
    INFO("step " << step);
    for (const char* key : {"critic/score/mean", "actor/pg_loss", "actor/grad_norm", "actor/kl_loss"}) {
      if (!m.contains(key)) continue;
      INFO(key);
      CHECK(steps.at(step)[key].get<double>() == Approx(m[key].get<double>()).epsilon(1e-3).margin(1e-6));
    }
  }
}

TEST_CASE("a listed worker killed mid-job is replaced at its address and the job finishes as if uninterrupted",
          "[e2e][reliability]") {
  TestDir dir("replace_e2e");
  REQUIRE(testing::MakeTinyModel(dir.file("model"), dir.path()).empty());
  REQUIRE(testing::MakeDataset(dir.file("data"), dir.path(), 256, 16).empty());

  const std::map<int, nlohmann::json> baseline = Baseline(dir);

  // The same job; worker b is killed once step 6 is recorded (checkpoint at step 4), and restarted 1.5 s later.
  HandStartedWorker a(dir, "a");
  auto b = std::make_unique<HandStartedWorker>(dir, "b");
  const std::string b_address = b->address;
  ChildProcess controller(JobArgv(dir, "faulty", {a.address, b_address}), dir.file("controller.out"),
                          dir.file("controller.err"));
  const std::string metrics = dir.file("faulty/logs/metrics.jsonl");
  REQUIRE(testing::WaitFor([&] { return ReadMetricsJsonl(metrics).count(6) == 1 || controller.Wait(0); }, 120));
  INFO(controller.err());
  REQUIRE(ReadMetricsJsonl(metrics).count(kSteps) == 0);  // still running
  ::kill(b->process->pid(), SIGKILL);
  REQUIRE(b->process->Wait(10));
  const auto killed_at = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  HandStartedWorker replacement(dir, "b2", {}, b_address);  // same host:port
  CHECK(replacement.address == b_address);

  REQUIRE(controller.Wait(180));
  const double recovery_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed_at).count();
  const std::string err = controller.out() + controller.err();  // spdlog writes to stdout
  INFO(err.substr(err.size() > 4000 ? err.size() - 4000 : 0));
  REQUIRE(controller.exit_code() == 0);
  CHECK_THAT(err, Catch::Contains("waiting for the workers at their addresses"));
  CHECK_THAT(err, Catch::Contains("waiting up to 60 s for worker-1 at " + b_address));
  CHECK_THAT(err, Catch::Contains("global_step_4") || Catch::Contains("global_step_8"));
  CHECK_THAT(err, Catch::Contains("recovered in"));
  WARN("killed worker replaced and job finished " << recovery_s << " s after the kill");

  RequireSameAsBaseline(metrics, baseline);
}

TEST_CASE("a listed worker hung mid-collective (SIGSTOP): the survivor is released at once, not at its timeout",
          "[e2e][reliability]") {
  TestDir dir("hang_e2e");
  REQUIRE(testing::MakeTinyModel(dir.file("model"), dir.path()).empty());
  REQUIRE(testing::MakeDataset(dir.file("data"), dir.path(), 256, 16).empty());
  // Collectives and RPCs may wait 10 minutes: only the heartbeat and the abort relay can end the wait in time.
  const std::vector<std::string> slow = {"cluster.comm_timeout_s=600", "cluster.rpc_timeout_s=600",
                                         "cluster.heartbeat_timeout_s=2"};
  const std::map<int, nlohmann::json> baseline = Baseline(dir, slow);

  HandStartedWorker a(dir, "a");
  auto b = std::make_unique<HandStartedWorker>(dir, "b");
  const std::string b_address = b->address;
  std::vector<std::string> argv = JobArgv(dir, "hung", {a.address, b_address});
  argv.insert(argv.end(), slow.begin(), slow.end());
  ChildProcess controller(argv, dir.file("controller.out"), dir.file("controller.err"));
  const std::string metrics = dir.file("hung/logs/metrics.jsonl");
  REQUIRE(testing::WaitFor([&] { return ReadMetricsJsonl(metrics).count(6) == 1 || controller.Wait(0); }, 120));
  REQUIRE(ReadMetricsJsonl(metrics).count(kSteps) == 0);
  ::kill(b->process->pid(), SIGSTOP);  // b stops wherever it is; a soon waits for it in a collective
  // While b is still stopped: the controller notices the missed heartbeat, cancels the calls and relays the failure;
  // a's communicator is aborted, so its rank thread is free again (it would otherwise wait 600 s).
  const bool relayed = testing::WaitFor(
      [&] { return a.process->out().find("aborting its communicator") != std::string::npos; }, 60);
  INFO("a's log:\n" << a.process->out() << "\ncontroller:\n" << controller.out());
  REQUIRE(relayed);
  // The relay names the hung worker's rank and why, not whichever cancelled call came back first.
  CHECK_THAT(a.process->out(), Catch::Contains("global rank 1 failed (worker worker-1 at " + b_address +
                                               " missed its heartbeat"));
  // Now replace b, as a supervisor would after its own health check.
  ::kill(b->process->pid(), SIGKILL);
  REQUIRE(b->process->Wait(10));
  HandStartedWorker replacement(dir, "b2", {}, b_address);
  REQUIRE(controller.Wait(180));  // far below the 600 s a blocked survivor would take
  const std::string log = controller.out() + controller.err();
  INFO(log.substr(log.size() > 4000 ? log.size() - 4000 : 0));
  REQUIRE(controller.exit_code() == 0);
  CHECK_THAT(log, Catch::Contains("missed its heartbeat"));
  RequireSameAsBaseline(metrics, baseline);
}

}  // namespace
}  // namespace verl
