#include "controller/job/val_generations.h"

#include <algorithm>
#include <random>

#include "absl/strings/str_cat.h"
#include "common/text/jinja_value.h"

namespace verl {
namespace {

// numpy's random_interval(max): a draw in [0, max] from 32-bit outputs masked to max's bit length, rejected above it.
uint64_t RandomInterval(std::mt19937& gen, uint64_t max) {
  if (max == 0) return 0;
  uint64_t mask = max;
  for (int shift : {1, 2, 4, 8, 16, 32}) mask |= mask >> shift;
  uint64_t value;
  do {
    value = static_cast<uint64_t>(gen()) & mask;
  } while (value > max);
  return value;
}

}  // namespace

std::vector<int64_t> NumpyLegacyShuffle(int64_t n, uint32_t seed) {
  std::vector<int64_t> order(static_cast<size_t>(std::max<int64_t>(n, 0)));
  for (int64_t i = 0; i < n; ++i) order[i] = i;
  std::mt19937 gen(seed);  // init_genrand, as numpy's legacy seeding of an integer
  for (int64_t i = n - 1; i >= 1; --i) {
    std::swap(order[i], order[RandomInterval(gen, static_cast<uint64_t>(i))]);
  }
  return order;
}

std::vector<ValGeneration> PickValGenerations(std::vector<ValGeneration> samples, int64_t count) {
  std::stable_sort(samples.begin(), samples.end(),
                   [](const ValGeneration& a, const ValGeneration& b) { return a.input < b.input; });
  const std::vector<int64_t> order = NumpyLegacyShuffle(static_cast<int64_t>(samples.size()), 42);
  std::vector<ValGeneration> picked;
  for (size_t i = 0; i < order.size() && static_cast<int64_t>(i) < count; ++i) picked.push_back(samples[order[i]]);
  return picked;
}

std::string ValGenerationsMarkdown(int64_t step, const std::vector<ValGeneration>& samples) {
  std::string text = absl::StrCat("**Generation Results - Step ", step, "**\n\n");
  for (size_t i = 0; i < samples.size(); ++i) {
    absl::StrAppend(&text, "### Sample ", i + 1, "\n", "**Input:** ", samples[i].input, "\n\n",
                    "**Output:** ", samples[i].output, "\n\n", "**Score:** ", PythonFloatRepr(samples[i].score),
                    "\n\n", "---\n\n");
  }
  return text;
}

}  // namespace verl
