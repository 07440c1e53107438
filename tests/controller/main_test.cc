// The verl-controller binary as a user runs it: bad input must stop the job before any worker starts, with a
// message naming the file and the key; Ctrl-C must stop the job and its workers.

#include <signal.h>

#include <arrow/api.h>
#include <arrow/io/file.h>
#include <parquet/arrow/writer.h>

#include <algorithm>
#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "common/data/dataset.h"
#include "tests/common/metrics/http_test_client.h"
#include "tests/controller/test_util.h"

namespace verl {
namespace {

namespace fs = std::filesystem;
using testing::Bin;
using testing::ChildProcess;
using testing::Clock;
using testing::ProcessRunning;
using testing::ReadFile;
using testing::RunResult;
using testing::SecondsSince;
using testing::TestDir;
using testing::WaitFor;
using testing::WriteFile;
using testing::WriteScript;

// A scaled-down quickstart (GRPO on the tiny model, repeat_letter), written here rather than read from
// configs/quickstart.yaml so that tuning that file does not change what these tests run.
constexpr char kJobYaml[] = R"(data:
  train_batch_size: 4
  max_prompt_length: 32
  max_response_length: 4
  shuffle: true
actor_rollout_ref:
  actor:
    optim:
      lr: 1.0e-3
    ppo_mini_batch_size: 2
    ppo_micro_batch_size_per_gpu: 4
    use_kl_loss: true
  rollout:
    n: 2
    log_prob_micro_batch_size_per_gpu: 8
algorithm:
  adv_estimator: grpo
trainer:
  project_name: ctest_project
  experiment_name: ctest_job
  logger: [console, jsonl]
  total_training_steps: 2
  test_freq: -1
  save_freq: -1
  val_before_train: false
  n_gpus_per_node: 1
  device: cpu
cluster:
  num_threads_per_rank: 1
)";

// A scratch job: a tiny model, a small dataset, and a fake worker binary that leaves a marker file if it is ever
// started. Paths the job writes (logs, checkpoints) are inside the scratch directory.
class Job {
 public:
  Job() : dir_("controller_main") {
    config_ = dir_.file("job.yaml");
    WriteFile(config_, kJobYaml);
    marker_ = dir_.file("worker_started");
    fake_worker_ = WriteScript(dir_.file("fake-worker.sh"), "touch " + marker_ + "\nexit 1\n");
  }

  // Makes the model and the dataset (only the tests that get past config loading need them).
  void MakeInputs() {
    REQUIRE(testing::MakeTinyModel(model(), dir_.path()).empty());
    REQUIRE(testing::MakeDataset(dir_.file("data"), dir_.path(), 32, 8).empty());
  }

  const TestDir& dir() const { return dir_; }
  const std::string& config() const { return config_; }
  std::string model() const { return dir_.file("model"); }
  std::string train() const { return dir_.file("data/train.parquet"); }
  std::string val() const { return dir_.file("data/test.parquet"); }
  bool worker_started() const { return fs::exists(marker_); }

  // Overrides pointing the quickstart at this job's inputs and scratch directories, using the fake worker unless
  // `real_worker` (then verl-worker beside verl-controller).
  std::vector<std::string> BaseOverrides(bool real_worker = false) const {
    std::vector<std::string> o = {"actor_rollout_ref.model.path=" + model(),
                                  "data.train_files=" + train(),
                                  "data.val_files=" + val(),
                                  "trainer.log_dir=" + dir_.file("logs"),
                                  "trainer.default_local_dir=" + dir_.file("ckpt"),
                                  "cluster.worker_start_timeout_s=10"};
    if (!real_worker) o.push_back("cluster.worker_binary=" + fake_worker_);
    return o;
  }

  // Runs verl-controller --config config with BaseOverrides() then `extra` (later overrides win).
  RunResult Run(const std::string& config, const std::vector<std::string>& extra = {}) const {
    std::vector<std::string> argv = {Bin("verl-controller"), "--config", config};
    for (const std::string& o : BaseOverrides()) argv.push_back(o);
    for (const std::string& o : extra) argv.push_back(o);
    return testing::Run(argv, dir_.path(), 30);
  }

