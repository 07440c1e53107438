// End to end: the real verl-controller starts real verl-worker processes over gRPC on loopback and runs a shortened
// CPU quickstart (GRPO on the tiny Qwen2 model, synthetic repeat-the-letter task). The reward must rise, metrics and
// checkpoints must land in verl's layout, and a second run must resume from the last checkpoint.

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <chrono>
#include <cmath>
#include <regex>
#include <string>
#include <thread>
#include <vector>

namespace {
namespace fs = std::filesystem;

const std::string kBin = std::string(VERL_BINARY_DIR) + "/bin/";
const std::string kConfig = std::string(VERL_SOURCE_DIR) + "/configs/quickstart.yaml";

int Run(const std::string& command) {
  int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::vector<nlohmann::json> ReadJsonl(const fs::path& path) {
  std::vector<nlohmann::json> lines;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) lines.push_back(nlohmann::json::parse(line));
  }
  return lines;
}

// The "step" of each metrics line, in file order.
std::vector<int64_t> Steps(const std::vector<nlohmann::json>& lines) {
  std::vector<int64_t> steps;
  for (const auto& l : lines) steps.push_back(l["step"].get<int64_t>());
  return steps;
}

// 1, 2, ..., n: every step once, in order.
std::vector<int64_t> OneTo(int64_t n) {
  std::vector<int64_t> out;
  for (int64_t i = 1; i <= n; ++i) out.push_back(i);
  return out;
}

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// How many whole lines a file being written holds: for polling a running job's metrics.jsonl, whose last line may
// be half-written when it is read (ReadJsonl, strict, is for after the job ended).
size_t CompleteLines(const fs::path& path) {
  const std::string text = ReadFile(path);
  return static_cast<size_t>(std::count(text.begin(), text.end(), '\n'));
}

// The end of a log, for failure messages.
std::string Tail(const fs::path& path) {
  std::string text = ReadFile(path);
  return text.size() > 3000 ? text.substr(text.size() - 3000) : text;
}

