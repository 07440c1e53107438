// End to end: `verl-controller serve` with TLS and a bearer token on loopback, driven by the real `verlctl` binary.
// Jobs are real shortened CPU quickstarts (the server starts its own local workers). Checks the queue, watch to
// completion, a restart of the server mid-queue (the queued job is still there; the interrupted one resumes from
// its checkpoint), cancel, logs, and the refusals: bad token, no TLS, unknown id, malformed and oversized configs,
// and a watcher that disconnects.

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "tests/common/metrics/prometheus_process.h"
#include "tests/test_dir.h"
#include "tests/tools/run_command.h"

namespace verl {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::ReadFile;
using testing::RunCommand;
using testing::RunResult;
using testing::ShellQuote;
using testing::TestDir;

const std::string kBin = std::string(VERL_BINARY_DIR) + "/bin/";
const std::string kConfig = std::string(VERL_SOURCE_DIR) + "/configs/quickstart.yaml";
constexpr char kToken[] = "s3cret-token-for-tests";

int Sh(const std::string& command) {
  const int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// A CA, a server certificate for localhost / 127.0.0.1 and a client certificate, made with the openssl CLI.
void MakeCertificates(const TestDir& dir) {
  const std::string d = ShellQuote(dir.path());
  const std::string ec = " -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes ";
  const std::string script =
      "set -e; cd " + d + "; exec >openssl.log 2>&1\n" +
      "openssl req -x509" + ec + "-keyout ca.key -out ca.pem -days 2 -subj /CN=verl-test-ca\n" +
      "openssl req" + ec + "-keyout server.key -out server.csr -subj /CN=localhost\n" +
      "printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\\nextendedKeyUsage=serverAuth\\n' > server.ext\n" +
      "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem -days 2 "
      "-extfile server.ext\n" +
      "openssl req" + ec + "-keyout client.key -out client.csr -subj /CN=verl-test-client\n" +
      "printf 'extendedKeyUsage=clientAuth\\n' > client.ext\n" +
      "openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out client.pem -days 2 "
      "-extfile client.ext\n";
  if (Sh("sh -c " + ShellQuote(script)) != 0) FAIL("openssl failed:\n" << ReadFile(dir.file("openssl.log")));
}

// One `verl-controller serve` process.
class Server {
 public:
  Server(const TestDir& dir, std::vector<std::string> flags, const std::string& log_name)
      : dir_(dir), flags_(std::move(flags)), log_(dir.file(log_name)) {}
  ~Server() { Kill(); }

  void Start() {
    const std::string ready = dir_.file("ready");
    fs::remove(ready);
    pid_ = fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      if (chdir(dir_.path().c_str()) != 0) _exit(126);
      FILE* out = std::freopen(log_.c_str(), "a", stdout);
      (void)out;
      dup2(STDOUT_FILENO, STDERR_FILENO);
      std::vector<std::string> args = {kBin + "verl-controller", "serve", "--listen", "127.0.0.1:0",
                                       "--ready-file", ready};
      args.insert(args.end(), flags_.begin(), flags_.end());
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    for (int i = 0; i < 300 && !fs::exists(ready); ++i) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        FAIL("serve exited before it was ready:\n" << ReadFile(log_));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    REQUIRE(fs::exists(ready));
    address_ = ReadFile(ready);
    while (!address_.empty() && address_.back() == '\n') address_.pop_back();
  }

  // SIGTERM and wait: the graceful stop.
  int Stop() {
    if (pid_ <= 0) return -1;
    kill(pid_, SIGTERM);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  void Kill() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

  const std::string& address() const { return address_; }
  std::string log() const { return ReadFile(log_); }

 private:
  const TestDir& dir_;
  std::vector<std::string> flags_;
  std::string log_;
  pid_t pid_ = -1;
  std::string address_;
};

struct Workspace {
  TestDir dir{"jobservice"};
  Workspace() {
    REQUIRE(Sh(kBin + "verl-make-tiny-model --out-dir " + dir.file("model") + " > /dev/null") == 0);
    REQUIRE(Sh(kBin + "verl-make-dataset --task repeat_letter --out-dir " + dir.file("data") + " > /dev/null") == 0);
    MakeCertificates(dir);
    dir.Write("token", std::string(kToken) + "\n");
  }
  // Overrides that point the quickstart at this workspace, with `name` as the experiment (own checkpoints).
  std::vector<std::string> JobArgs(const std::string& name, int steps) const {
    return {kConfig,
            "--name",
            name,
            "actor_rollout_ref.model.path=" + dir.file("model"),
            "data.train_files=" + dir.file("data/train.parquet"),
            "data.val_files=" + dir.file("data/test.parquet"),
            "trainer.experiment_name=" + name,
            "trainer.default_local_dir=" + dir.file("ckpt/" + name),
            "trainer.log_dir=" + dir.file("out/" + name),
            "trainer.total_training_steps=" + std::to_string(steps),
            "trainer.save_freq=10",
            "trainer.test_freq=1000"};
  }
};

RunResult Verlctl(const TestDir& dir, const std::string& server, std::vector<std::string> args,
                  std::vector<std::string> auth = {}) {
  std::vector<std::string> all = {"--server", server, "--tls-ca", dir.file("ca.pem"), "--tls-server-name",
                                  "localhost"};
  if (auth.empty()) auth = {"--token-file", dir.file("token")};
  all.insert(all.end(), auth.begin(), auth.end());
  all.insert(all.end(), args.begin(), args.end());
  return RunCommand(kBin + "verlctl", all, dir);
}

json JobStatus(const Workspace& ws, const Server& server, const std::string& id) {
  RunResult r = Verlctl(ws.dir, server.address(), {"--json", "status", id});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  return json::parse(r.out);
}

// Polls until `pred(status)` holds, at most `timeout_s`.
json WaitFor(const Workspace& ws, const Server& server, const std::string& id, const std::function<bool(const json&)>& pred,
             double timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  json status;
  while (std::chrono::steady_clock::now() < deadline) {
    status = JobStatus(ws, server, id);
    if (pred(status)) return status;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  FAIL("timed out waiting on " << id << "; last status " << status.dump() << "\nserver log:\n" << server.log());
  return status;
}

int64_t Int(const json& j, const char* key) {
  // protobuf's JSON mapping writes int64 as strings.
  if (!j.contains(key)) return 0;
  return j[key].is_string() ? std::stoll(j[key].get<std::string>()) : j[key].get<int64_t>();
}

std::string State(const json& j) { return j.value("state", std::string()); }

TEST_CASE("JobService over TLS with a token: queue, watch, restart mid-queue, cancel, logs", "[e2e][jobservice]") {
  Workspace ws;
  const std::vector<std::string> tls_flags = {"--state-dir", ws.dir.file("state"), "--token-file", ws.dir.file("token"),
                                              "--tls-cert", ws.dir.file("server.pem"), "--tls-key",
                                              ws.dir.file("server.key")};
  Server server(ws.dir, tls_flags, "serve1.log");
  server.Start();

  // Three jobs: A long enough to be interrupted, B queued behind it, C cancelled while queued.
  std::vector<std::string> a_args = {"submit"}, b_args = {"submit"}, c_args = {"submit"};
  for (auto& s : ws.JobArgs("job_a", 60)) a_args.push_back(s);
  for (auto& s : ws.JobArgs("job_b", 6)) b_args.push_back(s);
  for (auto& s : ws.JobArgs("job_c", 6)) c_args.push_back(s);
  RunResult a = Verlctl(ws.dir, server.address(), a_args);
  INFO(a.err);
  REQUIRE(a.exit_code == 0);
  CHECK(a.out == "submitted job-000001 (job_a)\n");
  RunResult b = Verlctl(ws.dir, server.address(), b_args);
  REQUIRE(b.exit_code == 0);
  RunResult c = Verlctl(ws.dir, server.address(), c_args);
  REQUIRE(c.exit_code == 0);
  CHECK(c.out == "submitted job-000003 (job_c)\n");

  RunResult cancel_c = Verlctl(ws.dir, server.address(), {"cancel", "job-000003"});
  REQUIRE(cancel_c.exit_code == 0);
  CHECK(cancel_c.out == "job-000003: cancelled\n");

  RunResult list = Verlctl(ws.dir, server.address(), {"list"});
  REQUIRE(list.exit_code == 0);
  CHECK_THAT(list.out, Catch::Contains("job-000002") && Catch::Contains("job_b") && Catch::Contains("queued"));

  // A watcher that goes away must not disturb the job.
  const std::string watch_cmd = ShellQuote(kBin + "verlctl") + " --server " + server.address() + " --tls-ca " +
                                ws.dir.file("ca.pem") + " --tls-server-name localhost --token-file " +
                                ws.dir.file("token") + " watch job-000001 > " + ws.dir.file("watch_a.txt") +
                                " 2>&1 & sleep 1.5; kill $!";
  REQUIRE(Sh(watch_cmd) == 0);

  // Once A has a checkpoint (step 10), stop the server: A stays queued (interrupted), B is still queued.
  WaitFor(ws, server, "job-000001", [](const json& j) { return Int(j, "current_step") >= 12; }, 120);
  REQUIRE(server.Stop() == 0);
  CHECK_THAT(server.log(), Catch::Contains("interrupted by the server's shutdown"));

  Server restarted(ws.dir, tls_flags, "serve2.log");
  restarted.Start();
  json b_status = JobStatus(ws, restarted, "job-000002");
  CHECK(State(b_status) == "JOB_STATE_QUEUED");
  json a_status = JobStatus(ws, restarted, "job-000001");
  CHECK(Int(a_status, "restarts") == 1);
  CHECK(State(JobStatus(ws, restarted, "job-000003")) == "JOB_STATE_CANCELLED");

  // Watch B to the end (it runs after A finishes).
  RunResult watch_b = Verlctl(ws.dir, restarted.address(), {"watch", "job-000002"});
  INFO(watch_b.err << "\nserver log:\n" << restarted.log());
  REQUIRE(watch_b.exit_code == 0);
  CHECK_THAT(watch_b.out, Catch::Contains("job-000002 running") && Catch::Contains("step 6/6") &&
                              Catch::EndsWith("job-000002 succeeded\n"));

  a_status = JobStatus(ws, restarted, "job-000001");
  CHECK(State(a_status) == "JOB_STATE_SUCCEEDED");
  CHECK(Int(a_status, "current_step") == 60);
  RunResult logs_a = Verlctl(ws.dir, restarted.address(), {"logs", "job-000001"});
  REQUIRE(logs_a.exit_code == 0);
  CHECK_THAT(logs_a.out, Catch::Contains("resumed from") && Catch::Contains("job finished: 60 steps"));
  RunResult logs_b = Verlctl(ws.dir, restarted.address(), {"logs", "job-000002"});
  CHECK_THAT(logs_b.out, Catch::Contains("step 6/6") && Catch::Contains("job-000002: succeeded"));

  // watch --json of an ended job: the job, then its whole history, then the stream closes.
  RunResult watch_json = Verlctl(ws.dir, restarted.address(), {"--json", "watch", "job-000002"});
  REQUIRE(watch_json.exit_code == 0);
  std::vector<json> events;
  for (size_t pos = 0, next; (next = watch_json.out.find('\n', pos)) != std::string::npos; pos = next + 1) {
    events.push_back(json::parse(watch_json.out.substr(pos, next - pos)));
  }
  REQUIRE(events.size() == 8);  // the job, validation before training (step 0), steps 1..6
  CHECK(events[0].contains("job"));
  CHECK(Int(events[1]["metrics"], "step") == 0);
  CHECK(events[1]["metrics"]["metrics"].contains("val-core/verl_cpp/repeat_letter/reward/mean@1"));
  CHECK(Int(events[7]["metrics"], "step") == 6);
  CHECK(events[7]["metrics"]["metrics"].contains("actor/pg_loss"));

  // Refusals.
  RunResult bad_token = Verlctl(ws.dir, restarted.address(), {"list"}, {"--token", "wrong"});
  CHECK(bad_token.exit_code == 1);
  CHECK_THAT(bad_token.err, Catch::Contains("UNAUTHENTICATED"));
  RunResult no_token = Verlctl(ws.dir, restarted.address(), {"list"}, {"--timeout", "10"});
  CHECK(no_token.exit_code == 1);
  CHECK_THAT(no_token.err, Catch::Contains("UNAUTHENTICATED"));
  RunResult plaintext = RunCommand(kBin + "verlctl",
                                   {"--server", restarted.address(), "--token", kToken, "--timeout", "3", "list"},
                                   ws.dir);
  CHECK(plaintext.exit_code == 1);
  CHECK_THAT(plaintext.err, Catch::Contains("UNAVAILABLE"));
  RunResult unknown = Verlctl(ws.dir, restarted.address(), {"status", "job-424242"});
  CHECK(unknown.exit_code == 1);
  CHECK_THAT(unknown.err, Catch::Contains("NOT_FOUND") && Catch::Contains("job-424242"));
  RunResult bad_value = Verlctl(ws.dir, restarted.address(), {"submit", kConfig, "data.train_batch_size=0"});
  CHECK(bad_value.exit_code == 1);
  CHECK_THAT(bad_value.err, Catch::Contains("INVALID_ARGUMENT") && Catch::Contains("data.train_batch_size"));
  const std::string broken = ws.dir.Write("broken.yaml", "data:\n  train_batch_size: [1, 2\n");
  RunResult bad_yaml = Verlctl(ws.dir, restarted.address(), {"submit", broken});
  CHECK(bad_yaml.exit_code == 1);
  CHECK_THAT(bad_yaml.err, Catch::Contains("INVALID_ARGUMENT") && Catch::Contains("submitted config"));
  RunResult typo = Verlctl(ws.dir, restarted.address(), {"submit", kConfig, "trainer.total_training_stepz=3"});
  CHECK_THAT(typo.err, Catch::Contains("did you mean"));
  const std::string huge = ws.dir.Write("huge.yaml", "# " + std::string(5 << 20, 'x') + "\n");
  RunResult oversized = Verlctl(ws.dir, restarted.address(), {"submit", huge});
  CHECK(oversized.exit_code == 1);
  CHECK_THAT(oversized.err, Catch::Contains("RESOURCE_EXHAUSTED"));
  // Nothing of the refused submissions was queued.
  RunResult final_list = Verlctl(ws.dir, restarted.address(), {"--json", "list"});
  CHECK(std::count(final_list.out.begin(), final_list.out.end(), '\n') == 3);
  CHECK(restarted.Stop() == 0);
}

TEST_CASE("A real Prometheus scrapes a running job through serve --metrics-listen; cancel stops it",
          "[e2e][jobservice][prometheus]") {
  if (!testing::PrometheusProcess::Available()) {
    WARN("prometheus not installed (Debian package 'prometheus'): skipped");
    return;
  }
  Workspace ws;
  Server server(ws.dir,
                {"--state-dir", ws.dir.file("state"), "--token-file", ws.dir.file("token"), "--tls-cert",
                 ws.dir.file("server.pem"), "--tls-key", ws.dir.file("server.key"), "--metrics-listen",
                 "127.0.0.1:0"},
                "serve.log");
  server.Start();
  std::smatch m;
  const std::string log = server.log();
  REQUIRE(std::regex_search(log, m, std::regex("prometheus metrics: http://([0-9.:]+)/metrics")));
  const std::string metrics_address = m[1];

  std::vector<std::string> args = {"submit"};
  for (auto& a : ws.JobArgs("long_job", 2000)) args.push_back(a);
  REQUIRE(Verlctl(ws.dir, server.address(), args).exit_code == 0);
  WaitFor(ws, server, "job-000001", [](const json& j) { return Int(j, "current_step") >= 1; }, 60);

  testing::PrometheusProcess prometheus(ws.dir, {metrics_address});
  const json pg_loss = prometheus.QueryFirst("verl_actor_pg_loss%7Bjob_id%3D%22job-000001%22%7D", 30);
  const json running = prometheus.QueryFirst("verl_jobs%7Bstate%3D%22running%22%7D", 10);
  const json step = prometheus.QueryFirst("verl_training_global_step", 10);
  INFO(prometheus.log());
  REQUIRE(pg_loss.is_object());
  CHECK(pg_loss["metric"]["experiment"] == "long_job");
  CHECK(pg_loss["metric"]["job"] == "verl");  // Prometheus's scrape job
  REQUIRE(running.is_object());
  CHECK(running["value"][1] == "1");
  REQUIRE(step.is_object());
  CHECK(std::stod(step["value"][1].get<std::string>()) >= 1);
  // Read while the job was still running.
  CHECK(State(JobStatus(ws, server, "job-000001")) == "JOB_STATE_RUNNING");
  // The exposition itself passes promtool (job_id labels, verl_jobs, the step metrics of a running job).
  if (const std::string promtool = testing::FindOnPath("promtool"); !promtool.empty()) {
    const int port = std::stoi(metrics_address.substr(metrics_address.rfind(':') + 1));
    const testing::HttpResponse scrape = testing::HttpGet(port, "/metrics");
    REQUIRE(scrape.status == 200);
    CHECK_THAT(scrape.body, Catch::Contains("verl_jobs{state=\"running\"} 1"));
    const std::string path = ws.dir.Write("scrape.txt", scrape.body);
    const int rc = Sh(ShellQuote(promtool) + " check metrics < " + ShellQuote(path) + " > " +
                      ws.dir.file("promtool.txt") + " 2>&1");
    INFO(ReadFile(ws.dir.file("promtool.txt")));
    CHECK(rc == 0);
  }

  RunResult cancel = Verlctl(ws.dir, server.address(), {"cancel", "job-000001"});
  REQUIRE(cancel.exit_code == 0);
  CHECK(cancel.out == "job-000001: cancelling (it stops at its next cancellation point)\n");
  RunResult watch = Verlctl(ws.dir, server.address(), {"watch", "job-000001"});
  CHECK(watch.exit_code == 5);
  CHECK_THAT(watch.out, Catch::EndsWith("job-000001 cancelled: cancelled by CancelJob while running\n"));
  CHECK(Int(JobStatus(ws, server, "job-000001"), "current_step") < 2000);
  CHECK(server.Stop() == 0);
}

TEST_CASE("verlctl watch shows the steps a recovery re-runs", "[e2e][jobservice][recovery]") {
  Workspace ws;
  Server server(ws.dir,
                {"--state-dir", ws.dir.file("state"), "--token-file", ws.dir.file("token"), "--tls-cert",
                 ws.dir.file("server.pem"), "--tls-key", ws.dir.file("server.key")},
                "serve.log");
  server.Start();
  std::vector<std::string> args = {"submit"};
  for (auto& a : ws.JobArgs("recovered", 60)) args.push_back(a);
  // No checkpoint: the recovery re-runs from step 1 whenever the kill lands. (With checkpoints every 10 steps, a kill
  // landing just after one is committed and before the next step is recorded re-runs nothing the watch has seen.)
  args.push_back("trainer.save_freq=1000");
  REQUIRE(Verlctl(ws.dir, server.address(), args).exit_code == 0);
  RunResult watch;
  std::thread watcher([&] { watch = Verlctl(ws.dir, server.address(), {"watch", "job-000001"}); });
  const json running = WaitFor(
      ws, server, "job-000001", [](const json& j) { return Int(j, "current_step") >= 16; }, 120);
  // Kill the local worker (SIGKILL): the job restarts it and re-runs the steps after its last checkpoint.
  std::smatch m;
  const std::string worker_log = ReadFile(ws.dir.file("out/recovered/workers/worker-0.log"));
  REQUIRE(std::regex_search(worker_log, m, std::regex(R"(\(pid ([0-9]+)\))")));
  const int64_t killed_at = Int(running, "current_step");
  REQUIRE(kill(std::stoi(m[1]), SIGKILL) == 0);
  watcher.join();
  INFO(watch.out << watch.err << "\nserver log:\n" << server.log());
  CHECK(watch.exit_code == 0);
  REQUIRE(killed_at < 60);  // the kill came before the job's end
  // The re-run steps come again, with a note, up to the last step.
  CHECK_THAT(watch.out, Catch::Contains("(re-running from step ") && Catch::Contains("after a recovery") &&
                            Catch::Contains("step 60/60"));
  CHECK(server.Stop() == 0);
}

TEST_CASE("JobService with client certificates refuses clients without one", "[e2e][jobservice]") {
  TestDir dir("jobservice_mtls");
  MakeCertificates(dir);
  Server server(dir,
                {"--state-dir", dir.file("state"), "--insecure-no-auth", "--tls-cert", dir.file("server.pem"),
                 "--tls-key", dir.file("server.key"), "--tls-client-ca", dir.file("ca.pem")},
                "serve.log");
  server.Start();
  const std::vector<std::string> base = {"--server", server.address(), "--tls-ca", dir.file("ca.pem"),
                                         "--tls-server-name", "localhost", "--timeout", "5"};
  std::vector<std::string> without = base, with = base;
  without.push_back("list");
  for (const char* s : {"--tls-cert", "", "--tls-key", ""}) with.push_back(s);
  with[with.size() - 3] = dir.file("client.pem");
  with[with.size() - 1] = dir.file("client.key");
  with.push_back("list");
  RunResult refused = RunCommand(kBin + "verlctl", without, dir);
  CHECK(refused.exit_code == 1);
  CHECK_THAT(refused.err, Catch::Contains("UNAVAILABLE"));
  RunResult accepted = RunCommand(kBin + "verlctl", with, dir);
  INFO(accepted.err);
  CHECK(accepted.exit_code == 0);
  CHECK_THAT(accepted.out, Catch::StartsWith("ID "));
  CHECK(server.Stop() == 0);
}

TEST_CASE("serve refuses to start without a token unless told to", "[e2e][jobservice]") {
  TestDir dir("jobservice_flags");
  RunResult r = RunCommand(kBin + "verl-controller", {"serve", "--state-dir", dir.file("state")}, dir);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("--insecure-no-auth"));
  RunResult missing = RunCommand(kBin + "verl-controller",
                                 {"serve", "--token-file", dir.file("nope"), "--state-dir", dir.file("state")}, dir);
  CHECK(missing.exit_code == 2);
  CHECK_THAT(missing.err, Catch::Contains(dir.file("nope")));
  // A corrupt state file stops the server with its name instead of dropping the job.
  fs::create_directories(dir.file("state/jobs/job-000007"));
  dir.Write("state/jobs/job-000007/job.json", "{not json");
  RunResult corrupt = RunCommand(kBin + "verl-controller",
                                 {"serve", "--insecure-no-auth", "--listen", "127.0.0.1:0", "--state-dir",
                                  dir.file("state")},
                                 dir);
  CHECK(corrupt.exit_code == 1);
  CHECK_THAT(corrupt.err, Catch::Contains("job-000007/job.json"));
}

}  // namespace
}  // namespace verl
