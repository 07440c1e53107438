#ifndef VERL_TOOLS_BENCH_KERNEL_PROFILE_H_
#define VERL_TOOLS_BENCH_KERNEL_PROFILE_H_

// `--profile 1` of the LibTorch benchmark tools: one more run under LibTorch's Kineto profiler, summarised as the device
// time per kernel name (the largest first), so a benchmark result says where its time goes without a trace viewer.

#include <kineto/ActivityType.h>  // libkineto::ActivityType, from the torch wheel
#include <torch/csrc/autograd/profiler_kineto.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <type_traits>
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
// `long_us` (the `top` pairs with the most idle time), so the profile says where the device waits. With `host` (the
// host's spans: ATen ops, the CUDA runtime's calls, the code's own RECORD_USER_SCOPEs; names in `host_names`) also
// host_in_gaps: [{name, s, count}], how long each name's spans overlap the device's gaps of at least `host_gap_us` (the
// `top` largest), i.e. what the host was doing while the device waited for it (nested spans each count in full).
inline nlohmann::json IdleGaps(std::vector<Activity> busy, const std::vector<std::string>& names, double long_us = 10.0,
                               int top = 12, const std::vector<Activity>& host = {},
                               const std::vector<std::string>& host_names = {}, double host_gap_us = 1000.0) {
  static constexpr double kBelowUs[] = {2, 5, 10, 50, 200, 1e300};
  constexpr int kBuckets = sizeof(kBelowUs) / sizeof(kBelowUs[0]);
  double sum_s[kBuckets] = {};
  int64_t count[kBuckets] = {};
  std::map<std::pair<size_t, size_t>, std::pair<double, int64_t>> by_pair;  // (after, before) -> s, count
  std::sort(busy.begin(), busy.end(),
            [](const Activity& a, const Activity& b) { return std::tie(a.start, a.end) < std::tie(b.start, b.end); });
  double idle_s = 0.0;
  std::vector<std::pair<uint64_t, uint64_t>> host_gaps;  // [start, end) of the gaps of at least host_gap_us
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
      if (gap_us >= host_gap_us) host_gaps.push_back({covered, busy[i].start});
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
  nlohmann::json out = {{"span_s", span_s}, {"idle_s", idle_s}, {"gaps", gaps}, {"long_gaps_min_us", long_us},
                        {"long_gaps", long_gaps}};
  if (!host.empty()) {
    std::map<size_t, std::pair<double, int64_t>> by_host;  // name -> overlap s, spans
    for (const auto& [g0, g1] : host_gaps) {
      for (const Activity& h : host) {
        const uint64_t lo = std::max(g0, h.start), hi = std::min(g1, h.end);
        if (lo >= hi) continue;
        auto& [s, n] = by_host[h.name];
        s += static_cast<double>(hi - lo) * 1e-9;
        ++n;
      }
    }
    std::vector<std::pair<size_t, std::pair<double, int64_t>>> ranked(by_host.begin(), by_host.end());
    std::sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) { return a.second.first > b.second.first; });
    nlohmann::json in_gaps = nlohmann::json::array();
    for (size_t i = 0; i < ranked.size() && static_cast<int>(i) < top; ++i) {
      in_gaps.push_back({{"name", host_names[ranked[i].first].substr(0, 100)},
                         {"s", ranked[i].second.first},
                         {"count", ranked[i].second.second}});
    }
    double gap_s = 0.0;
    for (const auto& [g0, g1] : host_gaps) gap_s += static_cast<double>(g1 - g0) * 1e-9;
    out["host_gap_min_us"] = host_gap_us;
    out["host_gaps"] = {{"count", host_gaps.size()}, {"s", gap_s}};
    out["host_in_gaps"] = in_gaps;
  }
  return out;
}

// Host spans that nest (torch ops, the code's own scopes), each thread's a tree: which span was open on the host when
// a kernel was launched, and which spans were around it.
class SpanTree {
 public:
  struct Span {
    uint64_t start, end;  // ns
    size_t name;
    uint64_t thread;
    std::string shapes = {};  // the op's inputs' shapes, "[4, 8] [8]" ("" where not recorded)
  };
  static constexpr size_t kNone = SIZE_MAX;

