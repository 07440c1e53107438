// The worker service over real gRPC on loopback: a verl-worker started by LocalWorkerLauncher, driven through
// WorkerClient with the tiny model from verl-make-tiny-model.

#include <signal.h>

#include <filesystem>
#include <memory>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include <google/protobuf/util/message_differencer.h>

#include "controller/cluster/local_worker_launcher.h"
#include "controller/cluster/rank_group.h"
#include "controller/cluster/worker_client.h"
#include "tests/common/metrics/http_test_client.h"
#include "tests/controller/test_util.h"

namespace verl {
namespace {

using testing::Bin;
using testing::Clock;
using testing::SecondsSince;
using testing::TestDir;
using testing::WaitFor;

// Field-by-field equality (maps compared as maps: their serialized order is unspecified).
bool Same(const google::protobuf::Message& a, const google::protobuf::Message& b) {
  return google::protobuf::util::MessageDifferencer::Equals(a, b);
}

v1::ConfigureRolesRequest Roles(const std::string& model_path) {
  v1::ConfigureRolesRequest req;
  req.add_roles("actor");
  req.add_roles("rollout");
  req.add_roles("ref");
  req.set_model_path(model_path);
  req.set_num_threads(1);
  req.set_seed(7);
  req.set_dtype("float32");
  v1::ActorConfig* a = req.mutable_actor();
  a->mutable_optim()->set_lr(1e-3);
  a->mutable_optim()->set_beta1(0.9);
  a->mutable_optim()->set_beta2(0.999);
  a->mutable_optim()->set_eps(1e-8);
  a->set_grad_clip(1.0);
  a->set_clip_ratio_low(0.2);
  a->set_clip_ratio_high(0.2);
  a->set_clip_ratio_c(3.0);
  a->set_loss_agg_mode("token-mean");
  a->set_use_kl_loss(true);
  a->set_kl_loss_coef(0.001);
  a->set_kl_loss_type("low_var_kl");
  a->set_ppo_mini_batch_size(2);
  a->set_ppo_micro_batch_size_per_gpu(4);
  a->set_ppo_epochs(1);
  a->set_log_prob_micro_batch_size_per_gpu(8);
  return req;
}

// Two prompts, n = 2, four new tokens, sampled with a fixed seed.
v1::GenerateRequest SmallBatch(const std::string& step_id, int max_new_tokens = 4) {
  v1::GenerateRequest req;
  req.set_step_id(step_id);
  for (int i = 0; i < 2; ++i) {
    v1::Prompt* p = req.add_prompts();
    for (int t : {5, 6 + i, 7, 8 + 2 * i}) p->add_token_ids(t);
    p->set_uid("p" + std::to_string(i));
    p->set_data_source("verl_cpp/repeat_letter");
    p->set_ground_truth(i == 0 ? "a" : "b");
    p->set_extra_info_json("{}");
  }
  v1::SamplingParams* s = req.mutable_sampling();
  s->set_temperature(1.0);
  s->set_top_k(-1);
  s->set_top_p(1.0);
  s->set_do_sample(true);
  s->set_n(2);
  s->set_max_new_tokens(max_new_tokens);
  s->set_pad_token_id(0);
  s->set_seed(11);
  return req;
}

TEST_CASE("WorkerService runs a GRPO step over gRPC and reports errors with context", "[controller][worker_rpc]") {
  TestDir dir("worker_rpc");
  const std::string model = dir.file("model");
  REQUIRE(testing::MakeTinyModel(model, dir.path()).empty());

  LocalWorkerLauncher launcher;
  // worker-0 runs the step; worker-1 is given a bad model path.
  auto launched = launcher.Launch(Bin("verl-worker"), 2, dir.file("logs"), 30);
  REQUIRE(launched.ok());
  auto liveness = [&launcher] { return launcher.CheckAlive(); };
  const LaunchedWorker w0 = launched->at(0);
  const LaunchedWorker w1 = launched->at(1);
  auto client = std::make_unique<WorkerClient>(w0.worker_id, w0.address, 30, liveness);
  WorkerClient other(w1.worker_id, w1.address, 30, liveness);
  REQUIRE(client->WaitHealthy(10).ok());
  REQUIRE(other.WaitHealthy(10).ok());

  {
    INFO("LoadModel on a nonexistent model path names the path");
    const std::string missing = dir.file("no_such_model");
    absl::Status s = other.ConfigureRoles(Roles(missing)).status();
    if (s.ok()) s = other.LoadModel(v1::LoadModelRequest()).status();
    REQUIRE_FALSE(s.ok());
    CHECK_THAT(std::string(s.message()), Catch::Contains(missing) && Catch::Contains("worker-1"));
  }
  {
    INFO("LoadModel before ConfigureRoles is refused");
    auto r = client->LoadModel(v1::LoadModelRequest());
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(std::string(r.status().message()), Catch::Contains("LoadModel") && Catch::Contains("worker-0"));
  }

  REQUIRE(client->ConfigureRoles(Roles(model)).ok());
  auto loaded = client->LoadModel(v1::LoadModelRequest());
  REQUIRE(loaded.ok());
  CHECK(loaded->num_parameters() > 0);
  CHECK(loaded->vocab_size() > 8);

  auto gen = client->Generate(SmallBatch("train-1"));
  REQUIRE(gen.ok());
  REQUIRE(gen->responses().shape_size() == 2);
  CHECK(gen->responses().shape(0) == 4);
  CHECK(gen->responses().shape(1) == 4);
  CHECK(gen->responses().data().size() == 4 * 4 * sizeof(int32_t));
  REQUIRE(gen->response_lengths_size() == 4);
  REQUIRE(gen->prompt_lengths_size() == 4);
  for (int i = 0; i < 4; ++i) {
    CHECK(gen->response_lengths(i) >= 1);
    CHECK(gen->response_lengths(i) <= 4);
    CHECK(gen->prompt_lengths(i) == 4);
  }
  CHECK(gen->metrics().count("rollout/log_prob/mean") == 1);
  {
    INFO("ignore_eos (rollout.ignore_eos) samples past EOS tokens: with every token an EOS, one token without it");
    for (bool ignore : {false, true}) {
      v1::GenerateRequest req = SmallBatch(ignore ? "eos-ignored" : "eos-all");
      for (int32_t id = 0; id < loaded->vocab_size(); ++id) req.mutable_sampling()->add_eos_token_ids(id);
      req.mutable_sampling()->set_ignore_eos(ignore);
      auto r = client->Generate(req);
      REQUIRE(r.ok());
      REQUIRE(r->response_lengths_size() == 4);
      for (int i = 0; i < 4; ++i) CHECK(r->response_lengths(i) == (ignore ? 4 : 1));
    }
  }

  {
    INFO("Generate is idempotent per step id, even when the repeated request differs");
    auto again = client->Generate(SmallBatch("train-1"));
    REQUIRE(again.ok());
    CHECK(Same(*again, *gen));
    v1::GenerateRequest changed = SmallBatch("train-1");
    changed.mutable_sampling()->set_seed(12345);
    auto third = client->Generate(changed);
    REQUIRE(third.ok());
    CHECK(Same(*third, *gen));
  }

  v1::ScoreRequest score_req;
  score_req.set_step_id("train-1");
  auto scored = client->Score(score_req);
  REQUIRE(scored.ok());
  CHECK(scored->scores_size() == 4);
  CHECK(scored->response_texts_size() == 4);
  auto scored_again = client->Score(score_req);
  REQUIRE(scored_again.ok());
  CHECK(Same(*scored_again, *scored));

  v1::ComputeLogProbsRequest lp;
  lp.set_step_id("train-1");
  lp.set_role("actor");
  lp.set_temperature(1.0);
  REQUIRE(client->ComputeLogProbs(lp).ok());
  lp.set_role("ref");
  REQUIRE(client->ComputeLogProbs(lp).ok());

  v1::ComputeAdvantageRequest adv;
  adv.set_step_id("train-1");
  adv.set_estimator("grpo");
  adv.set_norm_adv_by_std_in_grpo(true);
  REQUIRE(client->ComputeAdvantage(adv).ok());

  v1::UpdateActorRequest upd;
  upd.set_step_id("train-1");
  upd.set_temperature(1.0);
  upd.set_seed(3);
  auto updated = client->UpdateActor(upd);
  REQUIRE(updated.ok());
  CHECK_FALSE(updated->metrics().empty());
  {
    INFO("a repeated UpdateActor returns the stored result instead of updating twice");
    auto again = client->UpdateActor(upd);
    REQUIRE(again.ok());
    CHECK(Same(*again, *updated));
  }

  {
    INFO("an error from the rank arrives as NOT_FOUND naming the worker, the RPC and the step");
    v1::ScoreRequest unknown;
    unknown.set_step_id("train-99");
    auto r = client->Score(unknown);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == absl::StatusCode::kNotFound);
    // "(pid N)" is added by the worker itself, so this checks the worker's annotation, not just the client's.
    CHECK_THAT(std::string(r.status().message()),
               Catch::Contains("worker worker-0 (pid " + std::to_string(w0.pid) + ")") &&
                   Catch::Contains("Score") && Catch::Contains("train-99"));
  }
  {
    INFO("ReleaseBatch drops the step: later calls for it are NOT_FOUND");
    v1::ReleaseBatchRequest rel;
    rel.set_step_id("train-1");
    REQUIRE(client->ReleaseBatch(rel).ok());
    auto r = client->ComputeAdvantage(adv);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == absl::StatusCode::kNotFound);
    CHECK_THAT(std::string(r.status().message()), Catch::Contains("ComputeAdvantage") && Catch::Contains("train-1"));
  }
  {
    INFO("a call that outlives its deadline fails with DEADLINE_EXCEEDED at the deadline, naming worker and RPC");
    // 32 sequences of 128 tokens (no EOS given, so all run to the end) take far longer than 10 ms.
    WorkerClient impatient(w0.worker_id, w0.address, 0.01, liveness);
    v1::GenerateRequest big = SmallBatch("slow-1", 128);
    big.mutable_sampling()->set_n(16);
    const auto start = Clock::now();
    auto r = impatient.Generate(big);
    const double elapsed = SecondsSince(start);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == absl::StatusCode::kDeadlineExceeded);
    CHECK(elapsed < 1.0);
    CHECK_THAT(std::string(r.status().message()), Catch::Contains("Generate") && Catch::Contains("worker-0"));
    // The worker is still fine afterwards.
    CHECK(client->WaitHealthy(5).ok());
  }

  {
    INFO("Shutdown makes the worker exit with status 0");
    REQUIRE(client->Shutdown().ok());
    // Disconnect, as the controller does: the worker's graceful stop waits for its clients to go away.
    client.reset();
    const auto start = Clock::now();
    REQUIRE(WaitFor([&] { return !launcher.CheckAlive().ok(); }, 10));
    CHECK(SecondsSince(start) < 3);
    absl::Status alive = launcher.CheckAlive();
    CHECK_THAT(std::string(alive.message()), Catch::Contains("worker-0") && Catch::Contains("exited with status 0"));
  }
}

