#ifndef VERL_TESTS_WORKER_ALGOS_GOLDEN_UTIL_H_
#define VERL_TESTS_WORKER_ALGOS_GOLDEN_UTIL_H_

// Helpers for the golden-file tests: load a JSON file written by golden/make_golden.py and compare tensors with it.
// ATen comes before Catch2 because c10 defines a CHECK macro that collides with Catch2's.

#include <ATen/ATen.h>
#undef CHECK

#include <catch2/catch.hpp>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace verl::testing {

inline nlohmann::json LoadGolden(const std::string& name) {
  const std::string path = std::string(VERL_SOURCE_DIR) + "/tests/worker/algos/golden/" + name;
  std::ifstream in(path);
  INFO("golden file " << path);
  REQUIRE(in.good());
  return nlohmann::json::parse(in);
}

// A JSON number, list of numbers or list of lists of numbers as a tensor of `dtype`.
inline at::Tensor ToTensor(const nlohmann::json& j, at::ScalarType dtype = at::kDouble) {
  if (j.is_number()) return at::full({}, j.get<double>(), at::TensorOptions().dtype(dtype));
  REQUIRE(j.is_array());
  std::vector<double> flat;
  std::vector<int64_t> shape{static_cast<int64_t>(j.size())};
  if (!j.empty() && j[0].is_array()) {
    shape.push_back(static_cast<int64_t>(j[0].size()));
    for (const auto& row : j) {
      REQUIRE(static_cast<int64_t>(row.size()) == shape[1]);
      for (const auto& v : row) flat.push_back(v.get<double>());
    }
  } else {
    for (const auto& v : j) flat.push_back(v.get<double>());
  }
  return at::tensor(flat, at::TensorOptions().dtype(at::kDouble)).reshape(shape).to(dtype);
}

// |actual - expected| <= rel * |expected| + abs_tol, elementwise; reports the worst element.
inline void RequireNear(const at::Tensor& actual, const at::Tensor& expected, const std::string& what,
                        double rel = 1e-5, double abs_tol = 1e-6) {
  INFO(what);
  REQUIRE(actual.defined());
  REQUIRE(actual.sizes() == expected.sizes());
  at::Tensor a = actual.detach().to(at::kDouble);
  at::Tensor e = expected.to(at::kDouble);
  at::Tensor excess = (a - e).abs() - (rel * e.abs() + abs_tol);
  const int64_t worst = excess.reshape({-1}).argmax().item<int64_t>();
  INFO("worst element " << worst << ": actual " << a.reshape({-1})[worst].item<double>() << ", expected "
                        << e.reshape({-1})[worst].item<double>());
  CHECK(excess.max().item<double>() <= 0);
}

inline void RequireNear(double actual, double expected, const std::string& what, double rel = 1e-5,
                        double abs_tol = 1e-6) {
  INFO(what << ": actual " << actual << ", expected " << expected);
  CHECK(std::abs(actual - expected) <= rel * std::abs(expected) + abs_tol);
}

}  // namespace verl::testing

#endif  // VERL_TESTS_WORKER_ALGOS_GOLDEN_UTIL_H_
