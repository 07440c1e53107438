#include "worker/comm/communicator.h"

#include <limits>

#include "absl/strings/str_cat.h"

namespace verl {

std::string_view ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kMin: return "min";
    case ReduceOp::kAvg: return "avg";
  }
  return "unknown";
}

absl::Status CheckBuffer(const std::string& prefix, const void* data, int64_t count, DType dtype, const char* what) {
  if (count < 0) return absl::InvalidArgumentError(absl::StrCat(prefix, "count must be >= 0, got ", count));
  if (DTypeSize(dtype) <= 0) return absl::InvalidArgumentError(absl::StrCat(prefix, "unknown ", DTypeName(dtype)));
  if (count > std::numeric_limits<int64_t>::max() / 64) {
    return absl::InvalidArgumentError(absl::StrCat(prefix, "count ", count, " is too large"));
  }
  if (data == nullptr && count > 0) {
    return absl::InvalidArgumentError(absl::StrCat(prefix, what, " is null with count ", count));
  }
  return absl::OkStatus();
}

absl::Status CheckReduction(const std::string& prefix, DType dtype, ReduceOp op) {
  if (dtype != DType::kFloat32 && dtype != DType::kBFloat16 && dtype != DType::kFloat16 && dtype != DType::kInt32 &&
      dtype != DType::kInt64) {
    return absl::InvalidArgumentError(
        absl::StrCat(prefix, "reductions support float32, bfloat16, float16, int32 and int64, not ", DTypeName(dtype)));
  }
  if (op != ReduceOp::kSum && op != ReduceOp::kMax && op != ReduceOp::kMin && op != ReduceOp::kAvg) {
    return absl::InvalidArgumentError(absl::StrCat(prefix, "unknown ReduceOp ", static_cast<int>(op)));
  }
  return absl::OkStatus();
}

}  // namespace verl
