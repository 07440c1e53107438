// RankGroup's pure helpers: which of several ranks' errors to report, and how their metrics merge.

#include "controller/cluster/rank_group.h"

#include <catch2/catch.hpp>

namespace verl {
namespace {

TEST_CASE("PickRootCause reports the failure that is not a consequence of another", "[controller][rank_group]") {
  REQUIRE(PickRootCause({absl::OkStatus(), absl::OkStatus()}).ok());
  // Rank 1 failed for a reason of its own; rank 0 only saw its peer go away.
  const absl::Status peer_gone = absl::UnavailableError("rank 0: peer rank 1 went away");
  const absl::Status cause = absl::InvalidArgumentError("rank 1: prompt 3 is empty");
  REQUIRE(PickRootCause({peer_gone, cause}) == cause);
  // Rank 1's worker died; the controller's relay aborted rank 0's communicator before rank 0 saw the connection go
  // (a race): the lost worker is reported, which the controller recovers from, not the abort it caused.
  const absl::Status aborted = absl::AbortedError("rank 0: AllReduce: this communicator was aborted");
  REQUIRE(PickRootCause({aborted, peer_gone}) == peer_gone);
  REQUIRE(PickRootCause({aborted, absl::OkStatus()}) == aborted);
  REQUIRE(PickRootCause({aborted, peer_gone, cause}) == cause);
  REQUIRE(PickRootCause({absl::OkStatus(), peer_gone}) == peer_gone);
}

TEST_CASE("MergeRankMetrics: max of /max, min of /min, mean of the rest", "[controller][rank_group]") {
  const auto merged = MergeRankMetrics({{{"a/max", 1.0}, {"a/min", -1.0}, {"a/mean", 1.0}, {"only0", 5.0}},
                                        {{"a/max", 3.0}, {"a/min", -4.0}, {"a/mean", 2.0}}});
  REQUIRE(merged.at("a/max") == 3.0);
  REQUIRE(merged.at("a/min") == -4.0);
  REQUIRE(merged.at("a/mean") == 1.5);
  REQUIRE(merged.at("only0") == 5.0);  // averaged over the ranks that report it
}

}  // namespace
}  // namespace verl
