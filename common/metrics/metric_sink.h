#ifndef VERL_COMMON_METRICS_METRIC_SINK_H_
#define VERL_COMMON_METRICS_METRIC_SINK_H_

// Where the controller writes each step's metrics (verl's names: "actor/pg_loss", "critic/score/mean", ...).
//
// Implementations: ConsoleSink (progress line), JsonlSink (metrics.jsonl), MultiSink (fan-out). A sink is used from
// one thread; implementations document anything stronger.

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/status.h"

namespace verl {

class MetricSink {
 public:
  virtual ~MetricSink() = default;

  // Records the metrics of `step` (training steps count from 1; validation before training logs step 0). Returns an
  // error naming the sink's destination when it cannot write; FailedPrecondition after Close().
  virtual absl::Status Log(int64_t step, const std::map<std::string, double>& metrics) = 0;

  // Records a text (Markdown) under `tag` at `step`, as verl's trackers that show text do (its validation
  // generations: trainer.log_val_generations). Sinks without a place for text ignore it, as verl's console and file
  // loggers do.
  virtual absl::Status LogText(int64_t /*step*/, const std::string& /*tag*/, const std::string& /*markdown*/) {
    return absl::OkStatus();
  }

  // Flushes and releases the destination. Idempotent; Log() after Close() fails.
  virtual absl::Status Close() { return absl::OkStatus(); }
};

}  // namespace verl

#endif  // VERL_COMMON_METRICS_METRIC_SINK_H_
