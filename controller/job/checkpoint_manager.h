#ifndef VERL_CONTROLLER_JOB_CHECKPOINT_MANAGER_H_
#define VERL_CONTROLLER_JOB_CHECKPOINT_MANAGER_H_

// Checkpoint bookkeeping in verl's layout under trainer.default_local_dir:
//   global_step_N/actor/..., critic/...     written by the workers
//   global_step_N/data.json                 the sampler state (verl writes data.pt)
//   latest_checkpointed_iteration.txt       N, written last
// A checkpoint is assembled in a temporary directory and renamed into place, then the tracker file is replaced
// atomically, so a crash at any point leaves the previous checkpoint intact and the tracker never names a partial one.

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/data/sampler.h"

namespace verl {

class CheckpointManager {
 public:
  // Writes the workers' part of a checkpoint into `dir`.
  using SaveOnWorkers = std::function<absl::Status(const std::string& dir, int64_t global_step, bool hf_export)>;

  // With `max_to_keep`, after each complete save the oldest global_step_N directories with a step below the one just
  // saved are deleted until at most max_to_keep remain (the one just saved always stays; directories of later steps,
  // left by a run that was resumed from an earlier checkpoint, are never touched).
  CheckpointManager(std::string root, SaveOnWorkers save_on_workers, std::optional<int64_t> max_to_keep = std::nullopt);

  // `controller_state` (e.g. the KL controller's coefficient) is stored in data.json and returned by Find.
  // `before_commit` runs once the checkpoint directory is complete and in place, before the tracker names it (the
  // commit point): what must be on disk whenever a resume starts from this step (the step's metrics) goes there. Its
  // error fails the save with the tracker untouched.
  absl::Status Save(int64_t global_step, const ResumableSampler::State& sampler_state, bool hf_export,
                    const std::map<std::string, double>& controller_state = {},
                    const std::function<absl::Status()>& before_commit = nullptr);

  struct Found {
    std::string dir;
    int64_t global_step = 0;
    ResumableSampler::State sampler_state;
    std::map<std::string, double> controller_state;
  };
  // The checkpoint to resume from: none for resume_mode "disable" or when "auto" finds no tracker file;
  // resume_from_path for "resume_path" (which must be a global_step_N directory). Errors name the file.
  absl::StatusOr<std::optional<Found>> Find(const std::string& resume_mode, const std::string& resume_from_path) const;

  std::string StepDir(int64_t global_step) const;
  std::string TrackerPath() const;

 private:
  // Deletes the older checkpoints beyond max_to_keep_ (see the constructor). Errors are logged by the caller.
  absl::Status Rotate(int64_t saved_step) const;

  std::string root_;
  SaveOnWorkers save_on_workers_;
  std::optional<int64_t> max_to_keep_;
};

}  // namespace verl

#endif  // VERL_CONTROLLER_JOB_CHECKPOINT_MANAGER_H_
