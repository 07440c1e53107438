// verl-controller: runs a PPO/GRPO job.
//
//   verl-controller --config job.yaml [key=value ...]     run one job and exit
//   verl-controller --config job.yaml --print-config [key=value ...]
//   verl-controller serve [--listen HOST:PORT] [--state-dir DIR] ...   the JobService (controller/service/serve.h)
//
// With no cluster.worker_addresses it starts local verl-worker processes (the binary next to this one) and stops
// them when the job ends. Ctrl-C cancels the job cleanly (workers are stopped); a second Ctrl-C exits at once.

#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/config/config_loader.h"
#include "common/config/flag_reader.h"
#include "controller/job/job_runner.h"
#include "controller/service/serve.h"
#include "spdlog/spdlog.h"

namespace {

void Usage(std::ostream& out) {
  out << "usage: verl-controller --config JOB.yaml [--print-config] [--log-level LEVEL] [key=value ...]\n"
         "       verl-controller serve --help      (the JobService for verlctl and remote clients)\n"
         "  key=value, +key=value   set a config key (verl's names, e.g. data.train_batch_size=64)\n"
         "  ~key                    reset a key to its default\n"
         "  --print-config          print the resolved configuration and exit\n"
         "  --log-level LEVEL       debug, info (default), warn, error\n";
}

std::string SelfDir() {
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string(".") : p.parent_path().string();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::string(argv[1]) == "serve") {
    return verl::ServeMain(std::vector<std::string>(argv + 2, argv + argc), SelfDir() + "/verl-worker");
  }
  std::string config_path;
  bool print_config = false;
  std::string log_level = "info";
  std::vector<std::string> overrides;
  verl::FlagReader flags("verl-controller", std::vector<std::string>(argv + 1, argv + argc));
  while (flags.Next()) {
    const std::string& arg = flags.name();
    if (arg == "--config" || arg == "-c") {
      if (!flags.Value(&config_path)) return 2;
    } else if (arg == "--print-config") {
      if (!flags.NoValue()) return 2;
      print_config = true;
    } else if (arg == "--log-level") {
      if (!flags.Value(&log_level)) return 2;
    } else if (arg == "--help" || arg == "-h") {
      Usage(std::cout);
      return 0;
    } else if (arg.rfind("--", 0) == 0) {
      std::cerr << "verl-controller: unknown flag '" << flags.arg() << "'\n";
      Usage(std::cerr);
      return 2;
    } else {
      overrides.push_back(flags.arg());
    }
  }
  if (config_path.empty()) {
    std::cerr << "verl-controller: --config is required\n";
    Usage(std::cerr);
    return 2;
  }
  spdlog::set_level(spdlog::level::from_str(log_level));
  spdlog::set_pattern("[%H:%M:%S] [controller] [%l] %v");

  if (print_config) {
    auto yaml = verl::ResolvedConfigYaml(config_path, overrides);
    if (!yaml.ok()) {
      std::cerr << "verl-controller: " << yaml.status().message() << "\n";
      return 2;
    }
    std::cout << *yaml;
    return 0;
  }
  auto config = verl::LoadJobConfig(config_path, overrides);
  if (!config.ok()) {
    std::cerr << "verl-controller: " << config.status().message() << "\n";
    return 2;
  }

  // Signals go to a dedicated thread; the first SIGINT/SIGTERM cancels the job, a second one exits at once (the
  // workers we started get SIGTERM through PR_SET_PDEATHSIG).
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  verl::JobRunnerOptions options;
  options.default_worker_binary = SelfDir() + "/verl-worker";
  // Shared with the signal thread, which may outlive main's scope.
  auto runner = std::make_shared<verl::JobRunner>(*std::move(config), options);
  std::thread([signals, runner] {
    int sig = 0;
    sigwait(&signals, &sig);
    std::cerr << "\nverl-controller: cancelling (again to exit at once)\n";
    runner->RequestCancel();
    sigwait(&signals, &sig);
    _exit(130);
  }).detach();

  absl::Status status = runner->Run();
  if (!status.ok()) {
    std::cerr << "verl-controller: " << (absl::IsCancelled(status) ? "cancelled: " : "job failed: ")
              << status.message() << "\n";
    return absl::IsCancelled(status) ? 130 : 1;
  }
  return 0;
}
