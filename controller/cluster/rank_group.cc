#include "controller/cluster/rank_group.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status/status_macros.h"

namespace verl {

absl::Status PickRootCause(const std::vector<absl::Status>& statuses) {
  const absl::Status* first = nullptr;
  const absl::Status* lost = nullptr;  // the first UNAVAILABLE: a peer (or its worker) went away
  for (const absl::Status& s : statuses) {
    if (s.ok()) continue;
    if (first == nullptr) first = &s;
    if (absl::IsUnavailable(s)) {
      if (lost == nullptr) lost = &s;
    } else if (!absl::IsAborted(s)) {
      return s;
    }
  }
  if (lost != nullptr) return *lost;
  return first == nullptr ? absl::OkStatus() : *first;
}

std::map<std::string, double> MergeRankMetrics(const std::vector<std::map<std::string, double>>& per_rank) {
  std::map<std::string, std::pair<double, int>> acc;  // value (sum, max or min), count
  for (const auto& metrics : per_rank) {
    for (const auto& [key, value] : metrics) {
      auto [it, inserted] = acc.try_emplace(key, value, 1);
      if (inserted) continue;
      if (absl::EndsWith(key, "/max")) {
        it->second.first = std::max(it->second.first, value);
      } else if (absl::EndsWith(key, "/min")) {
        it->second.first = std::min(it->second.first, value);
      } else {
        it->second.first += value;
      }
      ++it->second.second;
    }
  }
  std::map<std::string, double> out;
  for (const auto& [key, v] : acc) {
    const bool extreme = absl::EndsWith(key, "/max") || absl::EndsWith(key, "/min");
    out[key] = extreme ? v.first : v.first / v.second;
  }
  return out;
}

RankGroup::RankGroup(std::vector<RankAddress> ranks, double rpc_timeout_s,
                     std::function<absl::Status(const std::string& worker_id)> liveness)
    : ranks_(std::move(ranks)) {
  for (const RankAddress& r : ranks_) {
    std::function<absl::Status()> alive;
    if (liveness) alive = [liveness, id = r.worker_id] { return liveness(id); };
    clients_.push_back(std::make_unique<WorkerClient>(
        ranks_.size() == 1 ? r.worker_id : absl::StrCat(r.worker_id, " rank ", r.local_rank), r.address, rpc_timeout_s,
        alive));
  }
}

absl::Status RankGroup::InitCommunicators(double connect_timeout_s, double collective_timeout_s, bool allow_nccl,
                                          std::string* backend, std::vector<int> members, const std::string& group) {
  if (members.empty()) {
    for (int r = 0; r < size(); ++r) members.push_back(r);
  }
  if (members.size() <= 1) return absl::OkStatus();
  std::map<int, int> place;  // rank -> its rank in the group
  for (size_t i = 0; i < members.size(); ++i) place[members[i]] = static_cast<int>(i);
  v1::PrepareCommunicatorRequest prepare;
  prepare.set_group(group);
  ASSIGN_OR_RETURN(std::vector<v1::PrepareCommunicatorResponse> prepared,
                   ForEach<v1::PrepareCommunicatorResponse>(
                       [&](int r) {
                         v1::PrepareCommunicatorRequest req = For(r, prepare);
                         // Only the group's first rank makes the NCCL unique id (its bootstrap listener).
                         req.set_create_nccl_unique_id(allow_nccl && r == members.front());
                         return client(r).PrepareCommunicator(req);
                       },
                       members));
  v1::InitCommunicatorRequest init;
  bool all_nccl = true;
  for (const auto& p : prepared) {
    init.add_addresses(p.address());
    all_nccl = all_nccl && p.nccl_capable();
  }
  // GPU ranks of workers built with NCCL can all join: they form an NCCL group with global rank 0's id.
  if (all_nccl && allow_nccl && !prepared.front().nccl_unique_id().empty()) {
    init.set_nccl_unique_id(prepared.front().nccl_unique_id());
  }
  if (backend) *backend = init.nccl_unique_id().empty() ? "host" : "nccl";
  init.set_connect_timeout_s(connect_timeout_s);
  init.set_collective_timeout_s(collective_timeout_s);
  init.set_group(group);
  ASSIGN_OR_RETURN(std::vector<v1::InitCommunicatorResponse> done,
                   ForEach<v1::InitCommunicatorResponse>(
                       [&](int r) {
                         v1::InitCommunicatorRequest req = For(r, init);
                         req.set_global_rank(place.at(r));
                         return client(r).InitCommunicator(req, connect_timeout_s + 30);
                       },
                       members));
  (void)done;
  return absl::OkStatus();
}

void RankGroup::RelayFailure(int failed, const absl::Status& why) {
  std::string reason(why.message().substr(0, 300));
  {
    std::lock_guard<std::mutex> lock(suspect_mu_);
    if (suspect_rank_ >= 0) {
      failed = suspect_rank_;
      reason = suspect_reason_;
    }
  }
  // Every rank, the failed one's included: the first failure seen may be a consequence (a call cancelled because
  // another worker missed its heartbeat), and a rank whose call the controller cancelled may still be blocked in
  // the collective on its worker.
  for (int r = 0; r < size(); ++r) {
    v1::AbortCommunicatorRequest req;
    req.set_local_rank(ranks_[r].local_rank);
    req.set_failed_global_rank(failed);
    req.set_reason(reason);
    // A worker that is gone or hung does not answer: not worth more than a moment.
    (void)client(r).AbortCommunicator(req, 1.0);
  }
}

void RankGroup::CancelInFlight(const std::string& failed_worker_id, const std::string& reason) {
  if (!failed_worker_id.empty()) {
    std::lock_guard<std::mutex> lock(suspect_mu_);
    for (int r = 0; r < size() && suspect_rank_ < 0; ++r) {
      if (ranks_[r].worker_id == failed_worker_id) {
        suspect_rank_ = r;
        suspect_reason_ = reason.substr(0, 300);
      }
    }
  }
  for (auto& c : clients_) c->CancelInFlight();
}

double RankGroup::MeanComputeSeconds() const {
  if (clients_.empty()) return 0;
  double total = 0;
  for (const auto& c : clients_) total += c->compute_seconds();
  return total / static_cast<double>(clients_.size());
}

}  // namespace verl
