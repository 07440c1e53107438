#ifndef VERL_TESTS_WORKER_VISIBLE_GPUS_H_
#define VERL_TESTS_WORKER_VISIBLE_GPUS_H_

// For [gpu] tests that need several GPUs (CUDA builds only): how many the CUDA runtime sees, 0 where it sees none
// (no sticky error left behind).

#include <cuda_runtime_api.h>

namespace verl::testing {

inline int VisibleGpus() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

}  // namespace verl::testing

#endif  // VERL_TESTS_WORKER_VISIBLE_GPUS_H_
