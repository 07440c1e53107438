#include "common/config/config_loader.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include <unistd.h>

#include "common/config/config_schema.h"
#include "common/config/config_tree.h"
#include "common/config/job_config.h"
#include "tests/test_dir.h"

namespace verl {
namespace {

namespace fs = std::filesystem;

using TempDir = testing::TestDir;

constexpr const char* kMinimal = R"(
data:
  train_files: /data/train.parquet
actor_rollout_ref:
  model:
    path: /models/qwen
)";

constexpr const char* kFull = R"(
# A GRPO job in verl's layout.
data:
  train_files: /data/gsm8k/train.parquet
  val_files: /data/gsm8k/test.parquet
  train_batch_size: 16
  max_prompt_length: 256
  max_response_length: 128
  filter_overlong_prompts: true
  truncation: left
actor_rollout_ref:
  model:
    path: /models/Qwen2.5-0.5B-Instruct
    dtype: float32
  actor:
    optim:
      lr: 1e-6
      betas: [0.9, 0.95]
    ppo_mini_batch_size: 8
    ppo_micro_batch_size_per_gpu: 4
    use_kl_loss: true
    kl_loss_coef: 0.001
    kl_loss_type: low_var_kl
    clip_ratio_high: 0.28
    loss_agg_mode: seq-mean-token-mean
  rollout:
    n: 4
    temperature: 0.7
    log_prob_micro_batch_size_per_gpu: 8
    val_kwargs:
      n: 2
      do_sample: true
      temperature: 0.6
  ref:
    log_prob_micro_batch_size_per_gpu: 8
algorithm:
  adv_estimator: grpo
  norm_adv_by_std_in_grpo: false
trainer:
  project_name: proj
  experiment_name: exp1
  logger: [console, jsonl, tensorboard]
  total_epochs: 2
  save_freq: 10
  test_freq: 5
  nnodes: 2
cluster:
  worker_addresses: ["10.0.0.1:7000", "10.0.0.2:7000"]
  rpc_timeout_s: 30
)";

bool Contains(const absl::Status& s, const std::string& text) {
  return std::string(s.message()).find(text) != std::string::npos;
}

#define CHECK_ERROR_CONTAINS(status, text)                              \
  do {                                                                  \
    const absl::Status st_ = (status);                                  \
    INFO("status: " << st_.ToString());                                 \
    CHECK_FALSE(st_.ok());                                              \
    CHECK(Contains(st_, text));                                         \
  } while (0)

TEST_CASE("every schema default parses and has its declared type", "[config]") {
  TempDir dir;
  const std::string path = dir.Write("min.yaml", kMinimal);
  auto loaded = LoadConfig(path, {});
  INFO(loaded.status().ToString());
  REQUIRE(loaded.ok());
  CHECK(loaded->tree.size() == ConfigSchema().size());
  for (const ConfigKeySpec& spec : ConfigSchema()) {
    CHECK(FindConfigKey(spec.key) == &spec);
    CHECK_FALSE(spec.doc.empty());
  }
}

TEST_CASE("a minimal config gets verl's defaults", "[config]") {
  TempDir dir;
  auto job = LoadJobConfig(dir.Write("min.yaml", kMinimal), {});
  INFO(job.status().ToString());
  REQUIRE(job.ok());
  const JobConfig& c = *job;
  CHECK(c.data.train_files == std::vector<std::string>{"/data/train.parquet"});
  CHECK(c.data.val_files.empty());
  CHECK(c.data.prompt_key == "prompt");
  CHECK(c.data.max_prompt_length == 512);
  CHECK(c.data.train_batch_size == 1024);
  CHECK_FALSE(c.data.val_batch_size.has_value());
  CHECK(c.data.truncation == "error");
  CHECK(c.actor_rollout_ref.model.dtype == "float32");
  CHECK(c.actor_rollout_ref.actor.optim.lr == 1e-6);
  CHECK(c.actor_rollout_ref.actor.optim.betas == std::vector<double>{0.9, 0.999});
  CHECK(c.actor_rollout_ref.actor.optim.eps == 1e-8);
  CHECK(c.actor_rollout_ref.actor.ppo_mini_batch_size == 256);
  CHECK_FALSE(c.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu.has_value());
  CHECK(c.actor_rollout_ref.actor.ClipRatioLow() == 0.2);
  CHECK(c.actor_rollout_ref.actor.ClipRatioHigh() == 0.2);
  CHECK(c.actor_rollout_ref.actor.loss_agg_mode == "token-mean");
  CHECK(c.actor_rollout_ref.actor.kl_loss_type == "low_var_kl");
  CHECK(c.actor_rollout_ref.rollout.n == 1);
  CHECK_FALSE(c.actor_rollout_ref.rollout.ignore_eos);
  CHECK(c.actor_rollout_ref.rollout.val_kwargs.temperature == 0.0);
  CHECK_FALSE(c.actor_rollout_ref.rollout.val_kwargs.do_sample);
  CHECK(c.algorithm.adv_estimator == "gae");
  CHECK(c.trainer.logger == std::vector<std::string>{"console", "jsonl"});
  CHECK(c.trainer.n_gpus_per_node == 1);
  CHECK(c.trainer.device == "cpu");
  CHECK(c.trainer.default_local_dir == "checkpoints/verl_examples/gsm8k");
  CHECK(c.trainer.log_dir == "outputs/verl_examples/gsm8k");
  CHECK(c.trainer.resume_mode == "auto");
  CHECK(c.cluster.worker_addresses.empty());
  CHECK(c.cluster.rpc_timeout_s == 600.0);

  // The struct defaults equal the schema defaults (apart from the required keys and the interpolated paths).
  JobConfig expected;
  expected.data.train_files = c.data.train_files;
  expected.actor_rollout_ref.model.path = c.actor_rollout_ref.model.path;
  expected.trainer.default_local_dir = c.trainer.default_local_dir;
  expected.trainer.log_dir = c.trainer.log_dir;
  expected.critic.model_path = c.critic.model_path;
  CHECK(c.critic.model_path == c.actor_rollout_ref.model.path);
  CHECK(c == expected);
}

TEST_CASE("a full config loads every section", "[config]") {
  TempDir dir;
  auto job = LoadJobConfig(dir.Write("full.yaml", kFull), {});
  INFO(job.status().ToString());
  REQUIRE(job.ok());
  const JobConfig& c = *job;
  CHECK(c.data.train_batch_size == 16);
  CHECK(c.data.filter_overlong_prompts);
  CHECK(c.data.truncation == "left");
  CHECK(c.actor_rollout_ref.model.dtype == "float32");
  CHECK(c.actor_rollout_ref.actor.optim.betas == std::vector<double>{0.9, 0.95});
  CHECK(c.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu == 4);
  CHECK(c.actor_rollout_ref.actor.ClipRatioLow() == 0.2);
  CHECK(c.actor_rollout_ref.actor.ClipRatioHigh() == 0.28);
  CHECK(c.actor_rollout_ref.rollout.n == 4);
  CHECK(c.actor_rollout_ref.rollout.val_kwargs.n == 2);
  CHECK(c.actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu == 8);
  CHECK(c.algorithm.adv_estimator == "grpo");
  CHECK_FALSE(c.algorithm.norm_adv_by_std_in_grpo);
  CHECK(c.trainer.logger == std::vector<std::string>{"console", "jsonl", "tensorboard"});
  CHECK(c.trainer.default_local_dir == "checkpoints/proj/exp1");
  CHECK(c.cluster.worker_addresses == std::vector<std::string>{"10.0.0.1:7000", "10.0.0.2:7000"});
  CHECK(c.cluster.rpc_timeout_s == 30.0);
}

