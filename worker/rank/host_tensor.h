#ifndef VERL_WORKER_RANK_HOST_TENSOR_H_
#define VERL_WORKER_RANK_HOST_TENSOR_H_

// A tensor as plain host bytes: what crosses the wall between the protobuf side (worker/service) and the LibTorch
// side (worker/rank), and what safetensors files hold. Row-major, little-endian, no strides.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace verl {

enum class DType : int32_t { kFloat32 = 0, kBFloat16 = 1, kFloat16 = 2, kInt64 = 3, kInt32 = 4, kUInt8 = 5, kBool = 6 };

// Bytes per element of `dtype`.
inline int64_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return 4;
    case DType::kBFloat16: return 2;
    case DType::kFloat16: return 2;
    case DType::kInt64: return 8;
    case DType::kInt32: return 4;
    case DType::kUInt8: return 1;
    case DType::kBool: return 1;
  }
  return 0;
}

// "float32", "bfloat16", "float16", "int64", "int32", "uint8", "bool" (also HF's torch_dtype names); "dtype(N)" for a
// value outside the enum.
inline std::string DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return "float32";
    case DType::kBFloat16: return "bfloat16";
    case DType::kFloat16: return "float16";
    case DType::kInt64: return "int64";
    case DType::kInt32: return "int32";
    case DType::kUInt8: return "uint8";
    case DType::kBool: return "bool";
  }
  return "dtype(" + std::to_string(static_cast<int>(dtype)) + ")";
}

struct HostTensor {
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;
  std::string bytes;  // numel * DTypeSize(dtype) bytes

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
};

}  // namespace verl

#endif  // VERL_WORKER_RANK_HOST_TENSOR_H_
