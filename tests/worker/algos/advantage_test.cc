#include "worker/train/advantage.h"

#include <barrier>
#include <string>
#include <thread>
#include <vector>

#include "tests/worker/algos/golden_util.h"

namespace verl {
namespace {

using testing::LoadGolden;
using testing::RequireNear;
using testing::ToTensor;

double AbsTol(at::ScalarType dtype) { return dtype == at::kDouble ? 1e-9 : 1e-6; }

AdvantageInputs InputsOf(const nlohmann::json& c, at::ScalarType dtype) {
  AdvantageInputs in;
  in.token_level_rewards = ToTensor(c["token_level_rewards"], dtype);
  in.response_mask = ToTensor(c["response_mask"], dtype);
  in.values = ToTensor(c["values"], dtype);
  in.baseline_scores = ToTensor(c["baseline_scores"], dtype);
  in.group_ids = c["group_ids"].get<std::vector<std::string>>();
  return in;
}

AdvantageOptions OptionsOf(const nlohmann::json& c) {
  AdvantageOptions o;
  o.gamma = c["gamma"].get<double>();
  o.lam = c["lam"].get<double>();
  o.epsilon = c["epsilon"].get<double>();
  return o;
}

TEST_CASE("every advantage estimator matches verl's formulas", "[algos]") {
  const nlohmann::json golden = LoadGolden("advantages.json");
  for (at::ScalarType dtype : {at::kDouble, at::kFloat}) {
    for (const auto& c : golden["cases"]) {
      for (const auto& [key, expected] : c["expected"].items()) {
        const std::string name = c["name"].get<std::string>() + "/" + key + (dtype == at::kFloat ? "/f32" : "/f64");
        AdvantageInputs in = InputsOf(c, dtype);
        AdvantageOptions o = OptionsOf(c);
        std::string estimator = key;
        if (const auto slash = key.find('/'); slash != std::string::npos) {
          estimator = key.substr(0, slash);
          o.norm_adv_by_std_in_grpo = key.substr(slash + 1) == "norm";
        }
        if (estimator == "grpo_passk") in.group_ids = c["passk_group_ids"].get<std::vector<std::string>>();
        auto r = ComputeAdvantages(estimator, in, o);
        INFO(name << ": " << r.status().ToString());
        REQUIRE(r.ok());
        CHECK(r->advantages.scalar_type() == dtype);
        RequireNear(r->advantages, ToTensor(expected["advantages"]), name + " advantages", 1e-5, AbsTol(dtype));
        RequireNear(r->returns, ToTensor(expected["returns"]), name + " returns", 1e-5, AbsTol(dtype));
      }
    }
  }
}

TEST_CASE("masked whitening matches verl's masked_whiten", "[algos]") {
  const nlohmann::json w = LoadGolden("advantages.json")["whiten"];
  RequireNear(MaskedWhiten(ToTensor(w["values"]), ToTensor(w["mask"])), ToTensor(w["expected"]), "masked_whiten", 1e-5,
              1e-9);
  // A bool mask gives the same result.
  RequireNear(MaskedWhiten(ToTensor(w["values"]), ToTensor(w["mask"]).to(at::kBool)), ToTensor(w["expected"]),
              "masked_whiten (bool mask)", 1e-5, 1e-9);
}

// Two "ranks" in two threads whose reduce_sum adds both ranks' tensors, as an all-reduce would.
class TwoRankSum {
 public:
  at::Tensor Reduce(int rank, const at::Tensor& t) {
    slots_[rank] = t.clone();
    sync_.arrive_and_wait();
    at::Tensor sum = slots_[0] + slots_[1];
    sync_.arrive_and_wait();  // both read the slots before the next call overwrites them
    ++calls_[rank];
    return sum;
  }
  int calls(int rank) const { return calls_[rank]; }

