#ifndef VERL_WORKER_RANK_TORCH_UTIL_H_
#define VERL_WORKER_RANK_TORCH_UTIL_H_

// LibTorch-side helpers: dtype mapping, HostTensor <-> at::Tensor, and the exception wall (c10::Error and
// std::exception become absl::Status with context). Only for code behind the wall (worker/rank, model, rollout, ...).

#include <ATen/ATen.h>

#include <exception>
#include <string>
#include <type_traits>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "worker/rank/host_tensor.h"

namespace verl {

at::ScalarType ToScalarType(DType dtype);
DType FromScalarType(at::ScalarType type);

// Copies a CPU-resident copy of `t` into a HostTensor.
HostTensor ToHostTensor(const at::Tensor& t);
// A tensor owning a copy of `h`'s bytes.
at::Tensor FromHostTensor(const HostTensor& h);

std::string ShapeOf(const at::Tensor& t);

// Runs fn() and turns any exception into an Internal status prefixed by `context`. fn returns absl::Status or
// absl::StatusOr<T>.
template <typename Fn>
auto CatchTorch(const std::string& context, Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat(context, ": ", e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(context, ": ", e.what()));
  }
}

}  // namespace verl

#endif  // VERL_WORKER_RANK_TORCH_UTIL_H_
