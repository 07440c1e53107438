// A real full disk while a checkpoint is written: the checkpoint directory is a 2.5 MB tmpfs (mounted in a private
// user + mount namespace, so no root is needed where unprivileged namespaces are allowed), which holds the step-2
// checkpoint (1.7 MB) but not step 4's beside it. The job must fail naming the problem, leave step 2 complete and
// named by the tracker (rotation with max_actor_ckpt_to_keep=1 must not have deleted it), leave no partial step 4,
// and a rerun from a copy of that directory must resume from step 2 and finish. Skipped where no namespace can be
// made (WARN).

#include <sys/wait.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "tests/controller/test_util.h"

namespace verl {
namespace {

namespace fs = std::filesystem;
using testing::Bin;
using testing::ReadFile;
using testing::TestDir;

const std::string kConfig = std::string(VERL_SOURCE_DIR) + "/configs/quickstart.yaml";

std::string Overrides(const TestDir& dir, const std::string& ckpt, const std::string& out) {
  return " actor_rollout_ref.model.path=" + dir.file("model") + " data.train_files=" + dir.file("data/train.parquet") +
         " data.val_files=" + dir.file("data/test.parquet") + " trainer.default_local_dir=" + ckpt +
         " trainer.log_dir=" + out +
         " trainer.total_training_steps=6 trainer.save_freq=2 trainer.test_freq=1000 trainer.max_actor_ckpt_to_keep=1"
         " trainer.logger=[console,jsonl]";
}

TEST_CASE("a disk that fills up while a checkpoint is written leaves the previous one loadable",
          "[e2e][reliability]") {
  TestDir dir("full_disk");
  REQUIRE(testing::MakeTinyModel(dir.file("model"), dir.path()).empty());
  REQUIRE(testing::MakeDataset(dir.file("data"), dir.path(), 256, 16).empty());
  const std::string script = dir.Write(
      "in_namespace.sh",
      "set -u\n"
      "cd " + dir.path() + "\n"
      "mkdir -p ckpt\n"
      "mount -t tmpfs -o size=2560k tmpfs ckpt || exit 77\n"
      "OMP_NUM_THREADS=1 " + Bin("verl-controller") + " --config " + kConfig +
          Overrides(dir, dir.file("ckpt"), dir.file("out1")) + " > run1.log 2>&1\n"
      "echo $? > run1.rc\n"
      "df -k ckpt > df.txt; ls -laR ckpt > ls.txt\n"
      "cp -a ckpt ckpt-copy\n");
  const int status = std::system(("unshare --user --map-root-user --mount sh " + script + " > " +
                                  dir.file("unshare.log") + " 2>&1").c_str());
  const int rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (rc != 0) {
    WARN("skipped: no private mount namespace here (unshare exit " << rc << "): " << ReadFile(dir.file("unshare.log")));
    return;
  }
  const std::string log = ReadFile(dir.file("run1.log"));
  INFO("run 1:\n" << log.substr(log.size() > 3000 ? log.size() - 3000 : 0) << "\n" << ReadFile(dir.file("df.txt"))
                  << ReadFile(dir.file("ls.txt")));
  CHECK(ReadFile(dir.file("run1.rc")) == "1\n");
  CHECK_THAT(log, Catch::Contains("No space left on device"));
  CHECK_THAT(log, Catch::Contains("global_step_4"));
  const fs::path copy = dir.file("ckpt-copy");
  CHECK(ReadFile((copy / "latest_checkpointed_iteration.txt").string()) == "2\n");
  CHECK(fs::file_size(copy / "global_step_2/actor/model_world_size_1_rank_0.safetensors") > 500000);
  CHECK(fs::exists(copy / "global_step_2/data.json"));
  CHECK_FALSE(fs::exists(copy / "global_step_4"));
  CHECK_FALSE(fs::exists(copy / ".global_step_4.tmp"));

  // The same job again, with room: it resumes from step 2 and finishes.
  testing::RunResult again = testing::Run(
      {"/bin/sh", "-c",
       Bin("verl-controller") + " --config " + kConfig + Overrides(dir, copy.string(), dir.file("out2"))},
      dir.path(), 300);
  INFO("run 2:\n" << again.out << again.err);
  REQUIRE(again.exit_code == 0);
  CHECK_THAT(again.out + again.err, Catch::Contains("resumed from " + (copy / "global_step_2").string()));
  CHECK(ReadFile((copy / "latest_checkpointed_iteration.txt").string()) == "6\n");
  CHECK_FALSE(fs::exists(copy / "global_step_2"));  // rotated away once step 4 and 6 were complete
}

}  // namespace
}  // namespace verl
