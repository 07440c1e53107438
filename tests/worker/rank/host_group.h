#ifndef VERL_TESTS_WORKER_RANK_HOST_GROUP_H_
#define VERL_TESTS_WORKER_RANK_HOST_GROUP_H_

// Shared by the rank tests that run a group of ranks in one process: a thread per rank, and the ranks' host
// communicators joined over loopback.

#include <catch2/catch.hpp>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "worker/comm/free_ports.h"
#include "worker/comm/host_communicator.h"

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

}  // namespace rank_testing
}  // namespace verl

#endif  // VERL_TESTS_WORKER_RANK_HOST_GROUP_H_
