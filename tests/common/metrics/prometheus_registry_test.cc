#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>
#include <limits>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/metrics/metrics_util.h"
#include "common/metrics/process_metrics.h"
#include "common/metrics/prometheus_registry.h"

namespace verl {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

PrometheusRegistryOptions NoProcess() {
  PrometheusRegistryOptions o;
  o.process_metrics = false;
  return o;
}

// Checks every line against the text format's grammar (comments, and samples with an optional label set).
void CheckExpositionSyntax(const std::string& text) {
  static const std::regex comment(R"(# (HELP|TYPE) [a-zA-Z_:][a-zA-Z0-9_:]* .*)");
  static const std::regex sample(
      R"re([a-zA-Z_:][a-zA-Z0-9_:]*(\{[a-zA-Z_][a-zA-Z0-9_]*="([^"\\\n]|\\[\\"n])*"(,[a-zA-Z_][a-zA-Z0-9_]*="([^"\\\n]|\\[\\"n])*")*\})? (NaN|[+-]Inf|-?[0-9.eE+-]+))re");
  REQUIRE(!text.empty());
  REQUIRE(text.back() == '\n');
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    INFO(line);
    CHECK((std::regex_match(line, comment) || std::regex_match(line, sample)));
  }
}

TEST_CASE("PrometheusRegistry renders the 0.0.4 text format (golden)", "[prometheus]") {
  PrometheusRegistry reg(NoProcess());
  REQUIRE(reg.DeclareCounter("verl_rpc_errors_total", "RPC errors by method").ok());
  REQUIRE(reg.IncrementCounter("verl_rpc_errors_total", {{"method", "Generate"}}).ok());
  REQUIRE(reg.IncrementCounter("verl_rpc_errors_total", {{"method", "Generate"}}, 2).ok());
  REQUIRE(reg.IncrementCounter("verl_rpc_errors_total", {{"method", "Up\"da\\te\n"}}).ok());
  REQUIRE(reg.DeclareGauge("verl_gpu_memory_bytes", "GPU memory\nper rank \\ in use").ok());
  REQUIRE(reg.SetGauge("verl_gpu_memory_bytes", {{"rank", "1"}, {"role", "actor"}}, 2.5).ok());
  REQUIRE(reg.SetGauge("verl_gpu_memory_bytes", {{"role", "actor"}, {"rank", "0"}}, 1024).ok());
  REQUIRE(reg.DeclareHistogram("verl_rpc_latency_seconds", "RPC latency", {0.1, 1}).ok());
  for (double v : {0.05, 0.1, 0.5, 5.0}) REQUIRE(reg.ObserveHistogram("verl_rpc_latency_seconds", {}, v).ok());
  REQUIRE(reg.DeclareGauge("verl_unused", "declared, never set: not rendered").ok());
  REQUIRE(reg.SetStepMetrics({{"experiment", "exp"}}, {{"actor/pg_loss", -0.5},
                                                       {"val-core/x/reward/mean@1", 1},
                                                       {"perf/throughput", kNaN},
                                                       {"timing_s/gen", kInf},
                                                       {"timing_s/ref", -kInf}})
              .ok());
  const std::string expected =
      "# HELP verl_actor_pg_loss verl metric 'actor/pg_loss' (last reported value)\n"
      "# TYPE verl_actor_pg_loss gauge\n"
      "verl_actor_pg_loss{experiment=\"exp\"} -0.5\n"
      "# HELP verl_gpu_memory_bytes GPU memory\\nper rank \\\\ in use\n"
      "# TYPE verl_gpu_memory_bytes gauge\n"
      "verl_gpu_memory_bytes{rank=\"0\",role=\"actor\"} 1024\n"
      "verl_gpu_memory_bytes{rank=\"1\",role=\"actor\"} 2.5\n"
      "# HELP verl_metric_name_collisions Number of verl metric names exposed under a disambiguated name because "
      "their sanitized name was taken\n"
      "# TYPE verl_metric_name_collisions gauge\n"
      "verl_metric_name_collisions 0\n"
      "# HELP verl_perf_throughput verl metric 'perf/throughput' (last reported value)\n"
      "# TYPE verl_perf_throughput gauge\n"
      "verl_perf_throughput{experiment=\"exp\"} NaN\n"
      "# HELP verl_rpc_errors_total RPC errors by method\n"
      "# TYPE verl_rpc_errors_total counter\n"
      "verl_rpc_errors_total{method=\"Generate\"} 3\n"
      "verl_rpc_errors_total{method=\"Up\\\"da\\\\te\\n\"} 1\n"
      "# HELP verl_rpc_latency_seconds RPC latency\n"
      "# TYPE verl_rpc_latency_seconds histogram\n"
      "verl_rpc_latency_seconds_bucket{le=\"0.1\"} 2\n"
      "verl_rpc_latency_seconds_bucket{le=\"1\"} 3\n"
      "verl_rpc_latency_seconds_bucket{le=\"+Inf\"} 4\n"
      "verl_rpc_latency_seconds_sum 5.65\n"
      "verl_rpc_latency_seconds_count 4\n"
      "# HELP verl_timing_seconds_gen verl metric 'timing_s/gen' (last reported value)\n"
      "# TYPE verl_timing_seconds_gen gauge\n"
      "verl_timing_seconds_gen{experiment=\"exp\"} +Inf\n"
      "# HELP verl_timing_seconds_ref verl metric 'timing_s/ref' (last reported value)\n"
      "# TYPE verl_timing_seconds_ref gauge\n"
      "verl_timing_seconds_ref{experiment=\"exp\"} -Inf\n"
      "# HELP verl_val_core_x_reward_mean_at_1 verl metric 'val-core/x/reward/mean@1' (last reported value)\n"
      "# TYPE verl_val_core_x_reward_mean_at_1 gauge\n"
      "verl_val_core_x_reward_mean_at_1{experiment=\"exp\"} 1\n";
  const std::string text = reg.Render();
  CHECK(text == expected);
  CheckExpositionSyntax(text);

  // A later step that omits a metric keeps its last value; reported ones are replaced.
  REQUIRE(reg.SetStepMetrics({{"experiment", "exp"}}, {{"actor/pg_loss", 0.25}}).ok());
  double v = 0;
  REQUIRE(reg.GetValue("actor/pg_loss", {{"experiment", "exp"}}, &v).ok());
  CHECK(v == 0.25);
  REQUIRE(reg.GetValue("verl_val_core_x_reward_mean_at_1", {{"experiment", "exp"}}, &v).ok());
  CHECK(v == 1);
  CHECK(reg.GetValue("actor/pg_loss", {{"experiment", "other"}}, &v).code() == absl::StatusCode::kNotFound);
}

