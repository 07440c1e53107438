#ifndef VERL_COMMON_METRICS_JSONL_SINK_H_
#define VERL_COMMON_METRICS_JSONL_SINK_H_

// Appends one JSON object per Log() call to a file, in the line format of verl's "file" logger
// (verl/utils/tracking.py): {"step": 12, "data": {"actor/pg_loss": -0.01, ...}}. Keys of "data" are sorted;
// non-finite values are written as null so every line is valid JSON (Python's json.dumps would write NaN).
// The file is opened in append mode, so a resumed job continues it; each line is flushed when written.

#include <fstream>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/metrics/metric_sink.h"

namespace verl {

class JsonlSink : public MetricSink {
 public:
  // Creates the parent directories and opens `path` for appending. Errors name the path.
  static absl::StatusOr<std::unique_ptr<JsonlSink>> Open(const std::string& path);

  ~JsonlSink() override;
  JsonlSink(const JsonlSink&) = delete;
  JsonlSink& operator=(const JsonlSink&) = delete;

  absl::Status Log(int64_t step, const std::map<std::string, double>& metrics) override;
  absl::Status Close() override;

  const std::string& path() const { return path_; }

  // Rewrites `path` (atomically) keeping only the lines whose "step" is <= `last_step`, so that steps replayed after
  // a resume or a recovery are recorded exactly once. A missing file is fine. Unparsable lines are kept.
  static absl::Status KeepStepsUpTo(const std::string& path, int64_t last_step);

  // The line Log() writes, without the trailing newline.
  static std::string FormatLine(int64_t step, const std::map<std::string, double>& metrics);

 private:
  JsonlSink(std::string path, std::ofstream out);

  std::string path_;
  std::ofstream out_;
  bool closed_ = false;
};

}  // namespace verl

#endif  // VERL_COMMON_METRICS_JSONL_SINK_H_
