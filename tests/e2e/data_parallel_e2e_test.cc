// Data parallelism end to end: the real verl-controller runs the CPU quickstart (shortened) on 1 rank, on 2 ranks of
// one worker, on 2 local workers of 2 ranks each, and on two verl-worker daemons started by hand on loopback and
// listed in cluster.worker_addresses (the multi-node setup). The same seed and global batch must give the same
// metrics at every step within float tolerance. Bad cluster setups fail at startup naming the address.

#include <catch2/catch.hpp>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tests/e2e/e2e_util.h"

namespace verl {
namespace {

namespace fs = std::filesystem;
using testing::Bin;
using testing::HandStartedWorker;
using testing::ReadFile;
using testing::RunResult;
using testing::TestDir;

const std::string kConfig = std::string(VERL_SOURCE_DIR) + "/configs/quickstart.yaml";
constexpr int kSteps = 6;

struct Inputs {
  TestDir dir{"dp_e2e"};
  Inputs() {
    REQUIRE(testing::MakeTinyModel(dir.file("model"), dir.path()).empty());
    REQUIRE(testing::MakeDataset(dir.file("data"), dir.path(), 256, 16).empty());
  }

  // Runs the shortened quickstart with `extra` overrides; returns the metrics of each step (0: validation before
  // training).
  std::map<int, nlohmann::json> Job(const std::string& name, const std::vector<std::string>& extra) const {
    std::vector<std::string> argv = {Bin("verl-controller"),
                                     "--config",
                                     kConfig,
                                     "actor_rollout_ref.model.path=" + dir.file("model"),
                                     "data.train_files=" + dir.file("data/train.parquet"),
                                     "data.val_files=" + dir.file("data/test.parquet"),
                                     "trainer.log_dir=" + dir.file(name + "/logs"),
                                     "trainer.default_local_dir=" + dir.file(name + "/ckpt"),
                                     "trainer.total_training_steps=" + std::to_string(kSteps),
                                     "trainer.test_freq=3",
                                     "trainer.logger=[jsonl]",
                                     "cluster.worker_start_timeout_s=30"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    RunResult r = testing::Run(argv, dir.path(), 300);
    INFO(name << " stderr: " << r.err.substr(r.err.size() > 3000 ? r.err.size() - 3000 : 0));
    REQUIRE(r.exit_code == 0);
    std::map<int, nlohmann::json> steps;
    std::istringstream lines(ReadFile(dir.file(name + "/logs/metrics.jsonl")));
    for (std::string line; std::getline(lines, line);) {
      if (line.empty()) continue;
      nlohmann::json j = nlohmann::json::parse(line);
      steps[j["step"].get<int>()] = j["data"];
    }
    REQUIRE(steps.size() == kSteps + 1);
    return steps;
  }
};

void RequireSameRun(const std::map<int, nlohmann::json>& one, const std::map<int, nlohmann::json>& many,
                    const std::string& what) {
  INFO(what);
  for (const auto& [step, metrics] : one) {
    INFO("step " << step);
    for (const char* key :
         {"critic/score/mean", "response_length/mean", "critic/advantages/mean", "actor/pg_loss", "actor/grad_norm",
          "actor/kl_loss", "actor/entropy", "val-core/verl_cpp/repeat_letter/reward/mean@1", "critic/vf_loss",
          "critic/grad_norm", "critic/values/mean", "critic/returns/mean"}) {
      if (!metrics.contains(key)) continue;
      INFO(key);
      REQUIRE(many.at(step).contains(key));
      REQUIRE(many.at(step)[key].get<double>() == Approx(metrics[key].get<double>()).epsilon(1e-3).margin(1e-6));
    }
  }
}

TEST_CASE("data parallel: 1 rank, 2 ranks, 2 workers x 2 ranks and two hand-started daemons agree step by step",
          "[e2e][dp]") {
  Inputs in;
  const auto one = in.Job("r1", {});
  // The mini-batch is 16 prompts x 8 samples; per rank the micro-batch is the whole local mini-batch, as in the
  // one-rank quickstart.
  RequireSameRun(one,
                 in.Job("r2", {"trainer.n_gpus_per_node=2", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=64"}),
                 "one worker, 2 ranks");
  RequireSameRun(one,
                 in.Job("r4", {"trainer.nnodes=2", "trainer.n_gpus_per_node=2",
                               "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=32"}),
                 "two local workers, 2 ranks each");
  const auto zero3 = in.Job("zero3", {"trainer.nnodes=2", "trainer.n_gpus_per_node=2",
                                      "actor_rollout_ref.actor.shard_parameters=true",
                                      "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16"});
  RequireSameRun(one, zero3, "two local workers, 2 ranks each, parameters sharded (ZeRO-3), micro-batches of 16");
  REQUIRE(zero3.at(1)["perf/actor_micro_batches"].get<double>() == 2.0);  // 32 rows per rank and mini-batch
  // The same with passes cut by tokens (use_dynamic_bsz; the log-prob passes follow the actor's switch) and packed
  // without padding (use_remove_padding): more passes of fewer rows, agreed across the four sharded ranks, and the
  // same numbers.
  const auto dynamic = in.Job("zero3-dynamic", {"trainer.nnodes=2", "trainer.n_gpus_per_node=2",
                                                "actor_rollout_ref.actor.shard_parameters=true",
                                                "actor_rollout_ref.actor.use_dynamic_bsz=true",
                                                "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=64",
                                                "actor_rollout_ref.model.use_remove_padding=true"});
  RequireSameRun(one, dynamic, "ZeRO-3 with token-budget passes of 64 tokens, packed without padding");
  REQUIRE(dynamic.at(1)["perf/actor_micro_batches"].get<double>() > 2.0);
  // Split placement: two ranks train, a third only generates; rows and weights move between them rank to rank.
  RequireSameRun(one,
                 in.Job("split", {"trainer.n_gpus_per_node=3", "resource_pool.rollout_ranks=1",
                                  "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=64",
                                  "actor_rollout_ref.rollout.update_weights_bucket_megabytes=1"}),
                 "split placement: 2 training ranks, 1 rollout rank");
  HandStartedWorker a(in.dir, "node-a");
  HandStartedWorker b(in.dir, "node-b");
  RequireSameRun(one,
                 in.Job("hand", {"trainer.nnodes=2", "cluster.worker_addresses=[" + a.address + "," + b.address + "]",
                                 "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=64"}),
                 "two daemons started by hand");
  // The daemons outlive the job (the controller does not own them) and serve the next one.
  REQUIRE(a.process->exit_code() == -1);
  REQUIRE(b.process->exit_code() == -1);
}

TEST_CASE("split placement with a critic: PPO with the critic (and the rollout) on ranks of their own agrees with "
          "the colocated run step by step",
          "[e2e][dp][placement]") {
  Inputs in;
  const std::vector<std::string> ppo = {"algorithm.adv_estimator=gae", "trainer.save_freq=3",
                                        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=64",
                                        "critic.ppo_micro_batch_size_per_gpu=64"};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.end(), ppo.begin(), ppo.end());
    return extra;
  };
  const auto colocated = in.Job("ppo-colocated", with({"trainer.n_gpus_per_node=2"}));
  REQUIRE(colocated.at(1).contains("critic/vf_loss"));
  // Ranks 0-1 actor and ref, 2-3 critic: values go to the actor's ranks for the advantage, returns come back.
  RequireSameRun(colocated, in.Job("ppo-critic", with({"trainer.n_gpus_per_node=4", "resource_pool.critic_ranks=2"})),
                 "critic on ranks of its own");
  // And the rollout on a fifth: rows go rollout -> actor -> critic.
  RequireSameRun(colocated,
                 in.Job("ppo-critic-rollout", with({"trainer.n_gpus_per_node=5", "resource_pool.critic_ranks=2",
                                                    "resource_pool.rollout_ranks=1"})),
                 "critic and rollout on ranks of their own");
  // The checkpoint has both parts, written by the actor's and the critic's group rank 0.
  for (const char* part : {"actor", "critic"}) {
    INFO(part);
    CHECK(fs::exists(in.dir.file(std::string("ppo-critic/ckpt/global_step_6/") + part +
                                 "/model_world_size_1_rank_0.safetensors")));
  }
}

TEST_CASE("data parallel: bad cluster setups fail at startup naming the address", "[e2e][dp]") {
  TestDir dir("dp_e2e_bad");
  REQUIRE(testing::MakeTinyModel(dir.file("model"), dir.path()).empty());
  REQUIRE(testing::MakeDataset(dir.file("data"), dir.path(), 64, 8).empty());
  auto job = [&](const std::vector<std::string>& extra) {
    std::vector<std::string> argv = {Bin("verl-controller"),
                                     "--config",
                                     kConfig,
                                     "actor_rollout_ref.model.path=" + dir.file("model"),
                                     "data.train_files=" + dir.file("data/train.parquet"),
                                     "data.val_files=" + dir.file("data/test.parquet"),
                                     "trainer.log_dir=" + dir.file("logs"),
                                     "trainer.default_local_dir=" + dir.file("ckpt"),
                                     "trainer.total_training_steps=1",
                                     "trainer.logger=[jsonl]",
                                     "cluster.worker_start_timeout_s=3",
                                     "trainer.nnodes=2",
                                     "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=64"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return testing::Run(argv, dir.path(), 60);
  };
  HandStartedWorker one_rank(dir, "one");
  HandStartedWorker two_ranks(dir, "two", {"--ranks", "2"});

  SECTION("a worker hosting another number of ranks than trainer.n_gpus_per_node") {
    RunResult r = job({"cluster.worker_addresses=[" + one_rank.address + "," + two_ranks.address + "]"});
    INFO(r.err);
    REQUIRE(r.exit_code != 0);
    REQUIRE(r.err.find(two_ranks.address) != std::string::npos);
    REQUIRE(r.err.find("hosts 2 rank(s) but trainer.n_gpus_per_node is 1") != std::string::npos);
  }
  SECTION("an address nobody listens at") {
    const std::string nobody = "127.0.0.1:1";
    RunResult r = job({"cluster.worker_addresses=[" + one_rank.address + "," + nobody + "]"});
    INFO(r.err);
    REQUIRE(r.exit_code != 0);
    REQUIRE(r.err.find(nobody) != std::string::npos);
  }
}

}  // namespace
}  // namespace verl
