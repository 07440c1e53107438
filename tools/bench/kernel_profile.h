#ifndef VERL_TOOLS_BENCH_KERNEL_PROFILE_H_
#define VERL_TOOLS_BENCH_KERNEL_PROFILE_H_

// `--profile 1` of the LibTorch benchmark tools: one more run under LibTorch's Kineto profiler, summarised as the device
// time per kernel name (the largest first), so a benchmark result says where its time goes without a trace viewer.

#include <torch/csrc/autograd/profiler_kineto.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace verl::bench {

// One device activity (kernel, copy, memset): [start, end) in ns and an index into a table of names.
struct Activity {
  uint64_t start, end;
  size_t name;
};

// The gaps between the union of `busy` activities, summed by length: {span_s, idle_s, gaps: [{below_us, s, count}],
// long_gaps: [{after, before, s, count}]}, the last naming the activities on either side of the gaps of at least
// `long_us` (the `top` pairs with the most idle time), so the profile says where the device waits.
inline nlohmann::json IdleGaps(std::vector<Activity> busy, const std::vector<std::string>& names, double long_us = 10.0,
                               int top = 12) {
  static constexpr double kBelowUs[] = {2, 5, 10, 50, 200, 1e300};
  constexpr int kBuckets = sizeof(kBelowUs) / sizeof(kBelowUs[0]);
  double sum_s[kBuckets] = {};
  int64_t count[kBuckets] = {};
  std::map<std::pair<size_t, size_t>, std::pair<double, int64_t>> by_pair;  // (after, before) -> s, count
  std::sort(busy.begin(), busy.end(),
            [](const Activity& a, const Activity& b) { return std::tie(a.start, a.end) < std::tie(b.start, b.end); });
  double idle_s = 0.0;
  uint64_t covered = busy.empty() ? 0 : busy.front().end;
  size_t last = busy.empty() ? 0 : busy.front().name;  // the activity that ends last so far
  for (size_t i = 1; i < busy.size(); ++i) {
    if (busy[i].start > covered) {
      const double gap_us = static_cast<double>(busy[i].start - covered) * 1e-3;
      int b = 0;
      while (gap_us >= kBelowUs[b]) ++b;
      sum_s[b] += gap_us * 1e-6;
      ++count[b];
      idle_s += gap_us * 1e-6;
      if (gap_us >= long_us) {
        auto& [s, n] = by_pair[{last, busy[i].name}];
        s += gap_us * 1e-6;
        ++n;
      }
    }
    if (busy[i].end >= covered) {
      covered = busy[i].end;
      last = busy[i].name;
    }
  }
  nlohmann::json gaps = nlohmann::json::array();
  for (int b = 0; b < kBuckets; ++b) {
    gaps.push_back({{"below_us", b + 1 < kBuckets ? nlohmann::json(kBelowUs[b]) : nlohmann::json("inf")},
                    {"s", sum_s[b]},
                    {"count", count[b]}});
  }
  std::vector<std::pair<std::pair<size_t, size_t>, std::pair<double, int64_t>>> pairs(by_pair.begin(), by_pair.end());
  std::sort(pairs.begin(), pairs.end(), [](const auto& a, const auto& b) { return a.second.first > b.second.first; });
  nlohmann::json long_gaps = nlohmann::json::array();
  for (size_t i = 0; i < pairs.size() && static_cast<int>(i) < top; ++i) {
    const auto& [key, v] = pairs[i];
    long_gaps.push_back({{"after", names[key.first].substr(0, 100)},
                         {"before", names[key.second].substr(0, 100)},
                         {"s", v.first},
                         {"count", v.second}});
  }
  const double span_s = busy.empty() ? 0.0 : static_cast<double>(covered - busy.front().start) * 1e-9;
  return {{"span_s", span_s}, {"idle_s", idle_s}, {"gaps", gaps}, {"long_gaps_min_us", long_us},
          {"long_gaps", long_gaps}};
}

// Runs `fn` (which must wait for the device before returning) under the profiler; returns {wall_s, kernel_s (the sum
// of device activity: kernels, copies, memsets), kernels: [{name, s, calls, share}] for the `top` largest, idle: the
// device's idle time between its first and last activity, by the length of each gap}. Short gaps are the launch
// latency between kernels (inside CUDA graphs too); long ones, time the device waited on the host.
inline nlohmann::json ProfileKernels(const std::function<void()>& fn, int top = 30) {
  namespace prof = torch::autograd::profiler;
  using torch::profiler::impl::ActivityType;
  const torch::profiler::impl::ProfilerConfig config(torch::profiler::impl::ProfilerState::KINETO);
  const std::set<ActivityType> activities = {ActivityType::CPU, ActivityType::CUDA};
  prof::prepareProfiler(config, activities);
  prof::enableProfiler(config, activities);
  const auto start = std::chrono::steady_clock::now();
  fn();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::unique_ptr<prof::ProfilerResult> result = prof::disableProfiler();
  std::map<std::string, std::pair<uint64_t, int64_t>> by_name;  // ns, calls
  uint64_t total_ns = 0;
  std::vector<Activity> busy;
  std::vector<std::string> names;
  std::map<std::string, size_t> name_index;
  for (const auto& e : result->events()) {
    if (e.deviceType() != c10::DeviceType::CUDA) continue;
    std::string name = e.name();
    if (name.size() > 160) name = name.substr(0, 160);
    const auto [it, added] = name_index.emplace(name, names.size());
    if (added) names.push_back(name);
    busy.push_back({e.startNs(), e.startNs() + e.durationNs(), it->second});
    auto& [ns, calls] = by_name[name];
    ns += e.durationNs();
    ++calls;
    total_ns += e.durationNs();
  }
  std::vector<std::pair<std::string, std::pair<uint64_t, int64_t>>> sorted(by_name.begin(), by_name.end());
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.second.first > b.second.first; });
  nlohmann::json kernels = nlohmann::json::array();
  for (size_t i = 0; i < sorted.size() && static_cast<int>(i) < top; ++i) {
    const auto& [name, v] = sorted[i];
    kernels.push_back({{"name", name},
                       {"s", static_cast<double>(v.first) * 1e-9},
                       {"calls", v.second},
                       {"share", total_ns ? static_cast<double>(v.first) / static_cast<double>(total_ns) : 0.0}});
  }
  return {{"wall_s", wall},
          {"kernel_s", static_cast<double>(total_ns) * 1e-9},
          {"kernels", kernels},
          {"idle", IdleGaps(std::move(busy), names)}};
}

}  // namespace verl::bench

#endif  // VERL_TOOLS_BENCH_KERNEL_PROFILE_H_
