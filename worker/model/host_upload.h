#ifndef VERL_WORKER_MODEL_HOST_UPLOAD_H_
#define VERL_WORKER_MODEL_HOST_UPLOAD_H_

// Host-built tensors (index lists, sequence offsets) onto the device without waiting for it. ATen's copy from pageable
// host memory (`.to(device)`) synchronizes the stream after the copy, so a pass that uploads what it planned on the
// host makes the host wait until the device has run everything queued before it; the device then idles while the host
// plans and launches the next pass. From pinned memory the copy is queued like a kernel and the host goes on (the
// caching host allocator keeps the pinned block until the copy has run).

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

namespace verl {

// `host` (a CPU tensor) on `device`, queued on the current stream; `host` itself when `device` is the CPU.
inline at::Tensor UploadAsync(const at::Tensor& host, at::Device device) {
  if (device.is_cpu()) return host;
  return host.pin_memory().to(device, /*non_blocking=*/true);
}

// The values as an int64 (int32) tensor on `device` (UploadAsync).
inline at::Tensor LongsOn(const std::vector<int64_t>& v, at::Device device) {
  return UploadAsync(at::tensor(v, at::TensorOptions().dtype(at::kLong)), device);
}
inline at::Tensor IntsOn(const std::vector<int32_t>& v, at::Device device) {
  return UploadAsync(at::tensor(v, at::TensorOptions().dtype(at::kInt)), device);
}

// `t` on the host: itself when it is a CPU tensor, else read back (which waits for the device).
inline at::Tensor OnHost(const at::Tensor& t) { return t.is_cpu() ? t : t.to(at::kCPU); }

// A 2-D tensor on the host as `dtype` with each row's values adjacent, to read row r at data_ptr() + r * stride(0):
// `t` itself where it already is (a view narrowed along its columns included), else one copy. Planning reads the
// batch's host copies this way: copies of them took milliseconds each on the GPU machine's host (fresh pages).
inline at::Tensor HostRows(const at::Tensor& t, at::ScalarType dtype) {
  TORCH_CHECK(t.dim() == 2, "HostRows: a 2-D tensor, got ", t.dim(), " dimensions");
  if (t.is_cpu() && t.scalar_type() == dtype && (t.size(1) <= 1 || t.stride(1) == 1)) return t;
  return t.to(at::kCPU, dtype).contiguous();
}

}  // namespace verl

#endif  // VERL_WORKER_MODEL_HOST_UPLOAD_H_