TEST_CASE("command-line overrides", "[config]") {
  TempDir dir;
  const std::string path = dir.Write("full.yaml", kFull);

  SECTION("plain, +, ++, list, bool, null for an optional") {
    auto job = LoadJobConfig(path, {"data.train_batch_size=32", "+trainer.seed=7", "++data.seed=9",
                                    "trainer.logger=[console]", "data.shuffle=False",
                                    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=null",
                                    "actor_rollout_ref.actor.clip_ratio_low=0.1",
                                    "actor_rollout_ref.actor.optim.betas=[0.8,0.99]"});
    INFO(job.status().ToString());
    REQUIRE(job.ok());
    CHECK(job->data.train_batch_size == 32);
    CHECK(job->trainer.seed == 7);
    CHECK(job->data.seed == 9);
    CHECK(job->trainer.logger == std::vector<std::string>{"console"});
    CHECK_FALSE(job->data.shuffle);
    CHECK_FALSE(job->actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu.has_value());
    CHECK(job->actor_rollout_ref.actor.ClipRatioLow() == 0.1);
    CHECK(job->actor_rollout_ref.actor.optim.betas == std::vector<double>{0.8, 0.99});
  }

  SECTION("later overrides win, ~key restores the default") {
    auto job = LoadJobConfig(path, {"trainer.total_epochs=3", "trainer.total_epochs=4", "~trainer.save_freq",
                                    "~cluster"});
    INFO(job.status().ToString());
    REQUIRE(job.ok());
    CHECK(job->trainer.total_epochs == 4);
    CHECK(job->trainer.save_freq == -1);
    CHECK(job->cluster.worker_addresses.empty());
    CHECK(job->cluster.rpc_timeout_s == 600.0);
  }

  SECTION("a scalar for a string list is a one-element list") {
    auto job = LoadJobConfig(path, {"trainer.logger=jsonl"});
    REQUIRE(job.ok());
    CHECK(job->trainer.logger == std::vector<std::string>{"jsonl"});
  }

  SECTION("overrides without a file") {
    auto job = LoadJobConfig("", {"data.train_files=a.parquet", "actor_rollout_ref.model.path=m",
                                  "data.train_batch_size=256"});
    INFO(job.status().ToString());
    REQUIRE(job.ok());
    CHECK(job->data.train_files == std::vector<std::string>{"a.parquet"});
  }

  SECTION("data files: one path or a list, verl's quoted form included") {
    auto job = LoadJobConfig(path, {"data.train_files=['/d/gsm8k.parquet', '/d/math.parquet']",
                                    "data.val_files=[/d/gsm8k_test.parquet, /d/math_test.parquet]"});
    INFO(job.status().ToString());
    REQUIRE(job.ok());
    CHECK(job->data.train_files == std::vector<std::string>{"/d/gsm8k.parquet", "/d/math.parquet"});
    CHECK(job->data.val_files == std::vector<std::string>{"/d/gsm8k_test.parquet", "/d/math_test.parquet"});
    CHECK(LoadJobConfig(path, {"data.val_files=null"})->data.val_files.empty());
    CHECK(LoadJobConfig(path, {"data.val_files=''"})->data.val_files.empty());
    CHECK_ERROR_CONTAINS(LoadJobConfig(path, {"data.train_files=[a.parquet, '']"}).status(),
                         "data.train_files: entry 2 of 2 is an empty path");
    CHECK_ERROR_CONTAINS(LoadJobConfig(path, {"data.train_files=[]"}).status(), "data.train_files is required");
    CHECK_ERROR_CONTAINS(LoadJobConfig(path, {"data.train_files={a: b}"}).status(), "data.train_files: expected");
  }

  SECTION("malformed override") {
    CHECK_ERROR_CONTAINS(LoadJobConfig(path, {"data.train_batch_size"}).status(), "must have the form key=value");
  }

  SECTION("text after a value is an error, not dropped") {
    for (const char* o : {"trainer.logger=[console],jsonl", "trainer.logger=[console] [tensorboard]",
                          "trainer.experiment_name=\"a\" b", "trainer.experiment_name='a'b"}) {
      INFO(o);
      CHECK_ERROR_CONTAINS(LoadJobConfig(path, {o}).status(), "cannot parse the value");
    }
    auto job = LoadJobConfig(path, {"trainer.experiment_name=a, b [c]", "trainer.logger=[console, jsonl]  # c"});
    INFO(job.status().ToString());
    REQUIRE(job.ok());
    CHECK(job->trainer.experiment_name == "a, b [c]");
    CHECK(job->trainer.logger == std::vector<std::string>{"console", "jsonl"});
  }
}

// The overrides of verl's GRPO example (examples/grpo_trainer/run_qwen2-7b.sh): what carries over, and what is refused
// saying what to do instead.
TEST_CASE("verl's GRPO example script's overrides", "[config]") {
  const std::vector<std::string> example = {
      "algorithm.adv_estimator=grpo", "data.train_files=/d/gsm8k/train.parquet",
      "data.val_files=/d/gsm8k/test.parquet", "data.train_batch_size=1024", "data.max_prompt_length=512",
      "data.max_response_length=1024", "data.filter_overlong_prompts=True", "data.truncation='error'",
      "actor_rollout_ref.model.path=Qwen/Qwen2-7B-Instruct", "actor_rollout_ref.actor.optim.lr=1e-6",
      "actor_rollout_ref.model.use_remove_padding=True", "actor_rollout_ref.actor.ppo_mini_batch_size=256",
      "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=40", "actor_rollout_ref.actor.use_kl_loss=True",
      "actor_rollout_ref.actor.kl_loss_coef=0.001", "actor_rollout_ref.actor.kl_loss_type=low_var_kl",
      "actor_rollout_ref.actor.entropy_coeff=0", "actor_rollout_ref.model.enable_gradient_checkpointing=True",
      "actor_rollout_ref.actor.fsdp_config.param_offload=False",
      "actor_rollout_ref.actor.fsdp_config.optimizer_offload=False",
      "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=40",
      "actor_rollout_ref.rollout.gpu_memory_utilization=0.6", "actor_rollout_ref.rollout.n=5",
      "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=40", "algorithm.use_kl_in_reward=False",
      "trainer.critic_warmup=0", "trainer.project_name='verl_grpo_example_gsm8k'",
      "trainer.experiment_name='qwen2_7b_function_rm'", "trainer.n_gpus_per_node=8", "trainer.nnodes=1",
      "trainer.save_freq=20", "trainer.test_freq=5", "trainer.total_epochs=15"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> all = example;
    all.insert(all.end(), extra.begin(), extra.end());
    return LoadJobConfig("", all);
  };
  {
    auto job = with({"actor_rollout_ref.ref.fsdp_config.param_offload=False", "critic.model.fsdp_config.param_offload=false",
                     "trainer.logger=['console','tensorboard']"});
    INFO(job.status().ToString());
    REQUIRE(job.ok());
    CHECK(job->actor_rollout_ref.rollout.n == 5);
    CHECK_FALSE(job->actor_rollout_ref.ref.param_offload);
  }
  // verl's script offloads the reference model's parameters, as here; the actor's and the critic's offload is refused,
  // naming the alternative.
  {
    auto job = with({"actor_rollout_ref.ref.fsdp_config.param_offload=True", "trainer.logger=['console']"});
    INFO(job.status().ToString());
    REQUIRE(job.ok());
    CHECK(job->actor_rollout_ref.ref.param_offload);
  }
  CHECK_ERROR_CONTAINS(with({"actor_rollout_ref.actor.fsdp_config.param_offload=True"}).status(),
                       "actor_rollout_ref.actor.fsdp_config.optimizer_offload=true moves the AdamW state");
  CHECK_ERROR_CONTAINS(with({"critic.model.fsdp_config.param_offload=True"}).status(),
                       "critic.model.fsdp_config.param_offload=true is not available");
  CHECK_ERROR_CONTAINS(with({"trainer.logger=['console','wandb']"}).status(),
                       "verl's 'wandb' tracker is not built in here: use tensorboard");
  CHECK_ERROR_CONTAINS(with({"actor_rollout_ref.rollout.name=vllm"}).status(),
                       "the rollout engine here is built in: drop it");
}

