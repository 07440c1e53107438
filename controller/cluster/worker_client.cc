#include "controller/cluster/worker_client.h"

#include <thread>

#include "absl/strings/numbers.h"
#include "common/rpc/metadata.h"

namespace verl {

WorkerClient::WorkerClient(std::string worker_id, std::string address, double rpc_timeout_s,
                           std::function<absl::Status()> liveness)
    : worker_id_(std::move(worker_id)),
      address_(std::move(address)),
      rpc_timeout_s_(rpc_timeout_s),
      liveness_(std::move(liveness)) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(1 << 30);
  args.SetMaxSendMessageSize(1 << 30);
  // Reconnect within a second of a worker coming (back) up: gRPC's default backoff grows to 2 minutes, which made the
  // controller notice a replaced worker up to 10 s late. Workers are on the same network; retries are cheap.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  channel_ = grpc::CreateCustomChannel(address_, grpc::InsecureChannelCredentials(), args);
  stub_ = v1::WorkerService::NewStub(channel_);
}

absl::Status WorkerClient::ExitOf(const grpc::Status& status) {
  if (!liveness_) return absl::OkStatus();
  absl::Status alive = liveness_();
  // A killed process closes its sockets before it can be reaped, so a call can fail on the broken connection a
  // moment before the launcher sees the exit. Give the exit a moment to show, so that it is what gets reported.
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
  while (alive.ok() && status.error_code() == grpc::StatusCode::UNAVAILABLE &&
         std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    alive = liveness_();
  }
  return alive;
}

absl::Status WorkerClient::Failure(const char* rpc, const grpc::Status& status) {
  if (absl::Status exit = ExitOf(status); !exit.ok()) {
    return absl::UnavailableError(absl::StrCat(rpc, " failed: ", exit.message()));
  }
  absl::Status s = FromGrpcStatus(status);
  return absl::Status(s.code(), absl::StrCat(rpc, " on worker ", worker_id_, " at ", address_, ": ", s.message()));
}

absl::StatusOr<v1::HealthResponse> WorkerClient::WaitHealthy(double timeout_s, const std::function<bool()>& cancelled) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (true) {
    auto r = Call("Health", &Stub::Health, v1::HealthRequest(), 2.0);  // a cancel is seen within 2 s
    if (r.ok()) return r;
    if (cancelled && cancelled()) {
      return absl::CancelledError(
          absl::StrCat("job cancelled while waiting for worker ", worker_id_, " at ", address_));
    }
    if (std::chrono::steady_clock::now() > deadline) return r;
    if (liveness_) {
      absl::Status alive = liveness_();
      if (!alive.ok()) return alive;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

void WorkerClient::AddComputeSeconds(const grpc::ClientContext& ctx) {
  const auto& trailers = ctx.GetServerTrailingMetadata();
  auto it = trailers.find(kComputeSecondsMetadataKey);
  if (it == trailers.end()) return;
  double seconds = 0;
  if (absl::SimpleAtod(absl::string_view(it->second.data(), it->second.size()), &seconds)) {
    std::lock_guard<std::mutex> lock(mu_);
    compute_seconds_ += seconds;
  }
}

void WorkerClient::CancelInFlight() {
  std::lock_guard<std::mutex> lock(mu_);
  for (grpc::ClientContext* ctx : in_flight_) ctx->TryCancel();
}

absl::Status WorkerClient::Ping(double timeout_s) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() +
                   std::chrono::milliseconds(static_cast<int64_t>(1000 * timeout_s)));
  v1::HealthResponse response;
  grpc::Status status = stub_->Health(&ctx, v1::HealthRequest(), &response);
  if (status.ok()) return absl::OkStatus();
  // A launched worker that died: its exit, as a failed call reports it (the job logs the heartbeat's failure in place
  // of the step's, which would otherwise lose the signal or exit status).
  if (absl::Status exit = ExitOf(status); !exit.ok()) {
    return absl::UnavailableError(absl::StrCat("Health (the heartbeat) failed: ", exit.message()));
  }
  return absl::UnavailableError(absl::StrCat("worker ", worker_id_, " at ", address_, " missed its heartbeat (",
                                             FromGrpcStatus(status).message(), ")"));
}

absl::Status WorkerClient::AbortCommunicator(const v1::AbortCommunicatorRequest& r, double timeout_s) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() +
                   std::chrono::milliseconds(static_cast<int64_t>(1000 * timeout_s)));
  v1::AbortCommunicatorResponse response;
  grpc::Status status = stub_->AbortCommunicator(&ctx, r, &response);
  if (status.ok()) return absl::OkStatus();
  absl::Status s = FromGrpcStatus(status);
  return absl::Status(s.code(), absl::StrCat("AbortCommunicator on worker ", worker_id_, " at ", address_, ": ",
                                             s.message()));
}

absl::Status WorkerClient::Shutdown() {
  return Call("Shutdown", &Stub::Shutdown, v1::ShutdownRequest(), 5.0).status();
}

}  // namespace verl
