#ifndef VERL_CONTROLLER_CLUSTER_RANK_GROUP_H_
#define VERL_CONTROLLER_CLUSTER_RANK_GROUP_H_

// The ranks of a job, numbered by the controller: global rank r is local rank `local_rank` of the worker at
// `address`, in the order the workers are listed (worker 0's ranks first). One WorkerClient per rank, so the ranks'
// calls can be in flight at the same time: a data-parallel stage is one call per rank, all concurrent (the ranks meet
// in collectives, so issuing them one after another would deadlock).
//
// Thread-safety: ForEach and InitCommunicators from the job's thread; CancelInFlight from any thread.

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "controller/cluster/worker_client.h"

namespace verl {

struct RankAddress {
  std::string worker_id;
  std::string address;  // the worker's gRPC address
  int32_t local_rank = 0;
};

// Of several ranks' failures, the one to report: the first (in rank order) that is not merely a consequence of
// another rank failing (a collective that saw its peer go away: UNAVAILABLE or ABORTED), else the first UNAVAILABLE
// (a worker or its peer went away: the controller recovers from that), else the first (ABORTED: a communicator the
// controller's relay aborted, which rank 0 may report before rank 1's lost connection). OK when all are OK.
absl::Status PickRootCause(const std::vector<absl::Status>& statuses);

// Merges the metrics of several ranks: keys ending in "/max" take the maximum, "/min" the minimum, the rest the mean
// over the ranks that report the key. (Ranks report batch-wide values where exactness matters; see rank_interface.h.)
std::map<std::string, double> MergeRankMetrics(const std::vector<std::map<std::string, double>>& per_rank);

class RankGroup {
 public:
  // `liveness(worker_id)` reports whether a locally launched worker still runs (may be null).
  RankGroup(std::vector<RankAddress> ranks, double rpc_timeout_s,
            std::function<absl::Status(const std::string& worker_id)> liveness);

  int size() const { return static_cast<int>(ranks_.size()); }
  const RankAddress& rank(int r) const { return ranks_.at(r); }
  WorkerClient& client(int r) { return *clients_.at(r); }

  // `request` with its local_rank set for global rank r.
  template <typename Req>
  Req For(int r, Req request) const {
    request.set_local_rank(ranks_.at(r).local_rank);
    return request;
  }

  // Runs fn(r) for each rank in `ranks` (every rank when empty), concurrently, and returns the results in that order;
  // on failure, PickRootCause of the failures. As soon as one rank's call fails (several ranks running), every rank
  // of the group is told to abort its communicator (AbortCommunicator, answered beside the call in flight), so ranks
  // blocked in a collective with the failed one return at once instead of at their collective timeout (NCCL ranks
  // would not notice otherwise; host ranks not when the failed one hangs).
  template <typename T>
  absl::StatusOr<std::vector<T>> ForEach(const std::function<absl::StatusOr<T>(int)>& fn, std::vector<int> ranks = {}) {
    if (ranks.empty()) {
      for (int r = 0; r < size(); ++r) ranks.push_back(r);
    }
    std::vector<absl::StatusOr<T>> results(ranks.size(), absl::UnknownError("not run"));
    if (ranks.size() == 1) {
      results[0] = fn(ranks[0]);
    } else {
      std::vector<std::thread> threads;
      threads.reserve(ranks.size());
      std::atomic<bool> relayed{false};
      for (size_t i = 0; i < ranks.size(); ++i) {
        threads.emplace_back([&, i] {
          results[i] = fn(ranks[i]);
          if (!results[i].ok() && !relayed.exchange(true)) RelayFailure(ranks[i], results[i].status());
        });
      }
      for (std::thread& t : threads) t.join();
    }
    std::vector<absl::Status> statuses;
    std::vector<T> out;
    for (auto& r : results) {
      statuses.push_back(r.status());
      if (r.ok()) out.push_back(*std::move(r));
    }
    if (absl::Status s = PickRootCause(statuses); !s.ok()) return s;
    return out;
  }

  // Forms the data-parallel group of all ranks (host backend): every rank binds a listener on its worker's
  // communication host, then all ranks connect to each other, at most connect_timeout_s; each collective later has
  // collective_timeout_s. No-op for a single rank.
  // With allow_nccl, GPU ranks that all offer an NCCL id form an NCCL group instead (global rank 0's id).
  // Returns the backend used ("host" or "nccl") through *backend when given.
  // `members` (ascending; empty: every rank) form the group, numbered by their place in the list; `group` is "" for
  // the data-parallel group or "transfer" (PrepareCommunicatorRequest.group).
  absl::Status InitCommunicators(double connect_timeout_s, double collective_timeout_s, bool allow_nccl = true,
                                 std::string* backend = nullptr, std::vector<int> members = {},
                                 const std::string& group = "");

  // Cancels every rank's call in flight. `failed_worker_id`, when given, is the worker that made this necessary (it
  // missed its heartbeat): the abort relay then names its first rank and `reason`, not whichever cancelled call
  // happened to come back first.
  void CancelInFlight(const std::string& failed_worker_id = "", const std::string& reason = "");

  // Rank compute seconds so far, averaged over the ranks (they run concurrently).
  double MeanComputeSeconds() const;

 private:
  // Tells every rank that the call of `failed` failed (best effort, a short deadline each).
  void RelayFailure(int failed, const absl::Status& why);

  std::vector<RankAddress> ranks_;
  std::vector<std::unique_ptr<WorkerClient>> clients_;
  std::mutex suspect_mu_;
  int suspect_rank_ = -1;       // guarded by suspect_mu_: set by CancelInFlight(worker, ...)
  std::string suspect_reason_;  // guarded by suspect_mu_
};

}  // namespace verl

#endif  // VERL_CONTROLLER_CLUSTER_RANK_GROUP_H_
