#ifndef VERL_WORKER_KERNELS_LAUNCH_CUH_
#define VERL_WORKER_KERNELS_LAUNCH_CUH_

// Programmatic dependent launch (Hopper and later) inside CUDA graphs: a kernel launched with LaunchDependent while
// its stream is being captured may be scheduled while the kernel before it in the graph is still running, and waits in
// WaitForPriorGrid until that one has finished and its writes are visible. A decoding step is some 220 short kernels
// replayed as a graph; this takes the launch latency between them off the step's critical path (B1: 1.690 against
// 1.699 s without, in one run). Outside a capture the kernels launch plainly: there the op before one of ours may be a
// copy, and one run of the fused sampler's GPU test drew differently once with every launch dependent (not seen since;
// the graphs' steps have kernels before each of ours).
//
// The contract: every kernel launched with LaunchDependent calls WaitForPriorGrid before it reads anything an earlier
// kernel wrote or writes anything an earlier kernel reads; it may call AllowDependentGrid (after its wait) to let the
// next dependent launch be scheduled before it ends (that kernel still waits for this one's end before its reads).
// VERL_PDL=0 in the environment launches them as plain kernels (the A/B of tools/bench/b1_rollout.py --pdl-variant).

#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>
#include <utility>

namespace verl::kernels {

__device__ __forceinline__ void WaitForPriorGrid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void AllowDependentGrid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Whether dependent launches are on: compute capability 9.0 or later on the current device when first asked, and
// VERL_PDL not "0". Fixed for the process (its GPUs are of one kind).
inline bool DependentLaunchEnabled() {
  static const bool enabled = [] {
    const char* env = std::getenv("VERL_PDL");
    if (env != nullptr && std::strcmp(env, "0") == 0) return false;
    int device = 0;
    int major = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) {
      cudaGetLastError();  // leave no sticky error for the launch's own check
      return false;
    }
    return major >= 9;
  }();
  return enabled;
}

// kernel<<<grid, block, 0, stream>>>(args...), as a programmatic dependent launch where DependentLaunchEnabled and
// `stream` is capturing a graph.
template <typename... Params, typename... Args>
cudaError_t LaunchDependent(void (*kernel)(Params...), dim3 grid, dim3 block, cudaStream_t stream, Args&&... args) {
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = 0;
  config.stream = stream;
  config.attrs = attribute;
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (DependentLaunchEnabled() && cudaStreamIsCapturing(stream, &capture) != cudaSuccess) {
    cudaGetLastError();
    capture = cudaStreamCaptureStatusNone;
  }
  bool dependent = capture == cudaStreamCaptureStatusActive;
  if (dependent) {
    // The kernel's code must have been compiled for sm_90 or later: for an older virtual architecture (a build with
    // CMAKE_CUDA_ARCHITECTURES=80, JIT-compiled on a Hopper) WaitForPriorGrid is empty, and only a plain launch keeps
    // the previous kernel's writes visible to it. Asked while capturing, i.e. once per graph.
    cudaFuncAttributes attributes{};
    if (cudaFuncGetAttributes(&attributes, kernel) != cudaSuccess) {
      cudaGetLastError();
      dependent = false;
    } else {
      dependent = attributes.ptxVersion >= 90;
    }
  }
  config.numAttrs = dependent ? 1 : 0;
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

}  // namespace verl::kernels

#endif  // VERL_WORKER_KERNELS_LAUNCH_CUH_
