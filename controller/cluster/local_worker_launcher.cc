#include "controller/cluster/local_worker_launcher.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"

namespace verl {
namespace fs = std::filesystem;

int CountDriverGpus(const std::string& driver_dir) {
  std::error_code ec;
  int count = 0;
  for (fs::directory_iterator it(driver_dir, ec), end; !ec && it != end; it.increment(ec)) ++count;
  return count;
}

std::string FileTail(const std::string& path, size_t max_bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  const std::streamoff start = size > static_cast<std::streamoff>(max_bytes) ? size - max_bytes : 0;
  in.seekg(start);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

LocalWorkerLauncher::~LocalWorkerLauncher() { StopAll(); }

std::string LocalWorkerLauncher::Describe(const Proc& p) const {
  std::string how;
  if (WIFEXITED(p.wait_status)) {
    how = absl::StrCat("exited with status ", WEXITSTATUS(p.wait_status));
  } else if (WIFSIGNALED(p.wait_status)) {
    how = absl::StrCat("was killed by signal ", WTERMSIG(p.wait_status), " (", strsignal(WTERMSIG(p.wait_status)),
                       ")");
  } else {
    how = "stopped";
  }
  std::string tail = FileTail(p.info.log_path);
  return absl::StrCat("worker ", p.info.worker_id, " (pid ", p.info.pid,
                      p.info.address.empty() ? "" : ", address " + p.info.address, ") ", how, "; log ",
                      p.info.log_path, tail.empty() ? "" : ":\n" + tail);
}

bool LocalWorkerLauncher::Reap(Proc& p) {
  if (p.exited) return true;
  int status = 0;
  pid_t r = waitpid(p.info.pid, &status, WNOHANG);
  if (r == p.info.pid) {
    p.exited = true;
    p.wait_status = status;
  } else if (r < 0 && errno == ECHILD) {
    p.exited = true;
  }
  return p.exited;
}

absl::StatusOr<std::vector<LaunchedWorker>> LocalWorkerLauncher::Launch(const std::string& binary, int count,
                                                                        const std::string& log_dir, double timeout_s,
                                                                        int ranks_per_worker, const std::string& device,
                                                                        const std::function<bool()>& cancelled) {
  if (access(binary.c_str(), X_OK) != 0) {
    return absl::NotFoundError(absl::StrCat("worker binary '", binary, "' is missing or not executable"));
  }
  std::lock_guard<std::mutex> lock(mu_);
  std::error_code ec;
  fs::create_directories(log_dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", log_dir, ": ", ec.message()));
  const size_t first = procs_.size();
  for (int i = 0; i < count; ++i) {
    Proc p;
    p.info.worker_id = absl::StrCat("worker-", first + i);
    p.info.log_path = absl::StrCat(log_dir, "/", p.info.worker_id, ".log");
    const std::string ready = absl::StrCat(log_dir, "/", p.info.worker_id, ".ready");
    fs::remove(ready, ec);
    {
      std::ofstream log(p.info.log_path, std::ios::app);
      const auto now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
      char when[32];
      std::strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", std::localtime(&now));
      log << "==== " << when << ": verl-controller starts " << p.info.worker_id << " ====\n";
    }
    // Everything the child needs is built before fork: between fork and exec only async-signal-safe calls.
    const std::string ranks = std::to_string(ranks_per_worker);
    const char* argv[] = {binary.c_str(), "--listen", "127.0.0.1:0", "--ready-file", ready.c_str(),
                          "--worker-id", p.info.worker_id.c_str(), "--ranks", ranks.c_str(),
                          "--device", device.c_str(), nullptr};
    const pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) return absl::InternalError(absl::StrCat("fork failed: ", strerror(errno)));
    if (pid == 0) {
      // Child: only async-signal-safe calls until exec.
      prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (getppid() != parent) _exit(1);
      setpgid(0, 0);  // Ctrl-C in the terminal reaches the controller only; it stops the workers itself.
      int fd = open(p.info.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      if (fd >= 0) {
        dup2(fd, 1);
        dup2(fd, 2);
        close(fd);
      }
      execv(binary.c_str(), const_cast<char* const*>(argv));
      _exit(127);
    }
    p.info.pid = pid;
    procs_.push_back(p);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  for (size_t i = first; i < procs_.size(); ++i) {
    Proc& p = procs_[i];
    const std::string ready = absl::StrCat(log_dir, "/", p.info.worker_id, ".ready");
    while (true) {
      std::ifstream in(ready);
      std::string address;
      if (in && std::getline(in, address) && !address.empty()) {
        p.info.address = address;
        break;
      }
      if (Reap(p)) return absl::UnavailableError(absl::StrCat("failed to start: ", Describe(p)));
      if (cancelled && cancelled()) return absl::CancelledError("job cancelled while starting the workers");
      if (std::chrono::steady_clock::now() > deadline) {
        return absl::DeadlineExceededError(absl::StrCat("worker ", p.info.worker_id, " (pid ", p.info.pid,
                                                        ") was not ready after ", timeout_s, " s; log ",
                                                        p.info.log_path));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    workers_.push_back(p.info);
  }
  return std::vector<LaunchedWorker>(workers_.begin() + first, workers_.end());
}

absl::Status LocalWorkerLauncher::CheckAlive() {
  std::lock_guard<std::mutex> lock(mu_);
  for (Proc& p : procs_) {
    if (Reap(p)) return absl::UnavailableError(Describe(p));
  }
  return absl::OkStatus();
}

absl::Status LocalWorkerLauncher::CheckAlive(const std::string& worker_id) {
  std::lock_guard<std::mutex> lock(mu_);
  for (Proc& p : procs_) {
    if (p.info.worker_id == worker_id && Reap(p)) return absl::UnavailableError(Describe(p));
  }
  return absl::OkStatus();
}

void LocalWorkerLauncher::StopAll(double grace_s) {
  std::lock_guard<std::mutex> lock(mu_);
  for (Proc& p : procs_) {
    if (!Reap(p)) kill(p.info.pid, SIGTERM);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(grace_s);
  for (Proc& p : procs_) {
    while (!Reap(p) && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (!Reap(p)) {
      kill(p.info.pid, SIGKILL);
      waitpid(p.info.pid, &p.wait_status, 0);
      p.exited = true;
    }
  }
}

}  // namespace verl
