#ifndef VERL_COMMON_METRICS_MULTI_SINK_H_
#define VERL_COMMON_METRICS_MULTI_SINK_H_

// Fans each Log() out to several sinks (trainer.logger=[console, jsonl] gives two).

#include <memory>
#include <vector>

#include "common/metrics/metric_sink.h"

namespace verl {

class MultiSink : public MetricSink {
 public:
  MultiSink() = default;
  explicit MultiSink(std::vector<std::unique_ptr<MetricSink>> sinks);

  void Add(std::unique_ptr<MetricSink> sink);
  size_t size() const { return sinks_.size(); }

  // Logs to every sink even when one fails; returns the first error.
  absl::Status Log(int64_t step, const std::map<std::string, double>& metrics) override;
  absl::Status LogText(int64_t step, const std::string& tag, const std::string& markdown) override;
  // Closes every sink; returns the first error.
  absl::Status Close() override;

 private:
  std::vector<std::unique_ptr<MetricSink>> sinks_;
};

}  // namespace verl

#endif  // VERL_COMMON_METRICS_MULTI_SINK_H_
