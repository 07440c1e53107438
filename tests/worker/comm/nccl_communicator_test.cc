// The NCCL backend against the backend-independent conformance suite, plus NCCL-specific cases. Every case is
// tagged [gpu] and skips (passes with a warning) when no GPU is visible, so CI machines without one stay green.
//
// The suite works on host buffers; StagedNcclComm adapts: it copies each host buffer to device memory of the rank's
// GPU, calls NcclCommunicator with the device pointers (preserving any aliasing between the host buffers), and copies
// the results back. One rank per GPU, one thread per rank (NCCL refuses two ranks on one device), world sizes 1 up
// to the number of visible GPUs.
//
// NCCL does not propagate an abort to peers inside a node; the Communicator contract wants peers to fail fast with
// UNAVAILABLE naming the aborting rank. In production the controller relays it (OnPeerAborted); here the group
// relays it between threads, and a separate case checks what happens without the relay (peers time out).

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "catch2/catch.hpp"
#include "common/status/status_macros.h"
#include "tests/worker/comm/communicator_conformance.h"
#include "tests/worker/visible_gpus.h"
#include "worker/comm/nccl_communicator.h"

namespace verl {
namespace {

using testing::VisibleGpus;

#define VERL_REQUIRE_GPUS(n)                                                                                  \
  do {                                                                                                        \
    if (VisibleGpus() < (n)) {                                                                                \
      WARN("skipped: needs " << (n) << " GPU(s), " << VisibleGpus() << " visible");                         \
      return;                                                                                                 \
    }                                                                                                         \
  } while (0)

int MaxWorld() { return std::min(VisibleGpus(), 8); }

// The communicators of one group. Destroyed concurrently (ncclCommDestroy is an intra-node collective); if any is
// broken, all are aborted first, as the controller would.
struct NcclGroup {
  std::vector<std::unique_ptr<NcclCommunicator>> comms;

  ~NcclGroup() {
    bool broken = false;
    for (auto& c : comms) broken |= c != nullptr && !c->health().ok();
    if (broken) {
      for (auto& c : comms) {
        if (c != nullptr) c->Abort();
      }
    }
    std::vector<std::thread> threads;
    for (auto& c : comms) threads.emplace_back([&c] { c.reset(); });
    for (auto& t : threads) t.join();
  }
};

// `bytes` of device memory on the current device, optionally filled from `host`. Errors are reported through
// status() (the conformance suite calls from rank threads, where Catch2 assertions are not allowed).
class DeviceCopy {
 public:
  DeviceCopy(const void* host, int64_t bytes, bool copy_in) {
    if (host == nullptr) return;
    cudaError_t e = cudaMalloc(&ptr_, std::max<int64_t>(bytes, 1));
    if (e == cudaSuccess && copy_in && bytes > 0) e = cudaMemcpy(ptr_, host, bytes, cudaMemcpyHostToDevice);
    if (e != cudaSuccess) status_ = absl::InternalError(absl::StrCat("staging to device: ", cudaGetErrorString(e)));
  }
  DeviceCopy(const DeviceCopy&) = delete;
  DeviceCopy& operator=(const DeviceCopy&) = delete;
  ~DeviceCopy() {
    if (ptr_ != nullptr) (void)cudaFree(ptr_);
  }
  const absl::Status& status() const { return status_; }
  char* get() const { return static_cast<char*>(ptr_); }

 private:
  void* ptr_ = nullptr;
  absl::Status status_;
};

absl::Status CopyToHost(void* host, const void* device, int64_t bytes) {
  if (host == nullptr || bytes <= 0) return absl::OkStatus();
  const cudaError_t e = cudaMemcpy(host, device, bytes, cudaMemcpyDeviceToHost);
  if (e != cudaSuccess) return absl::InternalError(absl::StrCat("staging to host: ", cudaGetErrorString(e)));
  return absl::OkStatus();
}

int64_t Bytes(int64_t count, DType dtype) { return std::max<int64_t>(count, 0) * DTypeSize(dtype); }

// Where `inner` lies inside [outer, outer + outer_bytes): its offset, else -1.
int64_t OffsetIn(const void* inner, const void* outer, int64_t outer_bytes) {
  const char* i = static_cast<const char*>(inner);
  const char* o = static_cast<const char*>(outer);
  if (inner == nullptr || outer == nullptr || i < o || i >= o + outer_bytes) return -1;
  return i - o;
}

class StagedNcclComm final : public Communicator {
 public:
  StagedNcclComm(std::shared_ptr<NcclGroup> group, int rank, bool relay_abort)
      : group_(std::move(group)), rank_(rank), relay_abort_(relay_abort) {}

