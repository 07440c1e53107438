#ifndef VERL_WORKER_TRAIN_METRIC_ACCUMULATOR_H_
#define VERL_WORKER_TRAIN_METRIC_ACCUMULATOR_H_

// Collects metric values over micro-/mini-batches and reports their means, as verl's append_to_dict + reduce_metrics.

#include <ATen/ATen.h>

#include <cstdint>
#include <initializer_list>
#include <map>
#include <string>
#include <utility>
#include <vector>

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

// Scalar figures of each pass (losses, clip fractions) kept where they were computed and read back together once a
// mini-batch ends: reading each back after its pass would make the host wait for the device between passes.
class DeviceFigures {
 public:
  // One pass's figures (scalar tensors, any dtype, detached here), in a fixed order.
  void Add(std::initializer_list<at::Tensor> figures) {
    std::vector<at::Tensor> row;
    for (const at::Tensor& t : figures) row.push_back(t.detach().reshape({1}).to(at::kDouble));
    rows_.push_back(at::cat(row));
  }
  // One pass's figures as a 1-D tensor (every pass the same length).
  void Add(const at::Tensor& figures) { rows_.push_back(figures.detach().reshape({-1}).to(at::kDouble)); }
  // Every pass's figures, in the order added (one read-back).
  std::vector<std::vector<double>> ReadBack() const {
    std::vector<std::vector<double>> out;
    if (rows_.empty()) return out;
    const at::Tensor all = at::stack(rows_).to(at::kCPU).contiguous();
    const double* p = all.data_ptr<double>();
    for (int64_t i = 0; i < all.size(0); ++i) out.emplace_back(p + i * all.size(1), p + (i + 1) * all.size(1));
    return out;
  }

 private:
  std::vector<at::Tensor> rows_;
};

}  // namespace verl

#endif  // VERL_WORKER_TRAIN_METRIC_ACCUMULATOR_H_
