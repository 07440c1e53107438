#ifndef VERL_COMMON_RPC_METADATA_H_
#define VERL_COMMON_RPC_METADATA_H_

// gRPC metadata keys shared by the controller and the workers.

namespace verl {

// Trailing metadata on every WorkerService reply that ran on a rank: the seconds the rank spent on the call
// (decimal text). The controller subtracts them from each step's time to report its own overhead.
inline constexpr char kComputeSecondsMetadataKey[] = "verl-compute-seconds";

}  // namespace verl

#endif  // VERL_COMMON_RPC_METADATA_H_
