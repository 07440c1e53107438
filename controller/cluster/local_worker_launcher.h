#ifndef VERL_CONTROLLER_CLUSTER_LOCAL_WORKER_LAUNCHER_H_
#define VERL_CONTROLLER_CLUSTER_LOCAL_WORKER_LAUNCHER_H_

// Starts verl-worker processes on this machine (the embedded default, when the config names no worker addresses),
// learns the port each bound from its ready file, notices when one dies, and stops them all.
//
// A started worker gets PR_SET_PDEATHSIG, so it also goes away if the controller is killed outright. Each worker's
// stdout/stderr are appended to <log_dir>/<worker_id>.log after a line naming the start, so a worker restarted after a
// failure (the same id) keeps its predecessor's output above its own; the tail of that log is quoted when a worker
// fails.
//
// Thread-safety: owned by the job's thread; CheckAlive may also be called from the rank-call threads.

#include <sys/types.h>

#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace verl {

struct LaunchedWorker {
  std::string worker_id;
  std::string address;  // host:port it serves on
  pid_t pid = -1;
  std::string log_path;
};

class LocalWorkerLauncher {
 public:
  LocalWorkerLauncher() = default;
  // Stops every worker still running.
  ~LocalWorkerLauncher();
  LocalWorkerLauncher(const LocalWorkerLauncher&) = delete;
  LocalWorkerLauncher& operator=(const LocalWorkerLauncher&) = delete;

  // Starts `count` workers from `binary`, each hosting `ranks_per_worker` ranks on `device` ("cpu", or "cuda": local
  // rank i on GPU i), and waits until each has written its
  // ready file, at most `timeout_s` seconds. Fails fast (naming the worker, its exit status and log tail) if one
  // exits before it is ready, and returns Cancelled as soon as `cancelled` (when given) says so.
  absl::StatusOr<std::vector<LaunchedWorker>> Launch(const std::string& binary, int count, const std::string& log_dir,
                                                     double timeout_s, int ranks_per_worker = 1,
                                                     const std::string& device = "cpu",
                                                     const std::function<bool()>& cancelled = {});

  // OK while every launched worker runs; otherwise an Unavailable error naming the first dead worker, its address
  // and its exit status.
  absl::Status CheckAlive();
  // The same for one worker only.
  absl::Status CheckAlive(const std::string& worker_id);

  // SIGTERM, then SIGKILL after `grace_s` seconds for those still running. Idempotent.
  void StopAll(double grace_s = 5.0);

  const std::vector<LaunchedWorker>& workers() const { return workers_; }

 private:
  struct Proc {
    LaunchedWorker info;
    bool exited = false;
    int wait_status = 0;
  };
  // Reaps `p` if it has exited; returns true when it is gone.
  bool Reap(Proc& p);
  std::string Describe(const Proc& p) const;

  // Guards procs_: waitpid on a child must not race between the rank threads' CheckAlive calls (the loser would see
  // ECHILD and lose the exit status).
  mutable std::mutex mu_;
  std::vector<Proc> procs_;
  std::vector<LaunchedWorker> workers_;
};

// The NVIDIA GPUs this machine's driver lists (the entries of `driver_dir`, /proc/driver/nvidia/gpus), 0 without the
// driver. For the warning a CPU job on a GPU machine gets (trainer.device defaults to cpu here, verl's to cuda).
int CountDriverGpus(const std::string& driver_dir = "/proc/driver/nvidia/gpus");

// The tail (last `max_bytes`) of a text file, or "" when unreadable.
std::string FileTail(const std::string& path, size_t max_bytes = 2000);

}  // namespace verl

#endif  // VERL_CONTROLLER_CLUSTER_LOCAL_WORKER_LAUNCHER_H_
