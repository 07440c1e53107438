#include "controller/job/checkpoint_manager.h"

#include <filesystem>
#include <set>
#include <string>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "tests/controller/test_util.h"

namespace verl {
namespace {

namespace fs = std::filesystem;
using testing::ReadFile;
using testing::TestDir;
using testing::WriteFile;

// A save callback standing in for the workers: writes actor/weights.txt naming the step into the directory given.
CheckpointManager::SaveOnWorkers FakeWorkers(std::vector<std::string>* dirs_seen = nullptr) {
  return [dirs_seen](const std::string& dir, int64_t step, bool hf_export) {
    if (dirs_seen) dirs_seen->push_back(dir);
    fs::create_directories(dir + "/actor");
    WriteFile(dir + "/actor/weights.txt", "step " + std::to_string(step) + (hf_export ? " hf" : ""));
    return absl::OkStatus();
  };
}

TEST_CASE("CheckpointManager::Save writes verl's layout and the tracker last", "[controller][checkpoint]") {
  TestDir root("ckpt_save");
  std::vector<std::string> dirs_seen;
  CheckpointManager manager(root.path(), FakeWorkers(&dirs_seen));
  REQUIRE(manager.Save(3, ResumableSampler::State{1, 24}, /*hf_export=*/true).ok());

  const std::string step_dir = root.file("global_step_3");
  CHECK(manager.StepDir(3) == step_dir);
  CHECK(manager.TrackerPath() == root.file("latest_checkpointed_iteration.txt"));
  CHECK(ReadFile(step_dir + "/actor/weights.txt") == "step 3 hf");
  nlohmann::json data = nlohmann::json::parse(ReadFile(step_dir + "/data.json"));
  CHECK(data["global_step"] == 3);
  CHECK(data["sampler"]["epoch"] == 1);
  CHECK(data["sampler"]["cursor"] == 24);
  CHECK(ReadFile(manager.TrackerPath()) == "3\n");

  // The workers wrote into a temporary directory, never into the final one, and nothing temporary is left.
  REQUIRE(dirs_seen.size() == 1);
  CHECK(dirs_seen[0] != step_dir);
  CHECK_FALSE(fs::exists(dirs_seen[0]));
  for (const auto& entry : fs::directory_iterator(root.path())) {
    const std::string name = entry.path().filename().string();
    CHECK((name == "global_step_3" || name == "latest_checkpointed_iteration.txt"));
  }

  // A later save moves the tracker; the earlier checkpoint stays.
  REQUIRE(manager.Save(6, ResumableSampler::State{2, 0}, false).ok());
  CHECK(ReadFile(manager.TrackerPath()) == "6\n");
  CHECK(fs::is_directory(step_dir));
  CHECK(ReadFile(root.file("global_step_6/actor/weights.txt")) == "step 6");
}

TEST_CASE("CheckpointManager::Save runs before_commit with the checkpoint in place and the tracker not yet moved",
          "[controller][checkpoint]") {
  TestDir root("ckpt_commit");
  CheckpointManager manager(root.path(), FakeWorkers());
  REQUIRE(manager.Save(2, ResumableSampler::State{0, 8}, false).ok());
  int calls = 0;
  auto check_before_commit = [&]() {
    ++calls;
    CHECK(ReadFile(root.file("global_step_4/actor/weights.txt")) == "step 4");  // complete and in place
    CHECK(ReadFile(manager.TrackerPath()) == "2\n");                            // still the previous one
    return absl::OkStatus();
  };
  REQUIRE(manager.Save(4, ResumableSampler::State{0, 16}, false, {}, check_before_commit).ok());
  CHECK(calls == 1);
  CHECK(ReadFile(manager.TrackerPath()) == "4\n");
  // Its failure fails the save and the tracker keeps naming the previous checkpoint.
  const absl::Status failed = manager.Save(6, ResumableSampler::State{0, 24}, false, {},
                                           [] { return absl::DataLossError("metrics not written"); });
  CHECK(absl::IsDataLoss(failed));
  CHECK(ReadFile(manager.TrackerPath()) == "4\n");
}

TEST_CASE("CheckpointManager::Save leaves the previous checkpoint alone when the workers fail",
          "[controller][checkpoint]") {
  TestDir root("ckpt_fail");
  bool fail = false;
  CheckpointManager manager(root.path(), [&fail](const std::string& dir, int64_t step, bool) {
    fs::create_directories(dir + "/actor");
    WriteFile(dir + "/actor/partial.bin", "half");
    if (fail) return absl::UnavailableError("worker-0 died while saving step " + std::to_string(step));
    return absl::OkStatus();
  });
  REQUIRE(manager.Save(1, ResumableSampler::State{0, 8}, false).ok());
  const std::string data_before = ReadFile(root.file("global_step_1/data.json"));

  fail = true;
  absl::Status s = manager.Save(2, ResumableSampler::State{0, 16}, false);
  REQUIRE_FALSE(s.ok());
  CHECK(s.code() == absl::StatusCode::kUnavailable);
  CHECK_THAT(std::string(s.message()), Catch::Contains("global_step_2") &&
                                           Catch::Contains("worker-0 died while saving step 2"));
  CHECK_FALSE(fs::exists(root.file("global_step_2")));
  CHECK(ReadFile(manager.TrackerPath()) == "1\n");
  CHECK(ReadFile(root.file("global_step_1/data.json")) == data_before);
  // The half-written temporary directory is removed too.
  for (const auto& entry : fs::directory_iterator(root.path())) {
    const std::string name = entry.path().filename().string();
    CHECK((name == "global_step_1" || name == "latest_checkpointed_iteration.txt"));
  }

  // Resuming still finds step 1 with its sampler state.
  auto found = manager.Find("auto", "");
  REQUIRE(found.ok());
  REQUIRE(found->has_value());
  CHECK((*found)->global_step == 1);
  CHECK((*found)->sampler_state == ResumableSampler::State{0, 8});
}

TEST_CASE("CheckpointManager::Find honours resume_mode", "[controller][checkpoint]") {
  TestDir root("ckpt_find");
  CheckpointManager manager(root.path(), FakeWorkers());

  SECTION("auto without a tracker starts fresh") {
    auto found = manager.Find("auto", "");
    REQUIRE(found.ok());
    CHECK_FALSE(found->has_value());
  }
  SECTION("auto resumes from the tracker's step with the sampler state round-tripped") {
    REQUIRE(manager.Save(4, ResumableSampler::State{7, 123}, false).ok());
    REQUIRE(manager.Save(8, ResumableSampler::State{9, 5}, false).ok());
    auto found = manager.Find("auto", "");
    REQUIRE(found.ok());
    REQUIRE(found->has_value());
    CHECK((*found)->global_step == 8);
    CHECK((*found)->dir == root.file("global_step_8"));
    CHECK((*found)->sampler_state == ResumableSampler::State{9, 5});
  }
  SECTION("auto after a crash inside a re-save of the tracker's step: the step moved aside is put back") {
    REQUIRE(manager.Save(4, ResumableSampler::State{7, 123}, false).ok());
    // Save(4) again stopped between moving the committed step aside and moving the new one in.
    fs::rename(root.file("global_step_4"), root.file(".global_step_4.old"));
    fs::create_directories(root.file(".global_step_4.tmp/actor"));
    auto found = manager.Find("auto", "");
    INFO(found.status().ToString());
    REQUIRE(found.ok());
    REQUIRE(found->has_value());
    CHECK((*found)->dir == root.file("global_step_4"));
    CHECK((*found)->sampler_state == ResumableSampler::State{7, 123});
    CHECK(ReadFile(root.file("global_step_4/actor/weights.txt")) == "step 4");
    CHECK_FALSE(fs::exists(root.file(".global_step_4.old")));
    // And the next save of that step goes through.
    REQUIRE(manager.Save(4, ResumableSampler::State{7, 124}, false).ok());
    CHECK_FALSE(fs::exists(root.file(".global_step_4.tmp")));
  }
  SECTION("disable ignores an existing checkpoint") {
    REQUIRE(manager.Save(4, ResumableSampler::State{0, 4}, false).ok());
    auto found = manager.Find("disable", "");
    REQUIRE(found.ok());
    CHECK_FALSE(found->has_value());
  }
  SECTION("resume_path loads the named step, not the tracker's") {
    REQUIRE(manager.Save(4, ResumableSampler::State{1, 4}, false).ok());
    REQUIRE(manager.Save(8, ResumableSampler::State{2, 8}, false).ok());
    auto found = manager.Find("resume_path", root.file("global_step_4"));
    REQUIRE(found.ok());
    REQUIRE(found->has_value());
    CHECK((*found)->global_step == 4);
    CHECK((*found)->sampler_state == ResumableSampler::State{1, 4});
  }
  SECTION("resume_path with a trailing slash") {
    REQUIRE(manager.Save(4, ResumableSampler::State{1, 4}, false).ok());
    auto found = manager.Find("resume_path", root.file("global_step_4") + "/");
    REQUIRE(found.ok());
    REQUIRE(found->has_value());
    CHECK((*found)->global_step == 4);
  }
  SECTION("resume_path that is not a global_step_N directory") {
    auto found = manager.Find("resume_path", root.file("my_checkpoint"));
    REQUIRE_FALSE(found.ok());
    CHECK(found.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(found.status().message()),
               Catch::Contains("trainer.resume_from_path") && Catch::Contains(root.file("my_checkpoint")));
  }
  SECTION("resume_path to a step directory that does not exist") {
    auto found = manager.Find("resume_path", root.file("global_step_12"));
    REQUIRE_FALSE(found.ok());
    CHECK(found.status().code() == absl::StatusCode::kNotFound);
    CHECK_THAT(std::string(found.status().message()), Catch::Contains(root.file("global_step_12")));
  }
  SECTION("a tracker that is not a number") {
    WriteFile(manager.TrackerPath(), "twelve\n");
    auto found = manager.Find("auto", "");
    REQUIRE_FALSE(found.ok());
    CHECK(found.status().code() == absl::StatusCode::kDataLoss);
    CHECK_THAT(std::string(found.status().message()),
               Catch::Contains(manager.TrackerPath()) && Catch::Contains("twelve"));
  }
  SECTION("a tracker naming a step whose directory is missing") {
    REQUIRE(manager.Save(4, ResumableSampler::State{0, 4}, false).ok());
    WriteFile(manager.TrackerPath(), "9\n");
    auto found = manager.Find("auto", "");
    REQUIRE_FALSE(found.ok());
    CHECK(found.status().code() == absl::StatusCode::kNotFound);
    CHECK_THAT(std::string(found.status().message()),
               Catch::Contains(root.file("global_step_9")) && Catch::Contains(manager.TrackerPath()));
  }
  SECTION("a step directory without data.json") {
    REQUIRE(manager.Save(4, ResumableSampler::State{0, 4}, false).ok());
    fs::remove(root.file("global_step_4/data.json"));
    auto found = manager.Find("auto", "");
    REQUIRE_FALSE(found.ok());
    CHECK_THAT(std::string(found.status().message()), Catch::Contains(root.file("global_step_4/data.json")));
  }
  SECTION("a data.json with a broken sampler state") {
    REQUIRE(manager.Save(4, ResumableSampler::State{0, 4}, false).ok());
    WriteFile(root.file("global_step_4/data.json"), R"({"global_step": 4, "sampler": {"epoch": "x"}})");
    auto found = manager.Find("auto", "");
    REQUIRE_FALSE(found.ok());
    CHECK_THAT(std::string(found.status().message()),
               Catch::Contains(root.file("global_step_4/data.json")) && Catch::Contains("epoch"));
  }
}

TEST_CASE("max_to_keep rotates old checkpoints only after a newer one is complete", "[controller][checkpoint]") {
  TestDir root("ckpt_rotate");
  CheckpointManager manager(root.path(), FakeWorkers(), /*max_to_keep=*/2);
  auto steps_on_disk = [&] {
    std::set<std::string> names;
    for (const auto& entry : fs::directory_iterator(root.path())) {
      if (entry.is_directory()) names.insert(entry.path().filename().string());
    }
    return names;
  };
  REQUIRE(manager.Save(10, ResumableSampler::State{}, false).ok());
  REQUIRE(manager.Save(20, ResumableSampler::State{}, false).ok());
  CHECK(steps_on_disk() == std::set<std::string>{"global_step_10", "global_step_20"});
  REQUIRE(manager.Save(30, ResumableSampler::State{}, false).ok());
  CHECK(steps_on_disk() == std::set<std::string>{"global_step_20", "global_step_30"});

  // A save that fails deletes nothing: the newest good checkpoint and the one before it stay, the tracker too.
  CheckpointManager failing(root.path(), [](const std::string&, int64_t, bool) {
    return absl::ResourceExhaustedError("No space left on device");
  }, 2);
  REQUIRE_FALSE(failing.Save(40, ResumableSampler::State{}, false).ok());
  CHECK(steps_on_disk() == std::set<std::string>{"global_step_20", "global_step_30"});
  CHECK(ReadFile(manager.TrackerPath()) == "30\n");

  // After resuming from step 20 and saving step 25, the stale later step 30 of the abandoned run is not touched
  // (rotation only removes steps older than the one saved), and the one just saved always stays.
  CheckpointManager one(root.path(), FakeWorkers(), 1);
  REQUIRE(one.Save(25, ResumableSampler::State{}, false).ok());
  CHECK(steps_on_disk() == std::set<std::string>{"global_step_25", "global_step_30"});
  CHECK(ReadFile(one.TrackerPath()) == "25\n");
}

}  // namespace
}  // namespace verl
