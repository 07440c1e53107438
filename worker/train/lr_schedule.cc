#include "worker/train/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace verl {

double LrFactor(const LrSchedule& schedule, int64_t update) {
  if (update < schedule.warmup_steps) {
    return static_cast<double>(update) / static_cast<double>(std::max<int64_t>(1, schedule.warmup_steps));
  }
  if (schedule.type != "cosine") return 1.0;
  const double progress = static_cast<double>(update - schedule.warmup_steps) /
                          static_cast<double>(std::max<int64_t>(1, schedule.total_steps - schedule.warmup_steps));
  const double x = std::cos(std::numbers::pi * schedule.num_cycles * 2.0 * progress);
  const double coef = (1.0 - schedule.min_lr_ratio) * 0.5;
  const double intercept = (1.0 + schedule.min_lr_ratio) * 0.5;
  return std::max(schedule.min_lr_ratio, x * coef + intercept);
}

}  // namespace verl
