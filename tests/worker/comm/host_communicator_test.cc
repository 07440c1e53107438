#include "worker/comm/host_communicator.h"

#include <chrono>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "catch2/catch.hpp"
#include "tests/worker/comm/communicator_conformance.h"
#include "worker/comm/free_ports.h"

namespace verl {
namespace {

std::vector<std::string> Addresses(int n) {
  absl::StatusOr<std::vector<std::string>> addresses = PickFreeLoopbackAddresses(n);
  REQUIRE(addresses.ok());
  return *addresses;
}

// Creates each rank of a group on its own thread (Create blocks until the mesh is up).
std::vector<absl::StatusOr<std::unique_ptr<HostCommunicator>>> CreateRanks(
    const std::vector<HostCommunicatorOptions>& options) {
  std::vector<absl::StatusOr<std::unique_ptr<HostCommunicator>>> results;
  for (size_t i = 0; i < options.size(); ++i) results.emplace_back(absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (size_t i = 0; i < options.size(); ++i) {
    threads.emplace_back([&, i] { results[i] = HostCommunicator::Create(options[i]); });
  }
  for (auto& t : threads) t.join();
  return results;
}

HostCommunicatorOptions Options(int rank, int world, const std::vector<std::string>& addresses,
                                absl::Duration timeout = absl::Seconds(10)) {
  HostCommunicatorOptions o;
  o.rank = rank;
  o.world_size = world;
  o.addresses = addresses;
  o.connect_timeout = timeout;
  return o;
}

std::vector<absl::StatusOr<std::unique_ptr<Communicator>>> HostGroup(int world) {
  const std::vector<std::string> addresses = Addresses(world);
  std::vector<HostCommunicatorOptions> options;
  for (int r = 0; r < world; ++r) options.push_back(Options(r, world, addresses));
  std::vector<absl::StatusOr<std::unique_ptr<Communicator>>> group;
  for (auto& c : CreateRanks(options)) {
    if (c.ok()) {
      group.push_back(std::unique_ptr<Communicator>(std::move(*c)));
    } else {
      group.push_back(c.status());
    }
  }
  return group;
}

bool Contains(const absl::Status& s, const std::string& needle) {
  return std::string(s.message()).find(needle) != std::string::npos;
}

TEST_CASE("HostCommunicator passes the collective conformance suite", "[comm]") {
  for (int world = 1; world <= 4; ++world) {
    INFO("world size " << world);
    testing::RunCollectiveConformance(HostGroup, world);
  }
}

TEST_CASE("HostCommunicator moves messages larger than socket buffers", "[comm]") {
  for (int world : {2, 3}) {
    INFO("world size " << world);
    testing::RunLargeMessageConformance(HostGroup, world);
  }
}

TEST_CASE("HostCommunicator names a rank that never joins a collective", "[comm]") {
  for (int world = 2; world <= 4; ++world) testing::RunMissingRankConformance(HostGroup, world);
}

TEST_CASE("HostCommunicator Abort fails every rank fast", "[comm]") {
  for (int world = 2; world <= 4; ++world) testing::RunAbortConformance(HostGroup, world);
}

TEST_CASE("HostCommunicator: what a peer sent before it aborted is still received", "[comm]") {
  // Rank 0 sends and then aborts (as a worker does when its call fails right after a collective); rank 1 receives
  // only after the reset has arrived. The bytes were sent before it: the receive completes. (It used to fail on the
  // reset once it had read them, so a peer that finished a collective and aborted failed the collective on ranks
  // still reading its last bytes.)
  std::vector<absl::StatusOr<std::unique_ptr<Communicator>>> group = HostGroup(2);
  for (auto& c : group) REQUIRE(c.ok());
  Communicator& sender = **group[0];
  Communicator& receiver = **group[1];
  const std::vector<float> sent = {1.5f, -2.0f, 3.25f, 4.0f};
  REQUIRE(sender.Send(sent.data(), 4, DType::kFloat32, 1, absl::Seconds(5)).ok());
  sender.Abort();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  std::vector<float> got(4, 0.0f);
  const absl::Status received = receiver.Recv(got.data(), 4, DType::kFloat32, 0, absl::Seconds(5));
  INFO(received.ToString());
  REQUIRE(received.ok());
  CHECK(got == sent);
  // Anything more from it fails at once, naming it.
  const absl::Status more = receiver.Recv(got.data(), 4, DType::kFloat32, 0, absl::Seconds(5));
  CHECK(more.code() == absl::StatusCode::kUnavailable);
  CHECK(Contains(more, "peer rank 0"));
}

TEST_CASE("HostCommunicator rejects bad arguments", "[comm]") { testing::RunBadArgumentConformance(HostGroup, 3); }

TEST_CASE("HostCommunicator::Create fails on a world-size mismatch, naming the address", "[comm]") {
  const std::vector<std::string> addresses = Addresses(3);
  const auto results = CreateRanks({Options(0, 2, {addresses[0], addresses[1]}, absl::Seconds(2)),
                                    Options(1, 3, addresses, absl::Seconds(2))});
  INFO(results[0].status().ToString() << "\n" << results[1].status().ToString());
  CHECK(results[0].status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(Contains(results[0].status(), "world size mismatch"));
  CHECK(Contains(results[0].status(), addresses[1]));
  CHECK(results[1].status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(Contains(results[1].status(), "world size mismatch"));
  CHECK(Contains(results[1].status(), addresses[0]));
}

TEST_CASE("HostCommunicator::Create fails on a duplicate rank", "[comm]") {
  const std::vector<std::string> ports = Addresses(4);
  const std::vector<std::string> addresses = {ports[0], ports[1], ports[2]};
  // The impostor also claims rank 1 but listens elsewhere.
  const std::vector<std::string> impostor = {ports[0], ports[3], ports[2]};
  const auto results = CreateRanks({Options(0, 3, addresses, absl::Milliseconds(800)),
                                    Options(1, 3, addresses, absl::Milliseconds(800)),
                                    Options(1, 3, impostor, absl::Milliseconds(800))});
  INFO(results[0].status().ToString());
  CHECK(results[0].status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(Contains(results[0].status(), "duplicate rank 1"));
  CHECK(Contains(results[0].status(), "127.0.0.1:"));
  CHECK_FALSE(results[1].ok());
  CHECK_FALSE(results[2].ok());
}

TEST_CASE("HostCommunicator::Create times out naming a rank that never starts", "[comm]") {
  const std::vector<std::string> addresses = Addresses(3);
  const auto start = std::chrono::steady_clock::now();
  const auto results = CreateRanks({Options(0, 3, addresses, absl::Milliseconds(500)),
                                    Options(2, 3, addresses, absl::Milliseconds(500))});
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (const auto& r : results) {
    INFO(r.status().ToString());
    CHECK(r.status().code() == absl::StatusCode::kDeadlineExceeded);
    CHECK(Contains(r.status(), "rank 1 at " + addresses[1]));
  }
  CHECK(elapsed < 1.5);
}

TEST_CASE("HostCommunicator::Create validates its options", "[comm]") {
  const std::vector<std::string> addresses = Addresses(2);
  CHECK(HostCommunicator::Create(Options(2, 2, addresses)).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(HostCommunicator::Create(Options(0, 0, {})).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(HostCommunicator::Create(Options(0, 3, addresses)).status().code() == absl::StatusCode::kInvalidArgument);
  const absl::Status bad = HostCommunicator::Create(Options(0, 2, {addresses[0], "no-port"})).status();
  CHECK(bad.code() == absl::StatusCode::kInvalidArgument);
  CHECK(Contains(bad, "addresses[1]"));
  CHECK(Contains(bad, "no-port"));
  const absl::Status huge = HostCommunicator::Create(Options(0, 2, {addresses[0], "h:123456789012345678901"})).status();
  CHECK(huge.code() == absl::StatusCode::kInvalidArgument);
  CHECK(Contains(huge, "above 65535"));
  // A single rank needs no network at all.
  absl::StatusOr<std::unique_ptr<HostCommunicator>> solo = HostCommunicator::Create(Options(0, 1, {addresses[0]}));
  REQUIRE(solo.ok());
  CHECK((*solo)->Barrier(absl::Seconds(1)).ok());
}

TEST_CASE("PickFreeLoopbackPorts returns distinct usable ports", "[comm]") {
  absl::StatusOr<std::vector<int>> ports = PickFreeLoopbackPorts(8);
  REQUIRE(ports.ok());
  CHECK(std::set<int>(ports->begin(), ports->end()).size() == 8);
  for (int p : *ports) CHECK(p > 0);
}

}  // namespace
}  // namespace verl
