#ifndef VERL_CONTROLLER_JOB_KL_CONTROLLER_H_
#define VERL_CONTROLLER_JOB_KL_CONTROLLER_H_

// The coefficient of the in-reward KL penalty (algorithm.kl_ctrl), as verl's FixedKLController and
// AdaptiveKLController: the adaptive one moves the coefficient towards target_kl,
//   value *= 1 + clip(current_kl / target_kl - 1, -0.2, 0.2) * n_steps / horizon,
// after every step, with n_steps the number of sequences in the step. Its value is saved in checkpoints.

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace verl {

class KlController {
 public:
  // type "fixed" or "adaptive"; InvalidArgument otherwise, or for a non-positive target_kl / horizon when adaptive.
  static absl::StatusOr<KlController> Create(const std::string& type, double kl_coef, double target_kl,
                                             int64_t horizon);

  double value() const { return value_; }
  void set_value(double value) { value_ = value; }
  // Feeds one step's mean KL (fixed: no-op).
  void Update(double current_kl, int64_t n_steps);

 private:
  KlController(bool adaptive, double value, double target, int64_t horizon)
      : adaptive_(adaptive), value_(value), target_(target), horizon_(horizon) {}
  bool adaptive_;
  double value_;
  double target_;
  int64_t horizon_;
};

}  // namespace verl

#endif  // VERL_CONTROLLER_JOB_KL_CONTROLLER_H_
