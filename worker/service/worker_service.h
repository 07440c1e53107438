#ifndef VERL_WORKER_SERVICE_WORKER_SERVICE_H_
#define VERL_WORKER_SERVICE_WORKER_SERVICE_H_

// The WorkerService gRPC handlers (callback API). No LibTorch here: requests become the plain structs of
// worker/rank/rank_interface.h and run on the executor thread of the rank they name (local_rank), so the ranks of one
// worker compute in parallel and meet in collectives; errors come back as gRPC statuses whose message names the
// worker, the rank, the RPC and the step. A rank call that fails while the rank belongs to a data-parallel group
// aborts the group, so its peers fail promptly (naming this rank) instead of waiting in a collective.

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "verl/v1/worker.grpc.pb.h"
#include "common/metrics/prometheus_registry.h"
#include "worker/comm/host_communicator.h"
#include "worker/rank/rank_interface.h"
#include "worker/service/rank_executor.h"

namespace verl {

class WorkerServiceImpl final : public verl::v1::WorkerService::CallbackService {
 public:
  // `on_shutdown` runs (once) after a Shutdown RPC has been answered. `comm_host` is the host (name or address) the
  // ranks' host-backend listeners bind to and advertise: one the other workers can reach.
  // `device` is "cpu" or "cuda"; with cuda, local rank i runs on GPU i. With a `metrics` registry (verl-worker
  // --metrics-listen) every rank call is recorded there: verl_rpc_duration_seconds{method} (histogram),
  // verl_rpc_errors_total{method,code}, verl_tokens_generated_total{rank}.
  WorkerServiceImpl(std::string worker_id, std::vector<std::unique_ptr<RankInterface>> ranks, std::string comm_host,
                    std::string device, std::function<void()> on_shutdown,
                    std::shared_ptr<PrometheusRegistry> metrics = nullptr);
  ~WorkerServiceImpl() override;

  grpc::ServerUnaryReactor* Health(grpc::CallbackServerContext* ctx, const v1::HealthRequest* req,
                                   v1::HealthResponse* resp) override;
  grpc::ServerUnaryReactor* ConfigureRoles(grpc::CallbackServerContext* ctx, const v1::ConfigureRolesRequest* req,
                                           v1::ConfigureRolesResponse* resp) override;
  grpc::ServerUnaryReactor* PrepareCommunicator(grpc::CallbackServerContext* ctx,
                                                const v1::PrepareCommunicatorRequest* req,
                                                v1::PrepareCommunicatorResponse* resp) override;
  grpc::ServerUnaryReactor* InitCommunicator(grpc::CallbackServerContext* ctx, const v1::InitCommunicatorRequest* req,
                                             v1::InitCommunicatorResponse* resp) override;
  grpc::ServerUnaryReactor* LoadModel(grpc::CallbackServerContext* ctx, const v1::LoadModelRequest* req,
                                      v1::LoadModelResponse* resp) override;
  grpc::ServerUnaryReactor* Generate(grpc::CallbackServerContext* ctx, const v1::GenerateRequest* req,
                                     v1::GenerateResponse* resp) override;
  grpc::ServerUnaryReactor* Score(grpc::CallbackServerContext* ctx, const v1::ScoreRequest* req,
                                  v1::ScoreResponse* resp) override;
  grpc::ServerUnaryReactor* ComputeLogProbs(grpc::CallbackServerContext* ctx, const v1::ComputeLogProbsRequest* req,
                                            v1::ComputeLogProbsResponse* resp) override;
  grpc::ServerUnaryReactor* ComputeValues(grpc::CallbackServerContext* ctx, const v1::ComputeValuesRequest* req,
                                          v1::ComputeValuesResponse* resp) override;
  grpc::ServerUnaryReactor* UpdateCritic(grpc::CallbackServerContext* ctx, const v1::UpdateCriticRequest* req,
                                         v1::UpdateCriticResponse* resp) override;
  grpc::ServerUnaryReactor* ComputeAdvantage(grpc::CallbackServerContext* ctx, const v1::ComputeAdvantageRequest* req,
                                             v1::ComputeAdvantageResponse* resp) override;
  grpc::ServerUnaryReactor* UpdateActor(grpc::CallbackServerContext* ctx, const v1::UpdateActorRequest* req,
                                        v1::UpdateActorResponse* resp) override;
  grpc::ServerUnaryReactor* ReleaseBatch(grpc::CallbackServerContext* ctx, const v1::ReleaseBatchRequest* req,
                                         v1::ReleaseBatchResponse* resp) override;
  grpc::ServerUnaryReactor* SyncWeights(grpc::CallbackServerContext* ctx, const v1::SyncWeightsRequest* req,
                                        v1::SyncWeightsResponse* resp) override;
  grpc::ServerUnaryReactor* TransferBatch(grpc::CallbackServerContext* ctx, const v1::TransferBatchRequest* req,
                                          v1::TransferBatchResponse* resp) override;
  grpc::ServerUnaryReactor* TransferColumn(grpc::CallbackServerContext* ctx, const v1::TransferColumnRequest* req,
                                           v1::TransferColumnResponse* resp) override;
  grpc::ServerUnaryReactor* SaveCheckpoint(grpc::CallbackServerContext* ctx, const v1::SaveCheckpointRequest* req,
                                           v1::SaveCheckpointResponse* resp) override;
  grpc::ServerUnaryReactor* LoadCheckpoint(grpc::CallbackServerContext* ctx, const v1::LoadCheckpointRequest* req,
                                           v1::LoadCheckpointResponse* resp) override;
  grpc::ServerUnaryReactor* Shutdown(grpc::CallbackServerContext* ctx, const v1::ShutdownRequest* req,
                                     v1::ShutdownResponse* resp) override;
  // On the gRPC thread, not the rank's (which may be blocked in the collective this unblocks).
  grpc::ServerUnaryReactor* AbortCommunicator(grpc::CallbackServerContext* ctx,
                                              const v1::AbortCommunicatorRequest* req,
                                              v1::AbortCommunicatorResponse* resp) override;

 private:
  // Runs `work(rank)` on rank `local_rank`'s thread and finishes the call with its status, annotated with worker,
  // rank, RPC and step. An out-of-range local_rank is INVALID_ARGUMENT.
  grpc::ServerUnaryReactor* RunOnRank(grpc::CallbackServerContext* ctx, const std::string& rpc, int32_t local_rank,
                                      const std::string& step_id, std::function<absl::Status(RankInterface&)> work);

  struct RankSlot {
    std::unique_ptr<RankInterface> rank;
    // From PrepareCommunicator until InitCommunicator, per group ("" data-parallel, "transfer"); rank thread only.
    std::map<std::string, HostListener> listeners;
    // Has a data-parallel / a transfer communicator (a failed call then aborts them); rank thread only. Kept apart:
    // a job of one trainer (world_size 1) leaves the data-parallel group but keeps split placement's transfer group.
    bool in_group = false;
    bool in_transfer_group = false;
    std::unique_ptr<RankExecutor> executor;  // declared last: joined before the rank is destroyed
  };

  const std::string worker_id_;
  const std::string comm_host_;
  const std::string device_;
  std::shared_ptr<PrometheusRegistry> metrics_;  // may be null
  std::vector<RankSlot> slots_;
  std::function<void()> on_shutdown_;
  std::atomic<bool> shutdown_requested_{false};
};

}  // namespace verl

#endif  // VERL_WORKER_SERVICE_WORKER_SERVICE_H_
