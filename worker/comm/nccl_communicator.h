#ifndef VERL_WORKER_COMM_NCCL_COMMUNICATOR_H_
#define VERL_WORKER_COMM_NCCL_COMMUNICATOR_H_

// The NCCL backend of Communicator: one GPU per rank, torch-free (CUDA runtime + NCCL only). Built only with
// -DVERL_WITH_CUDA=ON (target verl_nccl_comm).
//
// Buffers are DEVICE pointers on this communicator's CUDA device (options.cuda_device). Each call checks its
// arguments, enqueues the NCCL operation on the communicator's own stream (stream()) and waits for it to finish,
// polling cudaStreamQuery and ncclCommGetAsyncError, until the timeout. So when a call returns OK the result is in
// the buffer and nothing of the call is left on the GPU; work that the caller queued on other streams is NOT ordered
// before it: synchronize those first (or record an event and wait for it on stream()).
//
// The communicator is non-blocking (ncclConfig_t.blocking = 0), so a stuck collective can be cut short:
//  - timeout: the call aborts the NCCL communicator (ncclCommAbort) and returns DEADLINE_EXCEEDED naming the
//    collective and this rank. NCCL does not tell which peer is missing: with two ranks the message names the other
//    one ("peer rank 1"); with more it lists every other rank as possibly awaited.
//  - Abort() (any thread, idempotent): ncclCommAbort at once; a pending call and all later calls return ABORTED.
//  - Peers: NCCL does not propagate an abort within a node; a peer still inside a collective with the aborted rank
//    waits until its own timeout (DEADLINE_EXCEEDED). To meet the Communicator contract (peers fail fast with
//    UNAVAILABLE naming the aborting rank), whoever learns of the abort (the controller, which relays the unique id
//    and watches heartbeats) calls OnPeerAborted(rank) on every other rank's communicator. The conformance test
//    wires that relay between the threads of one process.
//  - An asynchronous NCCL error (ncclRemoteError: a peer failed; system/internal errors) breaks the communicator:
//    UNAVAILABLE for remote errors, INTERNAL otherwise, with file, line, ncclGetErrorString and ncclGetLastError.
//  After any error other than INVALID_ARGUMENT every later call repeats the first error; recreate the group.
//
// Data types: reductions on float32, bfloat16, float16, int32, int64 (as the contract; NCCL could also reduce
// uint8, but the contract rejects it). float kAvg is ncclAvg (inputs pre-multiplied by 1/world_size and summed, with
// rounding per step in 16-bit types: within the contract's tolerance); integer kAvg is ncclAvg, which divides the sum
// with truncation toward zero, as the contract requires. Data movement (Broadcast, AllGather, Send, Recv) supports
// every DType (uint8 and bool move as ncclUint8).
// Aliasing: AllGather with send == recv + rank * count and ReduceScatter with recv == send + rank * count are NCCL's
// in-place forms; any other overlap is staged through a temporary device buffer (allocated on stream()).
// Barrier is a one-element all-reduce on a device scratch word.
//
// Destruction: a healthy communicator is finalized (ncclCommFinalize, waited for at most 10 s, then
// ncclCommDestroy); ncclCommDestroy is an intra-node collective in recent NCCL, so destroy all ranks' communicators
// concurrently (one thread each) or they wait for one another until that bound; a broken or aborted one is
// ncclCommAbort-ed. The stream is synchronized and destroyed.

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "worker/comm/communicator.h"

struct ncclComm;  // nccl.h: typedef struct ncclComm* ncclComm_t.

namespace verl {

struct NcclCommunicatorOptions {
  // This rank, in [0, world_size).
  int rank = 0;
  // Number of ranks; >= 1. Each rank must be on a different GPU (NCCL refuses two ranks on one device).
  int world_size = 1;
  // The 128 bytes from NcclCommunicator::CreateUniqueId() on one rank, relayed unchanged to every rank.
  std::string unique_id;
  // The CUDA device (index as the CUDA runtime numbers them) this rank uses.
  int cuda_device = 0;
  // How long Create() waits for every rank to join. Default 60 s.
  absl::Duration init_timeout = absl::Seconds(60);
};

class NcclCommunicator final : public Communicator {
 public:
  // ncclGetUniqueId as 128 raw bytes (NCCL_UNIQUE_ID_BYTES). Call once per group, on one rank; it opens the
  // bootstrap listening socket of this process, so the creating process must stay alive while the group forms.
  static absl::StatusOr<std::string> CreateUniqueId();

