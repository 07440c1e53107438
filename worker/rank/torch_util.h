#ifndef VERL_WORKER_RANK_TORCH_UTIL_H_
#define VERL_WORKER_RANK_TORCH_UTIL_H_

// LibTorch-side helpers: dtype mapping, HostTensor <-> at::Tensor, and the exception wall (c10::Error and
// std::exception become absl::Status with context). Only for code behind the wall (worker/rank, model, rollout, ...).

#include <ATen/ATen.h>

#include <exception>
#include <string>
#include <type_traits>
#include <utility>

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

// Carries an absl::Status through code that can only throw (a callback inside a LibTorch computation, such as a
// collective in a reduce function); CatchTorch turns it back into that status, code included.
class StatusError : public std::exception {
 public:
  explicit StatusError(absl::Status status) : status_(std::move(status)), what_(status_.ToString()) {}
  const absl::Status& status() const { return status_; }
  const char* what() const noexcept override { return what_.c_str(); }

 private:
  absl::Status status_;
  std::string what_;
};

// Runs fn() and turns any exception into an Internal status prefixed by `context` (a StatusError into its own
// status, annotated with `context`). fn returns absl::Status or absl::StatusOr<T>.
template <typename Fn>
auto CatchTorch(const std::string& context, Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const StatusError& e) {
    return absl::Status(e.status().code(), absl::StrCat(context, ": ", e.status().message()));
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat(context, ": ", e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(context, ": ", e.what()));
  }
}

}  // namespace verl

#endif  // VERL_WORKER_RANK_TORCH_UTIL_H_
