#ifndef VERL_WORKER_RANK_TORCH_UTIL_H_
#define VERL_WORKER_RANK_TORCH_UTIL_H_

// LibTorch-side helpers: dtype mapping, HostTensor <-> at::Tensor, and the exception wall (c10::Error and
// std::exception become absl::Status with context). Only for code behind the wall (worker/rank, model, rollout, ...).

#include <ATen/ATen.h>

#include <exception>
#include <string>
#include <string_view>
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

// What CatchTorch puts after the context of an allocation that failed (device or host memory ran out).
inline constexpr char kOutOfMemory[] = "out of memory: ";

// Runs fn() and turns any exception into an Internal status prefixed by `context` (a StatusError into its own
// status, annotated with `context`; an allocation that failed into ResourceExhausted, "<context>: out of memory: ...").
// fn returns absl::Status or absl::StatusOr<T>.
template <typename Fn>
auto CatchTorch(const std::string& context, Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const StatusError& e) {
    return absl::Status(e.status().code(), absl::StrCat(context, ": ", e.status().message()));
  } catch (const c10::OutOfMemoryError& e) {  // the CUDA caching allocator's
    return absl::ResourceExhaustedError(absl::StrCat(context, ": ", kOutOfMemory, e.what_without_backtrace()));
  } catch (const c10::Error& e) {
    // The CPU allocator's failure is a plain c10::Error; its message is how it is told apart.
    if (std::string_view(e.what_without_backtrace()).find("DefaultCPUAllocator: can't allocate memory") !=
        std::string_view::npos) {
      return absl::ResourceExhaustedError(absl::StrCat(context, ": ", kOutOfMemory, e.what_without_backtrace()));
    }
    return absl::InternalError(absl::StrCat(context, ": ", e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(context, ": ", e.what()));
  }
}

// `result` with, where an allocation failed in it (CatchTorch's kOutOfMemory), the settings that bound the phase's
// memory named after the message, so that a user knows what to lower.
template <typename T>
T WithMemoryHint(T result, const std::string& keys) {
  absl::Status s;
  if constexpr (std::is_same_v<T, absl::Status>) {
    s = result;
  } else {
    s = result.status();
  }
  if (!absl::IsResourceExhausted(s) || s.message().find(kOutOfMemory) == std::string::npos) return result;
  return absl::Status(s.code(), absl::StrCat(s.message(), " [the settings that bound this phase's memory: ", keys, "]"));
}

// CatchTorch for a phase whose memory `memory_keys` bound: an allocation that failed names them (WithMemoryHint).
template <typename Fn>
auto CatchTorch(const std::string& context, const std::string& memory_keys, Fn&& fn) -> decltype(fn()) {
  return WithMemoryHint(CatchTorch(context, std::forward<Fn>(fn)), memory_keys);
}

}  // namespace verl

#endif  // VERL_WORKER_RANK_TORCH_UTIL_H_