TEST_CASE("FormatValue writes round-trip decimals and Prometheus's special values", "[prometheus]") {
  CHECK(PrometheusRegistry::FormatValue(kNaN) == "NaN");
  CHECK(PrometheusRegistry::FormatValue(kInf) == "+Inf");
  CHECK(PrometheusRegistry::FormatValue(-kInf) == "-Inf");
  CHECK(PrometheusRegistry::FormatValue(0) == "0");
  CHECK(PrometheusRegistry::FormatValue(3) == "3");
  CHECK(PrometheusRegistry::FormatValue(0.1) == "0.1");
  CHECK(PrometheusRegistry::FormatValue(-0.00564) == "-0.00564");
  for (double x : {1e-300, 123456789.123456789, 1.0 / 3.0, 6.02214076e23}) {
    CHECK(std::stod(PrometheusRegistry::FormatValue(x)) == x);
  }
}

TEST_CASE("Step metric names are sanitized to valid Prometheus names", "[prometheus]") {
  PrometheusRegistry reg(NoProcess());
  const std::vector<std::string> names = {"actor/pg_loss",
                                          "timing_s/gen",
                                          "val-core/openai/gsm8k/reward/mean@4",
                                          "response_length/clip_ratio",
                                          "1st/metric",
                                          "",
                                          "caf\xc3\xa9 metric",
                                          "q:r",
                                          "x\xff\n\"y"};
  std::map<std::string, double> metrics;
  for (const auto& n : names) metrics[n] = 1;
  REQUIRE(reg.SetStepMetrics({}, metrics).ok());
  CHECK(reg.StepMetricName("actor/pg_loss") == "verl_actor_pg_loss");
  CHECK(reg.StepMetricName("timing_s/gen") == "verl_timing_seconds_gen");
  CHECK(reg.StepMetricName("val-core/openai/gsm8k/reward/mean@4") == "verl_val_core_openai_gsm8k_reward_mean_at_4");
  CHECK(reg.StepMetricName("1st/metric") == "verl_1st_metric");
  CHECK(reg.StepMetricName("") == "verl_");
  CHECK(reg.StepMetricName("q:r") == "verl_q_r");  // ':' is reserved for recording rules
  CHECK(reg.StepMetricName("never/reported").empty());
  CHECK(reg.StepMetricName("caf\xc3\xa9 metric") == "verl_caf___metric");
  for (const auto& n : names) {
    INFO(n);
    CHECK(PrometheusRegistry::IsValidMetricName(reg.StepMetricName(n)));
  }
  CHECK(reg.NameCollisions().empty());
  CheckExpositionSyntax(reg.Render());  // the HELP line of "x\xff\n..." is escaped and valid UTF-8
  CHECK(reg.Render().find("verl metric 'x?\\n\"y'") != std::string::npos);
}

