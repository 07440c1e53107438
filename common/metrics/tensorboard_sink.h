#ifndef VERL_COMMON_METRICS_TENSORBOARD_SINK_H_
#define VERL_COMMON_METRICS_TENSORBOARD_SINK_H_

// trainer.logger=tensorboard: every Log() appends one TensorBoard event (all metrics of the step as scalar summaries,
// tags = verl's metric names) to <dir>/events.out.tfevents.<seconds>.<host>, a TFRecord file: per record a uint64
// length, its masked CRC-32C, the serialized Event, and the data's masked CRC-32C. The first record carries
// file_version "brain.Event:2", as TensorBoard expects. Non-finite values are skipped. Each record is flushed.
// LogText() appends an event with one text summary (TensorBoard's text plugin, as torch's SummaryWriter.add_text).

#include <cstdint>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/metrics/metric_sink.h"

namespace verl {

class TensorBoardSink : public MetricSink {
 public:
  // Creates `dir` if needed and a new event file in it. Errors name the path.
  static absl::StatusOr<std::unique_ptr<TensorBoardSink>> Open(const std::string& dir);
  ~TensorBoardSink() override;

  absl::Status Log(int64_t step, const std::map<std::string, double>& metrics) override;
  absl::Status LogText(int64_t step, const std::string& tag, const std::string& markdown) override;
  absl::Status Close() override;
  const std::string& path() const { return path_; }

 private:
  TensorBoardSink(std::string path, std::ofstream out) : path_(std::move(path)), out_(std::move(out)) {}
  absl::Status WriteRecord(const std::string& data);

  std::string path_;
  std::ofstream out_;
};

struct TensorBoardScalar {
  int64_t step = 0;
  std::string tag;
  float value = 0;
};

struct TensorBoardText {
  int64_t step = 0;
  std::string tag;
  std::string text;
};

// Reads the scalars of an event file, checking every record's CRCs. Errors name the file and the record's offset.
absl::StatusOr<std::vector<TensorBoardScalar>> ReadTensorBoardScalars(const std::string& path);
// Reads its text summaries (text plugin, one string), checking the CRCs as ReadTensorBoardScalars.
absl::StatusOr<std::vector<TensorBoardText>> ReadTensorBoardTexts(const std::string& path);

}  // namespace verl

#endif  // VERL_COMMON_METRICS_TENSORBOARD_SINK_H_