  explicit SpanTree(std::vector<Span> spans) : spans_(std::move(spans)), parent_(spans_.size(), kNone) {
    std::map<uint64_t, std::vector<size_t>> by_thread;
    for (size_t i = 0; i < spans_.size(); ++i) by_thread[spans_[i].thread].push_back(i);
    for (auto& [thread, order] : by_thread) {
      // Outer before inner: by start, the longer first where two start together.
      std::sort(order.begin(), order.end(), [this](size_t a, size_t b) {
        return spans_[a].start != spans_[b].start ? spans_[a].start < spans_[b].start : spans_[a].end > spans_[b].end;
      });
      std::vector<size_t> open;  // the spans around the current one, innermost last
      for (size_t i : order) {
        while (!open.empty() && spans_[open.back()].end < spans_[i].end) open.pop_back();
        parent_[i] = open.empty() ? kNone : open.back();
        open.push_back(i);
      }
      threads_.push_back(std::move(order));
    }
  }

  const Span& span(size_t i) const { return spans_[i]; }
  size_t parent(size_t i) const { return parent_[i]; }

  // The shortest span containing the instant t over all threads (kNone if none). On one thread it is the span that
  // started last at or before t, or the first of its ancestors still open at t.
  size_t Innermost(uint64_t t) const {
    size_t best = kNone;
    for (const std::vector<size_t>& order : threads_) {
      auto after = std::upper_bound(order.begin(), order.end(), t,
                                    [this](uint64_t x, size_t i) { return x < spans_[i].start; });
      if (after == order.begin()) continue;
      size_t i = *std::prev(after);
      while (i != kNone && spans_[i].end < t) i = parent_[i];
      if (i != kNone && (best == kNone || Length(i) < Length(best))) best = i;
    }
    return best;
  }

  // The names of up to `n` spans around span i, the innermost first.
  std::vector<size_t> Ancestors(size_t i, int n) const {
    std::vector<size_t> out;
    for (size_t p = parent_[i]; p != kNone && static_cast<int>(out.size()) < n; p = parent_[p]) {
      out.push_back(spans_[p].name);
    }
    return out;
  }

 private:
  uint64_t Length(size_t i) const { return spans_[i].end - spans_[i].start; }

  std::vector<Span> spans_;
  std::vector<size_t> parent_;
  std::vector<std::vector<size_t>> threads_;  // each thread's spans, outer before inner
};

