// CatchTorch, the exception wall of the LibTorch side: which status each exception becomes.

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/rank/torch_util.h"

namespace verl {
namespace {

using Catch::Matchers::Contains;
using Catch::Matchers::EndsWith;

absl::StatusOr<int> DeviceOutOfMemory() {
  TORCH_CHECK_WITH(OutOfMemoryError, false, "CUDA out of memory. Tried to allocate 2.00 GiB");
  return 0;
}

TEST_CASE("CatchTorch: an allocation that fails is ResourceExhausted, naming the phase's memory settings",
          "[worker][torch]") {
  absl::StatusOr<int> r = CatchTorch("rank 0 UpdateActor", DeviceOutOfMemory);
  CHECK(absl::IsResourceExhausted(r.status()));
  CHECK_THAT(std::string(r.status().message()),
             Contains("rank 0 UpdateActor: out of memory: CUDA out of memory. Tried to allocate 2.00 GiB"));
  r = CatchTorch("rank 0 UpdateActor", "a.micro_batch or a.max_token_len", DeviceOutOfMemory);
  CHECK(absl::IsResourceExhausted(r.status()));
  CHECK_THAT(std::string(r.status().message()),
             EndsWith("[the settings that bound this phase's memory: a.micro_batch or a.max_token_len]"));
  // A real one: host memory for 1 EiB.
  r = CatchTorch("rank 0 Generate", "the keys", []() -> absl::StatusOr<int> {
    const at::Tensor t = at::empty({int64_t{1} << 60}, at::kByte);
    return static_cast<int>(t.dim());
  });
  INFO(r.status().ToString());
  CHECK(absl::IsResourceExhausted(r.status()));
  CHECK_THAT(std::string(r.status().message()), Contains("rank 0 Generate: out of memory: ") && Contains("the keys"));
}

TEST_CASE("CatchTorch: other errors stay Internal and get no memory hint", "[worker][torch]") {
  absl::StatusOr<int> r = CatchTorch("rank 0 UpdateActor", "the keys", []() -> absl::StatusOr<int> {
    TORCH_CHECK(false, "shapes do not match");
    return 0;
  });
  CHECK(absl::IsInternal(r.status()));
  CHECK_THAT(std::string(r.status().message()), Contains("rank 0 UpdateActor: shapes do not match"));
  CHECK_THAT(std::string(r.status().message()), !Contains("the keys"));
  // A budget's own ResourceExhausted (it names its key already) passes unchanged.
  const absl::Status budget = absl::ResourceExhaustedError("gpu_memory_utilization 0.1 leaves 0 MiB: raise it");
  CHECK(WithMemoryHint(absl::StatusOr<int>(budget), "the keys").status() == budget);
  CHECK(WithMemoryHint(budget, "the keys") == budget);
}

}  // namespace
}  // namespace verl
