#include "worker/model/safetensors_checkpoint.h"

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/data/atomic_write.h"
#include "common/status/status_macros.h"
#include "nlohmann/json.hpp"

namespace verl {
namespace {

namespace fs = std::filesystem;

std::string Quote(std::string_view s) { return absl::StrCat("'", absl::string_view(s.data(), s.size()), "'"); }

bool IsRegularFile(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

absl::StatusOr<std::string> ReadTextFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path.string()));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat("cannot read ", path.string()));
  return ss.str();
}

bool IsShardName(const std::string& name) {
  static const std::regex kShard(R"(model-\d{5}-of-\d{5}\.safetensors)");
  return std::regex_match(name, kShard);
}

}  // namespace

absl::Status SafetensorsCheckpoint::AddFile(SafetensorsFile file) {
  const size_t index = files_.size();
  for (const std::string& name : file.names()) {
    auto [it, inserted] = location_.emplace(name, index);
    if (!inserted) {
      return absl::InvalidArgumentError(absl::StrCat("model directory ", dir_, ": tensor ", Quote(name),
                                                     " appears in both ", files_[it->second].path(), " and ",
                                                     file.path()));
    }
  }
  files_.push_back(std::move(file));
  return absl::OkStatus();
}

absl::StatusOr<SafetensorsCheckpoint> SafetensorsCheckpoint::Open(const std::string& model_dir) {
  SafetensorsCheckpoint ckpt;
  ckpt.dir_ = model_dir;
  const fs::path dir(model_dir);
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    return absl::NotFoundError(absl::StrCat("model directory ", model_dir, " does not exist or is not a directory"));
  }

  // 1. A single file.
  if (IsRegularFile(dir / kSafetensorsSingleFile)) {
    ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::Open((dir / kSafetensorsSingleFile).string()));
    RETURN_IF_ERROR(ckpt.AddFile(std::move(file)));
    return ckpt;
  }

  // 2. An index of shards.
  const fs::path index_path = dir / kSafetensorsIndexFile;
  if (IsRegularFile(index_path)) {
    ASSIGN_OR_RETURN(std::string text, ReadTextFile(index_path));
    nlohmann::json index = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (index.is_discarded() || !index.is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(index_path.string(), ": not a JSON object"));
    }
    auto wm = index.find("weight_map");
    if (wm == index.end() || !wm->is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(index_path.string(), ": missing or non-object key \"weight_map\""));
    }
    std::map<std::string, std::string> weight_map;  // tensor -> file
    std::set<std::string> shard_names;
    for (auto it = wm->begin(); it != wm->end(); ++it) {
      if (!it.value().is_string()) {
        return absl::InvalidArgumentError(absl::StrCat(index_path.string(), ": \"weight_map\" entry ", Quote(it.key()),
                                                       " is not a file name string"));
      }
      const std::string shard = it.value().get<std::string>();
      if (!IsRegularFile(dir / shard)) {
        return absl::NotFoundError(absl::StrCat(index_path.string(), ": \"weight_map\" entry ", Quote(it.key()),
                                                " references missing file ", (dir / shard).string()));
      }
      weight_map.emplace(it.key(), shard);
      shard_names.insert(shard);
    }
    if (shard_names.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(index_path.string(), ": \"weight_map\" is empty"));
    }
    std::map<std::string, size_t> file_index;
    for (const std::string& shard : shard_names) {
      ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::Open((dir / shard).string()));
      file_index[shard] = ckpt.files_.size();
      RETURN_IF_ERROR(ckpt.AddFile(std::move(file)));
    }
    for (const auto& [tensor, shard] : weight_map) {
      if (!ckpt.files_[file_index.at(shard)].Contains(tensor)) {
        return absl::DataLossError(absl::StrCat(index_path.string(), ": \"weight_map\" places tensor ", Quote(tensor),
                                                " in ", shard, ", which does not contain it"));
      }
    }
    return ckpt;
  }

  // 3. Whatever *.safetensors files there are.
  std::vector<fs::path> paths;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->path().extension() == ".safetensors" && IsRegularFile(it->path())) paths.push_back(it->path());
  }
  if (ec) return absl::InternalError(absl::StrCat("cannot list model directory ", model_dir, ": ", ec.message()));
  if (paths.empty()) {
    return absl::NotFoundError(absl::StrCat("model directory ", model_dir, " has no safetensors weights (looked for ",
                                            kSafetensorsSingleFile, ", ", kSafetensorsIndexFile,
                                            " and *.safetensors)"));
  }
  std::sort(paths.begin(), paths.end());
  for (const fs::path& p : paths) {
    ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::Open(p.string()));
    RETURN_IF_ERROR(ckpt.AddFile(std::move(file)));
  }
  return ckpt;
}