  // Joins the group (ncclCommInitRankConfig, non-blocking, polled until every rank joined or init_timeout passes:
  // DEADLINE_EXCEEDED naming this rank). Bad options give INVALID_ARGUMENT naming the field. Every rank calls
  // Create concurrently (threads or processes).
  static absl::StatusOr<std::unique_ptr<NcclCommunicator>> Create(const NcclCommunicatorOptions& options);

  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;
  ~NcclCommunicator() override;

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  bool uses_device_memory() const override { return true; }
  int cuda_device() const { return cuda_device_; }
  // The stream every collective runs on (non-blocking w.r.t. the legacy default stream). Owned by this object.
  cudaStream_t stream() const { return stream_; }

  absl::Status AllReduce(void* data, int64_t count, DType dtype, ReduceOp op, absl::Duration timeout) override;
  absl::Status Broadcast(void* data, int64_t count, DType dtype, int root, absl::Duration timeout) override;
  absl::Status AllGather(const void* send, int64_t count, void* recv, DType dtype, absl::Duration timeout) override;
  absl::Status ReduceScatter(const void* send, void* recv, int64_t count, DType dtype, ReduceOp op,
                             absl::Duration timeout) override;
  absl::Status Send(const void* data, int64_t count, DType dtype, int peer, absl::Duration timeout) override;
  absl::Status Recv(void* data, int64_t count, DType dtype, int peer, absl::Duration timeout) override;
  absl::Status Barrier(absl::Duration timeout) override;
  void Abort() override;

  // Told (by the controller or a watchdog) that rank `peer` aborted or died: aborts the NCCL communicator so a
  // pending call returns UNAVAILABLE naming that peer, and so do later calls. Safe from any thread; idempotent (the
  // first peer named wins). Ignored after this communicator's own Abort().
  void OnPeerAborted(int peer) override;

  // OK while usable; else the error every later call returns (ABORTED, UNAVAILABLE, DEADLINE_EXCEEDED, ...).
  absl::Status health() const;

 private:
  NcclCommunicator(int rank, int world_size, int cuda_device, ncclComm* comm, cudaStream_t stream, void* scratch);

  // "NCCL rank 1/2 (cuda:1): ".
  std::string Prefix() const;
  // OK if a new call may start.
  absl::Status CheckUsable(std::string_view op_name) const;
  // Enqueues with `enqueue` (called with the NCCL communicator under nccl_mu_) and waits for completion, the
  // timeout, Abort() or OnPeerAborted(). Any failure breaks the communicator.
  template <typename Enqueue>
  absl::Status Run(std::string_view op_name, absl::Duration timeout, Enqueue&& enqueue);
  // Records `status` as the first error (unless one is recorded), aborts the NCCL communicator, drains the stream;
  // returns the recorded error.
  absl::Status Break(absl::Status status);
  // ncclCommAbort once (nccl_mu_), with this communicator's device current.
  void AbortNcclComm();
  // Waits (bounded) until the stream has no pending work, so the caller's buffers are no longer used.
  void DrainStream();

  const int rank_;
  const int world_size_;
  const int cuda_device_;
  cudaStream_t stream_ = nullptr;
  void* scratch_ = nullptr;  // 8 device bytes for Barrier.

  // Guards comm_ (nullptr once aborted): every NCCL call on it runs under this mutex; they are all non-blocking.
  mutable std::mutex nccl_mu_;
  ncclComm* comm_ = nullptr;

  std::atomic<bool> aborted_{false};
  std::atomic<int> aborted_peer_{-1};
  mutable std::mutex status_mu_;
  absl::Status broken_;  // guarded by status_mu_
};

}  // namespace verl

#endif  // VERL_WORKER_COMM_NCCL_COMMUNICATOR_H_
