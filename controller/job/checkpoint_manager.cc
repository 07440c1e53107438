#include "controller/job/checkpoint_manager.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/data/atomic_write.h"
#include "common/status/status_macros.h"

namespace verl {
namespace fs = std::filesystem;
namespace {

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// SyncDirectory on `root` and every directory below it.
absl::Status SyncDirectoryTree(const std::string& root) {
  std::error_code ec;
  std::vector<std::string> dirs = {root};
  for (fs::recursive_directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->is_directory(ec)) dirs.push_back(it->path().string());
  }
  if (ec) return absl::InternalError(absl::StrCat("cannot list ", root, ": ", ec.message()));
  for (const std::string& dir : dirs) RETURN_IF_ERROR(SyncDirectory(dir));
  return absl::OkStatus();
}

}  // namespace

CheckpointManager::CheckpointManager(std::string root, SaveOnWorkers save_on_workers,
                                     std::optional<int64_t> max_to_keep)
    : root_(std::move(root)), save_on_workers_(std::move(save_on_workers)), max_to_keep_(max_to_keep) {}

absl::Status CheckpointManager::Rotate(int64_t saved_step) const {
  if (!max_to_keep_) return absl::OkStatus();
  std::vector<int64_t> older;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(root_, ec)) {
    const std::string name = entry.path().filename().string();
    constexpr std::string_view kPrefix = "global_step_";
    if (!entry.is_directory() || name.rfind(kPrefix, 0) != 0) continue;
    int64_t step = 0;
    if (!absl::SimpleAtoi(absl::string_view(name).substr(kPrefix.size()), &step)) continue;
    if (step < saved_step) older.push_back(step);
  }
  if (ec) return absl::InternalError(absl::StrCat("cannot list ", root_, ": ", ec.message()));
  std::sort(older.begin(), older.end());
  // The one just saved counts towards the limit.
  const int64_t to_delete = static_cast<int64_t>(older.size()) - (*max_to_keep_ - 1);
  for (int64_t i = 0; i < to_delete; ++i) {
    fs::remove_all(StepDir(older[i]), ec);
    if (ec) return absl::InternalError(absl::StrCat("cannot delete old checkpoint ", StepDir(older[i]), ": ",
                                                    ec.message()));
  }
  return absl::OkStatus();
}

std::string CheckpointManager::StepDir(int64_t global_step) const {
  return absl::StrCat(root_, "/global_step_", global_step);
}

std::string CheckpointManager::TrackerPath() const { return root_ + "/latest_checkpointed_iteration.txt"; }

