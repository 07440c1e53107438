#ifndef VERL_TESTS_CONTROLLER_TEST_UTIL_H_
#define VERL_TESTS_CONTROLLER_TEST_UTIL_H_

// Helpers for the controller tests, which run real processes (verl-worker, verl-controller, shell scripts) on this
// machine: temp directories, subprocesses with captured output and a timeout, and the tiny model / dataset tools.

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/test_dir.h"

namespace verl::testing {

// The directory holding the project's executables in this build tree.
inline std::string BinDir() { return std::string(VERL_BINARY_DIR) + "/bin"; }
inline std::string Bin(const std::string& name) { return BinDir() + "/" + name; }

using Clock = std::chrono::steady_clock;
inline double SecondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Writes an executable /bin/sh script.
inline std::string WriteScript(const std::string& path, const std::string& body) {
  WriteFile(path, "#!/bin/sh\n" + body);
  ::chmod(path.c_str(), 0755);
  return path;
}

// True while `pid` exists and is not a zombie.
inline bool ProcessRunning(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  if (!in) return false;
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t paren = stat.rfind(')');
  if (paren == std::string::npos || paren + 2 >= stat.size()) return false;
  const char state = stat[paren + 2];
  return state != 'Z' && state != 'X';
}

// Polls `done` every 10 ms until it is true or `timeout_s` passes; returns its last value.
inline bool WaitFor(const std::function<bool()>& done, double timeout_s) {
  const auto start = Clock::now();
  while (!done()) {
    if (SecondsSince(start) > timeout_s) return done();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

// A child process whose stdout and stderr go to files. The destructor kills it (SIGKILL) if it still runs.
class ChildProcess {
 public:
  ChildProcess(const std::vector<std::string>& argv, const std::string& stdout_path, const std::string& stderr_path)
      : stdout_path_(stdout_path), stderr_path_(stderr_path) {
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    pid_ = ::fork();
    if (pid_ == 0) {
      int out = ::open(stdout_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      int err = ::open(stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (out >= 0) ::dup2(out, 1);
      if (err >= 0) ::dup2(err, 2);
      ::execv(args[0], args.data());
      ::_exit(127);
    }
  }
  ~ChildProcess() {
    if (pid_ > 0 && !exited_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status_, 0);
    }
  }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }

  // Waits at most `timeout_s` for the child to exit; true when it did.
  bool Wait(double timeout_s) {
    return WaitFor(
        [this] {
          if (exited_) return true;
          if (::waitpid(pid_, &status_, WNOHANG) == pid_) exited_ = true;
          return exited_;
        },
        timeout_s);
  }
  // The exit code, or 128 + signal when killed by a signal; -1 while running.
  int exit_code() const {
    if (!exited_) return -1;
    if (WIFEXITED(status_)) return WEXITSTATUS(status_);
    if (WIFSIGNALED(status_)) return 128 + WTERMSIG(status_);
    return -1;
  }
  std::string out() const { return ReadFile(stdout_path_); }
  std::string err() const { return ReadFile(stderr_path_); }

 private:
  std::string stdout_path_;
  std::string stderr_path_;
  pid_t pid_ = -1;
  bool exited_ = false;
  int status_ = 0;
};

struct RunResult {
  int exit_code = -1;  // -1: timed out (the child was killed)
  std::string out;
  std::string err;
};

// Runs argv to completion (at most timeout_s), capturing its output in files under `scratch_dir`.
inline RunResult Run(const std::vector<std::string>& argv, const std::string& scratch_dir, double timeout_s = 30) {
  static std::atomic<int> counter{0};
  const std::string base = scratch_dir + "/run" + std::to_string(counter++);
  RunResult result;
  {
    ChildProcess child(argv, base + ".out", base + ".err");
    if (child.Wait(timeout_s)) result.exit_code = child.exit_code();
  }
  result.out = ReadFile(base + ".out");
  result.err = ReadFile(base + ".err");
  return result;
}

// Writes the tiny random Qwen2 model (verl-make-tiny-model) into `dir`; returns "" or the tool's stderr.
inline std::string MakeTinyModel(const std::string& dir, const std::string& scratch_dir) {
  RunResult r = Run({Bin("verl-make-tiny-model"), "--out-dir", dir}, scratch_dir);
  return r.exit_code == 0 ? "" : "verl-make-tiny-model failed: " + r.err;
}

// Writes the repeat_letter dataset (train.parquet, test.parquet) into `dir`; returns "" or the tool's stderr.
inline std::string MakeDataset(const std::string& dir, const std::string& scratch_dir, int train_size = 64,
                               int val_size = 16) {
  RunResult r = Run({Bin("verl-make-dataset"), "--task", "repeat_letter", "--out-dir", dir, "--train-size",
                     std::to_string(train_size), "--val-size", std::to_string(val_size)},
                    scratch_dir);
  return r.exit_code == 0 ? "" : "verl-make-dataset failed: " + r.err;
}

}  // namespace verl::testing

#endif  // VERL_TESTS_CONTROLLER_TEST_UTIL_H_
