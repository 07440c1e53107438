#ifndef VERL_WORKER_COMM_COMMUNICATOR_H_
#define VERL_WORKER_COMM_COMMUNICATOR_H_

// The collective-communication interface shared by every backend (host TCP now, NCCL later). Torch-free: it moves
// contiguous buffers of `count` elements of a DType (worker/rank/host_tensor.h), so it links anywhere.
//
// Contract common to all backends:
//  - Every rank of the group calls the same collectives in the same order with matching counts, dtypes, ops and
//    roots (as with NCCL / torch.distributed). A mismatch is undefined behaviour of the group, not detected.
//  - Each call gets a timeout; the call returns DEADLINE_EXCEEDED naming the collective, this rank and the peer(s)
//    it was still waiting for when the timeout passed.
//  - UNAVAILABLE: a peer disconnected or aborted; the message names that peer's rank.
//  - ABORTED: Abort() was called on this communicator.
//  - INVALID_ARGUMENT: bad arguments (negative count, null buffer with count > 0, peer or root out of range,
//    unsupported dtype for a reduction). Nothing is sent and the communicator stays usable.
//  - After any other error the communicator is broken (a collective was left half-done): every later call returns
//    that first error again. Recovery means creating a new communicator on every rank.
//  - Reductions support float32, bfloat16, float16 (added in float32 and rounded back to nearest-even; the host
//    backend rounds once at the end, a GPU backend may round after each step, so results agree within rounding),
//    int32 and int64. Data movement (Broadcast, AllGather, Send, Recv) supports every DType.
//  - kAvg on integers divides the sum by world_size with C++ truncation toward zero.
//  - Communicators are thread-compatible: one caller thread at a time, except Abort(), which may be called from any
//    thread at any time.

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "worker/rank/host_tensor.h"

namespace verl {

enum class ReduceOp : int32_t { kSum = 0, kMax = 1, kMin = 2, kAvg = 3 };

// "sum", "max", "min", "avg".
std::string_view ReduceOpName(ReduceOp op);

// The argument checks every backend makes before a collective (INVALID_ARGUMENT above): `count` not negative nor too
// large, `dtype` known, `data` not null where count > 0 (`what` names the argument: "data", "send", "recv"); and for a
// reduction, a reducible dtype and a known op. `prefix` starts each message (the call and this rank).
absl::Status CheckBuffer(const std::string& prefix, const void* data, int64_t count, DType dtype, const char* what);
absl::Status CheckReduction(const std::string& prefix, DType dtype, ReduceOp op);

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // Where every call's buffers must live: host memory (false; the host backend) or this rank's GPU (true; NCCL).
  virtual bool uses_device_memory() const { return false; }

  // In place: `data` (count elements) becomes the element-wise reduction over all ranks; identical bytes on every
  // rank. `count` need not be a multiple of world_size.
  virtual absl::Status AllReduce(void* data, int64_t count, DType dtype, ReduceOp op, absl::Duration timeout) = 0;

  // `data` (count elements) on every rank becomes root's `data`.
  virtual absl::Status Broadcast(void* data, int64_t count, DType dtype, int root, absl::Duration timeout) = 0;

  // `recv` (world_size * count elements) becomes the concatenation of every rank's `send` (count elements) in rank
  // order. `send` may alias recv + rank * count.
  virtual absl::Status AllGather(const void* send, int64_t count, void* recv, DType dtype,
                                 absl::Duration timeout) = 0;

  // `send` holds world_size * count elements; `recv` (count elements) becomes the reduction over all ranks of block
  // `rank` of their `send`. `recv` may alias `send`.
  virtual absl::Status ReduceScatter(const void* send, void* recv, int64_t count, DType dtype, ReduceOp op,
                                     absl::Duration timeout) = 0;

  // Point to point: a Send on rank a with peer b pairs with a Recv on rank b with peer a, in call order, with equal
  // counts and dtypes. A peer equal to this rank is INVALID_ARGUMENT.
  virtual absl::Status Send(const void* data, int64_t count, DType dtype, int peer, absl::Duration timeout) = 0;
  virtual absl::Status Recv(void* data, int64_t count, DType dtype, int peer, absl::Duration timeout) = 0;

  // Returns once every rank has entered Barrier.
  virtual absl::Status Barrier(absl::Duration timeout) = 0;

  // Makes every pending and future call on this communicator fail promptly with ABORTED, and every peer's pending
  // and future calls fail with UNAVAILABLE naming this rank. Idempotent; safe from any thread; never blocks.
  virtual void Abort() = 0;

  // Told (by the controller) that rank `peer` of the group failed: pending and future calls fail promptly instead of
  // waiting for the peer until their timeout. Safe from any thread; never blocks. The default aborts this
  // communicator (calls fail with ABORTED); NCCL's names the peer (UNAVAILABLE).
  virtual void OnPeerAborted(int peer) {
    (void)peer;
    Abort();
  }
};

}  // namespace verl

#endif  // VERL_WORKER_COMM_COMMUNICATOR_H_
