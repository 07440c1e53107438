#include "controller/job/kl_controller.h"

#include <catch2/catch.hpp>

namespace verl {
namespace {

TEST_CASE("fixed KL control keeps its coefficient", "[controller][kl]") {
  auto kl = KlController::Create("fixed", 0.05, 0.1, 1000);
  REQUIRE(kl.ok());
  kl->Update(10.0, 256);
  CHECK(kl->value() == 0.05);
}

TEST_CASE("adaptive KL control follows verl's update rule", "[controller][kl]") {
  auto kl = KlController::Create("adaptive", 0.1, 0.5, 1000);
  REQUIRE(kl.ok());
  // KL above target: error clipped to +0.2, value *= 1 + 0.2 * 100 / 1000.
  kl->Update(2.0, 100);
  CHECK(kl->value() == Approx(0.1 * 1.02));
  // KL below target: error (0.4 / 0.5 - 1) = -0.2 exactly.
  kl->Update(0.4, 100);
  CHECK(kl->value() == Approx(0.1 * 1.02 * 0.98));
  // Small error inside the clip range: (0.55 / 0.5 - 1) = 0.1.
  kl->Update(0.55, 1000);
  CHECK(kl->value() == Approx(0.1 * 1.02 * 0.98 * 1.1));
  kl->set_value(0.3);
  CHECK(kl->value() == 0.3);
}

TEST_CASE("KL controller settings are checked", "[controller][kl]") {
  CHECK(KlController::Create("pid", 0.1, 0.1, 10).status().message().find("fixed or adaptive") !=
        std::string::npos);
  CHECK(!KlController::Create("adaptive", 0.1, 0.0, 10).ok());
  CHECK(!KlController::Create("adaptive", 0.1, 0.1, 0).ok());
}

}  // namespace
}  // namespace verl
