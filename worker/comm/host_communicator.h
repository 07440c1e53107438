#ifndef VERL_WORKER_COMM_HOST_COMMUNICATOR_H_
#define VERL_WORKER_COMM_HOST_COMMUNICATOR_H_

// The host backend of Communicator: CPU ranks connected by a full mesh of TCP connections.
//
// Create(): rank i listens on addresses[i], connects to every rank j < i and accepts every rank j > i. Each new
// connection starts with a handshake (magic, protocol version, rank, world size) in both directions; a world-size
// mismatch, an unexpected or duplicate rank, or a protocol mismatch fails Create with INVALID_ARGUMENT naming the
// address. Connecting retries refused connections (the peer may not listen yet) until connect_timeout; a rank that
// never shows up fails Create with DEADLINE_EXCEEDED naming its rank and address.
//
// Collectives: AllReduce is a ring reduce-scatter + ring all-gather over world_size uneven chunks (16-bit floats are
// widened to float32 for the whole ring and rounded once at the end, so every rank gets identical bytes);
// ReduceScatter and AllGather are the two rings alone; Broadcast is a direct fan-out from the root; Barrier is an
// all-to-all exchange of one byte, so a missing rank is named by every waiting rank. All I/O is non-blocking with
// poll(); every poll also watches every other peer connection, so a peer that aborts (its connections are reset) is
// noticed by all ranks at once, even those not exchanging data with it.
//
// Abort() resets every connection (SO_LINGER 0 then close, done by dup2-ing /dev/null over the socket descriptors so
// a concurrent caller never sees a reused descriptor) and wakes a pending call through a self-pipe.
//
// A graceful destruction closes connections normally; peers only notice if they later need data from this rank.

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "worker/comm/communicator.h"
#include "worker/comm/scoped_fd.h"

namespace verl {

struct HostCommunicatorOptions {
  // This process's rank, in [0, world_size).
  int rank = 0;
  // Number of ranks; >= 1.
  int world_size = 1;
  // "host:port" of every rank (IPv6 as "[::1]:port"); addresses[rank] is where this rank listens. Required, size
  // world_size. Ports must be fixed (no port 0); see worker/comm/free_ports.h for tests.
  std::vector<std::string> addresses;
  // Time Create() waits for all connections and handshakes. Default 60 s.
  absl::Duration connect_timeout = absl::Seconds(60);
};

// A socket already bound and listening, made before the group forms so that a rank can publish its address without
// racing another process for the port (port 0 lets the kernel pick a free one).
struct HostListener {
  ScopedFd fd;
  std::string address;  // "host:port" actually bound ("[v6]:port" for IPv6)
};

class HostCommunicator final : public Communicator {
 public:
  // Builds the full mesh; blocks until every peer is connected or connect_timeout passes.
  static absl::StatusOr<std::unique_ptr<HostCommunicator>> Create(const HostCommunicatorOptions& options);
  // The same, accepting peers on `listener` (from Listen) instead of listening on addresses[rank] itself;
  // addresses[rank] should be listener.address.
  static absl::StatusOr<std::unique_ptr<HostCommunicator>> Create(const HostCommunicatorOptions& options,
                                                                  HostListener listener);
  // Binds and listens on `address` ("host:port"; port 0 for any free port). UNAVAILABLE naming the address when it
  // cannot be bound.
  static absl::StatusOr<HostListener> Listen(const std::string& address);

  HostCommunicator(const HostCommunicator&) = delete;
  HostCommunicator& operator=(const HostCommunicator&) = delete;
  ~HostCommunicator() override;

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }

  absl::Status AllReduce(void* data, int64_t count, DType dtype, ReduceOp op, absl::Duration timeout) override;
  absl::Status Broadcast(void* data, int64_t count, DType dtype, int root, absl::Duration timeout) override;
  absl::Status AllGather(const void* send, int64_t count, void* recv, DType dtype, absl::Duration timeout) override;
  absl::Status ReduceScatter(const void* send, void* recv, int64_t count, DType dtype, ReduceOp op,
                             absl::Duration timeout) override;
  absl::Status Send(const void* data, int64_t count, DType dtype, int peer, absl::Duration timeout) override;
  absl::Status Recv(void* data, int64_t count, DType dtype, int peer, absl::Duration timeout) override;
  absl::Status Barrier(absl::Duration timeout) override;
  void Abort() override;

 private:
  // One pending send or receive of `size` bytes with a peer, progressed by Exchange().
  struct Transfer {
    int peer = 0;
    bool is_send = false;
    char* data = nullptr;
    int64_t size = 0;
    int64_t done = 0;
  };

  HostCommunicator(int rank, int world_size, std::vector<std::string> addresses, std::vector<ScopedFd> peers,
                   ScopedFd wake_read, ScopedFd wake_write);

  // OK if a new collective may start: not aborted, not broken by an earlier error.
  absl::Status CheckUsable(std::string_view op_name) const;
  // Runs `transfers` concurrently until all are done, the deadline passes, a peer goes away or Abort() is called.
  // Any failure breaks the communicator (recorded in broken_).
  absl::Status Exchange(std::string_view op_name, std::vector<Transfer>& transfers, absl::Time deadline,
                        absl::Duration timeout);
  // Ring reduce-scatter over `work` (elements of the compute dtype, which is float32 for 16-bit floats) split in
  // world_size chunks; afterwards chunk `rank_` holds the full reduction (divided by world_size for kAvg).
  absl::Status RingReduceScatter(std::string_view op_name, char* work, const std::vector<int64_t>& offsets,
                                 DType compute_dtype, ReduceOp op, absl::Time deadline, absl::Duration timeout);
  // Ring all-gather of byte chunks: chunk `rank_` is present in `buf`; afterwards every chunk is.
  absl::Status RingAllGather(std::string_view op_name, char* buf, const std::vector<int64_t>& byte_offsets,
                             absl::Time deadline, absl::Duration timeout);
  std::string PeerName(int peer) const;
  std::string Prefix() const;

  const int rank_;
  const int world_size_;
  const std::vector<std::string> addresses_;
  // peers_[j] is the connection to rank j; peers_[rank_] is invalid.
  std::vector<ScopedFd> peers_;
  // Self-pipe: Abort() writes a byte so a pending poll() wakes up.
  ScopedFd wake_read_;
  ScopedFd wake_write_;
  std::atomic<bool> aborted_{false};
  // The first error that left a collective half-done; returned by every later call.
  absl::Status broken_;
};

}  // namespace verl

#endif  // VERL_WORKER_COMM_HOST_COMMUNICATOR_H_
