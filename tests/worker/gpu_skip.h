#ifndef VERL_TESTS_WORKER_GPU_SKIP_H_
#define VERL_TESTS_WORKER_GPU_SKIP_H_

// For [gpu] test cases: true (with a warning, so the skip shows in the log) where the build has no CUDA or no GPU is
// visible. Define VERL_WITH_CUDA for the test target in a CUDA build.

#include <ATen/Context.h>

#include "tests/worker/torch_catch.h"

namespace verl::testing {

inline bool SkipWithoutGpu() {
#ifndef VERL_WITH_CUDA
  WARN("skipped: built without CUDA (VERL_WITH_CUDA=OFF)");
  return true;
#else
  if (!at::hasCUDA()) {
    WARN("skipped: no CUDA device visible");
    return true;
  }
  return false;
#endif
}

}  // namespace verl::testing

#endif  // VERL_TESTS_WORKER_GPU_SKIP_H_
