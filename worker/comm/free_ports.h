#ifndef VERL_WORKER_COMM_FREE_PORTS_H_
#define VERL_WORKER_COMM_FREE_PORTS_H_

// Picks TCP ports on 127.0.0.1 that are free right now (bind to port 0, read the port back, close), for tests and
// single-host launches. Another process may take a port between this call and its use; callers that need certainty
// retry on UNAVAILABLE from bind.

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace verl {

// `n` distinct free loopback ports.
absl::StatusOr<std::vector<int>> PickFreeLoopbackPorts(int n);

// `n` distinct "127.0.0.1:<port>" addresses from PickFreeLoopbackPorts.
absl::StatusOr<std::vector<std::string>> PickFreeLoopbackAddresses(int n);

}  // namespace verl

#endif  // VERL_WORKER_COMM_FREE_PORTS_H_
