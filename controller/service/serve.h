#ifndef VERL_CONTROLLER_SERVICE_SERVE_H_
#define VERL_CONTROLLER_SERVICE_SERVE_H_

// `verl-controller serve`: the JobService over gRPC, with TLS, a bearer token, the standard health service and an
// optional Prometheus endpoint. ServeMain parses its flags (argv after "serve") and runs until SIGTERM / SIGINT:
// the running job is interrupted (it stays queued and resumes on the next start), then the server stops.

#include <string>
#include <vector>

namespace verl {

// `worker_binary`: the verl-worker that jobs without worker addresses start. Returns the process exit status
// (2 for bad flags, 1 when the server cannot start).
int ServeMain(const std::vector<std::string>& args, const std::string& worker_binary);

}  // namespace verl

#endif  // VERL_CONTROLLER_SERVICE_SERVE_H_