 private:
  std::barrier<> sync_{2};
  at::Tensor slots_[2];
  int calls_[2] = {0, 0};
};

TEST_CASE("batch-wide statistics are reduced over the data-parallel group", "[algos]") {
  const nlohmann::json golden = LoadGolden("advantages.json");
  // Rows [0, 5) on rank 0 and [5, 8) on rank 1: no prompt group straddles the ranks.
  const int64_t split = 5;
  for (const std::string estimator : {"gae", "reinforce_plus_plus", "reinforce_plus_plus_baseline", "gpg"}) {
    // gpg's batch statistic is the count of non-zero scores, which only the outcome case (with zero scores) exercises;
    // the whitening estimators use the dense case (holes and padding).
    const nlohmann::json& c = golden["cases"][estimator == "gpg" ? 0 : 1];
    const AdvantageInputs all = InputsOf(c, at::kDouble);
    TwoRankSum comm;
    absl::StatusOr<AdvantageResult> results[2];
    auto run = [&](int rank) {
      const int64_t begin = rank == 0 ? 0 : split;
      const int64_t end = rank == 0 ? split : all.token_level_rewards.size(0);
      AdvantageInputs in;
      in.token_level_rewards = all.token_level_rewards.slice(0, begin, end);
      in.response_mask = all.response_mask.slice(0, begin, end);
      in.values = all.values.slice(0, begin, end);
      in.group_ids.assign(all.group_ids.begin() + begin, all.group_ids.begin() + end);
      AdvantageOptions o = OptionsOf(c);
      o.reduce_sum = [&comm, rank](const at::Tensor& t) { return comm.Reduce(rank, t); };
      results[rank] = ComputeAdvantages(estimator, in, o);
    };
    std::thread rank1(run, 1);
    run(0);
    rank1.join();
    INFO(estimator);
    REQUIRE(results[0].ok());
    REQUIRE(results[1].ok());
    CHECK(comm.calls(0) > 0);
    CHECK(comm.calls(0) == comm.calls(1));
    const nlohmann::json& expected = c["expected"][estimator];
    RequireNear(at::cat({results[0]->advantages, results[1]->advantages}), ToTensor(expected["advantages"]),
                estimator + " advantages over 2 ranks", 1e-5, 1e-9);
    RequireNear(at::cat({results[0]->returns, results[1]->returns}), ToTensor(expected["returns"]),
                estimator + " returns over 2 ranks", 1e-5, 1e-9);
    // Without the reduction the whitening would use this rank's statistics only, and the test could tell.
    AdvantageInputs local;
    local.token_level_rewards = all.token_level_rewards.slice(0, 0, split);
    local.response_mask = all.response_mask.slice(0, 0, split);
    local.values = all.values.slice(0, 0, split);
    local.group_ids.assign(all.group_ids.begin(), all.group_ids.begin() + split);
    auto alone = ComputeAdvantages(estimator, local, OptionsOf(c));
    REQUIRE(alone.ok());
    CHECK((alone->advantages - results[0]->advantages).abs().max().item<double>() > 1e-3);
  }
}

TEST_CASE("advantage estimator errors name what is wrong", "[algos]") {
  const nlohmann::json golden = LoadGolden("advantages.json");
  const AdvantageInputs full = InputsOf(golden["cases"][0], at::kFloat);

  auto unknown = ComputeAdvantages("grpo_typo", full, {});
  REQUIRE(unknown.status().code() == absl::StatusCode::kInvalidArgument);
  const std::string msg(unknown.status().message());
  CHECK(msg.find("grpo_typo") != std::string::npos);
  for (const std::string& name : AdvantageEstimatorNames()) CHECK(msg.find(name) != std::string::npos);

  AdvantageInputs no_values = full;
  no_values.values = at::Tensor();
  auto gae = ComputeAdvantages("gae", no_values, {});
  REQUIRE(gae.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(std::string(gae.status().message()).find("values") != std::string::npos);

  AdvantageInputs no_baseline = full;
  no_baseline.baseline_scores = at::Tensor();
  auto remax = ComputeAdvantages("remax", no_baseline, {});
  REQUIRE(remax.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(std::string(remax.status().message()).find("baseline_scores") != std::string::npos);

  AdvantageInputs no_groups = full;
  no_groups.group_ids.clear();
  auto rloo = ComputeAdvantages("rloo", no_groups, {});
  REQUIRE(rloo.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(std::string(rloo.status().message()).find("group_ids") != std::string::npos);

  // grpo_passk needs two samples per prompt; group "c" has one.
  auto passk = ComputeAdvantages("grpo_passk", full, {});
  REQUIRE(passk.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(passk.status().message()).find("'c'") != std::string::npos);

  AdvantageInputs bad_mask = full;
  bad_mask.response_mask = full.response_mask.slice(1, 0, 3);
  auto shape = ComputeAdvantages("grpo", bad_mask, {});
  REQUIRE(shape.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(shape.status().message()).find("response_mask") != std::string::npos);

  // Whitening over one valid token is undefined; verl raises, so do we.
  AdvantageInputs one_token = full;
  one_token.response_mask = at::zeros_like(full.response_mask);
  one_token.response_mask.index_put_({0, 0}, 1.0);
  auto rpp = ComputeAdvantages("reinforce_plus_plus", one_token, {});
  REQUIRE(rpp.status().code() == absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace verl
