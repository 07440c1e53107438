#include "worker/comm/nccl_communicator.h"

#include <chrono>
#include <cstring>
#include <thread>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/status/status_macros.h"

namespace verl {
namespace {

// How long the destructor waits for ncclCommFinalize before falling back to ncclCommAbort.
constexpr absl::Duration kFinalizeTimeout = absl::Seconds(10);
// How long an error path waits for the stream to drain after ncclCommAbort.
constexpr absl::Duration kDrainTimeout = absl::Seconds(2);


ncclDataType_t NcclType(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return ncclFloat32;
    case DType::kBFloat16: return ncclBfloat16;
    case DType::kFloat16: return ncclFloat16;
    case DType::kInt64: return ncclInt64;
    case DType::kInt32: return ncclInt32;
    case DType::kUInt8:
    case DType::kBool: return ncclUint8;
  }
  return ncclUint8;
}

bool NcclOp(ReduceOp op, ncclRedOp_t* out) {
  switch (op) {
    case ReduceOp::kSum: *out = ncclSum; return true;
    case ReduceOp::kMax: *out = ncclMax; return true;
    case ReduceOp::kMin: *out = ncclMin; return true;
    case ReduceOp::kAvg: *out = ncclAvg; return true;
  }
  return false;
}

// An NCCL failure as a Status: the call, file:line, NCCL's error string and its last error message. Remote errors
// (a peer failed) are UNAVAILABLE, argument errors INVALID_ARGUMENT, everything else INTERNAL.
absl::Status NcclStatus(ncclResult_t result, std::string_view what, const char* file, int line) {
  if (result == ncclSuccess) return absl::OkStatus();
  const char* last = ncclGetLastError(nullptr);
  std::string message = absl::StrCat(absl::string_view(what.data(), what.size()), " failed (", file, ":", line,
                                     "): ", ncclGetErrorString(result));
  if (last != nullptr && last[0] != '\0') absl::StrAppend(&message, ": ", last);
  switch (result) {
    case ncclRemoteError: return absl::UnavailableError(message);
    case ncclInvalidArgument:
    case ncclInvalidUsage: return absl::InvalidArgumentError(message);
    default: return absl::InternalError(message);
  }
}

absl::Status CudaStatus(cudaError_t error, std::string_view what, const char* file, int line) {
  if (error == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(absl::string_view(what.data(), what.size()), " failed (", file, ":", line,
                                          "): ", cudaGetErrorName(error), ": ", cudaGetErrorString(error)));
}

#define VERL_NCCL_STATUS(expr, what) NcclStatus((expr), (what), __FILE__, __LINE__)
#define VERL_CUDA_STATUS(expr, what) CudaStatus((expr), (what), __FILE__, __LINE__)

absl::Time DeadlineAfter(absl::Duration timeout) {
  return timeout <= absl::ZeroDuration() ? absl::Now() : absl::Now() + timeout;
}

// `data` must be device (or managed) memory of `device`: NCCL given a host pointer faults the whole CUDA context.
absl::Status CheckDevicePointer(const std::string& prefix, const void* data, int device, const char* what) {
  if (data == nullptr) return absl::OkStatus();
  cudaPointerAttributes attributes{};
  const cudaError_t error = cudaPointerGetAttributes(&attributes, data);
  if (error != cudaSuccess) {
    (void)cudaGetLastError();
    return absl::InvalidArgumentError(
        absl::StrCat(prefix, what, " is not a CUDA pointer: ", cudaGetErrorString(error)));
  }
  if (attributes.type != cudaMemoryTypeDevice && attributes.type != cudaMemoryTypeManaged) {
    return absl::InvalidArgumentError(absl::StrCat(prefix, what, " is host memory; NCCL needs device memory of cuda:",
                                                   device));
  }
  if (attributes.type == cudaMemoryTypeDevice && attributes.device != device) {
    return absl::InvalidArgumentError(absl::StrCat(prefix, what, " is memory of cuda:", attributes.device,
                                                   ", not of this communicator's cuda:", device));
  }
  return absl::OkStatus();
}

bool Overlap(const void* a, int64_t a_bytes, const void* b, int64_t b_bytes) {
  const char* pa = static_cast<const char*>(a);
  const char* pb = static_cast<const char*>(b);
  return a_bytes > 0 && b_bytes > 0 && pa < pb + b_bytes && pb < pa + a_bytes;
}

// A temporary device buffer for staging an overlapping input, from the stream-ordered allocator of `stream`, so
// neither allocation nor release synchronizes the device (cudaFree would wait for every stream of the device,
// including NCCL kernels of other communicators that may be waiting on this rank: a deadlock). Released when it
// goes out of scope, ordered after everything already on the stream.
class DeviceScratch {
 public:
  explicit DeviceScratch(cudaStream_t stream) : stream_(stream) {}
  DeviceScratch(const DeviceScratch&) = delete;
  DeviceScratch& operator=(const DeviceScratch&) = delete;
  ~DeviceScratch() {
    if (ptr_ != nullptr) (void)cudaFreeAsync(ptr_, stream_);
  }
  absl::Status Allocate(int64_t bytes) {
    return VERL_CUDA_STATUS(cudaMallocAsync(&ptr_, static_cast<size_t>(bytes), stream_), "cudaMallocAsync (staging)");
  }
  void* get() const { return ptr_; }