struct Workspace {
  fs::path dir;
  Workspace() {
    dir = fs::temp_directory_path() / ("verl_e2e_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    REQUIRE(Run(kBin + "verl-make-tiny-model --out-dir " + (dir / "model").string() + " > /dev/null") == 0);
    REQUIRE(Run(kBin + "verl-make-dataset --task repeat_letter --out-dir " + (dir / "data").string() +
                " > /dev/null") == 0);
  }
  ~Workspace() { fs::remove_all(dir); }

  // Runs `config` (default: the quickstart) against this workspace's model/data/output directories plus
  // `overrides`.
  int Controller(const std::string& overrides, const std::string& log_name, const std::string& config = kConfig) const {
    const std::string cmd = kBin + "verl-controller --config " + config +
                            " actor_rollout_ref.model.path=" + (dir / "model").string() +
                            " data.train_files=" + (dir / "data/train.parquet").string() +
                            " data.val_files=" + (dir / "data/test.parquet").string() +
                            " trainer.default_local_dir=" + (dir / "ckpt").string() +
                            " trainer.log_dir=" + (dir / "out").string() + " " + overrides + " > " +
                            (dir / log_name).string() + " 2>&1";
    return Run(cmd);
  }
};

TEST_CASE("quickstart GRPO: reward rises, metrics and checkpoints land, and a rerun resumes", "[e2e]") {
  Workspace ws;
  // The quickstart as shipped (checkpoints every 50 steps), validating every 50 steps.
  const int rc = ws.Controller("trainer.test_freq=50", "run1.log");
  INFO(Tail(ws.dir / "run1.log"));
  REQUIRE(rc == 0);

  std::vector<nlohmann::json> lines = ReadJsonl(ws.dir / "out/metrics.jsonl");
  REQUIRE(lines.size() >= 3);
  // Line 0 is the validation before training (step 0); then one line per step.
  REQUIRE(lines.front()["step"] == 0);
  const double val_before = lines.front()["data"]["val-core/verl_cpp/repeat_letter/reward/mean@1"];
  const nlohmann::json& first = lines[1]["data"];
  const nlohmann::json& last = lines.back()["data"];
  for (const char* key : {"critic/score/mean", "actor/pg_loss", "actor/kl_loss", "actor/entropy", "actor/grad_norm",
                          "response_length/mean", "timing_s/gen", "timing_s/update_actor", "timing_s/step",
                          "perf/throughput", "critic/advantages/mean", "perf/controller_overhead"}) {
    INFO(key);
    REQUIRE(first.contains(key));
  }
  const double score_first = first["critic/score/mean"];
  const double score_last = last["critic/score/mean"];
  const double val_after = last["val-core/verl_cpp/repeat_letter/reward/mean@1"];
  INFO("score step 1 " << score_first << ", last " << score_last << ", val " << val_before << " -> " << val_after);
  CHECK(score_first < 0.3);
  CHECK(val_before < 0.3);
  CHECK(score_last >= 0.8);
  CHECK(val_after >= 0.8);

  // Checkpoint in verl's layout, tracker last.
  const int64_t steps = lines.back()["step"];
  const fs::path step_dir = ws.dir / "ckpt" / ("global_step_" + std::to_string(steps));
  CHECK(std::stoll(ReadFile(ws.dir / "ckpt/latest_checkpointed_iteration.txt")) == steps);
  CHECK(fs::exists(step_dir / "data.json"));
  CHECK(fs::exists(step_dir / "actor/model_world_size_1_rank_0.safetensors"));
  CHECK(fs::exists(step_dir / "actor/optim_world_size_1_rank_0.safetensors"));
  CHECK(fs::exists(step_dir / "actor/huggingface/config.json"));
  CHECK(fs::exists(step_dir / "actor/huggingface/model.safetensors"));
  CHECK(fs::exists(step_dir / "actor/huggingface/tokenizer.json"));

  // A rerun with more steps resumes at the checkpoint: it logs only the new steps, and the trained policy is kept.
  const int rc2 = ws.Controller("trainer.test_freq=-1 trainer.total_training_steps=" +
                                    std::to_string(steps + 2),
                                "run2.log");
  INFO(Tail(ws.dir / "run2.log"));
  REQUIRE(rc2 == 0);
  std::vector<nlohmann::json> after = ReadJsonl(ws.dir / "out/metrics.jsonl");
  REQUIRE(after.size() == lines.size() + 2);
  CHECK(after[lines.size()]["step"] == steps + 1);
  CHECK(after.back()["data"]["critic/score/mean"].get<double>() >= 0.8);
}

// Runs one algorithm from scratch on the quickstart task and checks that the reward rose: step 1 near random,
// validation (greedy) after training at least 0.8. Returns the metrics lines.
std::vector<nlohmann::json> CheckRewardRises(const std::string& config, const std::string& overrides) {
  Workspace ws;
  const int rc = ws.Controller("trainer.total_training_steps=120 trainer.test_freq=120 trainer.save_freq=-1 " +
                                   overrides,
                               "run.log", config);
  INFO(Tail(ws.dir / "run.log"));
  REQUIRE(rc == 0);
  std::vector<nlohmann::json> lines = ReadJsonl(ws.dir / "out/metrics.jsonl");
  REQUIRE(lines.size() == 121);
  const double score_first = lines[1]["data"]["critic/score/mean"];
  const double val_after = lines.back()["data"]["val-core/verl_cpp/repeat_letter/reward/mean@1"];
  INFO("score at step 1 " << score_first << ", validation after 120 steps " << val_after);
  CHECK(score_first < 0.3);
  CHECK(val_after >= 0.8);
  return lines;
}

TEST_CASE("PPO with a critic (GAE) and an in-reward KL penalty raises the reward", "[e2e][ppo]") {
  // With the actor's and the critic's checkpointing narrowed to their first layer (the same gradients; the setting
  // travels from the controller to the worker, which reports the layers it recomputed).
  const std::vector<nlohmann::json> lines =
      CheckRewardRises(std::string(VERL_SOURCE_DIR) + "/configs/quickstart_ppo.yaml",
                       "actor_rollout_ref.model.recompute_num_layers=1 critic.model.recompute_num_layers=1");
  CHECK(lines[1]["data"]["perf/actor_recomputed_layers"] == 1.0);
  CHECK(lines[1]["data"]["perf/critic_recomputed_layers"] == 1.0);
}

TEST_CASE("RLOO raises the reward", "[e2e][rloo]") { CheckRewardRises(kConfig, "algorithm.adv_estimator=rloo"); }

TEST_CASE("REINFORCE++ raises the reward", "[e2e][reinforce_plus_plus]") {
  CheckRewardRises(kConfig, "algorithm.adv_estimator=reinforce_plus_plus");
}

// The pids the workers printed in a log ("serving WorkerService on ... (pid N)"), oldest first: a restarted worker
// appends to its predecessor's log.
std::vector<pid_t> WorkerPids(const fs::path& log) {
  const std::string text = ReadFile(log);
  const std::regex pid("\\(pid ([0-9]+)\\)");
  std::vector<pid_t> pids;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), pid); it != std::sregex_iterator(); ++it) {
    pids.push_back(std::stoi((*it)[1]));
  }
  return pids;
}

