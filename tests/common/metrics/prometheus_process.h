#ifndef VERL_TESTS_COMMON_METRICS_PROMETHEUS_PROCESS_H_
#define VERL_TESTS_COMMON_METRICS_PROMETHEUS_PROCESS_H_

// A real Prometheus server (Debian's `prometheus` binary) on loopback for tests: scrapes the given targets every
// 200 ms and answers PromQL through its HTTP API. Stopped (SIGTERM, then SIGKILL) on destruction.

#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "tests/common/metrics/http_test_client.h"
#include "tests/test_dir.h"

namespace verl::testing {

// The path of `name` on $PATH, or "".
inline std::string FindOnPath(const std::string& name) {
  const char* path = std::getenv("PATH");
  const std::string dirs = path != nullptr ? path : "/usr/bin:/bin";
  size_t begin = 0;
  while (begin <= dirs.size()) {
    const size_t end = std::min(dirs.find(':', begin), dirs.size());
    const std::filesystem::path candidate = std::filesystem::path(dirs.substr(begin, end - begin)) / name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate.string();
    begin = end + 1;
  }
  return "";
}

// A port nothing listens on right now (bound, read, closed; Prometheus binds it just after).
inline int FreeLoopbackPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  socklen_t len = sizeof(addr);
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  ::close(fd);
  return ntohs(addr.sin_port);
}

class PrometheusProcess {
 public:
  // Starts Prometheus scraping `targets` ("host:port") as scrape job "verl". Use Available() first.
  PrometheusProcess(const TestDir& dir, const std::vector<std::string>& targets)
      : binary_(FindOnPath("prometheus")), log_(dir.file("prometheus.log")) {
    REQUIRE(!binary_.empty());
    web_port_ = FreeLoopbackPort();
    std::string list;
    for (const auto& t : targets) list += (list.empty() ? "'" : ", '") + t + "'";
    const std::string config = dir.Write("prometheus.yml", "global:\n  scrape_interval: 200ms\n  scrape_timeout: 200ms\n"
                                                           "scrape_configs:\n  - job_name: verl\n    static_configs:\n"
                                                           "      - targets: [" + list + "]\n");
    const std::string storage = dir.file("prometheus-data");
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      std::FILE* out = std::freopen(log_.c_str(), "w", stdout);
      (void)out;
      ::dup2(::fileno(stdout), STDERR_FILENO);
      const std::string config_flag = "--config.file=" + config;
      const std::string storage_flag = "--storage.tsdb.path=" + storage;
      const std::string web_flag = "--web.listen-address=127.0.0.1:" + std::to_string(web_port_);
      ::execl(binary_.c_str(), "prometheus", config_flag.c_str(), storage_flag.c_str(), web_flag.c_str(),
              "--log.level=warn", static_cast<char*>(nullptr));
      ::_exit(127);
    }
  }
  ~PrometheusProcess() {
    ::kill(pid_, SIGTERM);
    int status = 0;
    for (int i = 0; i < 50 && ::waitpid(pid_, &status, WNOHANG) == 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (::waitpid(pid_, &status, WNOHANG) == 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status, 0);
    }
  }
  PrometheusProcess(const PrometheusProcess&) = delete;
  PrometheusProcess& operator=(const PrometheusProcess&) = delete;

  static bool Available() { return !FindOnPath("prometheus").empty(); }

  // The first series of an instant query's result ({"metric": {...}, "value": [t, "v"]}), polled until there is
  // one or `timeout_s` passes; null when none came.
  nlohmann::json QueryFirst(const std::string& url_encoded_promql, double timeout_s = 10) const {
    const auto t0 = std::chrono::steady_clock::now();
    while (std::chrono::steady_clock::now() - t0 < std::chrono::duration<double>(timeout_s)) {
      const auto r = HttpGet(web_port_, "/api/v1/query?query=" + url_encoded_promql);
      if (r.status == 200) {
        const auto j = nlohmann::json::parse(r.body, nullptr, /*allow_exceptions=*/false);
        if (!j.is_discarded() && j.contains("data") && !j["data"]["result"].empty()) return j["data"]["result"][0];
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return nullptr;
  }

  std::string log() const { return ReadFile(log_); }

 private:
  std::string binary_;
  std::string log_;
  int web_port_ = 0;
  pid_t pid_ = -1;
};

}  // namespace verl::testing

#endif  // VERL_TESTS_COMMON_METRICS_PROMETHEUS_PROCESS_H_