 private:
  cudaStream_t stream_;
  void* ptr_ = nullptr;
};

// Pause between polls: yield for the first 2 ms (small collectives finish in tens of microseconds), then sleep.
void PollPause(absl::Time start) {
  if (absl::Now() - start < absl::Milliseconds(2)) {
    std::this_thread::yield();
  } else {
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

}  // namespace

absl::StatusOr<std::string> NcclCommunicator::CreateUniqueId() {
  ncclUniqueId id;
  RETURN_IF_ERROR(VERL_NCCL_STATUS(ncclGetUniqueId(&id), "NcclCommunicator::CreateUniqueId: ncclGetUniqueId"));
  return std::string(id.internal, sizeof(id.internal));
}

absl::StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::Create(const NcclCommunicatorOptions& options) {
  const std::string prefix = absl::StrCat("NCCL rank ", options.rank, "/", options.world_size, " (cuda:",
                                          options.cuda_device, "): Create: ");
  if (options.world_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat(prefix, "world_size must be >= 1, got ", options.world_size));
  }
  if (options.rank < 0 || options.rank >= options.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat(prefix, "rank ", options.rank, " is outside [0, ", options.world_size, ")"));
  }
  if (options.unique_id.size() != sizeof(ncclUniqueId)) {
    return absl::InvalidArgumentError(absl::StrCat(prefix, "unique_id must be the ", sizeof(ncclUniqueId),
                                                   " bytes of CreateUniqueId(), got ", options.unique_id.size()));
  }
  if (options.init_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(prefix, "init_timeout must be positive"));
  }
  int devices = 0;
  const cudaError_t count_error = cudaGetDeviceCount(&devices);
  if (count_error != cudaSuccess) {
    (void)cudaGetLastError();
    return absl::FailedPreconditionError(
        absl::StrCat(prefix, "no usable CUDA device: ", cudaGetErrorName(count_error), ": ",
                     cudaGetErrorString(count_error)));
  }
  if (options.cuda_device < 0 || options.cuda_device >= devices) {
    return absl::InvalidArgumentError(
        absl::StrCat(prefix, "cuda_device ", options.cuda_device, " is outside [0, ", devices, ")"));
  }
  RETURN_IF_ERROR(Annotate(VERL_CUDA_STATUS(cudaSetDevice(options.cuda_device), "cudaSetDevice"), prefix));

  cudaStream_t stream = nullptr;
  void* scratch = nullptr;
  ncclComm_t comm = nullptr;
  auto cleanup = [&] {
    if (comm != nullptr) (void)ncclCommAbort(comm);
    if (stream != nullptr) {
      (void)cudaStreamSynchronize(stream);
      (void)cudaStreamDestroy(stream);
    }
    if (scratch != nullptr) (void)cudaFree(scratch);
  };
  absl::Status status = VERL_CUDA_STATUS(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
                                         "cudaStreamCreateWithFlags");
  if (status.ok()) status = VERL_CUDA_STATUS(cudaMalloc(&scratch, 8), "cudaMalloc (barrier scratch)");
  if (status.ok()) status = VERL_CUDA_STATUS(cudaMemset(scratch, 0, 8), "cudaMemset (barrier scratch)");
  if (!status.ok()) {
    cleanup();
    return Annotate(status, prefix);
  }

  ncclUniqueId id;
  std::memcpy(id.internal, options.unique_id.data(), sizeof(id.internal));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // so a stuck init or collective can be abandoned with ncclCommAbort
  const ncclResult_t init =
      ncclCommInitRankConfig(&comm, options.world_size, id, options.rank, &config);
  if (init != ncclSuccess && init != ncclInProgress) {
    status = VERL_NCCL_STATUS(init, "ncclCommInitRankConfig");
    cleanup();
    return Annotate(status, prefix);
  }
  const absl::Time start = absl::Now();
  const absl::Time deadline = start + options.init_timeout;
  ncclResult_t state = ncclInProgress;
  while (true) {
    const ncclResult_t r = ncclCommGetAsyncError(comm, &state);
    if (r != ncclSuccess) {
      status = VERL_NCCL_STATUS(r, "ncclCommGetAsyncError (init)");
      break;
    }
    if (state != ncclInProgress) {
      if (state != ncclSuccess) status = VERL_NCCL_STATUS(state, "ncclCommInitRankConfig (asynchronous)");
      break;
    }
    if (absl::Now() >= deadline) {
      status = absl::DeadlineExceededError(absl::StrCat(
          prefix, "not every rank joined within ", absl::FormatDuration(options.init_timeout),
          " (every rank must call Create with the same unique_id and world_size ", options.world_size, ")"));
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (!status.ok()) {
    cleanup();
    return status.code() == absl::StatusCode::kDeadlineExceeded ? status : Annotate(status, prefix);
  }
  return std::unique_ptr<NcclCommunicator>(new NcclCommunicator(options.rank, options.world_size, options.cuda_device,
                                                                comm, stream, scratch));
}

NcclCommunicator::NcclCommunicator(int rank, int world_size, int cuda_device, ncclComm* comm, cudaStream_t stream,
                                   void* scratch)
    : rank_(rank), world_size_(world_size), cuda_device_(cuda_device), stream_(stream), scratch_(scratch),
      comm_(comm) {}

NcclCommunicator::~NcclCommunicator() {
  (void)cudaSetDevice(cuda_device_);
  ncclComm_t comm = nullptr;
  {
    std::lock_guard<std::mutex> lock(nccl_mu_);
    std::swap(comm, comm_);
  }
  if (comm != nullptr) {
    bool destroyed = false;
    if (health().ok()) {
      const ncclResult_t r = ncclCommFinalize(comm);
      ncclResult_t state = r;
      if (r == ncclSuccess || r == ncclInProgress) {
        const absl::Time deadline = absl::Now() + kFinalizeTimeout;
        while (ncclCommGetAsyncError(comm, &state) == ncclSuccess && state == ncclInProgress &&
               absl::Now() < deadline) {
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
      }
      if (state == ncclSuccess) destroyed = ncclCommDestroy(comm) == ncclSuccess;
    }
    if (!destroyed) (void)ncclCommAbort(comm);
  }
  DrainStream();
  (void)cudaStreamDestroy(stream_);
  (void)cudaFree(scratch_);
}

std::string NcclCommunicator::Prefix() const {
  return absl::StrCat("NCCL rank ", rank_, "/", world_size_, " (cuda:", cuda_device_, "): ");
}

absl::Status NcclCommunicator::health() const {
  {
    std::lock_guard<std::mutex> lock(status_mu_);
    if (!broken_.ok()) return broken_;
  }
  if (aborted_.load()) return absl::AbortedError(absl::StrCat(Prefix(), "this communicator was aborted (Abort())"));
  const int peer = aborted_peer_.load();
  if (peer >= 0) {
    return absl::UnavailableError(absl::StrCat(Prefix(), "peer rank ", peer, " aborted or died (reported by "
                                               "OnPeerAborted); recreate the group"));
  }
  return absl::OkStatus();
}

absl::Status NcclCommunicator::CheckUsable(std::string_view op_name) const {
  return Annotate(health(), op_name);
}

void NcclCommunicator::AbortNcclComm() {
  std::lock_guard<std::mutex> lock(nccl_mu_);
  if (comm_ == nullptr) return;
  int previous = -1;
  const bool had_device = cudaGetDevice(&previous) == cudaSuccess;
  (void)cudaSetDevice(cuda_device_);
  (void)ncclCommAbort(comm_);
  comm_ = nullptr;
  if (had_device && previous != cuda_device_) (void)cudaSetDevice(previous);
}

void NcclCommunicator::DrainStream() {
  const absl::Time deadline = absl::Now() + kDrainTimeout;
  while (cudaStreamQuery(stream_) == cudaErrorNotReady && absl::Now() < deadline) {
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  (void)cudaGetLastError();
}

absl::Status NcclCommunicator::Break(absl::Status status) {
  {
    std::lock_guard<std::mutex> lock(status_mu_);
    if (broken_.ok()) broken_ = std::move(status);
    status = broken_;
  }
  AbortNcclComm();
  DrainStream();
  return status;
}

void NcclCommunicator::Abort() {
  aborted_.store(true);
  AbortNcclComm();
}

void NcclCommunicator::OnPeerAborted(int peer) {
  if (aborted_.load()) return;
  int expected = -1;
  aborted_peer_.compare_exchange_strong(expected, peer);
  AbortNcclComm();
}

template <typename Enqueue>
absl::Status NcclCommunicator::Run(std::string_view op_name, absl::Duration timeout, Enqueue&& enqueue) {
  RETURN_IF_ERROR(CheckUsable(op_name));
  const std::string op(op_name);
  const absl::Time start = absl::Now();
  const absl::Time deadline = DeadlineAfter(timeout);
  const cudaError_t device_error = cudaSetDevice(cuda_device_);
  if (device_error != cudaSuccess) {
    return Break(Annotate(VERL_CUDA_STATUS(device_error, "cudaSetDevice"), Prefix() + op));
  }
  ncclResult_t result = ncclSuccess;
  bool have_comm = false;
  {
    std::lock_guard<std::mutex> lock(nccl_mu_);
    if (comm_ != nullptr) {
      have_comm = true;
      result = enqueue(comm_);
    }
  }
  if (!have_comm) {
    // Aborted between CheckUsable and here.
    const absl::Status usable = CheckUsable(op_name);
    return Break(usable.ok() ? absl::AbortedError(absl::StrCat(Prefix(), op, ": communicator gone")) : usable);
  }
  if (result != ncclSuccess && result != ncclInProgress) {
    const absl::Status status = VERL_NCCL_STATUS(result, absl::StrCat(Prefix(), op, ": enqueueing the NCCL call"));
    // A rejected argument enqueued nothing: the communicator stays usable.
    if (status.code() == absl::StatusCode::kInvalidArgument) return status;
    return Break(status);
  }
  bool enqueued = result == ncclSuccess;
  while (true) {
    if (aborted_.load()) {
      return Break(absl::AbortedError(absl::StrCat(Prefix(), op, ": aborted by Abort() on this rank")));
    }
    const int peer = aborted_peer_.load();
    if (peer >= 0) {
      return Break(absl::UnavailableError(absl::StrCat(Prefix(), op, ": peer rank ", peer, " aborted or died")));
    }
    ncclResult_t state = ncclSuccess;
    ncclResult_t query = ncclSuccess;
    bool alive = false;
    {
      std::lock_guard<std::mutex> lock(nccl_mu_);
      if (comm_ != nullptr) {
        alive = true;
        query = ncclCommGetAsyncError(comm_, &state);
      }
    }
    if (!alive) continue;  // aborted concurrently: Abort() / OnPeerAborted() set their flag first
    if (query != ncclSuccess) return Break(VERL_NCCL_STATUS(query, absl::StrCat(Prefix(), op, ": ncclCommGetAsyncError")));
    if (state != ncclSuccess && state != ncclInProgress) {
      return Break(VERL_NCCL_STATUS(state, absl::StrCat(Prefix(), op, " (asynchronous NCCL error)")));
    }
    if (state == ncclSuccess) enqueued = true;
    if (enqueued) {
      const cudaError_t done = cudaStreamQuery(stream_);
      if (done == cudaSuccess) return absl::OkStatus();
      if (done != cudaErrorNotReady) {
        return Break(VERL_CUDA_STATUS(done, absl::StrCat(Prefix(), op, ": cudaStreamQuery")));
      }
    }
    if (absl::Now() >= deadline) {
      std::string waiting;
      if (world_size_ == 2) {
        waiting = absl::StrCat("; still waiting for peer rank ", 1 - rank_);
      } else if (world_size_ > 2) {
        std::vector<std::string> others;
        for (int r = 0; r < world_size_; ++r) {
          if (r != rank_) others.push_back(absl::StrCat("peer rank ", r));
        }
        waiting = absl::StrCat("; still waiting for one or more of ", absl::StrJoin(others, ", "),
                               " (NCCL does not report which)");
      }
      return Break(absl::DeadlineExceededError(absl::StrCat(
          Prefix(), op, ": timed out after ", absl::FormatDuration(timeout),
          enqueued ? " (running on the GPU)" : " (NCCL still setting up the operation)", waiting,
          "; the NCCL communicator was aborted")));
    }
    PollPause(start);
  }
}

absl::Status NcclCommunicator::AllReduce(void* data, int64_t count, DType dtype, ReduceOp op,
                                         absl::Duration timeout) {
  const std::string prefix = absl::StrCat(Prefix(), "AllReduce: ");
  RETURN_IF_ERROR(CheckBuffer(prefix, data, count, dtype, "data"));
  RETURN_IF_ERROR(CheckReduction(prefix, dtype, op));
  RETURN_IF_ERROR(CheckDevicePointer(prefix, data, cuda_device_, "data"));
  if (count == 0) return CheckUsable("AllReduce");
  ncclRedOp_t nccl_op;
  NcclOp(op, &nccl_op);
  return Run("AllReduce", timeout, [&](ncclComm_t comm) {
    return ncclAllReduce(data, data, static_cast<size_t>(count), NcclType(dtype), nccl_op, comm, stream_);
  });
}

absl::Status NcclCommunicator::Broadcast(void* data, int64_t count, DType dtype, int root, absl::Duration timeout) {
  const std::string prefix = absl::StrCat(Prefix(), "Broadcast: ");
  RETURN_IF_ERROR(CheckBuffer(prefix, data, count, dtype, "data"));
  if (root < 0 || root >= world_size_) {
    return absl::InvalidArgumentError(absl::StrCat(prefix, "root ", root, " is outside [0, ", world_size_, ")"));
  }
  RETURN_IF_ERROR(CheckDevicePointer(prefix, data, cuda_device_, "data"));
  if (count == 0) return CheckUsable("Broadcast");
  return Run("Broadcast", timeout, [&](ncclComm_t comm) {
    return ncclBroadcast(data, data, static_cast<size_t>(count * DTypeSize(dtype)), ncclUint8, root, comm, stream_);
  });
}

absl::Status NcclCommunicator::AllGather(const void* send, int64_t count, void* recv, DType dtype,
                                         absl::Duration timeout) {
  const std::string prefix = absl::StrCat(Prefix(), "AllGather: ");
  RETURN_IF_ERROR(CheckBuffer(prefix, send, count, dtype, "send"));
  RETURN_IF_ERROR(CheckBuffer(prefix, recv, count, dtype, "recv"));
  RETURN_IF_ERROR(CheckDevicePointer(prefix, send, cuda_device_, "send"));
  RETURN_IF_ERROR(CheckDevicePointer(prefix, recv, cuda_device_, "recv"));
  if (count == 0) return CheckUsable("AllGather");
  const int64_t bytes = count * DTypeSize(dtype);
  const void* in_place = static_cast<char*>(recv) + rank_ * bytes;
  // NCCL's in-place form is send == recv + rank * bytes; any other overlap goes through a copy.
  DeviceScratch staged(stream_);
  const bool stage = send != in_place && Overlap(send, bytes, recv, world_size_ * bytes);
  if (stage) RETURN_IF_ERROR(Annotate(staged.Allocate(bytes), prefix));
  return Run("AllGather", timeout, [&](ncclComm_t comm) {
    const void* source = send;
    if (stage) {
      if (cudaMemcpyAsync(staged.get(), send, bytes, cudaMemcpyDeviceToDevice, stream_) != cudaSuccess) {
        return ncclUnhandledCudaError;
      }
      source = staged.get();
    }
    // Bytes: every dtype moves, and uint8/bool need no reduction semantics.
    return ncclAllGather(source, recv, static_cast<size_t>(bytes), ncclUint8, comm, stream_);
  });
}

absl::Status NcclCommunicator::ReduceScatter(const void* send, void* recv, int64_t count, DType dtype, ReduceOp op,
                                             absl::Duration timeout) {
  const std::string prefix = absl::StrCat(Prefix(), "ReduceScatter: ");
  RETURN_IF_ERROR(CheckBuffer(prefix, send, count, dtype, "send"));
  RETURN_IF_ERROR(CheckBuffer(prefix, recv, count, dtype, "recv"));
  RETURN_IF_ERROR(CheckReduction(prefix, dtype, op));
  RETURN_IF_ERROR(CheckDevicePointer(prefix, send, cuda_device_, "send"));
  RETURN_IF_ERROR(CheckDevicePointer(prefix, recv, cuda_device_, "recv"));
  if (count == 0) return CheckUsable("ReduceScatter");
  ncclRedOp_t nccl_op;
  NcclOp(op, &nccl_op);
  const int64_t bytes = count * DTypeSize(dtype);
  const void* in_place = static_cast<const char*>(send) + rank_ * bytes;
  DeviceScratch staged(stream_);
  const bool stage = recv != in_place && Overlap(send, world_size_ * bytes, recv, bytes);
  if (stage) RETURN_IF_ERROR(Annotate(staged.Allocate(world_size_ * bytes), prefix));
  return Run("ReduceScatter", timeout, [&](ncclComm_t comm) {
    const void* source = send;
    if (stage) {
      if (cudaMemcpyAsync(staged.get(), send, world_size_ * bytes, cudaMemcpyDeviceToDevice, stream_) !=
          cudaSuccess) {
        return ncclUnhandledCudaError;
      }
      source = staged.get();
    }
    return ncclReduceScatter(source, recv, static_cast<size_t>(count), NcclType(dtype), nccl_op, comm, stream_);
  });
}

absl::Status NcclCommunicator::Send(const void* data, int64_t count, DType dtype, int peer, absl::Duration timeout) {
  const std::string prefix = absl::StrCat(Prefix(), "Send: ");
  RETURN_IF_ERROR(CheckBuffer(prefix, data, count, dtype, "data"));
  if (peer < 0 || peer >= world_size_ || peer == rank_) {
    return absl::InvalidArgumentError(
        absl::StrCat(prefix, "peer ", peer, " must be in [0, ", world_size_, ") and differ from this rank"));
  }
  RETURN_IF_ERROR(CheckDevicePointer(prefix, data, cuda_device_, "data"));
  if (count == 0) return CheckUsable("Send");
  return Run("Send", timeout, [&](ncclComm_t comm) {
    return ncclSend(data, static_cast<size_t>(count * DTypeSize(dtype)), ncclUint8, peer, comm, stream_);
  });
}

absl::Status NcclCommunicator::Recv(void* data, int64_t count, DType dtype, int peer, absl::Duration timeout) {
  const std::string prefix = absl::StrCat(Prefix(), "Recv: ");
  RETURN_IF_ERROR(CheckBuffer(prefix, data, count, dtype, "data"));
  if (peer < 0 || peer >= world_size_ || peer == rank_) {
    return absl::InvalidArgumentError(
        absl::StrCat(prefix, "peer ", peer, " must be in [0, ", world_size_, ") and differ from this rank"));
  }
  RETURN_IF_ERROR(CheckDevicePointer(prefix, data, cuda_device_, "data"));
  if (count == 0) return CheckUsable("Recv");
  return Run("Recv", timeout, [&](ncclComm_t comm) {
    return ncclRecv(data, static_cast<size_t>(count * DTypeSize(dtype)), ncclUint8, peer, comm, stream_);
  });
}

absl::Status NcclCommunicator::Barrier(absl::Duration timeout) {
  return Run("Barrier", timeout, [&](ncclComm_t comm) {
    return ncclAllReduce(scratch_, scratch_, 1, ncclInt32, ncclSum, comm, stream_);
  });
}

}  // namespace verl