 private:
  TestDir dir_;
  std::string config_;
  std::string marker_;
  std::string fake_worker_;
};

TEST_CASE("verl-controller rejects a bad config before starting workers", "[controller][main]") {
  Job job;
  SECTION("missing config file") {
    const std::string missing = job.dir().file("no_such_job.yaml");
    RunResult r = job.Run(missing);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Catch::Contains(missing) && Catch::Contains("not found"));
  }
  SECTION("YAML syntax error: the message names file and line") {
    const std::string bad = job.dir().file("bad.yaml");
    WriteFile(bad, "data:\n  train_batch_size: 4\n  - seed\n");
    RunResult r = job.Run(bad);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Catch::Contains(bad + ":3:") && Catch::Contains("YAML syntax error"));
  }
  SECTION("unknown key in the file, with a suggestion") {
    const std::string typo = job.dir().file("typo.yaml");
    WriteFile(typo, "data:\n  train_batch_size: 4\ntrainer:\n  total_trainig_steps: 3\n");
    RunResult r = job.Run(typo);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Catch::Contains("trainer.total_trainig_steps") && Catch::Contains(typo + ":4") &&
                          Catch::Contains("did you mean 'trainer.total_training_steps'"));
  }
  SECTION("unknown override, with a suggestion") {
    RunResult r = job.Run(job.config(), {"data.trian_batch_size=4"});
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Catch::Contains("data.trian_batch_size") && Catch::Contains("did you mean 'data.train_batch_size'"));
  }
  CHECK_FALSE(job.worker_started());
}

