#ifndef VERL_WORKER_MODEL_SAFETENSORS_CHECKPOINT_H_
#define VERL_WORKER_MODEL_SAFETENSORS_CHECKPOINT_H_

// The safetensors weights of a HuggingFace model directory, possibly split over several shard files, and the writer
// of such a directory.

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/model/safetensors.h"
#include "worker/rank/host_tensor.h"

namespace verl {

inline constexpr char kSafetensorsSingleFile[] = "model.safetensors";
inline constexpr char kSafetensorsIndexFile[] = "model.safetensors.index.json";

// All tensors of a model directory, looked up by name across shards. Move-only; views returned by Get() are valid
// while the checkpoint is alive. Const methods are safe to call from several threads.
class SafetensorsCheckpoint {
 public:
  // Opens the weights of `model_dir`, in the order transformers looks for them:
  //   1. `model.safetensors`;
  //   2. every shard named in `model.safetensors.index.json` ("weight_map": tensor -> file);
  //   3. every `*.safetensors` file in the directory.
  // Errors: NotFound when the directory does not exist, holds no safetensors file, or the index names a file that
  // does not exist; InvalidArgument for a malformed index or a tensor name found in two shards; DataLoss when the
  // index places a tensor in a shard that does not hold it; plus any SafetensorsFile::Open error.
  static absl::StatusOr<SafetensorsCheckpoint> Open(const std::string& model_dir);

  SafetensorsCheckpoint(SafetensorsCheckpoint&&) noexcept = default;
  SafetensorsCheckpoint& operator=(SafetensorsCheckpoint&&) noexcept = default;
  SafetensorsCheckpoint(const SafetensorsCheckpoint&) = delete;
  SafetensorsCheckpoint& operator=(const SafetensorsCheckpoint&) = delete;

  // All tensor names, lexicographically sorted.
  std::vector<std::string> names() const;
  bool Contains(const std::string& name) const;
  size_t size() const { return location_.size(); }

  // The tensor `name` from whichever shard holds it; NotFound naming the tensor and the directory when absent.
  absl::StatusOr<SafetensorsFile::TensorView> Get(const std::string& name) const;

  // The opened files, in the order they were opened (sorted by file name).
  const std::vector<SafetensorsFile>& files() const { return files_; }
  const std::string& dir() const { return dir_; }

 private:
  SafetensorsCheckpoint() = default;
  absl::Status AddFile(SafetensorsFile file);

  std::string dir_;
  std::vector<SafetensorsFile> files_;
  std::map<std::string, size_t> location_;  // tensor name -> index into files_
};

// Writes `tensors` into `dir` (created if missing) the way transformers' save_pretrained does: when their total size
// exceeds `max_shard_bytes` they are split, in the given order, into `model-00001-of-0000N.safetensors` ... (a tensor
// larger than the limit gets a shard of its own; a shard is closed when the next tensor would push it over the limit)
// plus `model.safetensors.index.json` {"metadata": {"total_size": bytes}, "weight_map": {name: file}}; otherwise a
// single `model.safetensors`. Every file gets `metadata` with "format": "pt" added when absent (transformers checks
// it). Each file is written atomically and the index last; then stale weight files of the other layout
// (model.safetensors, the index, model-*-of-*.safetensors not written now) are removed.
absl::Status WriteShardedSafetensors(const std::string& dir, const std::vector<TensorRef>& tensors,
                                     uint64_t max_shard_bytes, std::map<std::string, std::string> metadata = {});

// Same, from owning tensors.
absl::Status WriteShardedSafetensors(const std::string& dir,
                                     const std::vector<std::pair<std::string, HostTensor>>& tensors,
                                     uint64_t max_shard_bytes, std::map<std::string, std::string> metadata = {});

}  // namespace verl

#endif  // VERL_WORKER_MODEL_SAFETENSORS_CHECKPOINT_H_