  int rank() const override { return comm().rank(); }
  int world_size() const override { return comm().world_size(); }

  absl::Status AllReduce(void* data, int64_t count, DType dtype, ReduceOp op, absl::Duration timeout) override {
    RETURN_IF_ERROR(SetDevice());
    DeviceCopy d(data, Bytes(count, dtype), true);
    RETURN_IF_ERROR(d.status());
    RETURN_IF_ERROR(comm().AllReduce(d.get(), count, dtype, op, timeout));
    return CopyToHost(data, d.get(), Bytes(count, dtype));
  }
  absl::Status Broadcast(void* data, int64_t count, DType dtype, int root, absl::Duration timeout) override {
    RETURN_IF_ERROR(SetDevice());
    DeviceCopy d(data, Bytes(count, dtype), true);
    RETURN_IF_ERROR(d.status());
    RETURN_IF_ERROR(comm().Broadcast(d.get(), count, dtype, root, timeout));
    return CopyToHost(data, d.get(), Bytes(count, dtype));
  }
  absl::Status AllGather(const void* send, int64_t count, void* recv, DType dtype, absl::Duration timeout) override {
    RETURN_IF_ERROR(SetDevice());
    const int64_t recv_bytes = Bytes(count, dtype) * world_size();
    DeviceCopy drecv(recv, recv_bytes, true);
    RETURN_IF_ERROR(drecv.status());
    const int64_t offset = OffsetIn(send, recv, recv_bytes);
    std::unique_ptr<DeviceCopy> dsend;
    const void* send_ptr = nullptr;
    if (offset >= 0) {
      send_ptr = drecv.get() + offset;  // keep the aliasing the caller asked for
    } else {
      dsend = std::make_unique<DeviceCopy>(send, Bytes(count, dtype), true);
      RETURN_IF_ERROR(dsend->status());
      send_ptr = dsend->get();
    }
    RETURN_IF_ERROR(comm().AllGather(send_ptr, count, drecv.get(), dtype, timeout));
    return CopyToHost(recv, drecv.get(), recv_bytes);
  }
  absl::Status ReduceScatter(const void* send, void* recv, int64_t count, DType dtype, ReduceOp op,
                             absl::Duration timeout) override {
    RETURN_IF_ERROR(SetDevice());
    const int64_t send_bytes = Bytes(count, dtype) * world_size();
    DeviceCopy dsend(send, send_bytes, true);
    RETURN_IF_ERROR(dsend.status());
    const int64_t offset = OffsetIn(recv, send, send_bytes);
    std::unique_ptr<DeviceCopy> drecv;
    void* recv_ptr = nullptr;
    if (offset >= 0) {
      recv_ptr = dsend.get() + offset;
    } else {
      drecv = std::make_unique<DeviceCopy>(recv, Bytes(count, dtype), false);
      RETURN_IF_ERROR(drecv->status());
      recv_ptr = drecv->get();
    }
    RETURN_IF_ERROR(comm().ReduceScatter(dsend.get(), recv_ptr, count, dtype, op, timeout));
    return CopyToHost(recv, recv_ptr, Bytes(count, dtype));
  }
  absl::Status Send(const void* data, int64_t count, DType dtype, int peer, absl::Duration timeout) override {
    RETURN_IF_ERROR(SetDevice());
    DeviceCopy d(data, Bytes(count, dtype), true);
    RETURN_IF_ERROR(d.status());
    return comm().Send(d.get(), count, dtype, peer, timeout);
  }
  absl::Status Recv(void* data, int64_t count, DType dtype, int peer, absl::Duration timeout) override {
    RETURN_IF_ERROR(SetDevice());
    DeviceCopy d(data, Bytes(count, dtype), false);
    RETURN_IF_ERROR(d.status());
    RETURN_IF_ERROR(comm().Recv(d.get(), count, dtype, peer, timeout));
    return CopyToHost(data, d.get(), Bytes(count, dtype));
  }
  absl::Status Barrier(absl::Duration timeout) override { return comm().Barrier(timeout); }

