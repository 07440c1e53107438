#include "controller/job/kl_controller.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace verl {

absl::StatusOr<KlController> KlController::Create(const std::string& type, double kl_coef, double target_kl,
                                                  int64_t horizon) {
  if (type == "fixed") return KlController(false, kl_coef, target_kl, horizon);
  if (type == "adaptive") {
    if (target_kl <= 0 || horizon <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("algorithm.kl_ctrl: adaptive control needs target_kl > 0 and ",
                                                     "horizon > 0, got ", target_kl, " and ", horizon));
    }
    return KlController(true, kl_coef, target_kl, horizon);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("algorithm.kl_ctrl.type: unknown controller '", type, "' (expected fixed or adaptive)"));
}

void KlController::Update(double current_kl, int64_t n_steps) {
  if (!adaptive_) return;
  const double proportional_error = std::clamp(current_kl / target_ - 1.0, -0.2, 0.2);
  value_ *= 1.0 + proportional_error * static_cast<double>(n_steps) / static_cast<double>(horizon_);
}

}  // namespace verl
