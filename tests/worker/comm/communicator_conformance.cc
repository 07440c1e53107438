#include "tests/worker/comm/communicator_conformance.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "catch2/catch.hpp"
#include "worker/model/dtype_convert.h"

namespace verl::testing {
namespace {

constexpr absl::Duration kTimeout = absl::Seconds(10);
constexpr DType kDTypes[] = {DType::kFloat32, DType::kBFloat16, DType::kFloat16, DType::kInt64, DType::kInt32};
constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kAvg};
constexpr int64_t kCounts[] = {1, 7, 1000};

bool IsFloat(DType dtype) {
  return dtype == DType::kFloat32 || dtype == DType::kBFloat16 || dtype == DType::kFloat16;
}

std::string Name(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return "float32";
    case DType::kBFloat16: return "bfloat16";
    case DType::kFloat16: return "float16";
    case DType::kInt64: return "int64";
    case DType::kInt32: return "int32";
    default: return "other";
  }
}

// Test inputs: floats are multiples of 0.5 in [-10, 10] so that every sum over <= 4 ranks is exact in bfloat16;
// integers are large enough to catch a wrong element width and include negatives.
double Value(DType dtype, int rank, int64_t i, int salt = 0) {
  const int64_t v = (rank * 131 + i * 17 + salt * 7 + 5) % 41 - 20;
  if (IsFloat(dtype)) return static_cast<double>(v) * 0.5;
  return static_cast<double>(v * 100003 + rank);
}

// One element of `dtype` holding `v` (floats are rounded to nearest even on the way to 16 bits).
void Put(DType dtype, double v, char* out) {
  switch (dtype) {
    case DType::kFloat32: {
      const float f = static_cast<float>(v);
      std::memcpy(out, &f, 4);
      break;
    }
    case DType::kBFloat16: {
      const uint16_t b = Float32ToBFloat16(static_cast<float>(v));
      std::memcpy(out, &b, 2);
      break;
    }
    case DType::kFloat16: {
      const uint16_t b = Float32ToFloat16(static_cast<float>(v));
      std::memcpy(out, &b, 2);
      break;
    }
    case DType::kInt64: {
      const int64_t x = static_cast<int64_t>(v);
      std::memcpy(out, &x, 8);
      break;
    }
    case DType::kInt32: {
      const int32_t x = static_cast<int32_t>(v);
      std::memcpy(out, &x, 4);
      break;
    }
    default: break;
  }
}

double Get(DType dtype, const std::string& bytes, int64_t i) {
  const char* p = bytes.data() + i * DTypeSize(dtype);
  switch (dtype) {
    case DType::kFloat32: { float f; std::memcpy(&f, p, 4); return f; }
    case DType::kBFloat16: { uint16_t b; std::memcpy(&b, p, 2); return BFloat16ToFloat32(b); }
    case DType::kFloat16: { uint16_t b; std::memcpy(&b, p, 2); return Float16ToFloat32(b); }
    case DType::kInt64: { int64_t x; std::memcpy(&x, p, 8); return static_cast<double>(x); }
    case DType::kInt32: { int32_t x; std::memcpy(&x, p, 4); return x; }
    default: return 0;
  }
}

// `count` elements of rank `rank`'s input starting at element `first`.
std::string Input(DType dtype, int rank, int64_t count, int64_t first = 0, int salt = 0) {
  std::string bytes(count * DTypeSize(dtype), '\0');
  for (int64_t i = 0; i < count; ++i) {
    Put(dtype, Value(dtype, rank, first + i, salt), bytes.data() + i * DTypeSize(dtype));
  }
  return bytes;
}

