#include "common/metrics/process_metrics.h"

#include <sys/resource.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/metrics/prometheus_registry.h"

namespace verl {
namespace {

// Boot time (Unix seconds) from /proc/stat's "btime" line; -1 when unreadable.
double BootTime() {
  std::ifstream in("/proc/stat");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("btime ", 0) == 0) return std::stod(line.substr(6));
  }
  return -1;
}

void Append(std::string* out, const char* name, const char* type, const char* help, double value) {
  if (value < 0) return;
  absl::StrAppend(out, "# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n", name, " ",
                  PrometheusRegistry::FormatValue(value), "\n");
}

}  // namespace

ProcessMetrics ReadProcessMetrics() {
  ProcessMetrics m;
  const long page = ::sysconf(_SC_PAGESIZE);
  const long ticks = ::sysconf(_SC_CLK_TCK);
  try {
    if (std::ifstream statm("/proc/self/statm"); statm) {
      double pages_virtual = 0, pages_resident = 0;
      if (statm >> pages_virtual >> pages_resident && page > 0) {
        m.virtual_memory_bytes = pages_virtual * static_cast<double>(page);
        m.resident_memory_bytes = pages_resident * static_cast<double>(page);
      }
    }
    if (std::ifstream stat("/proc/self/stat"); stat) {
      std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
      // Field 2 (comm) may contain spaces and parentheses: the fields after it start after the last ')'.
      const size_t close = text.rfind(')');
      if (close != std::string::npos && ticks > 0) {
        std::istringstream rest(text.substr(close + 1));
        std::vector<std::string> fields;  // fields[0] is field 3 (state)
        for (std::string f; rest >> f;) fields.push_back(f);
        if (fields.size() > 19) {
          const double utime = std::stod(fields[11]);      // field 14
          const double stime = std::stod(fields[12]);      // field 15
          m.threads = std::stod(fields[17]);               // field 20
          const double start_ticks = std::stod(fields[19]);  // field 22, clock ticks after boot
          m.cpu_seconds = (utime + stime) / static_cast<double>(ticks);
          if (const double boot = BootTime(); boot >= 0) {
            m.start_time_seconds = boot + start_ticks / static_cast<double>(ticks);
          }
        }
      }
    }
    std::error_code ec;
    double fds = 0;
    for (std::filesystem::directory_iterator it("/proc/self/fd", ec), end; !ec && it != end; it.increment(ec)) ++fds;
    if (!ec) m.open_fds = fds;
  } catch (const std::exception&) {
    // std::stod on an unexpected /proc layout: keep what was read.
  }
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) {
    m.max_fds = static_cast<double>(limit.rlim_cur);
  }
  return m;
}

std::string RenderProcessMetrics(const ProcessMetrics& m) {
  std::string out;
  Append(&out, "process_cpu_seconds_total", "counter", "Total user and system CPU time spent in seconds.",
         m.cpu_seconds);
  Append(&out, "process_max_fds", "gauge", "Maximum number of open file descriptors.", m.max_fds);
  Append(&out, "process_open_fds", "gauge", "Number of open file descriptors.", m.open_fds);
  Append(&out, "process_resident_memory_bytes", "gauge", "Resident memory size in bytes.", m.resident_memory_bytes);
  Append(&out, "process_start_time_seconds", "gauge", "Start time of the process since unix epoch in seconds.",
         m.start_time_seconds);
  Append(&out, "process_threads", "gauge", "Number of OS threads in the process.", m.threads);
  Append(&out, "process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.", m.virtual_memory_bytes);
  return out;
}

}  // namespace verl