TEST_CASE("verl-controller checks the model and data before starting workers", "[controller][main]") {
  Job job;
  job.MakeInputs();
  SECTION("missing model directory: names the path and the key") {
    const std::string missing = job.dir().file("no_such_model");
    RunResult r = job.Run(job.config(), {"actor_rollout_ref.model.path=" + missing});
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.err, Catch::Contains(missing) && Catch::Contains("actor_rollout_ref.model.path"));
    CHECK_THAT(r.err, !Catch::Contains("Hub id"));
  }
  SECTION("a Hugging Face Hub id, as verl's scripts pass: says to download it") {
    RunResult r = job.Run(job.config(), {"actor_rollout_ref.model.path=Qwen/Qwen2.5-0.5B-Instruct"});
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.err, Catch::Contains("'Qwen/Qwen2.5-0.5B-Instruct' does not exist (a Hugging Face Hub id?") &&
                          Catch::Contains("huggingface-cli download Qwen/Qwen2.5-0.5B-Instruct --local-dir DIR"));
  }
  SECTION("model directory without tokenizer.json") {
    const std::string model = job.dir().file("model_no_tok");
    fs::copy(job.model(), model);
    fs::remove(model + "/tokenizer.json");
    RunResult r = job.Run(job.config(), {"actor_rollout_ref.model.path=" + model});
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.err, Catch::Contains(model) && Catch::Contains("tokenizer.json") &&
                          Catch::Contains("actor_rollout_ref.model.path"));
  }
  SECTION("model directory without config.json") {
    const std::string model = job.dir().file("model_no_config");
    fs::copy(job.model(), model);
    fs::remove(model + "/config.json");
    RunResult r = job.Run(job.config(), {"actor_rollout_ref.model.path=" + model});
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.err, Catch::Contains(model + "/config.json") && Catch::Contains("actor_rollout_ref.model.path"));
  }
  SECTION("missing training file") {
    const std::string missing = job.dir().file("data/nope.parquet");
    RunResult r = job.Run(job.config(), {"data.train_files=" + missing});
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.err, Catch::Contains(missing) && Catch::Contains("data.train_files"));
  }
  SECTION("missing validation file") {
    const std::string missing = job.dir().file("data/nope_val.parquet");
    RunResult r = job.Run(job.config(), {"data.val_files=" + missing});
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.err, Catch::Contains(missing) && Catch::Contains("data.val_files"));
  }
  SECTION("JSONL row without data_source: names file, line and column") {
    auto examples = LoadDataset(job.train());
    REQUIRE(examples.ok());
    examples->resize(3);
    const std::string path = job.dir().file("data/broken.jsonl");
    REQUIRE(WriteJsonl(path, *examples).ok());
    // Drop data_source from the second line.
    std::string text = ReadFile(path);
    const size_t second = text.find('\n') + 1;
    std::string line2 = text.substr(second, text.find('\n', second) - second);
    const std::string stripped = std::regex_replace(line2, std::regex(R"("data_source":"[^"]*",?)"), "");
    REQUIRE(stripped != line2);
    text.replace(second, line2.size(), stripped);
    WriteFile(path, text);
    RunResult r = job.Run(job.config(), {"data.train_files=" + path, "data.train_batch_size=2"});
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.err, Catch::Contains(path) && Catch::Contains("line 2") && Catch::Contains("data_source") &&
                          Catch::Contains("data.train_files"));
  }
  SECTION("an overlong JSONL prompt is named by its line, blank lines counted") {
    auto examples = LoadDataset(job.train());
    REQUIRE(examples.ok());
    examples->resize(3);
    (*examples)[1].prompt[0].content = std::string(400, 'x');  // far over max_prompt_length
    const std::string path = job.dir().file("data/long.jsonl");
    REQUIRE(WriteJsonl(path, *examples).ok());
    WriteFile(path, "\n" + ReadFile(path));  // a blank first line: the long prompt is on line 3
    RunResult r = job.Run(job.config(), {"data.train_files=" + path, "data.train_batch_size=2",
                                         "data.max_prompt_length=64", "data.truncation=error"});
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.err, Catch::Contains(path + ": line 3: prompt is") && Catch::Contains("data.max_prompt_length=64"));
  }
  SECTION("Parquet file without the prompt column: names file and column, lists the columns present") {
    const std::string path = job.dir().file("data/no_prompt.parquet");
    arrow::StringBuilder question, source;
    for (const char* q : {"what?", "why?"}) {
      REQUIRE(question.Append(q).ok());
      REQUIRE(source.Append("verl_cpp/repeat_letter").ok());
    }
    std::shared_ptr<arrow::Array> qa, sa;
    REQUIRE(question.Finish(&qa).ok());
    REQUIRE(source.Finish(&sa).ok());
    auto table = arrow::Table::Make(
        arrow::schema({arrow::field("question", arrow::utf8()), arrow::field("data_source", arrow::utf8())}),
        {qa, sa});
    auto sink = arrow::io::FileOutputStream::Open(path);
    REQUIRE(sink.ok());
    REQUIRE(parquet::arrow::WriteTable(*table, arrow::default_memory_pool(), *sink, 1024).ok());
    REQUIRE((*sink)->Close().ok());
    RunResult r = job.Run(job.config(), {"data.val_files=" + path});
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.err, Catch::Contains(path) && Catch::Contains("'prompt'") && Catch::Contains("question") &&
                          Catch::Contains("data.val_files"));
  }
  SECTION("a batch larger than the training set") {
    RunResult r = job.Run(job.config(), {"data.train_batch_size=64"});
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.err, Catch::Contains("data.train_batch_size=64") && Catch::Contains(job.train()));
  }
  CHECK_FALSE(job.worker_started());
  // Nothing was written where the job would have logged or saved.
  CHECK_FALSE(fs::exists(job.dir().file("ckpt")));
}

TEST_CASE("data.train_files and data.val_files take lists, verl's quoted form included", "[controller][main]") {
  Job job;
  job.MakeInputs();  // train.parquet: 32 prompts; test.parquet: 8
  const std::string both = "['" + job.train() + "', '" + job.val() + "']";
  SECTION("the files' rows are concatenated") {
    std::vector<std::string> argv = {Bin("verl-controller"), "--config", job.config()};
    for (const std::string& o : job.BaseOverrides(/*real_worker=*/true)) argv.push_back(o);
    for (const std::string o : {"data.train_files=" + both, "data.val_files=[" + job.val() + ", " + job.val() + "]",
                                std::string("data.train_batch_size=40"), std::string("trainer.total_training_steps=1"),
                                std::string("actor_rollout_ref.actor.ppo_mini_batch_size=40")}) {
      argv.push_back(o);
    }
    RunResult r = testing::Run(argv, job.dir().path(), 120);
    INFO(r.out << r.err);
    CHECK(r.exit_code == 0);
    CHECK_THAT(r.out + r.err, Catch::Contains("40 training prompts, 16 validation prompts"));
  }
  SECTION("a missing file in the list is named") {
    const std::string missing = job.dir().file("data/nope.parquet");
    RunResult r = job.Run(job.config(), {"data.train_files=[" + job.train() + ", " + missing + "]"});
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.err, Catch::Contains("data.train_files: dataset '" + missing + "' does not exist"));
  }
  SECTION("the batch check counts every file") {
    RunResult r = job.Run(job.config(), {"data.train_files=" + both, "data.train_batch_size=64"});
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.err, Catch::Contains("larger than the training set (40 prompts in " + job.train() + ", " +
                                      job.val() + ")"));
  }
}

