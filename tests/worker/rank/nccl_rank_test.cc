// Ranks on two GPUs joined by NCCL, as split placement runs them: the actor on cuda:0, a rollout-only rank on cuda:1,
// a transfer group between them. Every buffer of an NCCL group must be device memory, so this is where a host tensor
// handed to a collective shows (the host backend, data_parallel_test's, takes both). Tagged [gpu]: skips with a
// warning where the build has no CUDA or fewer than two GPUs are visible.

#include <catch2/catch.hpp>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tests/worker/rank/rank_fixtures.h"
#include "tests/worker/tiny_model.h"
#include "tests/worker/visible_gpus.h"
#include "worker/comm/nccl_communicator.h"
#include "worker/rank/rank_interface.h"

namespace verl {
namespace {

using namespace rank_testing;  // NOLINT: the shared fixtures

using testing::VisibleGpus;

// One NCCL group of two ranks, rank r on cuda:r (created concurrently, as every rank must).
std::vector<std::unique_ptr<Communicator>> NcclPair() {
  auto id = NcclCommunicator::CreateUniqueId();
  REQUIRE(id.ok());
  std::vector<std::unique_ptr<Communicator>> comms(2);
  std::vector<absl::Status> errors(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      NcclCommunicatorOptions o;
      o.rank = r;
      o.world_size = 2;
      o.unique_id = *id;
      o.cuda_device = r;
      auto c = NcclCommunicator::Create(o);
      errors[r] = c.status();
      if (c.ok()) comms[r] = std::move(*c);
    });
  }
  for (std::thread& t : threads) t.join();
  for (const absl::Status& s : errors) {
    INFO(s.ToString());
    REQUIRE(s.ok());
  }
  return comms;
}

TEST_CASE("split placement on two GPUs: the weight sync over NCCL gives the rollout rank the actor's weights",
          "[worker][rank][gpu]") {
  if (VisibleGpus() < 2) {
    WARN("skipped: needs 2 GPUs, " << VisibleGpus() << " visible");
    return;
  }
  TinyRankModel m;
  // The rollout rank starts from other weights (another seed, the same shapes and tokenizer), so a sync that moved
  // nothing shows in its greedy tokens.
  TestDir other("nccl_rank_other");
  testing::WriteTinyModel(other.path(), m.config, /*seed=*/8);
  std::filesystem::copy_file(m.dir.file("tokenizer.json"), other.file("tokenizer.json"));

  RankConfig actor = Config(m.dir.path(), {"actor", "ref"});
  actor.device = "cuda:0";
  RankConfig rollout = Config(other.path(), {"rollout"});
  rollout.device = "cuda:1";
  std::vector<std::unique_ptr<RankInterface>> ranks;
  ranks.push_back(LoadedRank(0, actor));
  ranks.push_back(LoadedRank(1, rollout));
  auto comms = NcclPair();
  for (int r = 0; r < 2; ++r) REQUIRE(ranks[r]->SetTransferCommunicator(std::move(comms[r]), absl::Seconds(60)).ok());

  SamplingSettings greedy = Sampling(m);
  greedy.do_sample = false;
  auto probe = [&](int r, const std::string& step) {
    auto out = ranks[r]->Generate(step, {Prompts(m)[0]}, greedy, false);
    INFO(out.status().ToString());
    REQUIRE(out.ok());
    return out->metrics.at("rollout/log_prob/mean");
  };
  const double actor_before = probe(0, "probe-actor");
  const double rollout_before = probe(1, "probe-before");
  REQUIRE(rollout_before != actor_before);

  std::vector<absl::StatusOr<Metrics>> synced(2, absl::UnknownError("not run"));
  {
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r) {
      threads.emplace_back([&, r] {
        synced[r] = ranks[r]->SyncWeights(/*bucket_bytes=*/4096);  // small buckets: tensors span several
        if (!synced[r].ok()) ranks[r]->AbortCommunicator();
      });
    }
    for (std::thread& t : threads) t.join();
  }
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r << ": " << synced[r].status().ToString());
    REQUIRE(synced[r].ok());
  }
  REQUIRE(synced[1]->at("perf/weight_sync_buckets") > 10);
  // Bit for bit the actor's weights: the same greedy tokens and log-probs on either GPU.
  REQUIRE(probe(1, "probe-after") == actor_before);
}

}  // namespace
}  // namespace verl