TEST_CASE("unknown keys suggest the closest valid key", "[config]") {
  TempDir dir;
  SECTION("in the file, with file:line:col") {
    const std::string path = dir.Write("x.yaml", std::string(kMinimal) + R"(  actor:
    optim:
      lrr: 0.1
)");
    const absl::Status s = LoadJobConfig(path, {}).status();
    CHECK(s.code() == absl::StatusCode::kInvalidArgument);
    CHECK_ERROR_CONTAINS(s, "unknown key 'actor_rollout_ref.actor.optim.lrr' in " + path + ":9:7");
    CHECK_ERROR_CONTAINS(s, "did you mean 'actor_rollout_ref.actor.optim.lr'?");
  }
  SECTION("in an override") {
    const std::string path = dir.Write("min.yaml", kMinimal);
    const absl::Status s = LoadJobConfig(path, {"actor_rollout_ref.rollout.temprature=0.5"}).status();
    CHECK_ERROR_CONTAINS(s, "unknown key 'actor_rollout_ref.rollout.temprature' in command-line override "
                            "'actor_rollout_ref.rollout.temprature=0.5'; did you mean "
                            "'actor_rollout_ref.rollout.temperature'?");
  }
  SECTION("a right leaf name under the wrong section") {
    const std::string path = dir.Write("min.yaml", kMinimal);
    CHECK_ERROR_CONTAINS(LoadJobConfig(path, {"trainer.kl_loss_coef=0.1"}).status(),
                         "did you mean 'actor_rollout_ref.actor.kl_loss_coef'?");
    CHECK_ERROR_CONTAINS(LoadJobConfig(path, {"+data.max_prompt_len=10"}).status(),
                         "did you mean 'data.max_prompt_length'?");
  }
  SECTION("verl keys without a counterpart here say what to do") {
    const std::string path = dir.Write("min.yaml", kMinimal);
    absl::Status s = LoadJobConfig(path, {"actor_rollout_ref.actor.ppo_micro_batch_size=4"}).status();
    CHECK_ERROR_CONTAINS(s, "set 'actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu' (per GPU) instead");
    CHECK_THAT(std::string(s.message()), !Catch::Contains("ppo_mini_batch_size"));
    CHECK_ERROR_CONTAINS(LoadJobConfig(path, {"critic.ppo_micro_batch_size=4"}).status(),
                         "set 'critic.ppo_micro_batch_size_per_gpu'");
    CHECK_ERROR_CONTAINS(LoadJobConfig(path, {"actor_rollout_ref.ref.log_prob_micro_batch_size=4"}).status(),
                         "set 'actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu'");
    CHECK_ERROR_CONTAINS(LoadJobConfig(path, {"data.dataloader_num_workers=8"}).status(),
                         "the controller reads and tokenizes the prompts itself: drop it");
    CHECK_ERROR_CONTAINS(LoadJobConfig(path, {"data.return_raw_chat=True"}).status(), "Python data loading");
    CHECK_ERROR_CONTAINS(LoadJobConfig(path, {"data.reward_fn_key=data_source"}).status(),
                         "chosen by each row's data_source column");
    s = LoadJobConfig(path, {"actor_rollout_ref.rollout.name=vllm"}).status();
    CHECK_ERROR_CONTAINS(s, "the rollout engine here is built in: drop it");
    CHECK_THAT(std::string(s.message()), !Catch::Contains("algorithm.lam"));
    // Sub-keys of engine_kwargs as well (verl's multi-modal scripts set engine_kwargs.vllm.*).
    CHECK_ERROR_CONTAINS(
        LoadJobConfig(path, {"actor_rollout_ref.rollout.engine_kwargs.vllm.disable_mm_preprocessor_cache=True"})
            .status(),
        "the rollout engine here is built in: drop it");
    CHECK_ERROR_CONTAINS(LoadJobConfig(path, {"actor_rollout_ref.model.trust_remote_code=True"}).status(),
                         "read here without Python code: drop it");
    CHECK_ERROR_CONTAINS(LoadJobConfig(path, {"critic.model.trust_remote_code=True"}).status(),
                         "read here without Python code: drop it");
    // Model-based rewards and Python reward functions, instead of suggestions by the last component alone
    // (reward_model.model.path -> critic.model.path, custom_reward_function.name -> algorithm.lam).
    for (const std::string o : {"reward_model.enable=True", "reward_model.model.path=/tmp/rm",
                                "custom_reward_function.name=compute_score", "+reward_model.reward_kwargs.x=1"}) {
      s = LoadJobConfig(path, {o}).status();
      INFO(o);
      CHECK_ERROR_CONTAINS(s, "rewards come from the built-in rule scorer of each row's data_source");
      CHECK_FALSE(Contains(s, "did you mean"));
    }
    // Keys of verl's other backends and features that its example scripts set most (counted over examples/*.sh at
    // b178a3cd), each with what to do rather than an unrelated suggestion (megatron.param_offload ->
    // fsdp_config.param_offload).
    for (const auto& [o, advice] : std::vector<std::pair<std::string, std::string>>{
             {"actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2", "verl's Megatron-LM backend"},
             {"actor_rollout_ref.ref.megatron.param_offload=True", "verl's Megatron-LM backend"},
             {"+actor_rollout_ref.actor.megatron.override_transformer_config.recompute_num_layers=1",
              "with actor_rollout_ref.model.recompute_num_layers=N"},
             {"+actor_rollout_ref.actor.megatron.override_transformer_config.recompute_method=uniform",
              "narrowed to the first N layers"},
             {"+critic.megatron.override_transformer_config.recompute_granularity=full",
              "critic.model.recompute_num_layers=N"},
             {"actor_rollout_ref.actor.megatron.override_transformer_config.attention_backend=flash",
              "verl's Megatron-LM backend; the trainer here is built in"},
             {"actor_rollout_ref.actor.optim.override_optimizer_config.optimizer_cpu_offload=True",
              "verl's Megatron-LM backend"},
             {"critic.strategy=fsdp2", "verl's choice of training backend"},
             {"actor_rollout_ref.actor.ulysses_sequence_parallel_size=2", "Ulysses sequence parallelism is not built"},
             {"actor_rollout_ref.ref.use_torch_compile=False", "nothing is compiled at run time here"},
             {"actor_rollout_ref.actor.fsdp_config.fsdp_size=-1", "its whole data-parallel group (verl's -1)"},
             {"critic.model.fsdp_config.fsdp_size=-1", "its whole data-parallel group (verl's -1)"},
             {"actor_rollout_ref.actor.profiler.enable=True", "tools/bench's --profile"},
             {"global_profiler.tool=nsys", "tools/bench's --profile"},
             {"actor_rollout_ref.actor.optim.clip_grad=1.0", "set 'actor_rollout_ref.actor.grad_clip' instead"},
             {"critic.optim.clip_grad=1.0", "set 'critic.grad_clip' instead"},
             {"actor_rollout_ref.model.use_fused_kernels=True", "without [tokens, vocab] logits"},
             {"actor_rollout_ref.model.use_shm=True", "the model directory is read here directly"},
             {"actor_rollout_ref.model.lora_rank=32", "LoRA is not built in"},
             {"critic.model.target_modules=all-linear", "LoRA is not built in"},
             {"actor_rollout_ref.model.enable_activation_offload=True", "activation offload is not built in"},
             {"actor_rollout_ref.rollout.multi_turn.enable=True", "multi-turn rollouts with tool calls"},
             {"actor_rollout_ref.rollout.max_model_len=1536", "the rollout engine here is built in"},
             {"actor_rollout_ref.rollout.layered_summon=True", "the rollout engine here is built in"},
             {"trainer.use_legacy_worker_impl=auto", "verl's Python worker implementations"},
             {"actor_rollout_ref.actor.checkpoint.save_contents=['model','hf_model']", "the last one also"},
             {"model.partial_pretrain=Qwen/Qwen2.5-0.5B-Instruct", "verl's SFT trainer"},
             {"data.prompt_dict_keys=['question']", "verl's SFT trainer"},
             {"optim.lr=1e-4", "verl's SFT trainer"},
             {"actor_rollout_ref.ref.fsdp_config.forward_prefetch=True", "a setting of verl's FSDP wrapper"},
             {"actor_rollout_ref.actor.entropy_checkpointing=True", "compute log-probs and entropy in chunks"},
             {"actor_rollout_ref.model.lora.rank=256", "LoRA is not built in"},
             {"actor_rollout_ref.nccl_timeout=1200", "set 'cluster.comm_timeout_s' instead"},
             {"trainer.balance_batch=True", "split evenly over the ranks"},
             {"data.sampler.class_name=RandomCurriculumSampler", "Python dataset and sampler classes"},
             {"rollout.temperature=1.0", "verl's generation script"},
             {"data.n_samples=5", "verl's generation script"},
             {"actor_rollout_ref.rollout.over_sample_rate=0.1", "the rollout engine here is built in"},
             {"actor_rollout_ref.actor.router_replay.mode=R2", "MoE models are not supported here"}}) {
      s = LoadJobConfig(path, {o}).status();
      INFO(o << ": " << s.ToString());
      CHECK_ERROR_CONTAINS(s, advice);
      CHECK(Contains(s, ": drop it") != Contains(s, "instead"));
      CHECK_FALSE(Contains(s, "did you mean"));
    }
  }
  SECTION("a short last component needs a near match to be suggested") {
    const std::string path = dir.Write("min.yaml", kMinimal);
    for (const std::string o : {"data.custom_cls.name=X", "global_profiler.steps=[1]", "trainer.foo.mode=x"}) {
      INFO(o);
      CHECK_FALSE(Contains(LoadJobConfig(path, {o}).status(), "did you mean"));
    }
    CHECK_ERROR_CONTAINS(LoadJobConfig(path, {"algorithm.lamm=0.9"}).status(), "did you mean 'algorithm.lam'?");
    CHECK_ERROR_CONTAINS(LoadJobConfig(path, {"trainer.lr=3"}).status(), "did you mean 'critic.optim.lr'?");
  }
  SECTION("nothing close: no suggestion") {
    const std::string path = dir.Write("min.yaml", kMinimal);
    const absl::Status s = LoadJobConfig(path, {"completely.unrelated_thing=1"}).status();
    CHECK_ERROR_CONTAINS(s, "unknown key 'completely.unrelated_thing'");
    CHECK_FALSE(Contains(s, "did you mean"));
  }
  SECTION("every unknown key is reported") {
    const std::string path = dir.Write("x.yaml", std::string(kMinimal) + "trainer:\n  foo: 1\n  bar: 2\n");
    const absl::Status s = LoadJobConfig(path, {}).status();
    CHECK_ERROR_CONTAINS(s, "'trainer.foo'");
    CHECK_ERROR_CONTAINS(s, "'trainer.bar'");
  }
  SECTION("a section given a scalar") {
    const std::string path = dir.Write("x.yaml", std::string(kMinimal) + "algorithm: grpo\n");
    CHECK_ERROR_CONTAINS(LoadJobConfig(path, {}).status(), "'algorithm' in " + path + ":7:1 is a section");
  }
}

