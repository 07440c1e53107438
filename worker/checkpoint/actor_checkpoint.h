#ifndef VERL_WORKER_CHECKPOINT_ACTOR_CHECKPOINT_H_
#define VERL_WORKER_CHECKPOINT_ACTOR_CHECKPOINT_H_

// The actor's part of a checkpoint, in verl's layout with safetensors instead of pickles:
//   <dir>/model_world_size_W_rank_R.safetensors   parameters (HF names)
//   <dir>/optim_world_size_W_rank_R.safetensors   AdamW moments (exp_avg.<name>, exp_avg_sq.<name>)
//   <dir>/extra_state_world_size_W_rank_R.json    optimizer step, global step, update count
//   <dir>/huggingface/                             config.json + model.safetensors + tokenizer files (HF export)

#include <string>

#include "absl/status/status.h"
#include "worker/model/decoder_model.h"
#include "worker/train/adamw.h"

namespace verl {

// What a trained model's checkpoint holds: its parameters and, per parameter, the optimizer moments (and float32
// master, undefined when there is none). Names are the parameters' (HF names).
struct TrainableState {
  struct Moments {
    std::string name;
    at::Tensor exp_avg, exp_avg_sq, master;
  };
  std::vector<std::pair<std::string, at::Tensor>> params;
  std::vector<Moments> moments;
  int64_t optimizer_step = 0;
};

// Writes `state`; loads into its tensors in place (a master missing from the file is set to the loaded parameter of
// the same name) and sets optimizer_step.
absl::Status SaveTrainableState(const std::string& dir, const TrainableState& state, int64_t global_step,
                                int32_t world_size, int32_t rank, int64_t updates_done = -1);
absl::Status LoadTrainableState(const std::string& dir, TrainableState& state, int32_t world_size, int32_t rank,
                                int64_t* updates_done = nullptr);

// The same files for any trained model (actor, or critic under global_step_N/critic/) given its parameters.
// `updates_done` (the number of update calls, which drives the lr warmup) is kept in the extra state; on load it is
// written to *updates_done when given (-1 when the checkpoint predates it).
absl::Status SaveTrainableCheckpoint(const std::string& dir,
                                     const std::vector<std::pair<std::string, at::Tensor>>& params,
                                     const AdamW& optimizer, int64_t global_step, int32_t world_size, int32_t rank,
                                     int64_t updates_done = -1);
absl::Status LoadTrainableCheckpoint(const std::string& dir,
                                     const std::vector<std::pair<std::string, at::Tensor>>& params,
                                     AdamW& optimizer, int32_t world_size, int32_t rank,
                                     int64_t* updates_done = nullptr);

absl::Status SaveActorCheckpoint(const std::string& dir, const DecoderModel& model, const AdamW& optimizer,
                                 int64_t global_step, int32_t world_size, int32_t rank, int64_t updates_done = -1);

// Loads parameters and optimizer state in place. Errors name the file and tensor.
absl::Status LoadActorCheckpoint(const std::string& dir, DecoderModel& model, AdamW& optimizer, int32_t world_size,
                                 int32_t rank, int64_t* updates_done = nullptr);

// Writes an HF model directory (meant to load in transformers unchanged; not yet checked against it here):
// config.json, generation_config.json, model.safetensors, and the tokenizer files copied from `source_model_dir`.
absl::Status ExportHuggingFace(const std::string& out_dir, const DecoderModel& model,
                               const std::string& source_model_dir);

}  // namespace verl

#endif  // VERL_WORKER_CHECKPOINT_ACTOR_CHECKPOINT_H_