TEST_CASE("WorkerClient::CancelInFlight cancels every call in flight on the client, not only the latest",
          "[controller][worker_rpc]") {
  // The job overlaps calls on a rank (split placement: the critic's update beside the weight sync); a heartbeat that
  // finds the worker hung must release both, or one waits out rpc_timeout_s.
  TestDir dir("worker_rpc_cancel");
  LocalWorkerLauncher launcher;
  auto launched = launcher.Launch(Bin("verl-worker"), 1, dir.file("logs"), 30);
  REQUIRE(launched.ok());
  const LaunchedWorker w = launched->at(0);
  WorkerClient client(w.worker_id, w.address, /*rpc_timeout_s=*/60, nullptr);
  REQUIRE(client.WaitHealthy(10).ok());
  REQUIRE(::kill(w.pid, SIGSTOP) == 0);  // hung: calls reach its socket and get no answer
  std::vector<absl::Status> results(2, absl::UnknownError("not returned"));
  std::vector<std::thread> calls;
  for (int i = 0; i < 2; ++i) {
    calls.emplace_back([&, i] {
      v1::ReleaseBatchRequest req;
      req.set_step_id("s" + std::to_string(i));
      results[i] = client.ReleaseBatch(req).status();
    });
  }
  REQUIRE(WaitFor([&] { return client.calls_in_flight() == 2; }, 10));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // and on their way
  client.CancelInFlight();
  for (std::thread& t : calls) t.join();
  ::kill(w.pid, SIGCONT);
  for (const absl::Status& s : results) {
    INFO(s.ToString());
    CHECK(absl::IsCancelled(s));
  }
}

