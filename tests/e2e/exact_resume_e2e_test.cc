// Exact resume (issue 8): a job whose controller is SIGKILLed right after its step-10 checkpoint, then restarted with
// the same command, must give the same per-step metrics and the same final weights, optimizer state and data state
// as an uninterrupted run with the same seed. PPO (actor, critic, ref, adaptive KL controller in the reward, lr
// warmup), in float32 and in bfloat16 (with float32 master weights), so that every piece of state that must be restored is in play.

#include <signal.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tests/controller/test_util.h"

namespace verl {
namespace {

namespace fs = std::filesystem;
using testing::Bin;
using testing::ChildProcess;
using testing::ReadFile;
using testing::TestDir;

const std::string kConfig = std::string(VERL_SOURCE_DIR) + "/configs/quickstart_ppo.yaml";
constexpr int kSteps = 20;

std::vector<std::string> JobArgv(const TestDir& dir, const std::string& name, const std::string& dtype) {
  return {Bin("verl-controller"),
          "--config",
          kConfig,
          "actor_rollout_ref.model.path=" + dir.file("model"),
          "critic.model.path=" + dir.file("model"),
          "data.train_files=" + dir.file("data/train.parquet"),
          "data.val_files=" + dir.file("data/test.parquet"),
          "trainer.log_dir=" + dir.file(name + "/logs"),
          "trainer.default_local_dir=" + dir.file(name + "/ckpt"),
          "trainer.total_training_steps=" + std::to_string(kSteps),
          "trainer.save_freq=10",
          "trainer.test_freq=5",
          "trainer.logger=[jsonl]",
          "algorithm.kl_ctrl.type=adaptive",
          "actor_rollout_ref.actor.optim.lr_warmup_steps=15",
          "data.shuffle=true",
          "actor_rollout_ref.model.dtype=" + dtype};
}

std::map<int, nlohmann::json> Metrics(const std::string& path) {
  std::map<int, nlohmann::json> steps;
  std::istringstream lines(ReadFile(path));
  for (std::string line; std::getline(lines, line);) {
    if (line.empty()) continue;
    nlohmann::json j = nlohmann::json::parse(line);
    const int step = j["step"].get<int>();
    REQUIRE(steps.count(step) == 0);  // every step recorded once
    steps[step] = j["data"];
  }
  return steps;
}

TEST_CASE("a controller killed after a checkpoint and restarted gives the uninterrupted run exactly",
          "[e2e][reliability]") {
  // bfloat16 too: the optimizer's float32 master weights must be saved and restored for the resume to be exact.
  const std::string dtype = GENERATE(as<std::string>(), "float32", "bfloat16");
  INFO("dtype " << dtype);
  TestDir dir("exact_resume_" + dtype);
  REQUIRE(testing::MakeTinyModel(dir.file("model"), dir.path()).empty());
  REQUIRE(testing::MakeDataset(dir.file("data"), dir.path(), 512, 16).empty());

  // A: uninterrupted.
  {
    ChildProcess a(JobArgv(dir, "a", dtype), dir.file("a.out"), dir.file("a.err"));
    REQUIRE(a.Wait(300));
    INFO(a.err());
    REQUIRE(a.exit_code() == 0);
  }
  // B: killed (SIGKILL, no chance to clean up) once the step-10 checkpoint is complete (its tracker is written last),
  // then restarted with the same command line.
  {
    ChildProcess b(JobArgv(dir, "b", dtype), dir.file("b1.out"), dir.file("b1.err"));
    const std::string tracker = dir.file("b/ckpt/latest_checkpointed_iteration.txt");
    REQUIRE(testing::WaitFor([&] { return fs::exists(tracker) || b.Wait(0); }, 300));
    REQUIRE(b.exit_code() == -1);
    REQUIRE(::kill(b.pid(), SIGKILL) == 0);
    REQUIRE(b.Wait(10));
    REQUIRE(ReadFile(tracker).rfind("10", 0) == 0);
  }
  {
    ChildProcess b(JobArgv(dir, "b", dtype), dir.file("b2.out"), dir.file("b2.err"));
    REQUIRE(b.Wait(300));
    INFO(b.err());
    REQUIRE(b.exit_code() == 0);
    CHECK_THAT(b.out() + b.err(), Catch::Contains("resumed from"));
  }

  const auto a = Metrics(dir.file("a/logs/metrics.jsonl"));
  const auto b = Metrics(dir.file("b/logs/metrics.jsonl"));
  REQUIRE(a.size() == kSteps + 1);  // validation at step 0, then every step
  REQUIRE(b.size() == a.size());
  int compared = 0;
  for (const auto& [step, metrics] : a) {
    INFO("step " << step);
    for (const auto& [key, value] : metrics.items()) {
      // Wall-clock figures and process memory differ between runs by nature; the worker restarted with the job.
      if (key.rfind("timing_s/", 0) == 0 || key.rfind("perf/", 0) == 0) continue;
      INFO(key);
      REQUIRE(b.at(step).contains(key));
      REQUIRE(b.at(step)[key].get<double>() == value.get<double>());  // exact, not approximate
      ++compared;
    }
  }
  REQUIRE(compared > 20 * kSteps);
  // The final weights, optimizer state, critic and data state are byte for byte the same.
  for (const char* file : {"actor/model_world_size_1_rank_0.safetensors", "actor/optim_world_size_1_rank_0.safetensors",
                           "critic/model_world_size_1_rank_0.safetensors", "data.json"}) {
    INFO(file);
    const std::string name = "/global_step_" + std::to_string(kSteps) + "/" + file;
    const std::string bytes_a = ReadFile(dir.file("a/ckpt") + name);
    REQUIRE(bytes_a.size() > 10);
    REQUIRE(bytes_a == ReadFile(dir.file("b/ckpt") + name));
  }
}

}  // namespace
}  // namespace verl