TEST_CASE("verl-controller reports a worker that fails to start", "[controller][main]") {
  Job job;
  job.MakeInputs();
  RunResult r = job.Run(job.config());
  CHECK(r.exit_code == 1);
  CHECK(job.worker_started());
  CHECK_THAT(r.err, Catch::Contains("worker-0") && Catch::Contains("exited with status 1"));
}

TEST_CASE("verl-controller --print-config shows the resolved values", "[controller][main]") {
  Job job;
  std::vector<std::string> argv = {Bin("verl-controller"), "--config", job.config(), "--print-config"};
  for (const std::string& o : job.BaseOverrides()) argv.push_back(o);
  argv.push_back("trainer.experiment_name=zebra_run");
  argv.push_back("data.train_batch_size=8");
  argv.push_back("~trainer.default_local_dir");  // back to its default, an interpolation
  RunResult r = testing::Run(argv, job.dir().path());
  INFO("stderr: " << r.err);
  CHECK(r.exit_code == 0);
  // Overrides, values from the file, defaults, and interpolations resolved.
  CHECK_THAT(r.out, Catch::Contains("experiment_name: zebra_run") && Catch::Contains("train_batch_size: 8") &&
                        Catch::Contains("adv_estimator: grpo") &&
                        Catch::Contains("default_local_dir: checkpoints/ctest_project/zebra_run") &&
                        Catch::Contains("rpc_timeout_s:"));
  CHECK_THAT(r.out, !Catch::Contains("${"));
  CHECK_FALSE(job.worker_started());
}

// The pid the worker printed in its log: "serving WorkerService on HOST:PORT (pid N)".
pid_t WorkerPidFromLog(const std::string& log) {
  std::smatch m;
  if (!std::regex_search(log, m, std::regex(R"(serving WorkerService on \S+ \(pid (\d+)\))"))) return -1;
  return static_cast<pid_t>(std::stol(m[1].str()));
}

size_t CountLines(const std::string& path) {
  const std::string text = ReadFile(path);
  return static_cast<size_t>(std::count(text.begin(), text.end(), '\n'));
}

TEST_CASE("Ctrl-C stops verl-controller and its worker", "[controller][main]") {
  Job job;
  job.MakeInputs();
  std::vector<std::string> argv = {Bin("verl-controller"), "--config", job.config()};
  for (const std::string& o : job.BaseOverrides(/*real_worker=*/true)) argv.push_back(o);
  argv.push_back("trainer.total_training_steps=1000");
  ChildProcess controller(argv, job.dir().file("controller.out"), job.dir().file("controller.err"));
  const std::string metrics = job.dir().file("logs/metrics.jsonl");
  const bool stepped = WaitFor([&] { return CountLines(metrics) >= 1 || controller.Wait(0); }, 30);
  INFO("stderr: " << controller.err());
  REQUIRE(stepped);
  REQUIRE(controller.exit_code() == -1);  // still running

  const pid_t worker = WorkerPidFromLog(ReadFile(job.dir().file("logs/workers/worker-0.log")));
  REQUIRE(worker > 0);
  REQUIRE(ProcessRunning(worker));

  const auto start = Clock::now();
  REQUIRE(::kill(controller.pid(), SIGINT) == 0);
  REQUIRE(controller.Wait(10));
  // Normally well under a second; 5 s was the symptom of the controller keeping its connection open while
  // waiting for the worker to exit (the worker's graceful stop waited for gRPC's 5 s backup poll).
  CHECK(SecondsSince(start) < 3);
  CHECK(controller.exit_code() == 130);
  CHECK_THAT(controller.err(), Catch::Contains("cancel"));
  // The controller reaped its worker before exiting: it is neither running nor an orphaned zombie.
  CHECK(WaitFor([&] { return !ProcessRunning(worker); }, 1));
  CHECK(::kill(worker, 0) != 0);
  // The job stopped well before its 1000 steps.
  CHECK(CountLines(metrics) < 1000);
}

