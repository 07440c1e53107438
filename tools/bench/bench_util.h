#ifndef VERL_TOOLS_BENCH_BENCH_UTIL_H_
#define VERL_TOOLS_BENCH_BENCH_UTIL_H_

// Shared by the LibTorch benchmark tools (verl-bench-rollout, verl-bench-update): `--name value` flags over defaults,
// and waiting for the device.

#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/Device.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <map>
#include <optional>
#include <string>

namespace verl::bench {

// `flags` holds every accepted flag with its default; returns them with argv's values, or nullopt for an unknown
// flag, a flag without a value, or an empty `required` one (the caller prints its usage).
inline std::optional<std::map<std::string, std::string>> ParseFlags(int argc, char** argv,
                                                                   std::map<std::string, std::string> flags,
                                                                   const std::string& required) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--", 0) != 0 || !flags.count(arg.substr(2)) || i + 1 >= argc) return std::nullopt;
    flags[arg.substr(2)] = argv[++i];
  }
  if (!required.empty() && flags[required].empty()) return std::nullopt;
  return flags;
}

// Returns once `device` has finished its queued work (no-op on the CPU).
inline void SyncDevice(const c10::Device& device) {
  if (device.is_cuda()) c10::impl::getDeviceGuardImpl(device.type())->synchronizeDevice(device.index());
}

// The caching allocator's peak of allocated bytes on `device` since the start, in GiB (0 on the CPU): verl's
// perf/max_memory_allocated_gb.
inline double PeakAllocatedGb(const c10::Device& device) {
  if (!device.is_cuda()) return 0.0;
  const auto stats = c10::getDeviceAllocator(device.type())->getDeviceStats(device.index());
  return static_cast<double>(
             stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)].peak) /
         (1 << 30);
}

}  // namespace verl::bench

#endif  // VERL_TOOLS_BENCH_BENCH_UTIL_H_
