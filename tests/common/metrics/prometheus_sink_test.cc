#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/metrics/metrics_http_server.h"
#include "common/metrics/multi_sink.h"
#include "common/metrics/prometheus_registry.h"
#include "common/metrics/prometheus_sink.h"
#include "tests/common/metrics/http_test_client.h"
#include "tests/common/metrics/prometheus_process.h"
#include "tests/test_dir.h"

namespace verl {
namespace {

namespace fs = std::filesystem;

// The metrics of a quickstart step (controller/job/job_runner.cc and the workers' names), plus validation ones.
std::map<std::string, double> QuickstartStep(int step) {
  std::map<std::string, double> m = {
      {"actor/entropy", 5.68},          {"actor/grad_norm", 0.8},           {"actor/kl_loss", 0.00343},
      {"actor/lr", 1e-6},               {"actor/pg_clipfrac", 0.01},        {"actor/pg_loss", -0.5},
      {"actor/ppo_kl", 1e-4},           {"critic/advantages/max", 2},       {"critic/advantages/mean", 0},
      {"critic/advantages/min", -2},    {"critic/returns/mean", 0},         {"critic/rewards/mean", 0.0796},
      {"critic/score/max", 1},          {"critic/score/mean", 0.0796},      {"critic/score/min", 0},
      {"perf/controller_overhead", 0.1}, {"perf/max_memory_allocated_gb", 1.5},
      {"perf/mfu/actor", 0.01},         {"perf/throughput", 1234.5},        {"perf/time_per_step", 0.282},
      {"perf/total_num_tokens", 4096},  {"prompt_length/mean", 20},         {"response_length/clip_ratio", 0},
      {"response_length/max", 16},      {"response_length/mean", 7.85},     {"response_length/min", 1},
      {"timing_per_token_ms/gen", 0.02}, {"timing_s/adv", 0.001},           {"timing_s/gen", 0.1},
      {"timing_s/old_log_prob", 0.02},  {"timing_s/ref", 0.02},             {"timing_s/reward", 0.001},
      {"timing_s/step", 0.282},         {"timing_s/testing", 0.05},         {"timing_s/update_actor", 0.1},
      {"training/epoch", 0},            {"training/global_step", static_cast<double>(step)},
      {"training/worker_restarts", 0},  {"val-aux/verl_cpp/repeat_letter/reward/mean@1", 0.4},
      {"val-core/verl_cpp/repeat_letter/reward/mean@1", 0.438}};
  return m;
}

PrometheusRegistryOptions NoProcess() {
  PrometheusRegistryOptions o;
  o.process_metrics = false;
  return o;
}

// Runs `command` through the shell; returns its exit status and puts stdout+stderr in *output.
int RunCommand(const std::string& command, std::string* output) {
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return -1;
  char buf[1024];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), pipe)) > 0;) output->append(buf, n);
  const int status = ::pclose(pipe);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST_CASE("PrometheusSink publishes step metrics and job gauges", "[prometheus]") {
  auto registry = std::make_shared<PrometheusRegistry>(NoProcess());
  const PrometheusLabels labels = {{"experiment", "exp"}, {"project", "proj"}};
  auto created = PrometheusSink::Create(registry, labels);
  INFO(created.status().ToString());
  REQUIRE(created.ok());
  MultiSink sinks;
  sinks.Add(std::move(created).value());
  REQUIRE(sinks.Log(0, {{"val-core/verl_cpp/repeat_letter/reward/mean@1", 0}}).ok());
  REQUIRE(sinks.Log(1, QuickstartStep(1)).ok());
  std::map<std::string, double> step2 = QuickstartStep(2);
  step2["actor/pg_loss"] = 0.125;
  step2.erase("val-core/verl_cpp/repeat_letter/reward/mean@1");
  REQUIRE(sinks.Log(2, step2).ok());

  double v = 0;
  REQUIRE(registry->GetValue("actor/pg_loss", labels, &v).ok());
  CHECK(v == 0.125);
  REQUIRE(registry->GetValue("verl_val_core_verl_cpp_repeat_letter_reward_mean_at_1", labels, &v).ok());
  CHECK(v == 0.438);  // kept from step 1
  REQUIRE(registry->GetValue("verl_training_global_step", labels, &v).ok());
  CHECK(v == 2);
  REQUIRE(registry->GetValue("verl_training_steps_logged_total", labels, &v).ok());
  CHECK(v == 3);
  REQUIRE(registry->GetValue("verl_training_tokens_total", labels, &v).ok());
  CHECK(v == 8192);
  REQUIRE(registry->GetValue("verl_training_last_log_timestamp_seconds", labels, &v).ok());
  CHECK(v > 1.7e9);
  const std::string text = registry->Render();
  CHECK(text.find("verl_step_duration_seconds_count{experiment=\"exp\",project=\"proj\"} 2\n") != std::string::npos);
  CHECK(text.find("verl_step_duration_seconds_bucket{experiment=\"exp\",project=\"proj\",le=\"0.5\"} 2\n") !=
        std::string::npos);
  CHECK(text.find("verl_training_global_step{") != std::string::npos);
  CHECK(registry->NameCollisions().empty());  // training/global_step is the declared gauge, not a collision

  // Without "training/global_step" among the metrics, the step argument is used.
  auto bare = PrometheusSink::Create(registry, {{"experiment", "bare"}});
  REQUIRE(bare.ok());
  REQUIRE((*bare)->Log(7, {{"actor/pg_loss", 1}}).ok());
  REQUIRE(registry->GetValue("verl_training_global_step", {{"experiment", "bare"}}, &v).ok());
  CHECK(v == 7);

  REQUIRE(PrometheusSink::SetJobState(*registry, labels, "loading").ok());
  REQUIRE(PrometheusSink::SetJobState(*registry, labels, "step/rollout").ok());
  REQUIRE(registry->GetValue("verl_job_state", {{"experiment", "exp"}, {"project", "proj"}, {"state", "loading"}}, &v)
              .ok());
  CHECK(v == 0);
  REQUIRE(registry
              ->GetValue("verl_job_state", {{"experiment", "exp"}, {"project", "proj"}, {"state", "step/rollout"}}, &v)
              .ok());
  CHECK(v == 1);

  REQUIRE(sinks.Close().ok());
  CHECK(sinks.Log(3, step2).code() == absl::StatusCode::kFailedPrecondition);
  // The values stay published after the sink closes.
  REQUIRE(registry->GetValue("actor/pg_loss", labels, &v).ok());
  CHECK(v == 0.125);

  CHECK(PrometheusSink::Create(registry, {{"bad label", "x"}}).status().code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK(PrometheusSink::Create(nullptr, {}).status().code() == absl::StatusCode::kInvalidArgument);
  auto clash = std::make_shared<PrometheusRegistry>(NoProcess());
  REQUIRE(clash->DeclareCounter("verl_training_global_step", "taken").ok());
  CHECK(PrometheusSink::Create(clash, {}).status().code() == absl::StatusCode::kAlreadyExists);
}

TEST_CASE("The exposition passes promtool check metrics", "[prometheus][promtool]") {
  const std::string promtool = testing::FindOnPath("promtool");
  if (promtool.empty()) {
    WARN("promtool not installed (Debian package 'prometheus'): skipped");
    return;
  }
  auto registry = std::make_shared<PrometheusRegistry>();  // with the process metrics
  auto sink = PrometheusSink::Create(registry, {{"experiment", "quickstart"}, {"project", "verl_cpp"}});
  REQUIRE(sink.ok());
  REQUIRE((*sink)->Log(1, QuickstartStep(1)).ok());
  REQUIRE((*sink)->Log(2, {{"Weird-Name/x.y@3", 1}, {"x/gauge_total", 2}, {"a/b", 3}, {"a.b", 4}}).ok());
  REQUIRE(PrometheusSink::SetJobState(*registry, {{"experiment", "quickstart"}}, "step/rollout").ok());
  REQUIRE(registry->DeclareCounter("verl_rpc_errors_total", "RPC errors").ok());
  REQUIRE(registry->IncrementCounter("verl_rpc_errors_total", {{"method", "Generate"}, {"code", "UNAVAILABLE"}}).ok());
  REQUIRE(registry->DeclareHistogram("verl_rpc_duration_seconds", "RPC latency", {0.01, 0.1, 1}).ok());
  REQUIRE(registry->ObserveHistogram("verl_rpc_duration_seconds", {{"method", "Generate"}}, 0.05).ok());
  testing::TestDir dir("promtool");
  const std::string path = dir.Write("metrics.prom", registry->Render());
  std::string output;
  const int rc = RunCommand(promtool + " check metrics < " + path, &output);
  INFO(registry->Render());
  INFO(output);
  CHECK(rc == 0);
  CHECK(output.empty());

  // The check is real: a lint problem fails it.
  const std::string bad = dir.Write("bad.prom", "# HELP x_s x\n# TYPE x_s gauge\nx_s 1\n");
  output.clear();
  CHECK(RunCommand(promtool + " check metrics < " + bad, &output) != 0);
}

// Every verl_* metric the Grafana dashboard queries is one we export (or one the lead's RPC instrumentation adds).
TEST_CASE("The Grafana dashboard queries exported metric names", "[prometheus]") {
  std::ifstream in(std::string(VERL_SOURCE_DIR) + "/deploy/grafana/verl.json");
  REQUIRE(in.good());
  const auto dashboard = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  REQUIRE(dashboard.is_object());
  auto registry = std::make_shared<PrometheusRegistry>();
  auto sink = PrometheusSink::Create(registry, {{"experiment", "e"}});
  REQUIRE(sink.ok());
  std::map<std::string, double> metrics = QuickstartStep(1);
  // PPO (critic, KL in the reward), GPU memory and MFU metrics the quickstart (GRPO on a CPU) does not report; each is
  // a name the worker emits (rank.cc), not one made up here.
  for (const char* name : {"critic/vf_loss", "critic/vf_explained_var", "critic/grad_norm", "actor/reward_kl_penalty",
                           "perf/max_memory_reserved_gb", "perf/mfu/actor", "perf/rollout_max_memory_allocated_gb",
                           "perf/old_log_prob_max_memory_allocated_gb", "perf/ref_max_memory_allocated_gb",
                           "perf/values_max_memory_allocated_gb", "perf/update_critic_max_memory_allocated_gb",
                           "perf/update_max_memory_allocated_gb"}) {
    metrics[name] = 1;
  }
  REQUIRE((*sink)->Log(1, metrics).ok());
  REQUIRE(PrometheusSink::SetJobState(*registry, {{"experiment", "e"}}, "done").ok());
  const std::string text = registry->Render();
  // The worker's own metrics (verl-worker --metrics-listen; worker_rpc_test scrapes them, and the GPU memory gauges
  // were read on the H200), not the controller's sink.
  const std::set<std::string> planned = {"verl_rpc_errors_total", "verl_rpc_duration_seconds_bucket",
                                         "verl_gpu_memory_allocated_bytes",
                                         "verl_gpu_memory_reserved_bytes"};
  const std::regex name_re("verl_[a-z0-9_]+");
  int checked = 0;
  for (const auto& panel : dashboard["panels"]) {
    for (const auto& target : panel["targets"]) {
      const std::string expr = target["expr"].get<std::string>();
      for (std::sregex_iterator it(expr.begin(), expr.end(), name_re), end; it != end; ++it) {
        const std::string name = it->str();
        if (expr.compare(it->position() + it->length(), 2, ".*") == 0 || planned.count(name) > 0) continue;
        INFO(panel["title"] << ": " << name);
        CHECK((text.find("\n" + name + "{") != std::string::npos || text.find("\n" + name + " ") != std::string::npos));
        ++checked;
      }
    }
  }
  CHECK(checked > 20);
}

// Prometheus's own server scrapes our endpoint over loopback; its query API returns what we published.
TEST_CASE("A real Prometheus server scrapes /metrics", "[prometheus][promserver]") {
  if (!testing::PrometheusProcess::Available()) {
    WARN("prometheus not installed (Debian package 'prometheus'): skipped");
    return;
  }
  auto registry = std::make_shared<PrometheusRegistry>();
  auto sink = PrometheusSink::Create(registry, {{"experiment", "quickstart"}});
  REQUIRE(sink.ok());
  REQUIRE((*sink)->Log(3, QuickstartStep(3)).ok());
  auto server = MetricsHttpServer::Start({}, [registry] {
    return MetricsHttpServer::Response{PrometheusRegistry::kContentType, registry->Render()};
  });
  REQUIRE(server.ok());

  testing::TestDir dir("promserver");
  testing::PrometheusProcess prometheus(dir, {(*server)->address()});
  const nlohmann::json series = prometheus.QueryFirst("verl_actor_pg_loss");
  // Also ask for the histogram through PromQL.
  const nlohmann::json hist = prometheus.QueryFirst("verl_step_duration_seconds_count");
  INFO(prometheus.log());
  REQUIRE(series.is_object());
  CHECK(series["value"][1] == "-0.5");
  CHECK(series["metric"]["job"] == "verl");
  CHECK(series["metric"]["experiment"] == "quickstart");
  CHECK(series["metric"]["__name__"] == "verl_actor_pg_loss");
  REQUIRE(hist.is_object());
  CHECK(hist["value"][1] == "1");
  CHECK((*server)->requests_served() >= 1);
}

}  // namespace
}  // namespace verl