TEST_CASE("type mismatches name the key, the type and the value", "[config]") {
  TempDir dir;
  const std::string path = dir.Write("min.yaml", kMinimal);
  CHECK_ERROR_CONTAINS(LoadJobConfig(path, {"data.train_batch_size=abc"}).status(),
                       "data.train_batch_size: expected int, got 'abc' (command-line override "
                       "'data.train_batch_size=abc')");
  CHECK_ERROR_CONTAINS(LoadJobConfig(path, {"data.train_batch_size=1.5"}).status(), "expected int, got '1.5'");
  CHECK_ERROR_CONTAINS(LoadJobConfig(path, {"data.shuffle=maybe"}).status(),
                       "data.shuffle: expected bool, got 'maybe'");
  CHECK_ERROR_CONTAINS(LoadJobConfig(path, {"actor_rollout_ref.actor.optim.lr=fast"}).status(),
                       "actor_rollout_ref.actor.optim.lr: expected double, got 'fast'");
  CHECK_ERROR_CONTAINS(LoadJobConfig(path, {"data.seed=null"}).status(), "data.seed: expected int, got null");
  CHECK_ERROR_CONTAINS(LoadJobConfig(path, {"data.prompt_key=[a,b]"}).status(),
                       "data.prompt_key: expected string, got a sequence [a, b]");
  CHECK_ERROR_CONTAINS(LoadJobConfig(path, {"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=x"}).status(),
                       "expected optional int (null allowed), got 'x'");
  const std::string bad = dir.Write("bad.yaml", std::string(kMinimal) + "trainer:\n  total_epochs: [1, 2]\n");
  CHECK_ERROR_CONTAINS(LoadJobConfig(bad, {}).status(),
                       "trainer.total_epochs: expected int, got a sequence [1, 2] (" + bad + ":8:17)");
}

TEST_CASE("enums are enforced", "[config]") {
  TempDir dir;
  const std::string path = dir.Write("min.yaml", kMinimal);
  CHECK_ERROR_CONTAINS(LoadJobConfig(path, {"algorithm.adv_estimator=grpoo"}).status(),
                       "algorithm.adv_estimator: 'grpoo' is not one of gae, grpo, reinforce_plus_plus, rloo, remax, "
                       "grpo_passk, reinforce_plus_plus_baseline");
  CHECK_ERROR_CONTAINS(LoadJobConfig(path, {"algorithm.adv_estimator=grpoo"}).status(), "did you mean 'grpo'?");
  CHECK_ERROR_CONTAINS(LoadJobConfig(path, {"trainer.logger=[console,wandb]"}).status(),
                       "trainer.logger: 'wandb' is not one of console, jsonl, file, tensorboard");
  CHECK_ERROR_CONTAINS(LoadJobConfig(path, {"trainer.device=gpu"}).status(), "trainer.device: 'gpu'");
  CHECK_ERROR_CONTAINS(LoadJobConfig(path, {"actor_rollout_ref.actor.loss_agg_mode=mean"}).status(),
                       "is not one of token-mean");
  CHECK_ERROR_CONTAINS(LoadJobConfig(path, {"actor_rollout_ref.actor.kl_loss_type=lowvar_kl"}).status(),
                       "did you mean 'low_var_kl'?");
  CHECK(LoadJobConfig(path, {"actor_rollout_ref.actor.kl_loss_type=k3"}).ok());
}