// The newest worker's pid in a log, or -1.
pid_t WorkerPid(const fs::path& log) {
  const std::vector<pid_t> pids = WorkerPids(log);
  return pids.empty() ? -1 : pids.back();
}

// Sends `signal` to the newest worker of `worker_log` once `metrics` has `lines` lines; its pid goes to `*pid` (-1
// if that never happened within 120 s).
std::thread SignalWorkerAt(const fs::path& metrics, size_t lines, const fs::path& worker_log, int signal, pid_t* pid) {
  return std::thread([=] {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (std::chrono::steady_clock::now() < deadline) {
      if (CompleteLines(metrics) >= lines) {
        *pid = WorkerPid(worker_log);
        if (*pid > 0) ::kill(*pid, signal);
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
}

TEST_CASE("a worker killed mid-run is restarted from the last checkpoint and every step is recorded once",
          "[e2e][recovery]") {
  Workspace ws;
  const fs::path metrics = ws.dir / "out/metrics.jsonl";
  const fs::path worker_log = ws.dir / "out/workers/worker-0.log";
  // Kill the worker (SIGKILL, no goodbye) once step 16 is logged: the last checkpoint is then step 10.
  pid_t killed = -1;
  std::thread killer = SignalWorkerAt(metrics, 16, worker_log, SIGKILL, &killed);
  const int rc = ws.Controller("trainer.total_training_steps=30 trainer.save_freq=10 trainer.test_freq=-1", "run.log");
  killer.join();
  const std::string log = ReadFile(ws.dir / "run.log");
  INFO(Tail(ws.dir / "run.log"));
  REQUIRE(killed > 0);
  REQUIRE(rc == 0);
  CHECK(log.find("killed by signal 9") != std::string::npos);
  CHECK(log.find("resuming from") != std::string::npos);
  // Steps 1..30 (no validation here), each exactly once, in order.
  std::vector<nlohmann::json> lines = ReadJsonl(metrics);
  CHECK(Steps(lines) == OneTo(30));
  CHECK(lines.back()["data"]["training/worker_restarts"].get<double>() == 1.0);
  // The restarted worker is a new process, and its log follows the killed one's.
  const std::vector<pid_t> pids = WorkerPids(worker_log);
  REQUIRE(pids.size() == 2);
  CHECK(pids[0] == killed);
  CHECK(pids[1] != killed);
}

// Pids of the live processes whose command line contains `needle` (e.g. a worker's ready-file path).
std::vector<pid_t> ProcessesWith(const std::string& needle) {
  std::vector<pid_t> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || !std::all_of(name.begin(), name.end(), ::isdigit)) continue;
    std::string cmdline = ReadFile(entry.path() / "cmdline");
    std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
    if (cmdline.find(needle) != std::string::npos) out.push_back(std::stoi(name));
  }
  return out;
}

TEST_CASE("a worker that fails while the job recovers from another failure is restarted again", "[e2e][recovery]") {
  Workspace ws;
  const fs::path metrics = ws.dir / "out/metrics.jsonl";
  const fs::path worker_log = ws.dir / "out/workers/worker-0.log";
  const std::string ready = (ws.dir / "out/workers/worker-0.ready").string();
  // The worker is killed once step 16 is logged; its replacement is stopped (SIGSTOP) as soon as it exists, before
  // it answers, so the recovery itself meets a failed worker (its start times out) and must start another.
  pid_t killed = -1, stopped = -1;
  std::thread saboteur([&] {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (killed < 0 && std::chrono::steady_clock::now() < deadline) {
      if (CompleteLines(metrics) >= 16) {
        killed = WorkerPid(worker_log);
        if (killed > 0) ::kill(killed, SIGKILL);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    while (killed > 0 && stopped < 0 && std::chrono::steady_clock::now() < deadline) {
      for (pid_t pid : ProcessesWith(ready)) {
        if (pid != killed && ::kill(pid, SIGSTOP) == 0) stopped = pid;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  });
  const int rc = ws.Controller("trainer.total_training_steps=30 trainer.save_freq=10 trainer.test_freq=-1 "
                               "cluster.worker_start_timeout_s=15",
                               "run.log");
  saboteur.join();
  if (stopped > 0) ::kill(stopped, SIGKILL);  // never leave a stopped process behind, whatever happened
  const std::string log = ReadFile(ws.dir / "run.log");
  INFO(Tail(ws.dir / "run.log"));
  REQUIRE(killed > 0);
  REQUIRE(stopped > 0);
  REQUIRE(rc == 0);
  CHECK(log.find("worker failure while recovering: restarting the workers (2 of at most 3)") != std::string::npos);
  std::vector<nlohmann::json> lines = ReadJsonl(metrics);
  CHECK(Steps(lines) == OneTo(30));
  CHECK(lines.back()["data"]["training/worker_restarts"].get<double>() == 2.0);
}

TEST_CASE("resuming on a training set that changed since the checkpoint warns, or names data.json", "[e2e][resume]") {
  Workspace ws;
  // 3 steps of 32 prompts: the checkpoint's data position is 96 of 2,048 examples.
  REQUIRE(ws.Controller("trainer.total_training_steps=3 trainer.save_freq=3 trainer.test_freq=-1", "run1.log") == 0);
  for (const int size : {128, 64}) {
    INFO("training set of " << size);
    const fs::path data = ws.dir / ("data" + std::to_string(size));
    REQUIRE(Run(kBin + "verl-make-dataset --task repeat_letter --train-size " + std::to_string(size) +
                " --out-dir " + data.string() + " > /dev/null") == 0);
    const std::string log_name = "resume" + std::to_string(size) + ".log";
    const int rc = ws.Controller("trainer.total_training_steps=4 trainer.save_freq=100 trainer.test_freq=-1 "
                                 "data.train_files=" + (data / "train.parquet").string(),
                                 log_name);
    const std::string log = ReadFile(ws.dir / log_name);
    INFO(Tail(ws.dir / log_name));
    if (size == 128) {  // the position (96) is inside the smaller set: resumed, with a warning
      CHECK(rc == 0);
      CHECK(log.find("global_step_3/data.json was saved with 2048 training examples; data.train_files has 128 now")
            != std::string::npos);
    } else {  // beyond it (the 128-example run's last checkpoint, position 128): an error naming data.json
      CHECK(rc != 0);
      CHECK(log.find("global_step_4/data.json (data.train_files has 64 examples after filtering): sampler: cannot "
                     "restore cursor 128") != std::string::npos);
    }
  }
}

TEST_CASE("verl's cosine schedule drives the actor's learning rate step by step", "[e2e][lr]") {
  Workspace ws;
  // 5 steps, 1 of warm-up, floor 0.1: update k takes lr x (k < 1 ? 0 : max(0.1, 0.55 + 0.45 cos(pi (k - 1) / 4))).
  REQUIRE(ws.Controller("trainer.total_training_steps=5 trainer.save_freq=-1 trainer.test_freq=-1 "
                        "actor_rollout_ref.actor.optim.lr=1e-3 actor_rollout_ref.actor.optim.lr_warmup_steps=1 "
                        "actor_rollout_ref.actor.optim.warmup_style=cosine "
                        "actor_rollout_ref.actor.optim.min_lr_ratio=0.1",
                        "run.log") == 0);
  const std::vector<nlohmann::json> lines = ReadJsonl(ws.dir / "out/metrics.jsonl");
  INFO(Tail(ws.dir / "run.log"));
  REQUIRE(Steps(lines) == OneTo(5));
  const double pi = std::acos(-1.0);
  for (int k = 0; k < 5; ++k) {
    const double expected = k < 1 ? 0.0 : 1e-3 * std::max(0.1, 0.55 + 0.45 * std::cos(pi * (k - 1) / 4.0));
    INFO("step " << k + 1);
    CHECK(lines[k]["data"]["actor/lr"].get<double>() == Approx(expected).margin(1e-12));
  }
}

// The metrics of a one-step run with one mini-batch (so its update is on-policy) and `overrides`.
nlohmann::json OnPolicyFirstStep(const std::string& overrides) {
  Workspace ws;
  REQUIRE(ws.Controller("trainer.total_training_steps=1 trainer.save_freq=-1 trainer.test_freq=-1 "
                        "actor_rollout_ref.actor.ppo_mini_batch_size=32 " + overrides,
                        "run.log") == 0);
  const std::vector<nlohmann::json> lines = ReadJsonl(ws.dir / "out/metrics.jsonl");
  INFO(overrides << "\n" << Tail(ws.dir / "run.log"));
  REQUIRE(Steps(lines) == OneTo(1));
  return lines[0]["data"];
}

TEST_CASE("sapo's temperatures reach the update: on-policy, doubling them halves the first step's pg_loss",
          "[e2e][algos]") {
  // Every ratio is 1 on-policy, where sapo's gate is sigmoid(0) 4 / tau; the same seed gives the same rollout and
  // advantages in both runs.
  const std::string sapo = "actor_rollout_ref.actor.policy_loss.loss_mode=sapo ";
  const nlohmann::json one =
      OnPolicyFirstStep(sapo + "actor_rollout_ref.actor.tau_pos=1 actor_rollout_ref.actor.tau_neg=1");
  const nlohmann::json two =
      OnPolicyFirstStep(sapo + "actor_rollout_ref.actor.tau_pos=2 actor_rollout_ref.actor.tau_neg=2");
  CHECK_FALSE(one.contains("actor/pg_clipfrac"));  // sapo clips nothing: not reported
  REQUIRE(one["actor/pg_loss"].get<double>() != 0);
  CHECK(two["actor/pg_loss"].get<double>() == Approx(one["actor/pg_loss"].get<double>() / 2).epsilon(1e-4));
}

TEST_CASE("rollout_correction.rollout_is=token is the truncated IS of tis_imp_ratio_cap", "[e2e][algos]") {
  // On-policy the weights are min(exp(old - rollout), cap) with old = rollout but for rounding: a cap of 0.5 is below
  // every weight, so the first step's pg_loss is half the plain run's, through either key.
  const double plain = OnPolicyFirstStep("")["actor/pg_loss"].get<double>();
  const double rollout_is = OnPolicyFirstStep("algorithm.rollout_correction.rollout_is=token "
                                              "algorithm.rollout_correction.rollout_is_threshold=0.5")["actor/pg_loss"]
                                .get<double>();
  const double tis = OnPolicyFirstStep("actor_rollout_ref.actor.tis_imp_ratio_cap=0.5")["actor/pg_loss"].get<double>();
  REQUIRE(plain != 0);
  CHECK(rollout_is == Approx(plain / 2).epsilon(1e-4));
  CHECK(tis == rollout_is);
}

TEST_CASE("rollout_correction.bypass_mode: the rollout's log-probs are the old ones, under either loss type",
          "[e2e][algos]") {
  // One step, one mini-batch: the update's forward gives pi, the rollout gave pi_rollout, equal but for rounding.
  // reinforce is -A log pi, which decoupled gpg computes too; its IS weights min(pi / pi_rollout, 0.5) are all 0.5;
  // ppo_clip's ratio pi / pi_rollout is 1 but for rounding, as the decoupled update's pi / pi_old.
  const std::string bypass = "algorithm.rollout_correction.bypass_mode=true ";
  const nlohmann::json gpg = OnPolicyFirstStep("actor_rollout_ref.actor.policy_loss.loss_mode=gpg");
  const nlohmann::json plain = OnPolicyFirstStep("");
  const nlohmann::json reinforce = OnPolicyFirstStep(bypass + "algorithm.rollout_correction.loss_type=reinforce");
  const nlohmann::json capped = OnPolicyFirstStep(bypass +
                                                  "algorithm.rollout_correction.loss_type=reinforce "
                                                  "algorithm.rollout_correction.rollout_is=token "
                                                  "algorithm.rollout_correction.rollout_is_threshold=0.5");
  const nlohmann::json clip = OnPolicyFirstStep(bypass);
  for (const nlohmann::json* m : {&reinforce, &capped, &clip}) {
    // No old log-prob pass, and no comparison of the rollout's log-probs with themselves (as verl).
    CHECK_FALSE(m->contains("timing_s/old_log_prob"));
    CHECK_FALSE(m->contains("training/rollout_probs_diff_mean"));
    CHECK(m->contains("actor/ppo_kl"));
    CHECK(m->contains("actor/pg_clipfrac") == (m == &clip));  // reinforce reports ppo_kl only
    CHECK(m->contains("rollout_corr/kl"));                     // verl's off-policy figures, as its bypass loss's
  }
  CHECK(plain.contains("timing_s/old_log_prob"));
  CHECK(plain.contains("training/rollout_probs_diff_mean"));
  CHECK_FALSE(plain.contains("rollout_corr/kl"));  // verl's actor reports them with rollout.calculate_log_probs only
  const nlohmann::json logged = OnPolicyFirstStep("actor_rollout_ref.rollout.calculate_log_probs=true");
  for (const char* key : {"rollout_corr/kl", "rollout_corr/chi2_seq", "rollout_corr/training_ppl"}) {
    INFO(key);
    CHECK(logged.contains(key));
  }
  // On-policy: the update's log-probs are the rollout's but for rounding.
  CHECK(std::abs(logged["rollout_corr/kl"].get<double>()) < 1e-4);
  const double loss = gpg["actor/pg_loss"].get<double>();
  REQUIRE(loss != 0);
  CHECK(reinforce["actor/pg_loss"].get<double>() == Approx(loss).epsilon(1e-6));
  CHECK(capped["actor/pg_loss"].get<double>() == Approx(loss / 2).epsilon(1e-6));
  REQUIRE(plain["actor/pg_loss"].get<double>() != 0);
  CHECK(clip["actor/pg_loss"].get<double>() == Approx(plain["actor/pg_loss"].get<double>()).epsilon(1e-4));
  CHECK(std::abs(clip["actor/ppo_kl"].get<double>()) < 1e-4);
}

TEST_CASE("verl's file logger writes the jsonl lines at verl's path", "[e2e][metrics]") {
  Workspace ws;
  // VERL_FILE_LOGGER_ROOT/<project_name>/<experiment_name>.jsonl, as verl's FileLogger.
  REQUIRE(::setenv("VERL_FILE_LOGGER_ROOT", (ws.dir / "verl_logs").c_str(), 1) == 0);
  const int rc = ws.Controller("trainer.total_training_steps=2 trainer.save_freq=-1 trainer.test_freq=-1 "
                               "trainer.project_name=proj trainer.experiment_name=exp "
                               "trainer.logger=[console,jsonl,file]",
                               "run.log");
  ::unsetenv("VERL_FILE_LOGGER_ROOT");
  INFO(Tail(ws.dir / "run.log"));
  REQUIRE(rc == 0);
  const fs::path file = ws.dir / "verl_logs/proj/exp.jsonl";
  REQUIRE(fs::exists(file));
  CHECK(ReadFile(file) == ReadFile(ws.dir / "out/metrics.jsonl"));
  CHECK(Steps(ReadJsonl(file)) == OneTo(2));
}

TEST_CASE("a worker killed after resuming from trainer.resume_from_path recovers from that checkpoint",
          "[e2e][recovery]") {
  Workspace ws;
  // Run 1 saves global_step_10 in ckpt/; run 2 resumes from that path but keeps its own checkpoints elsewhere and
  // saves none before the kill, so the checkpoint to recover from is the one it resumed from.
  REQUIRE(ws.Controller("trainer.total_training_steps=10 trainer.save_freq=10 trainer.test_freq=-1", "run1.log") == 0);
  const fs::path resumed = ws.dir / "ckpt/global_step_10";
  REQUIRE(fs::is_directory(resumed));
  const fs::path metrics = ws.dir / "out/metrics.jsonl";
  pid_t killed = -1;
  std::thread killer = SignalWorkerAt(metrics, 16, ws.dir / "out/workers/worker-0.log", SIGKILL, &killed);
  const int rc = ws.Controller(
      "trainer.total_training_steps=30 trainer.save_freq=100 trainer.test_freq=-1 "
      "trainer.resume_mode=resume_path trainer.resume_from_path=" +
          resumed.string() + " trainer.default_local_dir=" + (ws.dir / "ckpt2").string(),
      "run2.log");
  killer.join();
  const std::string log = ReadFile(ws.dir / "run2.log");
  INFO(Tail(ws.dir / "run2.log"));
  REQUIRE(killed > 0);
  REQUIRE(rc == 0);
  CHECK(log.find("resuming from " + resumed.string()) != std::string::npos);
  CHECK(Steps(ReadJsonl(metrics)) == OneTo(30));
}

TEST_CASE("a hung worker (SIGSTOP) misses its heartbeat and is replaced; the job finishes", "[e2e][recovery]") {
  Workspace ws;
  const fs::path metrics = ws.dir / "out/metrics.jsonl";
  const fs::path worker_log = ws.dir / "out/workers/worker-0.log";
  pid_t stopped = -1;
  std::thread stopper = SignalWorkerAt(metrics, 16, worker_log, SIGSTOP, &stopped);
  const auto start = std::chrono::steady_clock::now();
  const int rc = ws.Controller("trainer.total_training_steps=30 trainer.save_freq=10 trainer.test_freq=-1 "
                               "cluster.heartbeat_interval_s=0.2 cluster.heartbeat_timeout_s=2.0",
                               "run.log");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  stopper.join();
  if (stopped > 0) ::kill(stopped, SIGKILL);  // never leave a stopped process behind, whatever happened
  INFO(Tail(ws.dir / "run.log"));
  REQUIRE(stopped > 0);
  REQUIRE(rc == 0);
  CHECK(ReadFile(ws.dir / "run.log").find("missed its heartbeat") != std::string::npos);
  std::vector<nlohmann::json> lines = ReadJsonl(metrics);
  REQUIRE(lines.size() == 30);
  CHECK(lines.back()["step"] == 30);
  CHECK(lines.back()["data"]["training/worker_restarts"].get<double>() == 1.0);
  // Far below the RPC deadline (cluster.rpc_timeout_s = 600 s): the heartbeat turned the hang into a recovery.
  CHECK(seconds < 60);
}

}  // namespace
