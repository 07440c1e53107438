#ifndef VERL_TESTS_WORKER_RANK_HOST_GROUP_H_
#define VERL_TESTS_WORKER_RANK_HOST_GROUP_H_

// Shared by the rank tests that run a group of ranks in one process: a thread per rank, the ranks' host
// communicators joined over loopback, and a rollout on every rank at once.

#include <catch2/catch.hpp>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "worker/comm/free_ports.h"
#include "worker/comm/host_communicator.h"
#include "worker/rank/rank_interface.h"

namespace verl {
namespace rank_testing {

// Runs fn(r) for r in [0, world), each on a thread of its own, and waits for all.
inline void OnEveryRank(int world, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) threads.emplace_back(fn, r);
  for (std::thread& t : threads) t.join();
}

// `world` host communicators joined over loopback (none for a world of one).
inline std::vector<std::unique_ptr<Communicator>> MakeGroup(int world, absl::Duration connect_timeout) {
  std::vector<std::unique_ptr<Communicator>> comms(world);
  if (world == 1) return comms;
  auto addresses = PickFreeLoopbackAddresses(world);
  REQUIRE(addresses.ok());
  std::vector<absl::Status> errors(world);
  OnEveryRank(world, [&](int r) {
    HostCommunicatorOptions o;
    o.rank = r;
    o.world_size = world;
    o.addresses = *addresses;
    o.connect_timeout = connect_timeout;
    auto c = HostCommunicator::Create(o);
    errors[r] = c.status();
    if (c.ok()) comms[r] = std::move(*c);
  });
  for (const absl::Status& s : errors) REQUIRE(s.ok());
  return comms;
}

// Joins `ranks` into one host group, in order, with collectives timing out after `timeout`.
inline void JoinGroup(const std::vector<std::unique_ptr<RankInterface>>& ranks, absl::Duration timeout) {
  auto comms = MakeGroup(static_cast<int>(ranks.size()), absl::Seconds(30));
  for (size_t r = 0; r < ranks.size(); ++r) REQUIRE(ranks[r]->SetCommunicator(std::move(comms[r]), timeout).ok());
}

// Generate on every rank at once, rank r over prompts[r]; a rank that fails aborts its communicator, as the worker
// service does, so that its peers stop waiting.
inline std::vector<absl::StatusOr<GenerateOutput>> GenerateOnEveryRank(
    const std::vector<std::unique_ptr<RankInterface>>& ranks, const std::string& step,
    const std::vector<std::vector<PromptInput>>& prompts, const SamplingSettings& sampling, bool greedy_baseline) {
  std::vector<absl::StatusOr<GenerateOutput>> out(ranks.size(), absl::UnknownError("not run"));
  OnEveryRank(static_cast<int>(ranks.size()), [&](int r) {
    out[r] = ranks[r]->Generate(step, prompts[r], sampling, greedy_baseline);
    if (!out[r].ok()) ranks[r]->AbortCommunicator();
  });
  return out;
}

// A rank's rollout succeeded with the tokens and lengths of `expected` (another rank's over the same prompts).
inline void RequireSameTokens(const absl::StatusOr<GenerateOutput>& got,
                              const absl::StatusOr<GenerateOutput>& expected) {
  INFO(got.status().ToString() << " / expected: " << expected.status().ToString());
  REQUIRE(got.ok());
  REQUIRE(expected.ok());
  CHECK(got->responses.bytes == expected->responses.bytes);
  CHECK(got->response_lengths == expected->response_lengths);
  CHECK(got->prompt_lengths == expected->prompt_lengths);
}

}  // namespace rank_testing
}  // namespace verl

#endif  // VERL_TESTS_WORKER_RANK_HOST_GROUP_H_
