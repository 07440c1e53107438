#include "worker/train/lr_schedule.h"

#include <catch2/catch.hpp>
#include <cmath>

namespace verl {
namespace {

TEST_CASE("LrFactor: verl's constant and cosine schedules with warm-up", "[train][lr]") {
  const double pi = std::acos(-1.0);
  SECTION("constant: a linear warm-up from 0, then 1") {
    LrSchedule s;
    s.warmup_steps = 4;
    CHECK(LrFactor(s, 0) == 0.0);
    CHECK(LrFactor(s, 1) == 0.25);
    CHECK(LrFactor(s, 3) == 0.75);
    CHECK(LrFactor(s, 4) == 1.0);
    CHECK(LrFactor(s, 1000) == 1.0);
    s.warmup_steps = 0;
    CHECK(LrFactor(s, 0) == 1.0);
  }
  SECTION("cosine: half a wave from 1 down to min_lr_ratio after the warm-up") {
    LrSchedule s;
    s.type = "cosine";
    s.warmup_steps = 2;
    s.total_steps = 10;
    s.min_lr_ratio = 0.2;
    CHECK(LrFactor(s, 1) == 0.5);  // warm-up as for constant
    CHECK(LrFactor(s, 2) == Approx(1.0));
    for (int k = 2; k <= 10; ++k) {
      const double progress = (k - 2) / 8.0;
      INFO(k);
      CHECK(LrFactor(s, k) == Approx(0.6 + 0.4 * std::cos(pi * progress)).epsilon(1e-12));
    }
    CHECK(LrFactor(s, 6) == Approx(0.6));   // halfway
    CHECK(LrFactor(s, 10) == Approx(0.2));  // the floor at the last step
  }
  SECTION("cosine: more cycles rise again; the floor holds past the end") {
    LrSchedule s;
    s.type = "cosine";
    s.total_steps = 8;
    s.num_cycles = 1.0;  // down and back up
    CHECK(LrFactor(s, 4) == Approx(0.0).margin(1e-12));
    CHECK(LrFactor(s, 8) == Approx(1.0));
    s.num_cycles = 0.5;
    s.min_lr_ratio = 0.3;
    CHECK(LrFactor(s, 8) == Approx(0.3));
    CHECK(LrFactor(s, 12) >= 0.3);  // beyond total_steps the cosine turns up again, as verl's does
  }
}

}  // namespace
}  // namespace verl