TEST_CASE("combination rules", "[config]") {
  TempDir dir;
  const std::string path = dir.Write("min.yaml", kMinimal);
  auto error = [&](std::vector<std::string> overrides) { return LoadJobConfig(path, overrides).status(); };

  CHECK_ERROR_CONTAINS(error({"data.train_batch_size=100", "actor_rollout_ref.actor.ppo_mini_batch_size=30"}),
                       "data.train_batch_size (100) must be divisible by actor_rollout_ref.actor.ppo_mini_batch_size "
                       "(30)");
  CHECK_ERROR_CONTAINS(error({"data.train_batch_size=8", "actor_rollout_ref.actor.ppo_mini_batch_size=16"}),
                       "actor_rollout_ref.actor.ppo_mini_batch_size (16) must be <= data.train_batch_size (8)");
  CHECK_ERROR_CONTAINS(error({"actor_rollout_ref.actor.ppo_mini_batch_size=0"}),
                       "actor_rollout_ref.actor.ppo_mini_batch_size must be > 0");
  CHECK_ERROR_CONTAINS(error({"data.train_batch_size=0"}), "data.train_batch_size must be > 0");
  CHECK_ERROR_CONTAINS(error({"data.train_batch_size=8", "actor_rollout_ref.actor.ppo_mini_batch_size=2",
                              "actor_rollout_ref.rollout.n=3",
                              "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4"}),
                       "(6) must be divisible by actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu (4)");
  CHECK(LoadJobConfig(path, {"data.train_batch_size=8", "actor_rollout_ref.actor.ppo_mini_batch_size=2",
                             "actor_rollout_ref.rollout.n=2", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
                             "algorithm.adv_estimator=grpo"})
            .ok());
  CHECK_ERROR_CONTAINS(error({"algorithm.adv_estimator=grpo"}), "GRPO needs actor_rollout_ref.rollout.n > 1");
  CHECK_ERROR_CONTAINS(error({"algorithm.adv_estimator=rloo"}), "RLOO needs actor_rollout_ref.rollout.n > 1");
  CHECK_ERROR_CONTAINS(error({"algorithm.adv_estimator=grpo_vectorized"}),
                       "GRPO needs actor_rollout_ref.rollout.n > 1 (algorithm.adv_estimator=grpo_vectorized");
  CHECK_ERROR_CONTAINS(error({"algorithm.adv_estimator=rloo_vectorized"}), "RLOO needs actor_rollout_ref.rollout.n > 1");
  CHECK_ERROR_CONTAINS(error({"actor_rollout_ref.rollout.n=0"}), "actor_rollout_ref.rollout.n must be >= 1, got 0");
  CHECK_ERROR_CONTAINS(error({"actor_rollout_ref.actor.clip_ratio=0"}), "actor_rollout_ref.actor.clip_ratio must be > 0");
  CHECK_ERROR_CONTAINS(error({"actor_rollout_ref.actor.clip_ratio_high=-0.1"}),
                       "actor_rollout_ref.actor.clip_ratio_high must be > 0 or null");
  CHECK_ERROR_CONTAINS(error({"actor_rollout_ref.rollout.temperature=0"}),
                       "actor_rollout_ref.rollout.temperature must be > 0 when actor_rollout_ref.rollout.do_sample is "
                       "true");
  // Greedy rollouts too: the trainer's log-probs divide the logits by the rollout's temperature.
  CHECK_ERROR_CONTAINS(error({"actor_rollout_ref.rollout.temperature=0", "actor_rollout_ref.rollout.do_sample=false"}),
                       "actor_rollout_ref.rollout.temperature must be > 0, got 0.0: the trainer divides the logits "
                       "by it");
  CHECK(LoadJobConfig(path, {"actor_rollout_ref.rollout.do_sample=false"}).ok());
  CHECK(LoadJobConfig(path, {"actor_rollout_ref.rollout.val_kwargs.temperature=0"}).ok());
  {
    auto eos = LoadJobConfig(path, {"actor_rollout_ref.rollout.ignore_eos=true"});
    REQUIRE(eos.ok());
    CHECK(eos->actor_rollout_ref.rollout.ignore_eos);
  }
  CHECK_ERROR_CONTAINS(error({"actor_rollout_ref.rollout.top_p=0"}), "actor_rollout_ref.rollout.top_p must lie in (0, 1]");
  CHECK_ERROR_CONTAINS(error({"actor_rollout_ref.rollout.top_p=1.5"}), "top_p must lie in (0, 1], got 1.5");
  CHECK_ERROR_CONTAINS(error({"trainer.save_freq=0"}), "trainer.save_freq must be -1 (disabled) or > 0, got 0");
  CHECK_ERROR_CONTAINS(error({"trainer.test_freq=-2"}), "trainer.test_freq must be -1 (disabled) or > 0, got -2");
  CHECK_ERROR_CONTAINS(error({"trainer.total_epochs=0"}), "trainer.total_epochs must be > 0");
  CHECK_ERROR_CONTAINS(error({"actor_rollout_ref.actor.optim.betas=[0.9]"}), "betas must have two values");
  CHECK_ERROR_CONTAINS(error({"trainer.resume_mode=resume_path"}), "trainer.resume_from_path must be set");

  SECTION("required keys") {
    const std::string empty = dir.Write("empty.yaml", "");
    const absl::Status s = LoadJobConfig(empty, {}).status();
    CHECK_ERROR_CONTAINS(s, "data.train_files is required");
    CHECK_ERROR_CONTAINS(s, "actor_rollout_ref.model.path is required");
  }
  SECTION("every violated rule is listed") {
    const absl::Status s = error({"trainer.save_freq=0", "trainer.total_epochs=0"});
    CHECK_ERROR_CONTAINS(s, "trainer.save_freq");
    CHECK_ERROR_CONTAINS(s, "trainer.total_epochs");
  }
  SECTION("the rank count divides the mini-batch") {
    CHECK_ERROR_CONTAINS(error({"trainer.n_gpus_per_node=3"}), "must be divisible by the number of ranks");
  }
  SECTION("each rank gets whole prompts") {
    const absl::Status s = error({"data.train_batch_size=6", "actor_rollout_ref.actor.ppo_mini_batch_size=2",
                                  "trainer.n_gpus_per_node=4"});
    CHECK_ERROR_CONTAINS(s, "data.train_batch_size (6) must be divisible by the number of ranks");
  }
  SECTION("split placement: the batch is split over the training ranks, and some must train") {
    // 3 ranks, one of them the rollout's: the 2 training ranks divide the batch.
    CHECK(error({"trainer.n_gpus_per_node=3", "resource_pool.rollout_ranks=1"}).ok());
    CHECK_ERROR_CONTAINS(error({"trainer.n_gpus_per_node=4", "resource_pool.rollout_ranks=1"}),
                         "must be divisible by the number of training ranks trainer.nnodes * trainer.n_gpus_per_node "
                         "- resource_pool.rollout_ranks - resource_pool.critic_ranks (3)");
    CHECK_ERROR_CONTAINS(error({"trainer.n_gpus_per_node=2", "resource_pool.critic_ranks=1",
                                "algorithm.adv_estimator=grpo"}),
                         "resource_pool.critic_ranks (1) places a critic, but there is none");
    CHECK_ERROR_CONTAINS(error({"trainer.n_gpus_per_node=3", "resource_pool.critic_ranks=1",
                                "algorithm.adv_estimator=gae"}),
                         "resource_pool.critic_ranks (1) must equal the actor's ranks (2");
    CHECK_ERROR_CONTAINS(error({"trainer.n_gpus_per_node=2", "resource_pool.rollout_ranks=2"}),
                         "resource_pool.rollout_ranks (2) must be >= 0 and leave at least one of the 2 ranks");
    CHECK_ERROR_CONTAINS(error({"resource_pool.rollout_ranks=-1"}), "resource_pool.rollout_ranks (-1)");
    CHECK_ERROR_CONTAINS(error({"actor_rollout_ref.rollout.update_weights_bucket_megabytes=0"}),
                         "update_weights_bucket_megabytes must be > 0");
  }
  SECTION("rollout engine limits and token budgets (use_dynamic_bsz)") {
    CHECK_ERROR_CONTAINS(error({"actor_rollout_ref.rollout.max_num_seqs=0"}), "max_num_seqs must be > 0, got 0");
    CHECK_ERROR_CONTAINS(error({"actor_rollout_ref.rollout.max_num_batched_tokens=-1"}),
                         "max_num_batched_tokens must be > 0, got -1");
    CHECK_ERROR_CONTAINS(error({"actor_rollout_ref.rollout.gpu_memory_utilization=1.5"}),
                         "gpu_memory_utilization must be in (0, 1], got 1.5");
    // Budgets only matter when dynamic batching is on; the log-prob and critic switches follow the actor's.
    CHECK(error({"actor_rollout_ref.actor.ppo_max_token_len_per_gpu=10"}).ok());
    CHECK_ERROR_CONTAINS(error({"actor_rollout_ref.actor.use_dynamic_bsz=true", "data.max_prompt_length=100",
                                "data.max_response_length=28",
                                "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=127"}),
                         "actor_rollout_ref.actor.ppo_max_token_len_per_gpu (127) must be at least "
                         "data.max_prompt_length + data.max_response_length (100 + 28 = 128)");
    CHECK_ERROR_CONTAINS(error({"actor_rollout_ref.actor.use_dynamic_bsz=true", "data.max_prompt_length=100",
                                "data.max_response_length=28",
                                "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=128",
                                "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu=64"}),
                         "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu (64)");
    CHECK(error({"actor_rollout_ref.actor.use_dynamic_bsz=true", "data.max_prompt_length=100",
                 "data.max_response_length=28", "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=128"})
              .ok());
    // With dynamic batching the micro-batch size need not divide the mini-batch.
    CHECK(error({"actor_rollout_ref.actor.use_dynamic_bsz=true",
                 "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=7"})
              .ok());
  }
  SECTION("one worker address per node") {
    CHECK_ERROR_CONTAINS(error({"cluster.worker_addresses=[a:1,b:2,c:3]", "trainer.nnodes=2"}),
                         "cluster.worker_addresses lists 3 worker(s) but trainer.nnodes is 2");
  }
}