  // Aborts this rank and, standing in for the controller, tells every other rank of the group.
  void Abort() override {
    comm().Abort();
    if (!relay_abort_) return;
    for (int r = 0; r < static_cast<int>(group_->comms.size()); ++r) {
      if (r != rank_) group_->comms[r]->OnPeerAborted(rank_);
    }
  }

  NcclCommunicator& comm() const { return *group_->comms[rank_]; }

 private:
  absl::Status SetDevice() const {
    const cudaError_t e = cudaSetDevice(comm().cuda_device());
    if (e != cudaSuccess) return absl::InternalError(absl::StrCat("cudaSetDevice: ", cudaGetErrorString(e)));
    return absl::OkStatus();
  }

  std::shared_ptr<NcclGroup> group_;
  const int rank_;
  const bool relay_abort_;
};

// Creates the NcclCommunicators of one group (rank r on GPU r), each on its own thread.
std::shared_ptr<NcclGroup> CreateGroup(int world, std::vector<absl::Status>* statuses) {
  auto group = std::make_shared<NcclGroup>();
  group->comms.resize(world);
  statuses->assign(world, absl::OkStatus());
  absl::StatusOr<std::string> id = NcclCommunicator::CreateUniqueId();
  if (!id.ok()) {
    statuses->assign(world, id.status());
    return group;
  }
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      NcclCommunicatorOptions options;
      options.rank = r;
      options.world_size = world;
      options.unique_id = *id;
      options.cuda_device = r;
      options.init_timeout = absl::Seconds(60);
      absl::StatusOr<std::unique_ptr<NcclCommunicator>> comm = NcclCommunicator::Create(options);
      if (comm.ok()) {
        group->comms[r] = std::move(*comm);
      } else {
        (*statuses)[r] = comm.status();
      }
    });
  }
  for (auto& t : threads) t.join();
  return group;
}

testing::CommGroupFactory StagedFactory(bool relay_abort = true) {
  return [relay_abort](int world) {
    std::vector<absl::Status> statuses;
    std::shared_ptr<NcclGroup> group = CreateGroup(world, &statuses);
    std::vector<absl::StatusOr<std::unique_ptr<Communicator>>> out;
    for (int r = 0; r < world; ++r) {
      if (statuses[r].ok()) {
        out.emplace_back(std::make_unique<StagedNcclComm>(group, r, relay_abort));
      } else {
        out.emplace_back(statuses[r]);
      }
    }
    return out;
  };
}

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

TEST_CASE("NCCL collective conformance", "[gpu]") {
  VERL_REQUIRE_GPUS(1);
  for (int world = 1; world <= MaxWorld(); ++world) {
    INFO("world " << world);
    testing::RunCollectiveConformance(StagedFactory(), world);
  }
}

TEST_CASE("NCCL large-message conformance", "[gpu]") {
  VERL_REQUIRE_GPUS(1);
  for (int world = 1; world <= MaxWorld(); ++world) {
    INFO("world " << world);
    testing::RunLargeMessageConformance(StagedFactory(), world);
  }
}

TEST_CASE("NCCL missing-rank conformance", "[gpu]") {
  VERL_REQUIRE_GPUS(2);
  for (int world = 2; world <= MaxWorld(); ++world) testing::RunMissingRankConformance(StagedFactory(), world);
}

TEST_CASE("NCCL abort conformance (abort relayed to peers)", "[gpu]") {
  VERL_REQUIRE_GPUS(2);
  for (int world = 2; world <= MaxWorld(); ++world) testing::RunAbortConformance(StagedFactory(), world);
}

TEST_CASE("NCCL bad-argument conformance", "[gpu]") {
  VERL_REQUIRE_GPUS(2);
  for (int world = 2; world <= MaxWorld(); ++world) testing::RunBadArgumentConformance(StagedFactory(), world);
}

