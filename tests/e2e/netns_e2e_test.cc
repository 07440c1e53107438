// Multi-node without the machines: two verl-worker daemons, each in its own network namespace with its own address
// (10.77.1.2 and 10.77.2.2, joined by veth pairs to a router namespace where the controller runs), so no two
// processes share a loopback and every byte between the ranks crosses a (virtual) network. The namespaces are made
// inside an unprivileged user namespace (`unshare --user --map-root-user --net --mount`, iproute2's `ip netns`), so
// no root is needed where the kernel allows user namespaces; elsewhere the test is skipped with a warning.
// The data-parallel job over them must give the same metrics as the same job on loopback.

#include <sys/wait.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tests/e2e/e2e_util.h"

namespace verl {
namespace {

namespace fs = std::filesystem;
using testing::Bin;
using testing::ReadFile;
using testing::TestDir;

const std::string kConfig = std::string(VERL_SOURCE_DIR) + "/configs/quickstart.yaml";
constexpr int kSteps = 6;

std::string JobOverrides(const TestDir& dir, const std::string& name) {
  return " actor_rollout_ref.model.path=" + dir.file("model") + " data.train_files=" + dir.file("data/train.parquet") +
         " data.val_files=" + dir.file("data/test.parquet") + " trainer.log_dir=" + dir.file(name + "/logs") +
         " trainer.default_local_dir=" + dir.file(name + "/ckpt") + " trainer.total_training_steps=" +
         std::to_string(kSteps) +
         " trainer.test_freq=3 trainer.logger=[jsonl] trainer.nnodes=2"
         " actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=64 cluster.worker_start_timeout_s=60";
}

TEST_CASE("data parallel across two network namespaces equals the same job on loopback", "[e2e][dp][netns]") {
  TestDir dir("netns_e2e");
  REQUIRE(testing::MakeTinyModel(dir.file("model"), dir.path()).empty());
  REQUIRE(testing::MakeDataset(dir.file("data"), dir.path(), 256, 16).empty());

  // The network: router namespace (the user namespace's own, where the controller runs) with veth links to A and B.
  const std::string worker = Bin("verl-worker");
  const std::string script = dir.Write(
      "in_namespaces.sh",
      "set -eu\n"
      "cd " + dir.path() + "\n"
      "ip link set lo up\n"
      "mkdir -p /run/netns && mount -t tmpfs tmpfs /run/netns\n"
      "for n in 1 2; do\n"
      "  ip netns add node$n\n"
      "  ip link add r$n type veth peer name e$n\n"
      "  ip link set e$n netns node$n\n"
      "  ip addr add 10.77.$n.1/24 dev r$n && ip link set r$n up\n"
      "  ip netns exec node$n sh -c \"ip link set lo up && ip addr add 10.77.$n.2/24 dev e$n && "
      "ip link set e$n up && ip route add default via 10.77.$n.1\"\n"
      "done\n"
      "echo 1 > /proc/sys/net/ipv4/ip_forward\n"
      "set +e\n"
      "pids=\n"
      "for n in 1 2; do\n"
      "  ip netns exec node$n " + worker + " --listen 10.77.$n.2:0 --comm-host 10.77.$n.2 --worker-id node$n "
      "--ready-file node$n.ready > node$n.log 2>&1 &\n"
      "  pids=\"$pids $!\"\n"
      "done\n"
      "for i in $(seq 300); do [ -f node1.ready ] && [ -f node2.ready ] && break; sleep 0.1; done\n"
      "OMP_NUM_THREADS=1 " + Bin("verl-controller") + " --config " + kConfig + JobOverrides(dir, "netns") +
          " \"cluster.worker_addresses=[$(cat node1.ready),$(cat node2.ready)]\" > controller.log 2>&1\n"
      "echo $? > controller.rc\n"
      "kill $pids 2>/dev/null; wait\n");
  const int status = std::system(("unshare --user --map-root-user --net --mount --fork sh " + script + " > " +
                                  dir.file("unshare.log") + " 2>&1").c_str());
  if (!fs::exists(dir.file("controller.rc"))) {
    WARN("skipped: could not set up network namespaces here (exit " << (WIFEXITED(status) ? WEXITSTATUS(status) : -1)
                                                                     << "): " << ReadFile(dir.file("unshare.log")));
    return;
  }
  const std::string log = ReadFile(dir.file("controller.log"));
  INFO("controller:\n" << log.substr(log.size() > 3000 ? log.size() - 3000 : 0) << "\nnode1:\n"
                       << ReadFile(dir.file("node1.log")));
  REQUIRE(ReadFile(dir.file("controller.rc")) == "0\n");
  CHECK_THAT(ReadFile(dir.file("node1.ready")), Catch::StartsWith("10.77.1.2:"));
  CHECK_THAT(ReadFile(dir.file("node2.ready")), Catch::StartsWith("10.77.2.2:"));
  CHECK_THAT(log, Catch::Contains("data-parallel group of 2 ranks on 2 worker(s)"));
  CHECK_THAT(ReadFile(dir.file("node2.log")), Catch::Contains("joined the data-parallel group as rank 1 of 2"));

  // The same job on loopback.
  testing::HandStartedWorker a(dir, "lo-a"), b(dir, "lo-b");
  testing::RunResult r = testing::Run(
      {"/bin/sh", "-c",
       Bin("verl-controller") + " --config " + kConfig + JobOverrides(dir, "loopback") +
           " cluster.worker_addresses=[" + a.address + "," + b.address + "]"},
      dir.path(), 300);
  INFO(r.out + r.err);
  REQUIRE(r.exit_code == 0);

  const auto across = testing::ReadMetricsJsonl(dir.file("netns/logs/metrics.jsonl"));
  const auto loopback = testing::ReadMetricsJsonl(dir.file("loopback/logs/metrics.jsonl"));
  REQUIRE(across.size() == kSteps + 1);
  REQUIRE(loopback.size() == kSteps + 1);
  for (const auto& [step, m] : loopback) {
    INFO("step " << step);
    for (const char* key : {"critic/score/mean", "actor/pg_loss", "actor/grad_norm", "actor/kl_loss",
                            "val-core/verl_cpp/repeat_letter/reward/mean@1"}) {
      if (!m.contains(key)) continue;
      INFO(key);
      CHECK(across.at(step)[key].get<double>() == Approx(m[key].get<double>()).epsilon(1e-6).margin(1e-9));
    }
  }
}

}  // namespace
}  // namespace verl
