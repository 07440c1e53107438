#include "controller/job/val_generations.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

namespace verl {
namespace {

TEST_CASE("NumpyLegacyShuffle is numpy's RandomState(42).shuffle", "[controller][val]") {
  // Golden orders from numpy 2.x: x = list(range(n)); np.random.RandomState(42).shuffle(x).
  CHECK(NumpyLegacyShuffle(0, 42).empty());
  CHECK(NumpyLegacyShuffle(1, 42) == std::vector<int64_t>{0});
  CHECK(NumpyLegacyShuffle(2, 42) == std::vector<int64_t>{1, 0});
  CHECK(NumpyLegacyShuffle(10, 42) == std::vector<int64_t>{8, 1, 5, 0, 7, 2, 9, 4, 3, 6});
  CHECK(NumpyLegacyShuffle(37, 42) ==
        std::vector<int64_t>{17, 13, 4,  29, 35, 25, 6,  26, 24, 16, 8, 15, 12, 32, 9,  19, 0,  31, 5,
                             11, 1,  27, 21, 2,  36, 34, 3,  33, 23, 30, 10, 22, 18, 20, 7,  14, 28});
  const std::vector<int64_t> big = NumpyLegacyShuffle(300, 42);
  CHECK(std::vector<int64_t>(big.begin(), big.begin() + 20) ==
        std::vector<int64_t>{203, 266, 152, 9,   233, 226, 196, 109, 5,   175,
                             237, 57,  218, 45,  182, 221, 289, 211, 148, 165});
}

TEST_CASE("PickValGenerations sorts by input, shuffles as verl, keeps the first N", "[controller][val]") {
  // Inputs given out of order and with a tie: sorted (stably) they are a0, a1 (first "b"), a2 (second "b"), ...
  std::vector<ValGeneration> samples;
  const std::vector<std::string> inputs = {"c", "b", "a", "b", "e", "d", "g", "f", "i", "h"};
  for (size_t i = 0; i < inputs.size(); ++i) samples.push_back({inputs[i], "out" + std::to_string(i), 1.0 * i});
  // Sorted: a(2) b(1) b(3) c(0) d(5) e(4) f(7) g(6) h(9) i(8); RandomState(42) on 10 items: 8 1 5 0 7 2 9 4 3 6.
  const std::vector<ValGeneration> picked = PickValGenerations(samples, 4);
  REQUIRE(picked.size() == 4);
  CHECK(picked[0].output == "out9");  // sorted[8] = h
  CHECK(picked[1].output == "out1");  // sorted[1] = the first b
  CHECK(picked[2].output == "out4");  // sorted[5] = e
  CHECK(picked[3].output == "out2");  // sorted[0] = a
  CHECK(PickValGenerations(samples, 50).size() == 10);
  CHECK(PickValGenerations({}, 3).empty());
}

TEST_CASE("ValGenerationsMarkdown is verl's TensorBoard text", "[controller][val]") {
  CHECK(ValGenerationsMarkdown(3, {{"in", "out", 1.0}, {"x", "y", 0.5}}) ==
        "**Generation Results - Step 3**\n\n"
        "### Sample 1\n**Input:** in\n\n**Output:** out\n\n**Score:** 1.0\n\n---\n\n"
        "### Sample 2\n**Input:** x\n\n**Output:** y\n\n**Score:** 0.5\n\n---\n\n");
  CHECK(ValGenerationsMarkdown(0, {}) == "**Generation Results - Step 0**\n\n");
}

}  // namespace
}  // namespace verl
