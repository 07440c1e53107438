#include "worker/rank/torch_util.h"

#include <cstring>

namespace verl {

at::ScalarType ToScalarType(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return at::kFloat;
    case DType::kBFloat16: return at::kBFloat16;
    case DType::kFloat16: return at::kHalf;
    case DType::kInt64: return at::kLong;
    case DType::kInt32: return at::kInt;
    case DType::kUInt8: return at::kByte;
    case DType::kBool: return at::kBool;
  }
  return at::kFloat;
}

DType FromScalarType(at::ScalarType type) {
  switch (type) {
    case at::kFloat: return DType::kFloat32;
    case at::kBFloat16: return DType::kBFloat16;
    case at::kHalf: return DType::kFloat16;
    case at::kLong: return DType::kInt64;
    case at::kInt: return DType::kInt32;
    case at::kByte: return DType::kUInt8;
    case at::kBool: return DType::kBool;
    default: throw std::invalid_argument(std::string("unsupported tensor dtype ") + c10::toString(type));
  }
}

HostTensor ToHostTensor(const at::Tensor& t) {
  at::Tensor c = t.detach().to(at::kCPU).contiguous();
  HostTensor h;
  h.dtype = FromScalarType(c.scalar_type());
  h.shape.assign(c.sizes().begin(), c.sizes().end());
  h.bytes.assign(static_cast<const char*>(c.data_ptr()), c.nbytes());
  return h;
}

at::Tensor FromHostTensor(const HostTensor& h) {
  at::Tensor t = at::empty(h.shape, at::TensorOptions().dtype(ToScalarType(h.dtype)));
  if (static_cast<size_t>(t.nbytes()) != h.bytes.size()) {
    throw std::invalid_argument("tensor bytes do not match its shape and dtype");
  }
  std::memcpy(t.data_ptr(), h.bytes.data(), h.bytes.size());
  return t;
}

std::string ShapeOf(const at::Tensor& t) {
  if (!t.defined()) return "undefined";
  std::string s = "[";
  for (int64_t i = 0; i < t.dim(); ++i) s += (i ? ", " : "") + std::to_string(t.size(i));
  return s + "]";
}

}  // namespace verl
