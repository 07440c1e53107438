#ifndef VERL_WORKER_TRAIN_METRIC_ACCUMULATOR_H_
#define VERL_WORKER_TRAIN_METRIC_ACCUMULATOR_H_

// Collects metric values over micro-/mini-batches and reports their means, as verl's append_to_dict + reduce_metrics.

#include <cstdint>
#include <map>
#include <string>
#include <utility>

namespace verl {

class MetricAccumulator {
 public:
  void Add(const std::string& key, double value) {
    auto& [sum, count] = sums_[key];
    sum += value;
    ++count;
  }
  std::map<std::string, double> Means() const {
    std::map<std::string, double> out;
    for (const auto& [key, sc] : sums_) out[key] = sc.first / static_cast<double>(sc.second);
    return out;
  }

 private:
  std::map<std::string, std::pair<double, int64_t>> sums_;
};

}  // namespace verl

#endif  // VERL_WORKER_TRAIN_METRIC_ACCUMULATOR_H_