TEST_CASE("Step metric names follow Prometheus's naming conventions, values in base units", "[prometheus]") {
  struct Case {
    std::string verl;
    std::string prom;
    double scale;
  };
  for (const Case& c : std::vector<Case>{
           {"timing_s/gen", "verl_timing_seconds_gen", 1},
           {"timing_per_token_ms/update_actor", "verl_timing_per_token_seconds_update_actor", 1e-3},
           {"perf/max_memory_allocated_gb", "verl_perf_max_memory_allocated_bytes", 1073741824.0},
           {"perf/cpu_memory_used_mb", "verl_perf_cpu_memory_used_bytes", 1048576.0},
           {"x/latency_us", "verl_x_latency_seconds", 1e-6},
           {"x/age_h", "verl_x_age_seconds", 3600},
           {"val-core/HuggingFaceH4/MATH-500/acc/mean@4", "verl_val_core_huggingfaceh4_math_500_acc_mean_at_4", 1},
           {"x/counter/total", "verl_x_counters_total_value", 1},
           {"x/gauge", "verl_x_gauges", 1},
           {"x/count", "verl_x_count_value", 1},
           {"perf/total_num_tokens", "verl_perf_total_num_tokens", 1},
           {"sms/mass", "verl_sms_mass", 1},  // only whole tokens are units
       }) {
    INFO(c.verl);
    double scale = 0;
    CHECK(PrometheusRegistry::StepMetricBaseName(c.verl, &scale) == c.prom);
    CHECK(scale == c.scale);
  }
  PrometheusRegistry reg(NoProcess());
  REQUIRE(reg.SetStepMetrics({}, {{"timing_per_token_ms/gen", 250}, {"perf/max_memory_allocated_gb", 1.5}}).ok());
  double v = 0;
  REQUIRE(reg.GetValue("timing_per_token_ms/gen", {}, &v).ok());
  CHECK(v == Approx(0.25));
  REQUIRE(reg.GetValue("verl_perf_max_memory_allocated_bytes", {}, &v).ok());
  CHECK(v == 1.5 * 1073741824.0);
  CHECK(reg.Render().find("# HELP verl_timing_per_token_seconds_gen verl metric 'timing_per_token_ms/gen' (last "
                          "reported value, times 0.001 for base units)\n") != std::string::npos);
}

