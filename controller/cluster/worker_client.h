#ifndef VERL_CONTROLLER_CLUSTER_WORKER_CLIENT_H_
#define VERL_CONTROLLER_CLUSTER_WORKER_CLIENT_H_

// The controller's client for one verl-worker. Every call has a deadline; a failed call comes back as an
// absl::Status whose message names the worker, its address and the RPC. When the worker was launched by this
// controller, `liveness` (if set) is consulted on failure so that a dead worker is reported with its exit status
// rather than as a bare UNAVAILABLE.

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/status/grpc_status.h"
#include "verl/v1/worker.grpc.pb.h"

namespace verl {

class WorkerClient {
 public:
  WorkerClient(std::string worker_id, std::string address, double rpc_timeout_s,
               std::function<absl::Status()> liveness = nullptr);

  const std::string& worker_id() const { return worker_id_; }
  const std::string& address() const { return address_; }

  // Waits until the worker answers Health, at most timeout_s; Cancelled as soon as `cancelled` (when given) says so.
  absl::StatusOr<v1::HealthResponse> WaitHealthy(double timeout_s, const std::function<bool()>& cancelled = {});

  absl::StatusOr<v1::ConfigureRolesResponse> ConfigureRoles(const v1::ConfigureRolesRequest& r) {
    return Call("ConfigureRoles", &Stub::ConfigureRoles, r);
  }
  absl::StatusOr<v1::PrepareCommunicatorResponse> PrepareCommunicator(const v1::PrepareCommunicatorRequest& r) {
    return Call("PrepareCommunicator", &Stub::PrepareCommunicator, r);
  }
  absl::StatusOr<v1::InitCommunicatorResponse> InitCommunicator(const v1::InitCommunicatorRequest& r,
                                                                double timeout_s) {
    return Call("InitCommunicator", &Stub::InitCommunicator, r, timeout_s);
  }
  absl::StatusOr<v1::LoadModelResponse> LoadModel(const v1::LoadModelRequest& r) {
    return Call("LoadModel", &Stub::LoadModel, r);
  }
  absl::StatusOr<v1::GenerateResponse> Generate(const v1::GenerateRequest& r) {
    return Call("Generate", &Stub::Generate, r);
  }
  absl::StatusOr<v1::ScoreResponse> Score(const v1::ScoreRequest& r) { return Call("Score", &Stub::Score, r); }
  absl::StatusOr<v1::ComputeLogProbsResponse> ComputeLogProbs(const v1::ComputeLogProbsRequest& r) {
    return Call("ComputeLogProbs", &Stub::ComputeLogProbs, r);
  }
  absl::StatusOr<v1::ComputeValuesResponse> ComputeValues(const v1::ComputeValuesRequest& r) {
    return Call("ComputeValues", &Stub::ComputeValues, r);
  }
  absl::StatusOr<v1::UpdateCriticResponse> UpdateCritic(const v1::UpdateCriticRequest& r) {
    return Call("UpdateCritic", &Stub::UpdateCritic, r);
  }
  absl::StatusOr<v1::ComputeAdvantageResponse> ComputeAdvantage(const v1::ComputeAdvantageRequest& r) {
    return Call("ComputeAdvantage", &Stub::ComputeAdvantage, r);
  }
  absl::StatusOr<v1::UpdateActorResponse> UpdateActor(const v1::UpdateActorRequest& r) {
    return Call("UpdateActor", &Stub::UpdateActor, r);
  }
  absl::StatusOr<v1::SyncWeightsResponse> SyncWeights(const v1::SyncWeightsRequest& r) {
    return Call("SyncWeights", &Stub::SyncWeights, r);
  }
  absl::StatusOr<v1::TransferBatchResponse> TransferBatch(const v1::TransferBatchRequest& r) {
    return Call("TransferBatch", &Stub::TransferBatch, r);
  }
  absl::StatusOr<v1::TransferColumnResponse> TransferColumn(const v1::TransferColumnRequest& r) {
    return Call("TransferColumn", &Stub::TransferColumn, r);
  }
  absl::StatusOr<v1::ReleaseBatchResponse> ReleaseBatch(const v1::ReleaseBatchRequest& r) {
    return Call("ReleaseBatch", &Stub::ReleaseBatch, r);
  }
  absl::StatusOr<v1::SaveCheckpointResponse> SaveCheckpoint(const v1::SaveCheckpointRequest& r) {
    return Call("SaveCheckpoint", &Stub::SaveCheckpoint, r);
  }
  absl::StatusOr<v1::LoadCheckpointResponse> LoadCheckpoint(const v1::LoadCheckpointRequest& r) {
    return Call("LoadCheckpoint", &Stub::LoadCheckpoint, r);
  }
  // Short deadline: used while stopping.
  absl::Status Shutdown();
  // Not tracked as the call in flight (it is sent beside one); `timeout_s` deadline.
  absl::Status AbortCommunicator(const v1::AbortCommunicatorRequest& r, double timeout_s);

  // A Health call with its own deadline, independent of the call in flight (safe from a heartbeat thread).
  absl::Status Ping(double timeout_s);

  // Cancels the calls in flight, if any (they return CANCELLED at once). Thread-safe; for Ctrl-C and the heartbeat.
  void CancelInFlight();
  // How many calls are in flight now. Thread-safe.
  size_t calls_in_flight() const {
    std::lock_guard<std::mutex> lock(mu_);
    return in_flight_.size();
  }

  // Seconds the worker's rank has spent on this client's calls so far (from each reply's trailing metadata).
  double compute_seconds() const {
    std::lock_guard<std::mutex> lock(mu_);
    return compute_seconds_;
  }

 private:
  using Stub = v1::WorkerService::Stub;

  template <typename Req, typename Resp>
  absl::StatusOr<Resp> Call(const char* rpc,
                            grpc::Status (Stub::*method)(grpc::ClientContext*, const Req&, Resp*),
                            const Req& request, double timeout_s = -1) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::milliseconds(static_cast<int64_t>(1000 * (timeout_s > 0 ? timeout_s
                                                                                           : rpc_timeout_s_))));
    Resp response;
    {
      std::lock_guard<std::mutex> lock(mu_);
      in_flight_.insert(&ctx);
    }
    grpc::Status status = (stub_.get()->*method)(&ctx, request, &response);
    {
      std::lock_guard<std::mutex> lock(mu_);
      in_flight_.erase(&ctx);
    }
    AddComputeSeconds(ctx);
    if (status.ok()) return response;
    return Failure(rpc, status);
  }
  // The launcher's account of the worker's exit (liveness) after a call failed with `status`, else OK.
  absl::Status ExitOf(const grpc::Status& status);
  absl::Status Failure(const char* rpc, const grpc::Status& status);
  void AddComputeSeconds(const grpc::ClientContext& ctx);

  std::string worker_id_;
  std::string address_;
  double rpc_timeout_s_;
  std::function<absl::Status()> liveness_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<Stub> stub_;
  mutable std::mutex mu_;
  // The calls in flight: usually one, two where the job overlaps calls on a rank (split placement's critic update
  // beside the weight sync), and CancelInFlight cancels them all.
  std::set<grpc::ClientContext*> in_flight_ ABSL_GUARDED_BY(mu_);
  double compute_seconds_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace verl

#endif  // VERL_CONTROLLER_CLUSTER_WORKER_CLIENT_H_