std::vector<std::string> SafetensorsCheckpoint::names() const {
  std::vector<std::string> out;
  out.reserve(location_.size());
  for (const auto& [name, index] : location_) out.push_back(name);
  return out;
}

bool SafetensorsCheckpoint::Contains(const std::string& name) const { return location_.count(name) > 0; }

absl::StatusOr<SafetensorsFile::TensorView> SafetensorsCheckpoint::Get(const std::string& name) const {
  auto it = location_.find(name);
  if (it == location_.end()) {
    return absl::NotFoundError(absl::StrCat("tensor ", Quote(name), " not found in the safetensors of model directory ",
                                            dir_));
  }
  return files_[it->second].Get(name);
}

absl::Status WriteShardedSafetensors(const std::string& dir, const std::vector<TensorRef>& tensors,
                                     uint64_t max_shard_bytes, std::map<std::string, std::string> metadata) {
  metadata.emplace("format", "pt");
  const fs::path root(dir);
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec) return absl::PermissionDeniedError(absl::StrCat("cannot create directory ", dir, ": ", ec.message()));

  {
    std::set<std::string_view> names;
    for (const TensorRef& t : tensors) {
      if (!names.insert(t.name).second) {
        return absl::InvalidArgumentError(
            absl::StrCat("writing sharded safetensors to ", dir, ": duplicate tensor name ", Quote(t.name)));
      }
    }
  }

  // Split as huggingface_hub's split_state_dict_into_shards does.
  std::vector<std::vector<TensorRef>> shards;
  std::vector<TensorRef> current;
  uint64_t current_bytes = 0, total_bytes = 0;
  for (const TensorRef& t : tensors) {
    total_bytes += t.nbytes;
    if (t.nbytes > max_shard_bytes) {
      shards.push_back({t});
      continue;
    }
    if (current_bytes + t.nbytes > max_shard_bytes && !current.empty()) {
      shards.push_back(std::move(current));
      current.clear();
      current_bytes = 0;
    }
    current.push_back(t);
    current_bytes += t.nbytes;
  }
  if (!current.empty() || shards.empty()) shards.push_back(std::move(current));

  std::set<std::string> written;
  if (shards.size() == 1) {
    RETURN_IF_ERROR(WriteSafetensors((root / kSafetensorsSingleFile).string(), shards[0], metadata));
    written.insert(kSafetensorsSingleFile);
  } else {
    nlohmann::json weight_map = nlohmann::json::object();
    for (size_t i = 0; i < shards.size(); ++i) {
      const std::string name = absl::StrFormat("model-%05d-of-%05d.safetensors", i + 1, shards.size());
      RETURN_IF_ERROR(WriteSafetensors((root / name).string(), shards[i], metadata));
      for (const TensorRef& t : shards[i]) weight_map[t.name] = name;
      written.insert(name);
    }
    nlohmann::json index = {{"metadata", {{"total_size", total_bytes}}}, {"weight_map", std::move(weight_map)}};
    std::string text;
    try {
      text = index.dump(2) + "\n";
    } catch (const nlohmann::json::exception& e) {
      return absl::InvalidArgumentError(absl::StrCat("writing ", (root / kSafetensorsIndexFile).string(), ": ", e.what()));
    }
    RETURN_IF_ERROR(WriteFileAtomically((root / kSafetensorsIndexFile).string(), text));
    written.insert(kSafetensorsIndexFile);
  }

  // Remove weight files of a previous save with another layout, so readers cannot pick them up.
  std::vector<fs::path> stale;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const bool ours = name == kSafetensorsSingleFile || name == kSafetensorsIndexFile || IsShardName(name);
    if (ours && written.count(name) == 0) stale.push_back(it->path());
  }
  for (const fs::path& p : stale) {
    fs::remove(p, ec);
    if (ec) return absl::InternalError(absl::StrCat("cannot remove stale weight file ", p.string(), ": ", ec.message()));
  }
  return absl::OkStatus();
}

absl::Status WriteShardedSafetensors(const std::string& dir,
                                     const std::vector<std::pair<std::string, HostTensor>>& tensors,
                                     uint64_t max_shard_bytes, std::map<std::string, std::string> metadata) {
  std::vector<TensorRef> refs;
  refs.reserve(tensors.size());
  for (const auto& [name, tensor] : tensors) refs.push_back(MakeTensorRef(name, tensor));
  return WriteShardedSafetensors(dir, refs, max_shard_bytes, std::move(metadata));
}

}  // namespace verl