TEST_CASE("interpolation", "[config]") {
  TempDir dir;
  const std::string ok_path = dir.Write("y.yaml", R"(
data:
  train_files: /data/train.parquet
  train_batch_size: 64
  val_batch_size: ${data.train_batch_size}
actor_rollout_ref:
  model:
    path: /models/${trainer.project_name}
  actor:
    ppo_mini_batch_size: 16
trainer:
  project_name: p
  experiment_name: ${trainer.project_name}-run
  default_local_dir: /ckpt/${trainer.experiment_name}
  rollout_data_dir: \${literal}
)");
  auto job = LoadJobConfig(ok_path, {});
  INFO(job.status().ToString());
  REQUIRE(job.ok());
  CHECK(job->trainer.experiment_name == "p-run");
  CHECK(job->trainer.default_local_dir == "/ckpt/p-run");
  CHECK(job->trainer.log_dir == "outputs/p/p-run");
  CHECK(job->actor_rollout_ref.model.path == "/models/p");
  CHECK(job->data.val_batch_size == 64);
  CHECK(job->trainer.rollout_data_dir == "${literal}");

  SECTION("an override changes what interpolates it") {
    auto j2 = LoadJobConfig(ok_path, {"trainer.project_name=q"});
    REQUIRE(j2.ok());
    CHECK(j2->trainer.default_local_dir == "/ckpt/q-run");
  }
  SECTION("unknown reference") {
    CHECK_ERROR_CONTAINS(LoadJobConfig(ok_path, {"trainer.log_dir=out/${trainer.project_nam}"}).status(),
                         "trainer.log_dir: interpolation '${trainer.project_nam}' refers to an unknown key");
  }
  SECTION("cycle") {
    CHECK_ERROR_CONTAINS(LoadJobConfig(ok_path, {"trainer.project_name=${trainer.experiment_name}"}).status(),
                         "interpolation cycle");
  }
  SECTION("duplicate keys in one file") {
    const std::string dup = dir.Write("dup.yaml", std::string(kMinimal) + "trainer:\n  seed: 1\n  seed: 2\n");
    CHECK_ERROR_CONTAINS(LoadJobConfig(dup, {}).status(), "duplicate key 'trainer.seed' in " + dup + ":9:3");
  }
}

TEST_CASE("file errors", "[config]") {
  TempDir dir;
  SECTION("missing file") {
    const std::string missing = dir.file("nope.yaml");
    const absl::Status s = LoadJobConfig(missing, {}).status();
    CHECK(s.code() == absl::StatusCode::kNotFound);
    CHECK_ERROR_CONTAINS(s, missing);
  }
  SECTION("YAML syntax error names file:line:col") {
    const std::string path = dir.Write("bad.yaml", "data:\n  train_files: [a, b\n  shuffle: true\n");
    const absl::Status s = LoadJobConfig(path, {}).status();
    CHECK(s.code() == absl::StatusCode::kInvalidArgument);
    CHECK_ERROR_CONTAINS(s, path + ":");
    CHECK_ERROR_CONTAINS(s, "YAML syntax error");
  }
  SECTION("YAML syntax error on a given line") {
    const std::string path = dir.Write("bad2.yaml", "data:\n  train_files: x\n   bad indent: [\n");
    const absl::Status s = LoadJobConfig(path, {}).status();
    CHECK_ERROR_CONTAINS(s, path + ":3:");
  }
  SECTION("top level not a map") {
    const std::string path = dir.Write("list.yaml", "- a\n- b\n");
    CHECK_ERROR_CONTAINS(LoadJobConfig(path, {}).status(), "the top level must be a mapping");
  }
  SECTION("a directory") {
    CHECK_ERROR_CONTAINS(LoadJobConfig(dir.file(""), {}).status(), "is a directory");
  }
}

TEST_CASE("--print-config output loads back to the same config", "[config]") {
  TempDir dir;
  const std::string path = dir.Write("full.yaml", kFull);
  const std::vector<std::string> overrides = {
      "actor_rollout_ref.actor.optim.lr=3e-7", "trainer.rollout_data_dir=\"odd: value # x\"", "data.seed=-5",
      "actor_rollout_ref.actor.entropy_coeff=0.1", "trainer.project_name=\\${not_a_key}"};
  auto first = LoadConfig(path, overrides);
  INFO(first.status().ToString());
  REQUIRE(first.ok());
  auto yaml = ResolvedConfigYaml(path, overrides);
  REQUIRE(yaml.ok());
  INFO(*yaml);
  CHECK(yaml->find("actor_rollout_ref:\n  model:\n    path: /models/Qwen2.5-0.5B-Instruct\n") != std::string::npos);
  CHECK(yaml->find("    ppo_micro_batch_size_per_gpu: 4\n") != std::string::npos);
  CHECK(yaml->find("  logger: [console, jsonl, tensorboard]\n") != std::string::npos);
  CHECK(yaml->find("  val_batch_size: null\n") != std::string::npos);
  CHECK(yaml->find("      lr: 3.0e-07\n") != std::string::npos);
  // Every key is printed.
  for (const ConfigKeySpec& spec : ConfigSchema()) {
    const std::string leaf(spec.key.substr(spec.key.rfind('.') + 1));
    CHECK(yaml->find(leaf + ":") != std::string::npos);
  }
  const std::string printed = dir.Write("printed.yaml", *yaml);
  auto second = LoadConfig(printed, {});
  INFO(second.status().ToString());
  REQUIRE(second.ok());
  CHECK(second->tree == first->tree);
  CHECK(second->job == first->job);
  CHECK(second->job.trainer.rollout_data_dir == "odd: value # x");
  CHECK(second->job.trainer.project_name == "${not_a_key}");
  auto value = GetValueAsString(second->tree, "actor_rollout_ref.actor.optim.betas");
  REQUIRE(value.ok());
  CHECK(*value == "[0.9, 0.95]");
  CHECK(GetValueAsString(second->tree, "no.such.key").status().code() == absl::StatusCode::kNotFound);
}

TEST_CASE("LoadConfigFromString names its source", "[config]") {
  auto r = LoadConfigFromString("data:\n  train_filez: x\n", "<submitted job>", {});
  CHECK_ERROR_CONTAINS(r.status(), "unknown key 'data.train_filez' in <submitted job>:2:3; did you mean "
                                   "'data.train_files'?");
}

TEST_CASE("FormatConfigValue", "[config]") {
  CHECK(FormatConfigValue(ConfigValue(1e-6)) == "1.0e-06");
  CHECK(FormatConfigValue(ConfigValue(0.2)) == "0.2");
  CHECK(FormatConfigValue(ConfigValue(600.0)) == "600.0");
  CHECK(FormatConfigValue(ConfigValue(int64_t{-1})) == "-1");
  CHECK(FormatConfigValue(ConfigValue(std::monostate{})) == "null");
  CHECK(FormatConfigValue(ConfigValue(std::string())) == "\"\"");
  CHECK(FormatConfigValue(ConfigValue(std::string("true"))) == "\"true\"");
  CHECK(FormatConfigValue(ConfigValue(std::string("token-mean"))) == "token-mean");
  CHECK(FormatConfigValue(ConfigValue(std::vector<std::string>{"a", "b c"})) == "[a, \"b c\"]");
}

}  // namespace
}  // namespace verl

namespace verl {
namespace {

TEST_CASE("each section's keys are contiguous in the schema (--print-config writes each section once)", "[config]") {
  std::set<std::string> closed;   // sections already left
  std::vector<std::string> open;  // the sections of the previous key, outermost first
  for (const ConfigKeySpec& spec : ConfigSchema()) {
    const std::string key(spec.key);
    std::vector<std::string> sections;
    for (size_t dot = key.find('.'); dot != std::string::npos; dot = key.find('.', dot + 1)) {
      sections.push_back(key.substr(0, dot));
    }
    for (const std::string& o : open) {
      if (std::find(sections.begin(), sections.end(), o) == sections.end()) closed.insert(o);
    }
    for (const std::string& sec : sections) {
      INFO(key << " reopens " << sec);
      CHECK(closed.count(sec) == 0);
    }
    open = sections;
  }
}

TEST_CASE("docs/config.md lists every schema key", "[config]") {
  std::ifstream in(std::string(VERL_SOURCE_DIR) + "/docs/config.md");
  REQUIRE(in.good());
  std::stringstream text;
  text << in.rdbuf();
  for (const ConfigKeySpec& spec : ConfigSchema()) {
    INFO(spec.key);
    CHECK(text.str().find("| `" + std::string(spec.key) + "` |") != std::string::npos);
  }
}

}  // namespace
}  // namespace verl