TEST_CASE("Colliding names are disambiguated stably and reported", "[prometheus]") {
  PrometheusRegistry reg(NoProcess());
  REQUIRE(reg.DeclareGauge("verl_job_x", "declared").ok());
  REQUIRE(reg.SetStepMetrics({}, {{"p/q", 1}, {"p.q", 2}, {"p-q", 3}, {"job/x", 4}}).ok());
  // std::map order: "p-q" < "p.q" < "p/q", so "p-q" claims verl_p_q in this registry.
  CHECK(reg.StepMetricName("p-q") == "verl_p_q");
  const std::string dot = reg.StepMetricName("p.q");
  const std::string slash = reg.StepMetricName("p/q");
  CHECK(std::regex_match(dot, std::regex("verl_p_q_h[0-9a-f]{8}")));
  CHECK(std::regex_match(slash, std::regex("verl_p_q_h[0-9a-f]{8}")));
  CHECK(dot != slash);
  CHECK(std::regex_match(reg.StepMetricName("job/x"), std::regex("verl_job_x_h[0-9a-f]{8}")));
  const std::vector<std::string> collisions = reg.NameCollisions();
  REQUIRE(collisions.size() == 3);
  // In the order the names were claimed (std::map order within a step).
  CHECK(collisions[0] == "'job/x' -> " + reg.StepMetricName("job/x") + " (verl_job_x is a declared metric)");
  CHECK(collisions[1] == "'p.q' -> " + dot + " (verl_p_q is 'p-q')");
  CHECK(collisions[2] == "'p/q' -> " + slash + " (verl_p_q is 'p-q')");
  double v = 0;
  REQUIRE(reg.GetValue("verl_metric_name_collisions", {}, &v).ok());
  CHECK(v == 3);
  REQUIRE(reg.GetValue("p.q", {}, &v).ok());
  CHECK(v == 2);
  REQUIRE(reg.GetValue("verl_job_x", {}, &v).code() == absl::StatusCode::kNotFound);  // declared, never set

  // The suffix depends on the name only, not on which name came first.
  PrometheusRegistry other(NoProcess());
  REQUIRE(other.SetStepMetrics({}, {{"p/q", 1}}).ok());
  REQUIRE(other.SetStepMetrics({}, {{"p.q", 1}}).ok());
  CHECK(other.StepMetricName("p/q") == "verl_p_q");
  CHECK(other.StepMetricName("p.q") == dot);

  // A name held by a step metric cannot be declared afterwards, nor set as a gauge.
  CHECK(reg.DeclareGauge("verl_p_q", "x").code() == absl::StatusCode::kAlreadyExists);
  CHECK(reg.SetGauge("verl_p_q", {}, 1).code() == absl::StatusCode::kNotFound);
}

