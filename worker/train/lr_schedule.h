#ifndef VERL_WORKER_TRAIN_LR_SCHEDULE_H_
#define VERL_WORKER_TRAIN_LR_SCHEDULE_H_

// verl's learning-rate schedules (verl/utils/torch_functional.py): a linear warm-up from 0, then constant, or a cosine
// from lr down to min_lr_ratio * lr. Update k of the run (0-based; one per training step, as verl steps its LambdaLR
// once per update_actor / update_critic) takes lr * LrFactor(schedule, k).

#include <cstdint>
#include <string>

namespace verl {

struct LrSchedule {
  std::string type = "constant";  // constant | cosine
  int64_t warmup_steps = 0;       // resolved: lr_warmup_steps, or lr_warmup_steps_ratio x total_steps
  int64_t total_steps = 0;        // the run's training steps (cosine only)
  double min_lr_ratio = 0.0;      // cosine: the floor, in [0, 1]
  double num_cycles = 0.5;        // cosine: waves after the warm-up (0.5 falls once to the floor)
};

// Warm-up: k / max(1, warmup_steps) for k < warmup_steps. After it, 1 (constant), or for cosine, with
// progress = (k - warmup) / max(1, total - warmup):
//   max(min_lr_ratio, (1 + min_lr_ratio) / 2 + (1 - min_lr_ratio) / 2 * cos(2 pi num_cycles progress)).
double LrFactor(const LrSchedule& schedule, int64_t update);

}  // namespace verl

#endif  // VERL_WORKER_TRAIN_LR_SCHEDULE_H_
