#ifndef VERL_COMMON_METRICS_CONSOLE_SINK_H_
#define VERL_COMMON_METRICS_CONSOLE_SINK_H_

// A terminal progress view: one line per Log() call,
//
//   step 12/60 [####----------------] 20% | score 0.43 | pg_loss -0.012 | kl 0.0012 | resp_len 7.9 | 1.21 s/step | ETA 0:58
//
// Fields whose metric is missing are skipped. Everything shown comes from the metrics themselves (s/step is
// `timing_s/step`; ETA is that times the steps left), so the output is deterministic for given input. Validation
// metrics (`val-core/...`) are appended when present, labelled "val <rest of the name>".

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "common/metrics/metric_sink.h"

namespace verl {

// One metric on the line: shown as "label value", or "value label" when value_first (for units such as "s/step").
struct ConsoleField {
  std::string key;    // metric name, e.g. "actor/pg_loss"
  std::string label;  // short label, e.g. "pg_loss"
  bool value_first = false;
};

class ConsoleSink : public MetricSink {
 public:
  struct Options {
    int bar_width = 20;                        // characters between the brackets
    bool show_val_core = true;                 // append val-core/... metrics
    std::string eta_key = "timing_s/step";     // seconds per step, for the ETA
  };

  // critic/score/mean->score, actor/pg_loss->pg_loss, actor/kl_loss->kl, actor/entropy->entropy,
  // response_length/mean->resp_len, timing_s/step->"s/step" (value first).
  static std::vector<ConsoleField> DefaultFields();

  // `out` is not owned and must outlive the sink. `total_steps` <= 0 means unknown (no bar, no ETA).
  ConsoleSink(std::ostream* out, int64_t total_steps, std::vector<ConsoleField> fields = DefaultFields());
  ConsoleSink(std::ostream* out, int64_t total_steps, std::vector<ConsoleField> fields, Options options);

  // Writes FormatLine() and a newline, then flushes.
  absl::Status Log(int64_t step, const std::map<std::string, double>& metrics) override;
  absl::Status Close() override;

  // The line for `step`, without the newline.
  std::string FormatLine(int64_t step, const std::map<std::string, double>& metrics) const;

  // 3 significant digits ("0.43", "-0.012", "1.2e-05"), whole numbers from 1000 up ("12345"), "nan", "inf".
  static std::string FormatNumber(double value);

  // "m:ss" below an hour, "h:mm:ss" from an hour up; negative or non-finite seconds give "?".
  static std::string FormatDuration(double seconds);

 private:
  std::ostream* out_;
  int64_t total_steps_;
  std::vector<ConsoleField> fields_;
  Options options_;
  bool closed_ = false;
};

}  // namespace verl

#endif  // VERL_COMMON_METRICS_CONSOLE_SINK_H_