// The reduction over all ranks of elements [first, first + count), computed the way the contract defines it:
// floats reduced exactly (the inputs make that possible), avg divided in float32, then rounded once to the dtype;
// integers divided with truncation toward zero.
std::string Reduced(DType dtype, ReduceOp op, int world, int64_t count, int64_t first) {
  std::string bytes(count * DTypeSize(dtype), '\0');
  for (int64_t i = 0; i < count; ++i) {
    double acc = Value(dtype, 0, first + i);
    for (int r = 1; r < world; ++r) {
      const double v = Value(dtype, r, first + i);
      if (op == ReduceOp::kSum || op == ReduceOp::kAvg) acc += v;
      if (op == ReduceOp::kMax) acc = std::max(acc, v);
      if (op == ReduceOp::kMin) acc = std::min(acc, v);
    }
    if (op == ReduceOp::kAvg) {
      if (IsFloat(dtype)) {
        acc = static_cast<float>(acc) / static_cast<float>(world);
      } else {
        acc = static_cast<double>(static_cast<int64_t>(acc) / world);
      }
    }
    Put(dtype, acc, bytes.data() + i * DTypeSize(dtype));
  }
  return bytes;
}

// Empty when equal, else a description of the first difference.
std::string Compare(DType dtype, const std::string& got, const std::string& want) {
  if (got.size() != want.size()) return absl::StrCat("size ", got.size(), " != ", want.size());
  const int64_t n = static_cast<int64_t>(got.size()) / DTypeSize(dtype);
  for (int64_t i = 0; i < n; ++i) {
    if (std::memcmp(got.data() + i * DTypeSize(dtype), want.data() + i * DTypeSize(dtype), DTypeSize(dtype)) != 0) {
      return absl::StrCat("element ", i, ": got ", Get(dtype, got, i), ", want ", Get(dtype, want, i));
    }
  }
  return "";
}

using Failures = std::vector<std::string>;
using RankBody = std::function<void(int rank, Communicator& comm, Failures& failures)>;

std::vector<std::unique_ptr<Communicator>> MakeGroup(const CommGroupFactory& factory, int world) {
  std::vector<absl::StatusOr<std::unique_ptr<Communicator>>> created = factory(world);
  REQUIRE(static_cast<int>(created.size()) == world);
  std::vector<std::unique_ptr<Communicator>> comms;
  for (auto& c : created) {
    INFO(c.status().ToString());
    REQUIRE(c.ok());
    comms.push_back(std::move(*c));
  }
  return comms;
}

// Runs body on one thread per rank and checks, on this thread, that no rank recorded a failure.
void RunOnRanks(std::vector<std::unique_ptr<Communicator>>& comms, const RankBody& body) {
  const int world = static_cast<int>(comms.size());
  std::vector<Failures> failures(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] { body(r, *comms[r], failures[r]); });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < world; ++r) {
    INFO("world " << world << " rank " << r << ":\n" << absl::StrJoin(failures[r], "\n"));
    CHECK(failures[r].empty());
  }
}

void ExpectOk(const absl::Status& s, const std::string& what, Failures& failures) {
  if (!s.ok()) failures.push_back(absl::StrCat(what, ": ", s.ToString()));
}

void ExpectBytes(DType dtype, const std::string& got, const std::string& want, const std::string& what,
                 Failures& failures) {
  const std::string diff = Compare(dtype, got, want);
  if (!diff.empty()) failures.push_back(absl::StrCat(what, ": ", diff));
}

