#ifndef VERL_WORKER_SERVICE_WORKER_SERVICE_H_
#define VERL_WORKER_SERVICE_WORKER_SERVICE_H_

// The WorkerService gRPC handlers (callback API). No LibTorch here: requests become the plain structs of
// worker/rank/rank_interface.h and run on the rank's executor thread; errors come back as gRPC statuses whose message
// names the worker, the RPC and the step.

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "verl/v1/worker.grpc.pb.h"
#include "worker/rank/rank_interface.h"
#include "worker/service/rank_executor.h"

namespace verl {

class WorkerServiceImpl final : public verl::v1::WorkerService::CallbackService {
 public:
  // `on_shutdown` runs (once) after a Shutdown RPC has been answered.
  WorkerServiceImpl(std::string worker_id, std::unique_ptr<RankInterface> rank, std::function<void()> on_shutdown);
  ~WorkerServiceImpl() override;

  grpc::ServerUnaryReactor* Health(grpc::CallbackServerContext* ctx, const v1::HealthRequest* req,
                                   v1::HealthResponse* resp) override;
  grpc::ServerUnaryReactor* ConfigureRoles(grpc::CallbackServerContext* ctx, const v1::ConfigureRolesRequest* req,
                                           v1::ConfigureRolesResponse* resp) override;
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
  grpc::ServerUnaryReactor* ComputeAdvantage(grpc::CallbackServerContext* ctx,
                                             const v1::ComputeAdvantageRequest* req,
                                             v1::ComputeAdvantageResponse* resp) override;
  grpc::ServerUnaryReactor* UpdateActor(grpc::CallbackServerContext* ctx, const v1::UpdateActorRequest* req,
                                        v1::UpdateActorResponse* resp) override;
  grpc::ServerUnaryReactor* ReleaseBatch(grpc::CallbackServerContext* ctx, const v1::ReleaseBatchRequest* req,
                                         v1::ReleaseBatchResponse* resp) override;
  grpc::ServerUnaryReactor* SaveCheckpoint(grpc::CallbackServerContext* ctx, const v1::SaveCheckpointRequest* req,
                                           v1::SaveCheckpointResponse* resp) override;
  grpc::ServerUnaryReactor* LoadCheckpoint(grpc::CallbackServerContext* ctx, const v1::LoadCheckpointRequest* req,
                                           v1::LoadCheckpointResponse* resp) override;
  grpc::ServerUnaryReactor* Shutdown(grpc::CallbackServerContext* ctx, const v1::ShutdownRequest* req,
                                     v1::ShutdownResponse* resp) override;

 private:
  // Runs `work` on the rank thread and finishes the call with its status, annotated with worker, RPC and step.
  grpc::ServerUnaryReactor* RunOnRank(grpc::CallbackServerContext* ctx, const std::string& rpc,
                                      const std::string& step_id, std::function<absl::Status()> work);

  const std::string worker_id_;
  std::unique_ptr<RankInterface> rank_;
  std::function<void()> on_shutdown_;
  std::atomic<bool> shutdown_requested_{false};
  RankExecutor executor_;  // last: joined first, while rank_ is alive
};

}  // namespace verl

#endif  // VERL_WORKER_SERVICE_WORKER_SERVICE_H_