TEST_CASE("PrometheusRegistry rejects invalid names, labels and updates", "[prometheus]") {
  PrometheusRegistry reg(NoProcess());
  CHECK(reg.DeclareGauge("", "x").code() == absl::StatusCode::kInvalidArgument);
  CHECK(reg.DeclareGauge("9lives", "x").code() == absl::StatusCode::kInvalidArgument);
  CHECK(reg.DeclareGauge("a/b", "x").code() == absl::StatusCode::kInvalidArgument);
  CHECK(reg.DeclareGauge("ns:metric_ok", "x").ok());
  CHECK(reg.DeclareHistogram("h_count", "x", {1}).code() == absl::StatusCode::kInvalidArgument);
  CHECK(reg.DeclareHistogram("h", "x", {}).code() == absl::StatusCode::kInvalidArgument);
  CHECK(reg.DeclareHistogram("h", "x", {1, 1}).code() == absl::StatusCode::kInvalidArgument);
  CHECK(reg.DeclareHistogram("h", "x", {2, 1}).code() == absl::StatusCode::kInvalidArgument);
  CHECK(reg.DeclareHistogram("h", "x", {1, kInf}).code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(reg.DeclareHistogram("h", "x", {1, 2}).ok());
  CHECK(reg.DeclareHistogram("h", "again", {1, 2}).ok());
  CHECK(reg.DeclareHistogram("h", "x", {1, 3}).code() == absl::StatusCode::kAlreadyExists);
  CHECK(reg.DeclareGauge("h", "x").code() == absl::StatusCode::kAlreadyExists);
  REQUIRE(reg.DeclareCounter("c_total", "x").ok());
  CHECK(reg.IncrementCounter("c_total", {}, -1).code() == absl::StatusCode::kInvalidArgument);
  CHECK(reg.IncrementCounter("c_total", {}, kNaN).code() == absl::StatusCode::kInvalidArgument);
  CHECK(reg.SetGauge("c_total", {}, 1).code() == absl::StatusCode::kFailedPrecondition);
  CHECK(reg.SetGauge("missing", {}, 1).code() == absl::StatusCode::kNotFound);
  CHECK(reg.IncrementCounter("c_total", {{"__name__", "x"}}).code() == absl::StatusCode::kInvalidArgument);
  CHECK(reg.IncrementCounter("c_total", {{"bad-label", "x"}}).code() == absl::StatusCode::kInvalidArgument);
  CHECK(reg.IncrementCounter("c_total", {{"", "x"}}).code() == absl::StatusCode::kInvalidArgument);
  CHECK(reg.ObserveHistogram("h", {{"le", "1"}}, 1).code() == absl::StatusCode::kInvalidArgument);
  CHECK(reg.ObserveHistogram("h", {}, kNaN).code() == absl::StatusCode::kInvalidArgument);
  CHECK(reg.SetStepMetrics({{"0rank", "1"}}, {{"a", 1}}).code() == absl::StatusCode::kInvalidArgument);
  CHECK(reg.StepMetricName("a").empty());  // nothing recorded on error
  const absl::Status s = reg.IncrementCounter("c_total", {{"bad-label", "x"}});
  CHECK(s.message().find("c_total") != absl::string_view::npos);
  CHECK(s.message().find("bad-label") != absl::string_view::npos);
}

TEST_CASE("SetStateGauge keeps one state at 1 per label set", "[prometheus]") {
  PrometheusRegistry reg(NoProcess());
  REQUIRE(reg.DeclareGauge("verl_job_state", "state").ok());
  REQUIRE(reg.SetStateGauge("verl_job_state", {{"job", "a"}}, "state", "init").ok());
  REQUIRE(reg.SetStateGauge("verl_job_state", {{"job", "b"}}, "state", "init").ok());
  REQUIRE(reg.SetStateGauge("verl_job_state", {{"job", "a"}}, "state", "step/rollout").ok());
  double v = -1;
  REQUIRE(reg.GetValue("verl_job_state", {{"job", "a"}, {"state", "init"}}, &v).ok());
  CHECK(v == 0);
  REQUIRE(reg.GetValue("verl_job_state", {{"job", "a"}, {"state", "step/rollout"}}, &v).ok());
  CHECK(v == 1);
  REQUIRE(reg.GetValue("verl_job_state", {{"job", "b"}, {"state", "init"}}, &v).ok());
  CHECK(v == 1);  // another job's state is untouched
}

TEST_CASE("Process metrics are read from /proc", "[prometheus]") {
  const ProcessMetrics m = ReadProcessMetrics();
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  CHECK(m.resident_memory_bytes > 1e5);
  CHECK(m.virtual_memory_bytes >= m.resident_memory_bytes);
  CHECK(m.start_time_seconds > now - 3600);  // this test process started within the hour
  CHECK(m.start_time_seconds <= now + 1);
  CHECK(m.cpu_seconds >= 0);
  CHECK(m.open_fds >= 3);
  CHECK(m.threads >= 1);
  PrometheusRegistry reg;
  const std::string text = reg.Render();
  CheckExpositionSyntax(text);
  for (const char* name : {"process_cpu_seconds_total", "process_open_fds", "process_max_fds",
                           "process_resident_memory_bytes", "process_virtual_memory_bytes",
                           "process_start_time_seconds", "process_threads"}) {
    INFO(name);
    CHECK(text.find(std::string("\n") + name + " ") != std::string::npos);
  }
}

// The value of the sample line that starts with `series` + " ", or -1.
long long SampleValue(const std::string& text, const std::string& series) {
  const size_t at = text.find("\n" + series + " ");
  if (at == std::string::npos) return -1;
  return std::stoll(text.substr(at + series.size() + 2));
}

TEST_CASE("PrometheusRegistry renders consistently while other threads update it", "[prometheus]") {
  PrometheusRegistry reg;
  REQUIRE(reg.DeclareCounter("verl_ops_total", "ops").ok());
  REQUIRE(reg.DeclareHistogram("verl_lat_seconds", "lat", {0.5}).ok());
  std::atomic<bool> stop{false};
  std::vector<std::thread> writers;
  for (int t = 0; t < 3; ++t) {
    writers.emplace_back([&, t] {
      for (int i = 0; !stop.load(); ++i) {
        (void)reg.IncrementCounter("verl_ops_total", {{"thread", std::to_string(t)}});
        (void)reg.ObserveHistogram("verl_lat_seconds", {}, (i % 2) ? 0.1 : 1.0);
        (void)reg.SetStepMetrics({}, {{"step/" + std::to_string(i % 50), static_cast<double>(i)}});
      }
    });
  }
  int renders = 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
  while (std::chrono::steady_clock::now() < until) {
    const std::string text = reg.Render();
    // Histogram invariants hold in every snapshot: +Inf bucket == count >= the finite bucket.
    const long long finite = SampleValue(text, "verl_lat_seconds_bucket{le=\"0.5\"}");
    const long long inf = SampleValue(text, "verl_lat_seconds_bucket{le=\"+Inf\"}");
    const long long count = SampleValue(text, "verl_lat_seconds_count");
    CHECK(finite <= inf);
    CHECK(inf == count);
    ++renders;
  }
  stop = true;
  for (auto& w : writers) w.join();
  CHECK(renders > 5);
  CheckExpositionSyntax(reg.Render());
}

}  // namespace
}  // namespace verl
