#ifndef VERL_TESTS_WORKER_COMM_COMMUNICATOR_CONFORMANCE_H_
#define VERL_TESTS_WORKER_COMM_COMMUNICATOR_CONFORMANCE_H_

// The conformance suite every Communicator backend passes (DESIGN.md, "Devices and communication"). A backend
// provides a CommGroupFactory; each Run* function builds groups through it, drives every rank from its own thread
// and checks the results with Catch2 on the calling thread.

#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/comm/communicator.h"

namespace verl::testing {

// Creates the communicators of one group of `world_size` ranks (index = rank). Called on the test thread; a
// backend whose creation blocks until all ranks join creates them concurrently itself.
using CommGroupFactory =
    std::function<std::vector<absl::StatusOr<std::unique_ptr<Communicator>>>(int world_size)>;

// Every collective with every dtype, counts 1, 7 and 1000, every ReduceOp and every root; Send/Recv; Barrier.
void RunCollectiveConformance(const CommGroupFactory& factory, int world_size);

// Messages far larger than socket buffers (millions of elements) and inputs that are not exactly representable:
// float results are checked within rounding, integers exactly.
void RunLargeMessageConformance(const CommGroupFactory& factory, int world_size);

// One rank never enters the collective: the others fail with DEADLINE_EXCEEDED within the 500 ms timeout, naming
// the missing rank (Barrier on any world size; AllReduce on world size 2).
void RunMissingRankConformance(const CommGroupFactory& factory, int world_size);

// One rank aborts (while it has a call pending, or while idle): everyone else fails fast with UNAVAILABLE naming it,
// the aborting rank gets ABORTED, and later calls keep failing.
void RunAbortConformance(const CommGroupFactory& factory, int world_size);

// Bad arguments fail with INVALID_ARGUMENT without breaking the communicator. world_size >= 2.
void RunBadArgumentConformance(const CommGroupFactory& factory, int world_size);

}  // namespace verl::testing

#endif  // VERL_TESTS_WORKER_COMM_COMMUNICATOR_CONFORMANCE_H_
