#ifndef VERL_TESTS_WORKER_TORCH_CATCH_H_
#define VERL_TESTS_WORKER_TORCH_CATCH_H_

// Include this instead of <catch2/catch.hpp> in tests that see LibTorch: c10 defines a glog-style CHECK macro that
// collides with Catch2's, so ATen comes first and its CHECK is dropped before Catch2 defines its own.

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#undef CHECK

#include <catch2/catch.hpp>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "worker/model/decoder_model.h"

namespace verl::testing {

// max |a - b| over all elements (as float64).
inline double MaxAbsDiff(const at::Tensor& a, const at::Tensor& b) {
  REQUIRE(a.sizes() == b.sizes());
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

inline std::unique_ptr<DecoderModel> LoadModelOrDie(const std::string& dir, at::ScalarType dtype = at::kFloat) {
  auto model = DecoderModel::Load(dir, dtype);
  INFO(model.status().ToString());
  REQUIRE(model.ok());
  return std::move(*model);
}

// Rows of int64 token ids as a [rows, cols] tensor.
inline at::Tensor LongTensor2d(const std::vector<std::vector<int64_t>>& rows) {
  const int64_t cols = rows.empty() ? 0 : static_cast<int64_t>(rows[0].size());
  at::Tensor t = at::empty({static_cast<int64_t>(rows.size()), cols}, at::kLong);
  for (size_t i = 0; i < rows.size(); ++i) {
    REQUIRE(static_cast<int64_t>(rows[i].size()) == cols);
    for (int64_t j = 0; j < cols; ++j) t[i][j] = rows[i][j];
  }
  return t;
}

}  // namespace verl::testing

#endif  // VERL_TESTS_WORKER_TORCH_CATCH_H_