namespace verl {
namespace {

TEST_CASE("the critic, policy-loss and KL-controller keys load and are checked", "[config]") {
  TempDir dir;
  const std::string path = dir.Write("min.yaml", kMinimal);
  SECTION("gae uses a critic whose defaults follow the actor") {
    auto job = LoadJobConfig(path, {"algorithm.adv_estimator=gae", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
                                    "data.train_batch_size=8", "actor_rollout_ref.actor.policy_loss.loss_mode=gspo",
                                    "algorithm.kl_ctrl.type=adaptive", "algorithm.use_kl_in_reward=true"});
    INFO(job.status().ToString());
    REQUIRE(job.ok());
    CHECK(job->UseCritic());
    CHECK(job->critic.model_path == job->actor_rollout_ref.model.path);
    CHECK(job->critic.ppo_mini_batch_size == 4);
    CHECK(job->critic.loss_agg_mode == "token-mean");
    CHECK(job->actor_rollout_ref.actor.policy_loss.loss_mode == "gspo");
    CHECK(job->algorithm.kl_ctrl.type == "adaptive");
    CHECK_FALSE(job->critic.forward_micro_batch_size_per_gpu.has_value());
  }
  SECTION("the critic's forward micro-batch follows its update micro-batch, as in verl") {
    auto job = LoadJobConfig(path, {"algorithm.adv_estimator=gae", "critic.ppo_micro_batch_size_per_gpu=4"});
    INFO(job.status().ToString());
    REQUIRE(job.ok());
    CHECK(job->critic.forward_micro_batch_size_per_gpu == 4);
    auto own = LoadJobConfig(path, {"algorithm.adv_estimator=gae", "critic.ppo_micro_batch_size_per_gpu=4",
                                    "critic.forward_micro_batch_size_per_gpu=16"});
    REQUIRE(own.ok());
    CHECK(own->critic.forward_micro_batch_size_per_gpu == 16);
  }
  SECTION("a critic mini-batch that does not divide the batch") {
    CHECK_ERROR_CONTAINS(LoadJobConfig(path, {"algorithm.adv_estimator=gae", "data.train_batch_size=8",
                                              "actor_rollout_ref.actor.ppo_mini_batch_size=4",
                                              "critic.ppo_mini_batch_size=3"})
                             .status(),
                         "critic.ppo_mini_batch_size (3)");
  }
  SECTION("critic_warmup without a critic") {
    CHECK_ERROR_CONTAINS(LoadJobConfig(path, {"algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.n=2",
                                              "trainer.critic_warmup=3"})
                             .status(),
                         "trainer.critic_warmup=3 needs a critic");
  }
  SECTION("an unknown loss mode lists the valid ones") {
    CHECK_ERROR_CONTAINS(LoadJobConfig(path, {"actor_rollout_ref.actor.policy_loss.loss_mode=ppo"}).status(),
                         "vanilla, gspo, gpg, cispo, clip_cov, kl_cov");
  }
  SECTION("bfloat16 (with float32 master weights in the optimizer) is accepted") {
    auto job = LoadJobConfig(path, {"actor_rollout_ref.model.dtype=bfloat16"});
    INFO(job.status().ToString());
    REQUIRE(job.ok());
    CHECK(job->actor_rollout_ref.model.dtype == "bfloat16");
  }
  SECTION("clip_cov's and kl_cov's token shares must be positive (checked at load, not at the first update)") {
    CHECK_ERROR_CONTAINS(LoadJobConfig(path, {"actor_rollout_ref.actor.policy_loss.loss_mode=kl_cov",
                                              "actor_rollout_ref.actor.policy_loss.kl_cov_ratio=0"})
                             .status(),
                         "kl_cov_ratio must be > 0 with loss_mode kl_cov");
    CHECK_ERROR_CONTAINS(LoadJobConfig(path, {"actor_rollout_ref.actor.policy_loss.loss_mode=clip_cov",
                                              "actor_rollout_ref.actor.policy_loss.clip_cov_ratio=-1"})
                             .status(),
                         "clip_cov_ratio must be > 0 with loss_mode clip_cov");
    // Another mode does not read them.
    CHECK(LoadJobConfig(path, {"actor_rollout_ref.actor.policy_loss.kl_cov_ratio=0"}).ok());
  }
  SECTION("verl's rollout correction: token-level IS loads; what is not built in is refused") {
    auto job = LoadJobConfig(path, {"algorithm.rollout_correction.rollout_is=token",
                                    "algorithm.rollout_correction.rollout_is_threshold=1.5",
                                    "algorithm.rollout_correction.rollout_rs_threshold=0.999_1.001",
                                    "algorithm.rollout_correction.loss_type=reinforce",
                                    "actor_rollout_ref.rollout.calculate_log_probs=True"});
    INFO(job.status().ToString());
    REQUIRE(job.ok());
    CHECK(job->algorithm.rollout_correction.rollout_is == "token");
    CHECK(job->algorithm.rollout_correction.rollout_is_threshold == 1.5);
    CHECK(job->actor_rollout_ref.rollout.calculate_log_probs);
    CHECK(LoadJobConfig(path, {"algorithm.rollout_correction.rollout_is=null"}).ok());
    CHECK_ERROR_CONTAINS(LoadJobConfig(path, {"algorithm.rollout_correction.rollout_is=sequence"}).status(),
                         "algorithm.rollout_correction.rollout_is=sequence is not available: null (off) or token");
    CHECK_ERROR_CONTAINS(LoadJobConfig(path, {"algorithm.rollout_correction.rollout_is=token",
                                              "actor_rollout_ref.actor.tis_imp_ratio_cap=2"})
                             .status(),
                         "both turn on the same truncated importance weights: set one");
    CHECK_ERROR_CONTAINS(LoadJobConfig(path, {"algorithm.rollout_correction.rollout_is=token",
                                              "algorithm.rollout_correction.rollout_is_threshold=0"})
                             .status(),
                         "rollout_is_threshold must be > 0");
    CHECK_ERROR_CONTAINS(LoadJobConfig(path, {"algorithm.rollout_correction.rollout_rs=token_k1"}).status(),
                         "rollout_rs=token_k1 is not available");
    CHECK_ERROR_CONTAINS(LoadJobConfig(path, {"algorithm.rollout_correction.rollout_is_batch_normalize=true"}).status(),
                         "rollout_is_batch_normalize=true is not available");
  }
  SECTION("verl's bypass mode loads with either loss type; a loss of the user's it would replace is refused") {
    for (const char* type : {"ppo_clip", "reinforce"}) {
      auto job = LoadJobConfig(path, {"algorithm.rollout_correction.bypass_mode=true",
                                      std::string("algorithm.rollout_correction.loss_type=") + type,
                                      "algorithm.rollout_correction.rollout_is=token"});
      INFO(type << ": " << job.status().ToString());
      REQUIRE(job.ok());
      CHECK(job->algorithm.rollout_correction.bypass_mode);
      CHECK(job->algorithm.rollout_correction.loss_type == type);
    }
    CHECK_ERROR_CONTAINS(LoadJobConfig(path, {"algorithm.rollout_correction.bypass_mode=true",
                                              "algorithm.rollout_correction.loss_type=reinforce",
                                              "actor_rollout_ref.actor.policy_loss.loss_mode=gspo"})
                             .status(),
                         "bypass_mode=true replaces the policy loss with loss_type's (reinforce), so "
                         "actor_rollout_ref.actor.policy_loss.loss_mode=gspo would not run");
    CHECK_ERROR_CONTAINS(LoadJobConfig(path, {"algorithm.rollout_correction.bypass_mode=true",
                                              "actor_rollout_ref.actor.tis_imp_ratio_cap=2"})
                             .status(),
                         "so actor_rollout_ref.actor.tis_imp_ratio_cap=2");
    CHECK_ERROR_CONTAINS(LoadJobConfig(path, {"algorithm.rollout_correction.loss_type=ppo"}).status(),
                         "algorithm.rollout_correction.loss_type");
  }
  SECTION("sapo's temperatures load and must be positive with sapo") {
    auto job = LoadJobConfig(path, {"actor_rollout_ref.actor.policy_loss.loss_mode=sapo",
                                    "actor_rollout_ref.actor.tau_pos=0.5", "actor_rollout_ref.actor.tau_neg=2"});
    INFO(job.status().ToString());
    REQUIRE(job.ok());
    CHECK(job->actor_rollout_ref.actor.tau_pos == 0.5);
    CHECK(job->actor_rollout_ref.actor.tau_neg == 2);
    CHECK_ERROR_CONTAINS(LoadJobConfig(path, {"actor_rollout_ref.actor.policy_loss.loss_mode=sapo",
                                              "actor_rollout_ref.actor.tau_neg=0"})
                             .status(),
                         "actor_rollout_ref.actor.tau_neg must be > 0 with loss_mode sapo");
    CHECK(LoadJobConfig(path, {"actor_rollout_ref.actor.tau_neg=0"}).ok());  // vanilla does not read it
    CHECK(LoadJobConfig(path, {"actor_rollout_ref.actor.policy_loss.loss_mode=geo_mean"}).ok());
  }
  SECTION("loss_scale_factor (verl's divisor of seq-mean-token-sum-norm) loads, and must be positive") {
    auto job = LoadJobConfig(path, {"actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-sum-norm",
                                    "actor_rollout_ref.actor.loss_scale_factor=4096"});
    INFO(job.status().ToString());
    REQUIRE(job.ok());
    CHECK(job->actor_rollout_ref.actor.loss_scale_factor == 4096);
    CHECK_ERROR_CONTAINS(LoadJobConfig(path, {"actor_rollout_ref.actor.loss_scale_factor=0"}).status(),
                         "actor_rollout_ref.actor.loss_scale_factor must be > 0 or null");
  }
  SECTION("the critic's optimizer is checked like the actor's") {
    for (const auto& [key, value, message] : std::vector<std::tuple<std::string, std::string, std::string>>{
             {"critic.optim.eps", "0", "critic.optim.eps must be > 0"},
             {"critic.optim.weight_decay", "-0.1", "critic.optim.weight_decay must be >= 0"},
             {"critic.optim.lr_warmup_steps_ratio", "1.5", "critic.optim.lr_warmup_steps_ratio must lie in [0, 1]"}}) {
      CHECK_ERROR_CONTAINS(LoadJobConfig(path, {"algorithm.adv_estimator=gae", key + "=" + value}).status(), message);
    }
  }
  SECTION("verl's learning-rate schedules: lr_scheduler_type, its deprecated warmup_style, and their checks") {
    auto job = LoadJobConfig(path, {});
    REQUIRE(job.ok());
    CHECK(job->actor_rollout_ref.actor.optim.lr_scheduler_type == "constant");
    CHECK(job->actor_rollout_ref.actor.optim.min_lr_ratio == 0.0);
    CHECK(job->actor_rollout_ref.actor.optim.num_cycles == 0.5);
    job = LoadJobConfig(path, {"actor_rollout_ref.actor.optim.lr_scheduler_type=cosine",
                               "actor_rollout_ref.actor.optim.min_lr_ratio=0.1", "critic.optim.warmup_style=cosine",
                               "critic.optim.lr_scheduler_type=constant", "critic.optim.num_cycles=1.5"});
    INFO(job.status().ToString());
    REQUIRE(job.ok());
    CHECK(job->actor_rollout_ref.actor.optim.lr_scheduler_type == "cosine");
    CHECK(job->actor_rollout_ref.actor.optim.min_lr_ratio == 0.1);
    CHECK(job->critic.optim.lr_scheduler_type == "cosine");  // warmup_style wins, as in verl
    CHECK(job->critic.optim.num_cycles == 1.5);
    CHECK_ERROR_CONTAINS(LoadJobConfig(path, {"actor_rollout_ref.actor.optim.lr_scheduler_type=linear"}).status(),
                         "'linear' is not one of constant, cosine");
    CHECK_ERROR_CONTAINS(LoadJobConfig(path, {"actor_rollout_ref.actor.optim.min_lr_ratio=1.5"}).status(),
                         "actor_rollout_ref.actor.optim.min_lr_ratio must lie in [0, 1], got 1.5");
    CHECK_ERROR_CONTAINS(
        LoadJobConfig(path, {"algorithm.adv_estimator=gae", "critic.optim.num_cycles=-1"}).status(),
        "critic.optim.num_cycles must be >= 0");
  }
  SECTION("integers the workers take as 32-bit must fit (a larger one would wrap: top_k 2^32 to 0, off)") {
    CHECK_ERROR_CONTAINS(LoadJobConfig(path, {"actor_rollout_ref.rollout.top_k=4294967296"}).status(),
                         "actor_rollout_ref.rollout.top_k is 4294967296, beyond the supported range");
    CHECK_ERROR_CONTAINS(LoadJobConfig(path, {"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=-3000000000"})
                             .status(),
                         "log_prob_micro_batch_size_per_gpu is -3000000000, beyond the supported range");
    // Seeds keep 64 bits.
    auto job = LoadJobConfig(path, {"data.seed=4294967296"});
    INFO(job.status().ToString());
    REQUIRE(job.ok());
    CHECK(job->data.seed == 4294967296);
  }
  SECTION("adaptive KL control needs a positive target") {
    CHECK_ERROR_CONTAINS(LoadJobConfig(path, {"algorithm.use_kl_in_reward=true", "algorithm.kl_ctrl.type=adaptive",
                                              "algorithm.kl_ctrl.target_kl=0"})
                             .status(),
                         "algorithm.kl_ctrl.target_kl must be > 0");
  }
}

}  // namespace
}  // namespace verl