TEST_CASE("WorkerService: a rank of split placement's transfer group that fails a call aborts it, also after a "
          "one-trainer ConfigureRoles", "[controller][worker_rpc]") {
  // Split placement forms the transfer group before ConfigureRoles, which a job of one trainer (or a rollout rank)
  // sends with world_size 1: that leaves the data-parallel group, not the transfer group. A failed call must still
  // abort the rank's communicators, so its transfer peers stop waiting for it now, not at the collective timeout.
  // The calls go to the ranks directly (no RankGroup::ForEach, whose relay would also release them).
  TestDir dir("worker_rpc_transfer");
  const std::string model = dir.file("model");
  REQUIRE(testing::MakeTinyModel(model, dir.path()).empty());
  LocalWorkerLauncher launcher;
  auto launched = launcher.Launch(Bin("verl-worker"), 1, dir.file("logs"), 30, /*ranks_per_worker=*/2);
  REQUIRE(launched.ok());
  const LaunchedWorker w = launched->at(0);
  std::vector<RankAddress> ranks = {{w.worker_id, w.address, 0}, {w.worker_id, w.address, 1}};
  RankGroup group(ranks, 60, nullptr);
  REQUIRE(group.client(0).WaitHealthy(10).ok());
  REQUIRE(group.InitCommunicators(10, /*collective_timeout_s=*/30, true, nullptr, {}, "transfer").ok());
  for (int r = 0; r < 2; ++r) {
    v1::ConfigureRolesRequest roles = group.For(r, Roles(model));
    roles.set_world_size(1);
    REQUIRE(group.client(r).ConfigureRoles(roles).ok());
    REQUIRE(group.client(r).LoadModel(group.For(r, v1::LoadModelRequest())).ok());
  }
  // Rank 1 waits in the weight sync's first broadcast for rank 0, whose call fails before it gets there.
  absl::Status waiting = absl::UnknownError("not returned");
  std::thread peer([&] {
    v1::SyncWeightsRequest req = group.For(1, v1::SyncWeightsRequest());
    req.set_bucket_bytes(4096);
    waiting = group.client(1).SyncWeights(req).status();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  v1::SyncWeightsRequest bad = group.For(0, v1::SyncWeightsRequest());
  bad.set_bucket_bytes(0);  // refused: "bucket size 0 bytes"
  REQUIRE(absl::IsInvalidArgument(group.client(0).SyncWeights(bad).status()));
  peer.join();
  INFO(waiting.ToString());
  CHECK(absl::IsUnavailable(waiting));  // the abort, naming rank 0; not DEADLINE_EXCEEDED after 30 s
}

TEST_CASE("WorkerService hosts several ranks: they form a group and a bad local_rank is refused",
          "[controller][worker_rpc]") {
  TestDir dir("worker_rpc_ranks");
  const std::string model = dir.file("model");
  REQUIRE(testing::MakeTinyModel(model, dir.path()).empty());
  LocalWorkerLauncher launcher;
  auto launched = launcher.Launch(Bin("verl-worker"), 1, dir.file("logs"), 30, /*ranks_per_worker=*/2);
  REQUIRE(launched.ok());
  const LaunchedWorker w = launched->at(0);
  WorkerClient client(w.worker_id, w.address, 30);
  auto health = client.WaitHealthy(10);
  REQUIRE(health.ok());
  REQUIRE(health->num_ranks() == 2);

  v1::ConfigureRolesRequest roles = Roles(model);
  roles.set_local_rank(2);
  auto refused = client.ConfigureRoles(roles);
  INFO(refused.status().ToString());
  REQUIRE(absl::IsInvalidArgument(refused.status()));
  REQUIRE(std::string(refused.status().message()).find("local_rank 2 is out of range (this worker has 2 rank(s)") !=
          std::string::npos);

  // InitCommunicator before PrepareCommunicator is refused; then the two ranks form a group over the host backend.
  v1::InitCommunicatorRequest early;
  early.add_addresses("127.0.0.1:1");
  REQUIRE(absl::IsFailedPrecondition(client.InitCommunicator(early, 10).status()));
  std::vector<RankAddress> ranks = {{w.worker_id, w.address, 0}, {w.worker_id, w.address, 1}};
  RankGroup group(ranks, 30, nullptr);
  REQUIRE(group.InitCommunicators(10, 10).ok());
  // Both ranks load the model and run a step's first stages as one group (the log-prob metrics are all-reduced).
  auto configured = group.ForEach<v1::ConfigureRolesResponse>(
      [&](int r) { return group.client(r).ConfigureRoles(group.For(r, Roles(model))); });
  REQUIRE(configured.ok());
  auto loaded = group.ForEach<v1::LoadModelResponse>(
      [&](int r) { return group.client(r).LoadModel(group.For(r, v1::LoadModelRequest())); });
  REQUIRE(loaded.ok());
  auto generated = group.ForEach<v1::GenerateResponse>(
      [&](int r) { return group.client(r).Generate(group.For(r, SmallBatch("s1"))); });
  REQUIRE(generated.ok());
  v1::ComputeLogProbsRequest lp;
  lp.set_step_id("s1");
  lp.set_role("actor");
  lp.set_temperature(1.0);
  auto logprobs = group.ForEach<v1::ComputeLogProbsResponse>(
      [&](int r) { return group.client(r).ComputeLogProbs(group.For(r, lp)); });
  INFO(logprobs.status().ToString());
  REQUIRE(logprobs.ok());
  // Each rank holds the same two prompts here, so the group-wide mean equals each rank's own.
  REQUIRE(logprobs->at(0).metrics().at("training/rollout_probs_diff_mean") ==
          Approx(logprobs->at(1).metrics().at("training/rollout_probs_diff_mean")));

  // A later job of one rank on the same daemon: configured with world_size 1, rank 0 must leave the old group (its
  // collectives would otherwise wait for rank 1, idle now, until the 10 s collective timeout and fail).
  v1::ConfigureRolesRequest alone = group.For(0, Roles(model));
  alone.set_world_size(1);
  REQUIRE(group.client(0).ConfigureRoles(alone).ok());
  REQUIRE(group.client(0).LoadModel(group.For(0, v1::LoadModelRequest())).ok());
  REQUIRE(group.client(0).Generate(group.For(0, SmallBatch("solo"))).ok());
  lp.set_step_id("solo");
  auto solo = group.client(0).ComputeLogProbs(group.For(0, lp));
  INFO(solo.status().ToString());
  REQUIRE(solo.ok());
}

TEST_CASE("verl-worker --metrics-listen serves its RPC metrics to a Prometheus scrape", "[controller][worker_rpc]") {
  TestDir dir("worker_metrics");
  const std::string ready = dir.file("w.ready");
  testing::ChildProcess worker({Bin("verl-worker"), "--listen", "127.0.0.1:0", "--ready-file", ready, "--worker-id",
                                "wm", "--metrics-listen", "127.0.0.1:0"},
                               dir.file("w.out"), dir.file("w.err"));
  REQUIRE(WaitFor([&] { return std::filesystem::exists(ready); }, 30));
  std::string address = testing::ReadFile(ready);
  address.erase(address.find_last_not_of("\r\n") + 1);
  std::smatch m;
  const std::string log = worker.out() + worker.err();
  INFO(log);
  REQUIRE(std::regex_search(log, m, std::regex(R"(prometheus metrics: http://127\.0\.0\.1:(\d+)/metrics)")));
  const int port = std::stoi(m[1].str());

  WorkerClient client("wm", address, 30);
  REQUIRE(client.WaitHealthy(10).ok());
  // A call that fails on the rank (no roles yet) and one that succeeds.
  REQUIRE(absl::IsFailedPrecondition(client.LoadModel(v1::LoadModelRequest()).status()));
  v1::ReleaseBatchRequest release;
  release.set_step_id("none");
  REQUIRE(client.ReleaseBatch(release).ok());

  testing::HttpResponse r = testing::HttpGet(port, "/metrics");
  INFO(r.body);
  REQUIRE(r.status == 200);
  CHECK_THAT(r.body, Catch::Contains(R"(verl_rpc_errors_total{code="FAILED_PRECONDITION",method="LoadModel"} 1)"));
  CHECK_THAT(r.body, Catch::Contains(R"(verl_rpc_duration_seconds_count{method="LoadModel"} 1)"));
  CHECK_THAT(r.body, Catch::Contains(R"(verl_rpc_duration_seconds_count{method="ReleaseBatch"} 1)"));
  CHECK_THAT(r.body, Catch::Contains("process_resident_memory_bytes"));
}

}  // namespace
}  // namespace verl