absl::Status CheckpointManager::Save(int64_t global_step, const ResumableSampler::State& sampler_state,
                                     bool hf_export, const std::map<std::string, double>& controller_state,
                                     const std::function<absl::Status()>& before_commit) {
  const std::string final_dir = StepDir(global_step);
  const std::string tmp_dir = absl::StrCat(root_, "/.global_step_", global_step, ".tmp");
  std::error_code ec;
  fs::remove_all(tmp_dir, ec);
  fs::create_directories(tmp_dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create checkpoint directory ", tmp_dir, ": ", ec.message()));
  absl::Status status = Annotate(save_on_workers_(tmp_dir, global_step, hf_export),
                                 absl::StrCat("saving checkpoint ", final_dir));
  if (status.ok()) {
    nlohmann::json data = {{"global_step", global_step},
                           {"sampler", nlohmann::json::parse(sampler_state.ToJson())},
                           {"controller", controller_state}};
    status = WriteFileAtomically(tmp_dir + "/data.json", data.dump(2) + "\n");
  }
  // Every file was flushed by its writer; their directories' entries are flushed here, before the tracker can name
  // them (a crash must not leave the tracker naming a step whose files' names never reached the disk).
  if (status.ok()) status = SyncDirectoryTree(tmp_dir);
  if (!status.ok()) {
    // Leave no half-written directory behind; the previous checkpoint and the tracker are untouched.
    fs::remove_all(tmp_dir, ec);
    return status;
  }
  // Re-saving a step (e.g. after resuming from an older one) must not open a window in which the directory the
  // tracker names is missing: move the old one aside, move the new one in, update the tracker, then delete the old.
  const std::string old_dir = absl::StrCat(root_, "/.global_step_", global_step, ".old");
  fs::remove_all(old_dir, ec);
  if (fs::exists(final_dir)) {
    fs::rename(final_dir, old_dir, ec);
    if (ec) return absl::InternalError(absl::StrCat("cannot move ", final_dir, " aside: ", ec.message()));
  }
  fs::rename(tmp_dir, final_dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot rename ", tmp_dir, " to ", final_dir, ": ", ec.message()));
  RETURN_IF_ERROR(SyncDirectory(root_));
  if (before_commit) RETURN_IF_ERROR(before_commit());
  RETURN_IF_ERROR(WriteFileAtomically(TrackerPath(), absl::StrCat(global_step, "\n")));
  fs::remove_all(old_dir, ec);
  // Only now that the new checkpoint is complete and named by the tracker may older ones go.
  return Annotate(Rotate(global_step), "rotating checkpoints (trainer.max_actor_ckpt_to_keep)");
}

absl::StatusOr<std::optional<CheckpointManager::Found>> CheckpointManager::Find(
    const std::string& resume_mode, const std::string& resume_from_path) const {
  if (resume_mode == "disable") return std::optional<Found>();
  std::string dir;
  int64_t step = 0;
  if (resume_mode == "resume_path") {
    // Accept "global_step_4/" (a shell's completion) as well as "global_step_4".
    fs::path path(resume_from_path);
    if (path.filename().empty()) path = path.parent_path();
    dir = path.string();
    const std::string base = path.filename().string();
    if (base.rfind("global_step_", 0) != 0 ||
        !absl::SimpleAtoi(absl::string_view(base.data() + 12, base.size() - 12), &step)) {
      return absl::InvalidArgumentError(absl::StrCat("trainer.resume_from_path: '", dir,
                                                     "' is not a global_step_N checkpoint directory"));
    }
  } else {
    if (!fs::exists(TrackerPath())) return std::optional<Found>();
    ASSIGN_OR_RETURN(std::string text, ReadFile(TrackerPath()));
    while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
    if (!absl::SimpleAtoi(absl::string_view(text.data(), text.size()), &step) || step <= 0) {
      return absl::DataLossError(absl::StrCat(TrackerPath(), ": expected a positive step number, found '", text, "'"));
    }
    dir = StepDir(step);
    // Save moves a re-saved step's committed directory aside just before moving the new one in: a crash between the
    // two renames leaves the tracker's step only under the aside name. Put it back.
    const std::string aside = absl::StrCat(root_, "/.global_step_", step, ".old");
    if (!fs::exists(dir) && fs::is_directory(aside)) {
      std::error_code ec;
      fs::rename(aside, dir, ec);
      if (ec) return absl::InternalError(absl::StrCat("cannot move ", aside, " back to ", dir, ": ", ec.message()));
    }
  }
  if (!fs::is_directory(dir)) {
    return absl::NotFoundError(absl::StrCat("checkpoint directory ", dir, " is missing",
                                            resume_mode == "resume_path"
                                                ? " (trainer.resume_from_path)"
                                                : absl::StrCat(" (named by ", TrackerPath(), ")")));
  }
  ASSIGN_OR_RETURN(std::string data, ReadFile(dir + "/data.json"));
  nlohmann::json parsed = nlohmann::json::parse(data, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded() || !parsed.contains("sampler")) {
    return absl::DataLossError(absl::StrCat(dir, "/data.json: malformed or without a sampler state"));
  }
  auto state = ResumableSampler::State::FromJson(parsed["sampler"].dump());
  if (!state.ok()) return Annotate(state.status(), dir + "/data.json");
  std::map<std::string, double> controller_state;
  if (parsed.contains("controller") && parsed["controller"].is_object()) {
    for (const auto& [key, value] : parsed["controller"].items()) {
      if (value.is_number()) controller_state[key] = value.get<double>();
    }
  }
  return std::optional<Found>(Found{dir, step, *state, controller_state});
}

}  // namespace verl