namespace verl {
namespace {

TEST_CASE("recompute_num_layers loads, and is refused where it cannot apply", "[config]") {
  TempDir dir;
  const std::string path = dir.Write("min.yaml", kMinimal);
  {
    auto job = LoadJobConfig(path, {});
    REQUIRE(job.ok());
    CHECK_FALSE(job->actor_rollout_ref.model.recompute_num_layers.has_value());  // null: every layer
    CHECK_FALSE(job->critic.recompute_num_layers.has_value());
    CHECK(job->actor_rollout_ref.model.recompute_keep_projections);  // kept, on a GPU
    CHECK(job->critic.recompute_keep_projections);
  }
  {
    auto job = LoadJobConfig(path, {"actor_rollout_ref.model.recompute_num_layers=6",
                                    "critic.model.recompute_num_layers=0",
                                    "actor_rollout_ref.model.recompute_keep_projections=false",
                                    "critic.model.recompute_keep_projections=false"});
    INFO(job.status().ToString());
    REQUIRE(job.ok());
    CHECK(job->actor_rollout_ref.model.recompute_num_layers == 6);
    CHECK(job->critic.recompute_num_layers == 0);
    CHECK_FALSE(job->actor_rollout_ref.model.recompute_keep_projections);
    CHECK_FALSE(job->critic.recompute_keep_projections);
  }
  CHECK_ERROR_CONTAINS(LoadJobConfig(path, {"actor_rollout_ref.model.recompute_num_layers=-2"}).status(),
                       "actor_rollout_ref.model.recompute_num_layers must be >= 0 or null, got -2");
  CHECK_ERROR_CONTAINS(LoadJobConfig(path, {"actor_rollout_ref.model.recompute_num_layers=4",
                                            "actor_rollout_ref.model.enable_gradient_checkpointing=false"})
                           .status(),
                       "enable_gradient_checkpointing is false");
  CHECK_ERROR_CONTAINS(LoadJobConfig(path, {"actor_rollout_ref.model.recompute_num_layers=4",
                                            "actor_rollout_ref.actor.shard_parameters=true"})
                           .status(),
                       "a sharded actor recomputes every layer");
  CHECK_ERROR_CONTAINS(LoadJobConfig(path, {"critic.model.recompute_num_layers=1",
                                            "critic.model.enable_gradient_checkpointing=false"})
                           .status(),
                       "critic.model.recompute_num_layers is set but critic.model.enable_gradient_checkpointing");
  CHECK_ERROR_CONTAINS(LoadJobConfig(path, {"critic.model.recompute_num_layers=-1"}).status(),
                       "critic.model.recompute_num_layers must be >= 0");
}

}  // namespace
}  // namespace verl
