#include "common/metrics/multi_sink.h"

namespace verl {

MultiSink::MultiSink(std::vector<std::unique_ptr<MetricSink>> sinks) : sinks_(std::move(sinks)) {}

void MultiSink::Add(std::unique_ptr<MetricSink> sink) { sinks_.push_back(std::move(sink)); }

absl::Status MultiSink::Log(int64_t step, const std::map<std::string, double>& metrics) {
  absl::Status first;
  for (auto& sink : sinks_) {
    absl::Status s = sink->Log(step, metrics);
    if (first.ok() && !s.ok()) first = s;
  }
  return first;
}

absl::Status MultiSink::LogText(int64_t step, const std::string& tag, const std::string& markdown) {
  absl::Status first;
  for (auto& sink : sinks_) {
    absl::Status s = sink->LogText(step, tag, markdown);
    if (first.ok() && !s.ok()) first = s;
  }
  return first;
}

absl::Status MultiSink::Close() {
  absl::Status first;
  for (auto& sink : sinks_) {
    absl::Status s = sink->Close();
    if (first.ok() && !s.ok()) first = s;
  }
  return first;
}

}  // namespace verl