double Seconds(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

void RunCollectiveConformance(const CommGroupFactory& factory, int world) {
  std::vector<std::unique_ptr<Communicator>> comms = MakeGroup(factory, world);
  std::atomic<int> arrivals{0};
  RunOnRanks(comms, [&](int rank, Communicator& comm, Failures& failures) {
    if (comm.rank() != rank || comm.world_size() != world) failures.push_back("wrong rank() or world_size()");
    for (DType dtype : kDTypes) {
      const int64_t esize = DTypeSize(dtype);
      for (int64_t count : kCounts) {
        const std::string tag = absl::StrCat(Name(dtype), " count ", count);
        for (ReduceOp op : kOps) {
          const std::string what = absl::StrCat(tag, " op ", std::string(ReduceOpName(op)));
          std::string data = Input(dtype, rank, count);
          ExpectOk(comm.AllReduce(data.data(), count, dtype, op, kTimeout), "AllReduce " + what, failures);
          ExpectBytes(dtype, data, Reduced(dtype, op, world, count, 0), "AllReduce " + what, failures);

          // ReduceScatter: rank r gets block r of the reduction of world * count elements.
          const std::string send = Input(dtype, rank, world * count);
          std::string recv(count * esize, '\x7f');
          ExpectOk(comm.ReduceScatter(send.data(), recv.data(), count, dtype, op, kTimeout), "ReduceScatter " + what,
                   failures);
          ExpectBytes(dtype, recv, Reduced(dtype, op, world, count, rank * count), "ReduceScatter " + what,
                      failures);
        }
        // AllGather: the concatenation of every rank's input.
        const std::string send = Input(dtype, rank, count);
        std::string gathered(world * count * esize, '\x7f');
        ExpectOk(comm.AllGather(send.data(), count, gathered.data(), dtype, kTimeout), "AllGather " + tag, failures);
        std::string want;
        for (int r = 0; r < world; ++r) want += Input(dtype, r, count);
        ExpectBytes(dtype, gathered, want, "AllGather " + tag, failures);

        for (int root = 0; root < world; ++root) {
          std::string data = Input(dtype, rank, count, 0, /*salt=*/root + 1);
          ExpectOk(comm.Broadcast(data.data(), count, dtype, root, kTimeout), absl::StrCat("Broadcast ", tag),
                   failures);
          ExpectBytes(dtype, data, Input(dtype, root, count, 0, root + 1),
                      absl::StrCat("Broadcast ", tag, " root ", root), failures);
        }
      }
      // AllReduce of nothing is a no-op that still synchronizes nothing and succeeds.
      ExpectOk(comm.AllReduce(nullptr, 0, dtype, ReduceOp::kSum, kTimeout), "AllReduce count 0", failures);

      // Send/Recv around the ring; even ranks send first so no pair waits on each other.
      if (world > 1) {
        const int next = (rank + 1) % world;
        const int prev = (rank + world - 1) % world;
        const int64_t count = 1000;
        const std::string out = Input(dtype, rank, count, 0, 9);
        std::string in(count * esize, '\0');
        const std::string what = absl::StrCat("Send/Recv ", Name(dtype));
        if (rank % 2 == 0) {
          ExpectOk(comm.Send(out.data(), count, dtype, next, kTimeout), what, failures);
          ExpectOk(comm.Recv(in.data(), count, dtype, prev, kTimeout), what, failures);
        } else {
          ExpectOk(comm.Recv(in.data(), count, dtype, prev, kTimeout), what, failures);
          ExpectOk(comm.Send(out.data(), count, dtype, next, kTimeout), what, failures);
        }
        ExpectBytes(dtype, in, Input(dtype, prev, count, 0, 9), what, failures);
      }
    }
    // AllGather in place: the send block is already at recv + rank * count.
    {
      const int64_t count = 7;
      std::string buf(world * count * 4, '\0');
      const std::string mine = Input(DType::kInt32, rank, count);
      std::memcpy(buf.data() + rank * count * 4, mine.data(), mine.size());
      ExpectOk(comm.AllGather(buf.data() + rank * count * 4, count, buf.data(), DType::kInt32, kTimeout),
               "AllGather in place", failures);
      std::string want;
      for (int r = 0; r < world; ++r) want += Input(DType::kInt32, r, count);
      ExpectBytes(DType::kInt32, buf, want, "AllGather in place", failures);
    }
    // Barrier: nobody leaves round k before everybody arrived at round k.
    for (int round = 0; round < 3; ++round) {
      arrivals.fetch_add(1);
      ExpectOk(comm.Barrier(kTimeout), "Barrier", failures);
      if (arrivals.load() < world * (round + 1)) {
        failures.push_back(absl::StrCat("Barrier round ", round, " returned before all ranks arrived"));
      }
      // A second barrier keeps a fast rank from incrementing the next round's count before the check above.
      ExpectOk(comm.Barrier(kTimeout), "Barrier", failures);
    }
  });
}

namespace {

// A pseudo-random value in [-1, 1) that is generally not representable in 16 bits.
double Noise(int rank, int64_t i) {
  uint64_t h = (static_cast<uint64_t>(rank + 1) * 0x9E3779B97F4A7C15ull) ^
               (static_cast<uint64_t>(i) * 0xBF58476D1CE4E5B9ull);
  h ^= h >> 31;
  h *= 0x94D049BB133111EBull;
  h ^= h >> 29;
  return static_cast<double>(h >> 11) / static_cast<double>(1ull << 52) - 1.0;
}

// Relative half-ulp of each float dtype, times the world size to admit per-step rounding in other backends.
double Tolerance(DType dtype, double magnitude, int world) {
  const double ulp = dtype == DType::kBFloat16 ? 1.0 / 256 : dtype == DType::kFloat16 ? 1.0 / 2048 : 1.0 / (1 << 23);
  return world * ulp * magnitude + 1e-6;
}

}  // namespace

void RunLargeMessageConformance(const CommGroupFactory& factory, int world) {
  std::vector<std::unique_ptr<Communicator>> comms = MakeGroup(factory, world);
  RunOnRanks(comms, [&](int rank, Communicator& comm, Failures& failures) {
    // Float AllReduce of noise: within rounding of the exact (double) sum of the rounded inputs.
    for (DType dtype : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
      const int64_t count = dtype == DType::kFloat32 ? 3'000'001 : 1'000'003;
      const int64_t esize = DTypeSize(dtype);
      auto input = [&](int r) {
        std::string bytes(count * esize, '\0');
        for (int64_t i = 0; i < count; ++i) Put(dtype, Noise(r, i), bytes.data() + i * esize);
        return bytes;
      };
      std::string data = input(rank);
      ExpectOk(comm.AllReduce(data.data(), count, dtype, ReduceOp::kAvg, kTimeout), "large AllReduce", failures);
      std::vector<std::string> inputs;
      for (int r = 0; r < world; ++r) inputs.push_back(input(r));
      int64_t bad = 0;
      for (int64_t i = 0; i < count; ++i) {
        double sum = 0, magnitude = 0;
        for (int r = 0; r < world; ++r) {
          sum += Get(dtype, inputs[r], i);
          magnitude += std::abs(Get(dtype, inputs[r], i));
        }
        const double got = Get(dtype, data, i);
        if (std::abs(got - sum / world) > Tolerance(dtype, magnitude / world, world)) {
          if (bad++ == 0) {
            failures.push_back(absl::StrCat("large AllReduce ", Name(dtype), " element ", i, ": got ", got,
                                            ", want ", sum / world));
          }
        }
      }
    }
    // Integer ReduceScatter and AllGather of several MB, checked exactly.
    {
      const int64_t count = 1'000'003;
      const std::string send = Input(DType::kInt64, rank, world * count);
      std::string recv(count * 8, '\0');
      ExpectOk(comm.ReduceScatter(send.data(), recv.data(), count, DType::kInt64, ReduceOp::kSum, kTimeout),
               "large ReduceScatter", failures);
      ExpectBytes(DType::kInt64, recv, Reduced(DType::kInt64, ReduceOp::kSum, world, count, rank * count),
                  "large ReduceScatter", failures);
      const std::string mine = Input(DType::kInt32, rank, count);
      std::string gathered(world * count * 4, '\0');
      ExpectOk(comm.AllGather(mine.data(), count, gathered.data(), DType::kInt32, kTimeout), "large AllGather",
               failures);
      std::string want;
      for (int r = 0; r < world; ++r) want += Input(DType::kInt32, r, count);
      ExpectBytes(DType::kInt32, gathered, want, "large AllGather", failures);
    }
    // A large Send/Recv between the first and last rank, and a large Broadcast from the last rank.
    if (world > 1) {
      const int64_t count = 2'000'000;
      const std::string out = Input(DType::kInt32, rank, count, 0, 3);
      std::string in(count * 4, '\0');
      if (rank == 0) {
        ExpectOk(comm.Send(out.data(), count, DType::kInt32, world - 1, kTimeout), "large Send", failures);
      } else if (rank == world - 1) {
        ExpectOk(comm.Recv(in.data(), count, DType::kInt32, 0, kTimeout), "large Recv", failures);
        ExpectBytes(DType::kInt32, in, Input(DType::kInt32, 0, count, 0, 3), "large Recv", failures);
      }
      std::string data = Input(DType::kBFloat16, rank, count, 0, 5);
      ExpectOk(comm.Broadcast(data.data(), count, DType::kBFloat16, world - 1, kTimeout), "large Broadcast",
               failures);
      ExpectBytes(DType::kBFloat16, data, Input(DType::kBFloat16, world - 1, count, 0, 5), "large Broadcast",
                  failures);
    }
  });
}

void RunMissingRankConformance(const CommGroupFactory& factory, int world) {
  REQUIRE(world >= 2);
  const int missing = world / 2;
  for (const bool use_barrier : {true, false}) {
    INFO("world " << world << (use_barrier ? " Barrier" : " AllReduce") << ", rank " << missing << " missing");
    std::vector<std::unique_ptr<Communicator>> comms = MakeGroup(factory, world);
    std::vector<absl::Status> results(world);
    std::vector<double> elapsed(world, 0);
    std::vector<std::thread> threads;
    for (int r = 0; r < world; ++r) {
      if (r == missing) continue;
      threads.emplace_back([&, r] {
        const auto start = std::chrono::steady_clock::now();
        std::vector<float> data(1000, 1.0f);
        results[r] = use_barrier
                         ? comms[r]->Barrier(absl::Milliseconds(500))
                         : comms[r]->AllReduce(data.data(), 1000, DType::kFloat32, ReduceOp::kSum,
                                               absl::Milliseconds(500));
        elapsed[r] = Seconds(start);
      });
    }
    for (auto& t : threads) t.join();
    for (int r = 0; r < world; ++r) {
      if (r == missing) continue;
      const std::string message(results[r].message());
      INFO("rank " << r << ": " << results[r].ToString() << " after " << elapsed[r] << " s");
      CHECK(results[r].code() == absl::StatusCode::kDeadlineExceeded);
      CHECK(message.find(use_barrier ? "Barrier" : "AllReduce") != std::string::npos);
      CHECK(message.find(absl::StrCat("rank ", r)) != std::string::npos);
      // Every rank waits on the missing one directly in a Barrier, and in a 2-rank AllReduce.
      if (use_barrier || world == 2) CHECK(message.find(absl::StrCat("peer rank ", missing)) != std::string::npos);
      CHECK(elapsed[r] >= 0.45);
      CHECK(elapsed[r] < 1.5);
    }
  }
}

void RunAbortConformance(const CommGroupFactory& factory, int world) {
  REQUIRE(world >= 2);
  for (const bool pending : {true, false}) {
    const int aborter = pending ? 1 : world - 1;
    INFO("world " << world << ", rank " << aborter << " aborts " << (pending ? "during a call" : "while idle"));
    std::vector<std::unique_ptr<Communicator>> comms = MakeGroup(factory, world);
    std::vector<absl::Status> results(world), later(world);
    std::vector<double> elapsed(world, 0);
    std::vector<std::thread> threads;
    for (int r = 0; r < world; ++r) {
      threads.emplace_back([&, r] {
        Communicator& comm = *comms[r];
        const auto start = std::chrono::steady_clock::now();
        if (r == aborter) {
          if (pending) {
            // A receive far larger than anything the peers send, so it is still pending when Abort() comes.
            std::thread killer([&comm] {
              std::this_thread::sleep_for(std::chrono::milliseconds(150));
              comm.Abort();
            });
            std::vector<float> big(1 << 20);
            results[r] = comm.Recv(big.data(), static_cast<int64_t>(big.size()), DType::kFloat32,
                                   (r + world - 1) % world, kTimeout);
            killer.join();
          } else {
            std::this_thread::sleep_for(std::chrono::milliseconds(150));
            comm.Abort();
            comm.Abort();  // idempotent
            results[r] = absl::AbortedError("idle");
          }
        } else {
          std::vector<float> data(1000, 1.0f);
          results[r] = comm.AllReduce(data.data(), 1000, DType::kFloat32, ReduceOp::kSum, kTimeout);
        }
        elapsed[r] = Seconds(start);
        later[r] = comm.Barrier(absl::Seconds(1));
      });
    }
    for (auto& t : threads) t.join();
    for (int r = 0; r < world; ++r) {
      INFO("rank " << r << ": " << results[r].ToString() << " after " << elapsed[r] << " s; later: "
                   << later[r].ToString());
      CHECK(elapsed[r] < 2.0);
      if (r == aborter) {
        CHECK(results[r].code() == absl::StatusCode::kAborted);
        CHECK(later[r].code() == absl::StatusCode::kAborted);
      } else {
        CHECK(results[r].code() == absl::StatusCode::kUnavailable);
        CHECK(std::string(results[r].message()).find(absl::StrCat("peer rank ", aborter)) != std::string::npos);
        CHECK(later[r].code() == absl::StatusCode::kUnavailable);
      }
    }
  }
}

void RunBadArgumentConformance(const CommGroupFactory& factory, int world) {
  REQUIRE(world >= 2);
  std::vector<std::unique_ptr<Communicator>> comms = MakeGroup(factory, world);
  RunOnRanks(comms, [&](int rank, Communicator& comm, Failures& failures) {
    std::vector<float> buf(4 * world, 1.0f);
    std::vector<uint8_t> bytes(4, 1);
    auto expect_invalid = [&](const absl::Status& s, const std::string& what, const std::string& needle) {
      if (s.code() != absl::StatusCode::kInvalidArgument ||
          std::string(s.message()).find(needle) == std::string::npos) {
        failures.push_back(absl::StrCat(what, ": want INVALID_ARGUMENT mentioning \"", needle, "\", got ",
                                        s.ToString()));
      }
    };
    const DType f32 = DType::kFloat32;
    expect_invalid(comm.AllReduce(nullptr, 4, f32, ReduceOp::kSum, kTimeout), "null AllReduce", "null");
    expect_invalid(comm.AllReduce(buf.data(), -1, f32, ReduceOp::kSum, kTimeout), "negative count", "count");
    expect_invalid(comm.AllReduce(bytes.data(), 4, DType::kUInt8, ReduceOp::kSum, kTimeout), "uint8 reduce",
                   "uint8");
    expect_invalid(comm.ReduceScatter(buf.data(), nullptr, 4, f32, ReduceOp::kSum, kTimeout), "null recv", "null");
    expect_invalid(comm.AllGather(nullptr, 4, buf.data(), f32, kTimeout), "null send", "null");
    expect_invalid(comm.Broadcast(buf.data(), 4, f32, world, kTimeout), "root too large", "root");
    expect_invalid(comm.Broadcast(buf.data(), 4, f32, -1, kTimeout), "negative root", "root");
    expect_invalid(comm.Send(buf.data(), 4, f32, world, kTimeout), "peer too large", "peer");
    expect_invalid(comm.Send(buf.data(), 4, f32, rank, kTimeout), "send to self", "peer");
    expect_invalid(comm.Recv(buf.data(), 4, f32, -1, kTimeout), "negative peer", "peer");
    expect_invalid(comm.Recv(nullptr, 4, f32, (rank + 1) % world, kTimeout), "null Recv", "null");
    // The communicator is still usable.
    std::vector<int64_t> one = {rank + 1};
    ExpectOk(comm.AllReduce(one.data(), 1, DType::kInt64, ReduceOp::kSum, kTimeout), "AllReduce after bad args",
             failures);
    if (one[0] != static_cast<int64_t>(world) * (world + 1) / 2) {
      failures.push_back(absl::StrCat("AllReduce after bad args: got ", one[0]));
    }
  });
}

}  // namespace verl::testing
