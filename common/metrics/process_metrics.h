#ifndef VERL_COMMON_METRICS_PROCESS_METRICS_H_
#define VERL_COMMON_METRICS_PROCESS_METRICS_H_

// The standard Prometheus process metrics (the names every official client library exports), read cheaply from
// /proc on Linux. A value that cannot be read is left negative and not rendered.

#include <string>

namespace verl {

struct ProcessMetrics {
  double start_time_seconds = -1;      // process_start_time_seconds: Unix time the process started
  double cpu_seconds = -1;             // process_cpu_seconds_total: user + system CPU time
  double resident_memory_bytes = -1;   // process_resident_memory_bytes (/proc/self/statm)
  double virtual_memory_bytes = -1;    // process_virtual_memory_bytes (/proc/self/statm)
  double open_fds = -1;                // process_open_fds (entries of /proc/self/fd)
  double max_fds = -1;                 // process_max_fds (RLIMIT_NOFILE soft limit)
  double threads = -1;                 // process_threads (/proc/self/stat)
};

// Reads the current process's metrics. Never fails: unreadable values stay negative.
ProcessMetrics ReadProcessMetrics();

// The metrics as exposition text (HELP, TYPE and one sample each), skipping the unreadable ones.
std::string RenderProcessMetrics(const ProcessMetrics& metrics);

}  // namespace verl

#endif  // VERL_COMMON_METRICS_PROCESS_METRICS_H_