TEST_CASE("NCCL CreateUniqueId and Create option checks", "[gpu]") {
  VERL_REQUIRE_GPUS(1);
  absl::StatusOr<std::string> a = NcclCommunicator::CreateUniqueId();
  absl::StatusOr<std::string> b = NcclCommunicator::CreateUniqueId();
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK(a->size() == 128);
  CHECK(*a != *b);

  auto expect_invalid = [](NcclCommunicatorOptions options, const std::string& needle) {
    absl::StatusOr<std::unique_ptr<NcclCommunicator>> c = NcclCommunicator::Create(options);
    INFO(c.status().ToString());
    CHECK(c.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(std::string(c.status().message()).find(needle) != std::string::npos);
  };
  NcclCommunicatorOptions good;
  good.unique_id = *a;
  NcclCommunicatorOptions o = good;
  o.unique_id = "short";
  expect_invalid(o, "unique_id");
  o = good;
  o.world_size = 0;
  expect_invalid(o, "world_size");
  o = good;
  o.rank = 1;
  expect_invalid(o, "rank 1");
  o = good;
  o.cuda_device = VisibleGpus();
  expect_invalid(o, "cuda_device");
  o = good;
  o.init_timeout = absl::ZeroDuration();
  expect_invalid(o, "init_timeout");
}

TEST_CASE("NCCL calls on device pointers; host memory and foreign devices are rejected", "[gpu]") {
  VERL_REQUIRE_GPUS(1);
  const int world = std::min(MaxWorld(), 2);
  std::vector<absl::Status> statuses;
  std::shared_ptr<NcclGroup> group = CreateGroup(world, &statuses);
  for (const auto& s : statuses) REQUIRE(s.ok());
  // Memory on each GPU for the foreign-device check, allocated here: a cudaMalloc/cudaFree on a GPU where a peer's
  // collective kernel waits for this rank can block until that kernel ends, i.e. deadlock.
  std::vector<void*> device_memory(world, nullptr);
  for (int r = 0; r < world; ++r) {
    REQUIRE(cudaSetDevice(r) == cudaSuccess);
    REQUIRE(cudaMalloc(&device_memory[r], 16) == cudaSuccess);
  }
  std::vector<std::string> failures(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      NcclCommunicator& comm = *group->comms[r];
      auto fail = [&](const std::string& what) { failures[r] += what + "\n"; };
      if (comm.stream() == nullptr) fail("stream() is null");
      if (cudaSetDevice(r) != cudaSuccess) return fail("cudaSetDevice");
      // Work queued on stream() before a call runs before it (same stream).
      const int64_t n = 1 << 20;
      float* d = nullptr;
      if (cudaMalloc(reinterpret_cast<void**>(&d), n * sizeof(float)) != cudaSuccess) return fail("cudaMalloc");
      std::vector<float> host(n, static_cast<float>(r + 1));
      if (cudaMemcpyAsync(d, host.data(), n * sizeof(float), cudaMemcpyHostToDevice, comm.stream()) != cudaSuccess) {
        return fail("cudaMemcpyAsync");
      }
      absl::Status s = comm.AllReduce(d, n, DType::kFloat32, ReduceOp::kSum, absl::Seconds(10));
      if (!s.ok()) fail(s.ToString());
      std::vector<float> out(n);
      if (cudaMemcpy(out.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost) != cudaSuccess) fail("cudaMemcpy");
      const float want = static_cast<float>(world * (world + 1) / 2);
      if (out[0] != want || out[n - 1] != want) fail(absl::StrCat("AllReduce got ", out[0], ", want ", want));
      // A host pointer: INVALID_ARGUMENT, and the communicator stays usable.
      s = comm.AllReduce(host.data(), 4, DType::kFloat32, ReduceOp::kSum, absl::Seconds(10));
      if (s.code() != absl::StatusCode::kInvalidArgument ||
          std::string(s.message()).find("host memory") == std::string::npos) {
        fail("host pointer: " + s.ToString());
      }
      if (world == 2) {
        // Memory of the other rank's GPU.
        s = comm.Broadcast(device_memory[1 - r], 4, DType::kFloat32, 0, absl::Seconds(10));
        if (s.code() != absl::StatusCode::kInvalidArgument ||
            std::string(s.message()).find("cuda:" + std::to_string(1 - r)) == std::string::npos) {
          fail("foreign device pointer: " + s.ToString());
        }
      }
      s = comm.Barrier(absl::Seconds(10));
      if (!s.ok()) fail("Barrier after bad args: " + s.ToString());
      // ReduceScatter whose recv is the START of send: in place for rank 0 (NCCL's form), staged for the others.
      const int64_t count = 1001;
      std::vector<int32_t> in(count * world);
      for (int64_t i = 0; i < count * world; ++i) in[i] = static_cast<int32_t>(i * 3 + r);
      if (cudaMemcpy(d, in.data(), in.size() * 4, cudaMemcpyHostToDevice) != cudaSuccess) fail("cudaMemcpy");
      s = comm.ReduceScatter(d, d, count, DType::kInt32, ReduceOp::kMax, absl::Seconds(10));
      if (!s.ok()) fail("ReduceScatter aliased: " + s.ToString());
      std::vector<int32_t> got(count);
      if (cudaMemcpy(got.data(), d, count * 4, cudaMemcpyDeviceToHost) != cudaSuccess) fail("cudaMemcpy");
      for (int64_t i = 0; i < count; ++i) {
        const int32_t want_i = static_cast<int32_t>((r * count + i) * 3 + (world - 1));
        if (got[i] != want_i) {
          fail(absl::StrCat("ReduceScatter aliased element ", i, ": got ", got[i], ", want ", want_i));
          break;
        }
      }
      if (comm.Barrier(absl::Seconds(10)).ok()) (void)cudaFree(d);  // freed once no peer waits on this GPU
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < world; ++r) (void)cudaFree(device_memory[r]);
  for (int r = 0; r < world; ++r) {
    INFO("rank " << r << ":\n" << failures[r]);
    CHECK(failures[r].empty());
  }
}

TEST_CASE("NCCL abort without a relay: peers fail at their timeout, not never", "[gpu]") {
  VERL_REQUIRE_GPUS(2);
  std::vector<absl::Status> statuses;
  std::shared_ptr<NcclGroup> group = CreateGroup(2, &statuses);
  for (const auto& s : statuses) REQUIRE(s.ok());
  group->comms[1]->Abort();
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  void* d = nullptr;
  REQUIRE(cudaMalloc(&d, 4096) == cudaSuccess);
  const auto start = std::chrono::steady_clock::now();
  const absl::Status s = group->comms[0]->AllReduce(d, 1024, DType::kFloat32, ReduceOp::kSum, absl::Milliseconds(500));
  const double elapsed = SecondsSince(start);
  (void)cudaFree(d);
  INFO(s.ToString() << " after " << elapsed << " s");
  CHECK(s.code() == absl::StatusCode::kDeadlineExceeded);
  CHECK(std::string(s.message()).find("peer rank 1") != std::string::npos);
  CHECK(elapsed >= 0.45);
  CHECK(elapsed < 2.0);
  CHECK(group->comms[0]->Barrier(absl::Seconds(1)).code() == absl::StatusCode::kDeadlineExceeded);
  CHECK(group->comms[1]->Barrier(absl::Seconds(1)).code() == absl::StatusCode::kAborted);
}

// Last and tagged [init] so a run can take it apart: it leaves a half-formed NCCL group to ncclCommAbort.
TEST_CASE("NCCL Create times out when a rank never joins", "[gpu][init]") {
  VERL_REQUIRE_GPUS(1);
  absl::StatusOr<std::string> id = NcclCommunicator::CreateUniqueId();
  REQUIRE(id.ok());
  NcclCommunicatorOptions options;
  options.rank = 0;
  options.world_size = 2;
  options.unique_id = *id;
  options.init_timeout = absl::Milliseconds(800);
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::unique_ptr<NcclCommunicator>> c = NcclCommunicator::Create(options);
  const double elapsed = SecondsSince(start);
  INFO(c.status().ToString() << " after " << elapsed << " s");
  CHECK(c.status().code() == absl::StatusCode::kDeadlineExceeded);
  CHECK(std::string(c.status().message()).find("rank 0") != std::string::npos);
  CHECK(elapsed >= 0.7);
  CHECK(elapsed < 5.0);
}

}  // namespace
}  // namespace verl