TEST_CASE("Ctrl-C while verl-controller waits for a worker ends the wait at once", "[controller][main]") {
  Job job;
  job.MakeInputs();
  std::vector<std::string> argv = {Bin("verl-controller"), "--config", job.config()};
  for (const std::string& o : job.BaseOverrides(/*real_worker=*/true)) argv.push_back(o);
  // Nothing listens on port 1: the controller waits out cluster.worker_start_timeout_s unless the cancel ends it.
  argv.push_back("cluster.worker_addresses=[127.0.0.1:1]");
  argv.push_back("cluster.worker_start_timeout_s=120");
  ChildProcess controller(argv, job.dir().file("controller.out"), job.dir().file("controller.err"));
  // Signalled once it waits for the worker (a SIGINT before the controller handles it would just end the process).
  REQUIRE(WaitFor([&] { return controller.out().find("connecting to worker-0 at 127.0.0.1:1") != std::string::npos ||
                               controller.Wait(0); }, 60));
  REQUIRE_FALSE(controller.Wait(0));  // still waiting for the worker
  const auto start = Clock::now();
  REQUIRE(::kill(controller.pid(), SIGINT) == 0);
  REQUIRE(controller.Wait(30));
  INFO("stderr: " << controller.err());
  CHECK(SecondsSince(start) < 5);  // one Health attempt (2 s) at most, not the 120 s timeout
  CHECK(controller.exit_code() == 130);
  CHECK_THAT(controller.err(), Catch::Contains("cancelled") && Catch::Contains("127.0.0.1:1"));
}

TEST_CASE("trainer.logger=prometheus serves the running job's metrics on /metrics", "[controller][main][prometheus]") {
  Job job;
  job.MakeInputs();
  std::vector<std::string> argv = {Bin("verl-controller"), "--config", job.config()};
  for (const std::string& o : job.BaseOverrides(/*real_worker=*/true)) argv.push_back(o);
  for (const char* o : {"trainer.total_training_steps=1000", "trainer.logger=[jsonl,prometheus]",
                        "trainer.prometheus_listen=127.0.0.1:0"}) {
    argv.push_back(o);
  }
  ChildProcess controller(argv, job.dir().file("controller.out"), job.dir().file("controller.err"));
  const std::string metrics = job.dir().file("logs/metrics.jsonl");
  REQUIRE(WaitFor([&] { return CountLines(metrics) >= 2 || controller.Wait(0); }, 30));
  INFO("stderr: " << controller.err());
  REQUIRE(controller.exit_code() == -1);
  std::smatch m;
  const std::string err = controller.out() + controller.err();  // the log line may be on either
  REQUIRE(std::regex_search(err, m, std::regex(R"(prometheus metrics: http://127\.0\.0\.1:(\d+)/metrics)")));
  const int port = std::stoi(m[1].str());
  // A real scrape over loopback while the job runs.
  testing::HttpResponse r = testing::HttpGet(port, "/metrics");
  INFO(r.body);
  REQUIRE(r.status == 200);
  CHECK_THAT(r.body, Catch::Contains("verl_actor_pg_loss{experiment=\""));
  CHECK_THAT(r.body, Catch::Contains("verl_critic_score_mean{"));
  CHECK_THAT(r.body, Catch::Contains("verl_timing_seconds_gen{"));
  CHECK_THAT(r.body, Catch::Contains("verl_training_global_step{"));
  // Exactly one job state is active, and it is a running one.
  CHECK(std::regex_search(r.body, std::regex(R"re(verl_job_state\{[^}]*state="(step/[a-z_]+|validating|checkpointing)"\} 1)re")));
  REQUIRE(::kill(controller.pid(), SIGINT) == 0);
  REQUIRE(controller.Wait(10));
}

}  // namespace
}  // namespace verl