// Runs `fn` (which must wait for the device before returning) under the profiler; returns {wall_s, kernel_s (the sum
// of device activity: kernels, copies, memsets), kernels: [{name, s, calls, share}] for the `top` largest, by_op:
// [{op, shapes, within, name, s, calls}] the same by where on the host it was launched, idle: the device's idle time
// between its first and last activity, by the length of each gap}.
// - by_op's op is the host span open at the launch: the torch op the profiler links the kernel to, or else the
//   innermost op or scope around the launch call ("" where none; kernels replayed by CUDA graphs link to nothing).
//   shapes: its inputs' shapes (a GEMM's tell its rate). within: up to three spans around it, the innermost first
//   (which backward node, which scope).
// - Short gaps are the launch latency between kernels (inside CUDA graphs too); long ones, time the device waited on
//   the host, and idle.host_in_gaps says what the host was doing in the gaps of a millisecond or more.
// - The code's scopes are not device activity: their GPU-side spans are left out.
inline nlohmann::json ProfileKernels(const std::function<void()>& fn, int top = 30) {
  namespace prof = torch::autograd::profiler;
  using torch::profiler::impl::ActivityType;
  using Kind = libkineto::ActivityType;
  const torch::profiler::impl::ProfilerConfig config(torch::profiler::impl::ProfilerState::KINETO,
                                                     /*report_input_shapes=*/true);
  const std::set<ActivityType> activities = {ActivityType::CPU, ActivityType::CUDA};
  prof::prepareProfiler(config, activities);
  prof::enableProfiler(config, activities);
  const auto start = std::chrono::steady_clock::now();
  fn();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::unique_ptr<prof::ProfilerResult> result = prof::disableProfiler();
  auto is = [](const prof::KinetoEvent& e, Kind kind) { return e.activityType() == static_cast<uint8_t>(kind); };
  std::map<std::string, std::pair<uint64_t, int64_t>> by_name;  // ns, calls
  uint64_t total_ns = 0;
  std::vector<Activity> busy;
  std::vector<std::string> names;
  std::map<std::string, size_t> name_index;
  std::vector<Activity> host;
  std::vector<std::string> host_names;
  std::map<std::string, size_t> host_index;
  std::vector<SpanTree::Span> spans;                 // torch ops and the code's scopes
  std::map<uint64_t, size_t> span_of_correlation;    // a torch op's correlation id -> its span
  std::map<uint64_t, uint64_t> launch_of_correlation;  // a runtime or driver call's correlation id -> its start
  for (const auto& e : result->events()) {
    if (e.deviceType() == c10::DeviceType::CUDA) continue;
    const auto [it, added] = host_index.emplace(e.name(), host_names.size());
    if (added) host_names.push_back(e.name());
    host.push_back({e.startNs(), e.startNs() + e.durationNs(), it->second});
    if (is(e, Kind::CPU_OP) || is(e, Kind::USER_ANNOTATION)) {
      // Torch ops' correlations only: the CUDA runtime's calls number their own (a kernel links to its op's).
      if (is(e, Kind::CPU_OP) && e.correlationId() != 0) span_of_correlation[e.correlationId()] = spans.size();
      std::string shapes;
      for (const std::vector<int64_t>& shape : e.shapes()) {
        if (shape.empty()) continue;  // a scalar, or not a tensor
        shapes += shapes.empty() ? "[" : " [";
        for (size_t d = 0; d < shape.size(); ++d) shapes += (d ? ", " : "") + std::to_string(shape[d]);
        shapes += "]";
      }
      spans.push_back({e.startNs(), e.startNs() + e.durationNs(), it->second, e.startThreadId(), std::move(shapes)});
    } else if (is(e, Kind::CUDA_RUNTIME) || is(e, Kind::CUDA_DRIVER)) {
      launch_of_correlation[e.correlationId()] = e.startNs();
    }
  }
  const SpanTree tree(std::move(spans));
  // (the host span open at the launch, its shapes, the spans around it, the kernel's name) -> ns, calls.
  using OpKey = std::tuple<size_t, std::string, std::vector<size_t>, size_t>;
  std::map<OpKey, std::pair<uint64_t, int64_t>> by_op;
  for (const auto& e : result->events()) {
    if (!is(e, Kind::CONCURRENT_KERNEL) && !is(e, Kind::GPU_MEMCPY) && !is(e, Kind::GPU_MEMSET)) continue;
    std::string name = e.name();
    if (name.size() > 160) name = name.substr(0, 160);
    const auto [it, added] = name_index.emplace(name, names.size());
    if (added) names.push_back(name);
    busy.push_back({e.startNs(), e.startNs() + e.durationNs(), it->second});
    size_t span = SpanTree::kNone;
    if (const auto op = span_of_correlation.find(e.linkedCorrelationId()); op != span_of_correlation.end()) {
      span = op->second;
    } else if (const auto launch = launch_of_correlation.find(e.correlationId());
               launch != launch_of_correlation.end()) {
      span = tree.Innermost(launch->second);
    }
    auto& [ns, calls] = by_name[name];
    ns += e.durationNs();
    ++calls;
    const OpKey key = span == SpanTree::kNone
                          ? OpKey{SpanTree::kNone, {}, {}, it->second}
                          : OpKey{tree.span(span).name, tree.span(span).shapes, tree.Ancestors(span, 3), it->second};
    auto& [op_ns, op_calls] = by_op[key];
    op_ns += e.durationNs();
    ++op_calls;
    total_ns += e.durationNs();
  }
  // A map's `top` entries with the most ns, the most first.
  auto largest = [top](const auto& map) {
    std::vector<std::pair<typename std::decay_t<decltype(map)>::key_type, std::pair<uint64_t, int64_t>>> sorted(
        map.begin(), map.end());
    std::sort(sorted.begin(), sorted.end(),
              [](const auto& a, const auto& b) { return a.second.first > b.second.first; });
    if (top >= 0 && sorted.size() > static_cast<size_t>(top)) sorted.resize(top);
    return sorted;
  };
  nlohmann::json kernels = nlohmann::json::array();
  for (const auto& [name, v] : largest(by_name)) {
    kernels.push_back({{"name", name},
                       {"s", static_cast<double>(v.first) * 1e-9},
                       {"calls", v.second},
                       {"share", total_ns ? static_cast<double>(v.first) / static_cast<double>(total_ns) : 0.0}});
  }
  nlohmann::json by_op_json = nlohmann::json::array();
  for (const auto& [key, v] : largest(by_op)) {
    const auto& [op, shapes, around, kernel] = key;
    nlohmann::json within = nlohmann::json::array();
    for (size_t a : around) within.push_back(host_names[a].substr(0, 100));
    by_op_json.push_back({{"op", op == SpanTree::kNone ? std::string() : host_names[op]},
                          {"shapes", shapes},
                          {"within", within},
                          {"name", names[kernel]},
                          {"s", static_cast<double>(v.first) * 1e-9},
                          {"calls", v.second}});
  }
  return {{"wall_s", wall},
          {"kernel_s", static_cast<double>(total_ns) * 1e-9},
          {"kernels", kernels},
          {"by_op", by_op_json},
          {"idle", IdleGaps(std::move(busy), names, 10.0, 12, host, host_names)}};
}

}  // namespace verl::bench

#endif  // VERL_TOOLS_BENCH_KERNEL_PROFILE_H_
