#include "worker/checkpoint/actor_checkpoint.h"

#include <filesystem>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "common/data/atomic_write.h"
#include "common/status/status_macros.h"
#include "worker/model/hf_config.h"
#include "worker/model/safetensors.h"
#include "worker/rank/torch_util.h"

namespace verl {
namespace fs = std::filesystem;
namespace {

std::string Suffix(int32_t world_size, int32_t rank) {
  return absl::StrCat("world_size_", world_size, "_rank_", rank);
}

// Writes the tensors without copying them all to the host first: a contiguous host tensor is written from its own
// memory, any other (on a device, or strided) is copied to the host when the writer reaches it and dropped at the
// next, so a checkpoint of device state holds at most one tensor's copy in host memory (not the whole state: for
// Qwen2.5-7B's parameters, float32 master and AdamW moments, some 100 GB).
absl::Status WriteTensors(const std::string& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors) {
  std::vector<TensorRef> refs;
  refs.reserve(tensors.size());
  at::Tensor staged;  // the host copy of the tensor being written
  for (const auto& [name, tensor] : tensors) {
    TensorRef ref;
    ref.name = name;
    ref.dtype = FromScalarType(tensor.scalar_type());
    ref.shape.assign(tensor.sizes().begin(), tensor.sizes().end());
    ref.nbytes = static_cast<size_t>(tensor.numel()) * tensor.element_size();
    if (tensor.device().is_cpu() && tensor.is_contiguous()) {
      ref.data = tensor.data_ptr();
    } else {
      ref.fetch = [&staged, t = tensor]() {
        staged = at::Tensor();  // the previous copy goes first
        // One contiguous host buffer, whatever the tensor's strides (to(kCPU) keeps a dense tensor's, and a
        // contiguous() after it would be a second copy).
        staged = at::empty(t.sizes(), t.options().device(at::kCPU).memory_format(at::MemoryFormat::Contiguous));
        staged.copy_(t.detach());
        return std::span<const std::byte>(static_cast<const std::byte*>(staged.data_ptr()), staged.nbytes());
      };
    }
    refs.push_back(std::move(ref));
  }
  return WriteSafetensors(path, refs, {{"format", "pt"}});
}

absl::Status ReadInto(const SafetensorsFile& file, const std::string& path, const std::string& name, at::Tensor dst) {
  ASSIGN_OR_RETURN(auto view, file.Get(name));
  if (view.shape != std::vector<int64_t>(dst.sizes().begin(), dst.sizes().end())) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": tensor '", name, "' has the wrong shape for this model"));
  }
  at::Tensor src = at::from_blob(const_cast<void*>(view.data), view.shape,
                                 at::TensorOptions().dtype(ToScalarType(view.dtype)));
  at::NoGradGuard no_grad;
  dst.copy_(src);
  return absl::OkStatus();
}

}  // namespace

absl::Status SaveActorCheckpoint(const std::string& dir, const DecoderModel& model, const AdamW& optimizer,
                                 int64_t global_step, int32_t world_size, int32_t rank, int64_t updates_done) {
  return SaveTrainableCheckpoint(dir, model.named_parameters(), optimizer, global_step, world_size, rank,
                                 updates_done);
}

absl::Status LoadActorCheckpoint(const std::string& dir, DecoderModel& model, AdamW& optimizer, int32_t world_size,
                                 int32_t rank, int64_t* updates_done) {
  return LoadTrainableCheckpoint(dir, model.named_parameters(), optimizer, world_size, rank, updates_done);
}

absl::Status SaveTrainableState(const std::string& dir, const TrainableState& state, int64_t global_step,
                                int32_t world_size, int32_t rank, int64_t updates_done) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", dir, ": ", ec.message()));
  const std::string sfx = Suffix(world_size, rank);
  RETURN_IF_ERROR(WriteTensors(absl::StrCat(dir, "/model_", sfx, ".safetensors"), state.params));
  std::vector<std::pair<std::string, at::Tensor>> moments;
  for (const TrainableState::Moments& m : state.moments) {
    if (!m.exp_avg.defined() || !m.exp_avg_sq.defined()) {
      return absl::FailedPreconditionError(
          absl::StrCat("the optimizer state of '", m.name, "' is not on this rank (sharded): gather it first"));
    }
    moments.emplace_back("exp_avg." + m.name, m.exp_avg);
    moments.emplace_back("exp_avg_sq." + m.name, m.exp_avg_sq);
    // bf16 training: the float32 master weights, so a resume continues from them rather than from the rounding.
    if (m.master.defined()) moments.emplace_back("master." + m.name, m.master);
  }
  RETURN_IF_ERROR(WriteTensors(absl::StrCat(dir, "/optim_", sfx, ".safetensors"), moments));
  nlohmann::json extra = {{"optimizer_step", state.optimizer_step}, {"global_step", global_step}};
  if (updates_done >= 0) extra["updates_done"] = updates_done;
  return WriteFileAtomically(absl::StrCat(dir, "/extra_state_", sfx, ".json"), extra.dump(2) + "\n");
}

absl::Status LoadTrainableState(const std::string& dir, TrainableState& state, int32_t world_size, int32_t rank,
                                int64_t* updates_done) {
  const std::string sfx = Suffix(world_size, rank);
  const std::string model_path = absl::StrCat(dir, "/model_", sfx, ".safetensors");
  const std::string optim_path = absl::StrCat(dir, "/optim_", sfx, ".safetensors");
  const std::string extra_path = absl::StrCat(dir, "/extra_state_", sfx, ".json");
  std::map<std::string, at::Tensor> loaded_params;
  {
    ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::Open(model_path));
    for (const auto& [name, t] : state.params) {
      RETURN_IF_ERROR(ReadInto(file, model_path, name, t));
      loaded_params[name] = t;
    }
  }
  {
    ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::Open(optim_path));
    for (TrainableState::Moments& m : state.moments) {
      RETURN_IF_ERROR(ReadInto(file, optim_path, "exp_avg." + m.name, m.exp_avg));
      if (m.master.defined()) {
        if (file.Contains("master." + m.name)) {
          RETURN_IF_ERROR(ReadInto(file, optim_path, "master." + m.name, m.master));
        } else {  // a checkpoint without masters (float32 training): the master is the loaded weight
          auto it = loaded_params.find(m.name);
          if (it == loaded_params.end()) {
            return absl::InvalidArgumentError(absl::StrCat(optim_path, ": no master weight for '", m.name, "'"));
          }
          at::NoGradGuard no_grad;
          m.master.copy_(it->second);
        }
      }
      RETURN_IF_ERROR(ReadInto(file, optim_path, "exp_avg_sq." + m.name, m.exp_avg_sq));
    }
  }
  std::ifstream in(extra_path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", extra_path));
  nlohmann::json extra = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (extra.is_discarded() || !extra.contains("optimizer_step")) {
    return absl::DataLossError(absl::StrCat(extra_path, ": malformed (no optimizer_step)"));
  }
  state.optimizer_step = extra["optimizer_step"].get<int64_t>();
  if (updates_done) *updates_done = extra.value("updates_done", int64_t{-1});
  return absl::OkStatus();
}

absl::Status SaveTrainableCheckpoint(const std::string& dir,
                                     const std::vector<std::pair<std::string, at::Tensor>>& params,
                                     const AdamW& optimizer, int64_t global_step, int32_t world_size, int32_t rank,
                                     int64_t updates_done) {
  TrainableState state;
  state.params = params;
  state.optimizer_step = optimizer.step_count();
  auto& opt = const_cast<AdamW&>(optimizer);
  for (size_t i = 0; i < optimizer.params().size(); ++i) {
    state.moments.push_back({optimizer.params()[i].first, opt.exp_avg()[i], opt.exp_avg_sq()[i], opt.master()[i]});
  }
  return SaveTrainableState(dir, state, global_step, world_size, rank, updates_done);
}

absl::Status LoadTrainableCheckpoint(const std::string& dir,
                                     const std::vector<std::pair<std::string, at::Tensor>>& params,
                                     AdamW& optimizer, int32_t world_size, int32_t rank,
                                     int64_t* updates_done) {
  TrainableState state;
  state.params = params;
  for (size_t i = 0; i < optimizer.params().size(); ++i) {
    if (!optimizer.owns(i)) continue;  // sharded: another rank keeps this parameter's moments
    state.moments.push_back({optimizer.params()[i].first, optimizer.exp_avg()[i], optimizer.exp_avg_sq()[i],
                             optimizer.master()[i]});
  }
  RETURN_IF_ERROR(LoadTrainableState(dir, state, world_size, rank, updates_done));
  optimizer.set_step_count(state.optimizer_step);
  return absl::OkStatus();
}

absl::Status ExportHuggingFace(const std::string& out_dir, const DecoderModel& model,
                               const std::string& source_model_dir) {
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", out_dir, ": ", ec.message()));
  DecoderConfig config = model.config();
  // The dtype label must describe the tensors written, which are the parameters as trained.
  config.torch_dtype = std::string(TorchDTypeName(FromScalarType(model.named_parameters().front().second.scalar_type())));
  RETURN_IF_ERROR(WriteFileAtomically(out_dir + "/config.json", DecoderConfigToJson(config)));
  RETURN_IF_ERROR(WriteTensors(out_dir + "/model.safetensors", model.named_parameters()));
  for (const char* name : {"tokenizer.json", "tokenizer_config.json", "generation_config.json",
                           "special_tokens_map.json", "vocab.json", "merges.txt"}) {
    fs::path src = fs::path(source_model_dir) / name;
    if (fs::exists(src)) {
      fs::copy_file(src, fs::path(out_dir) / name, fs::copy_options::overwrite_existing, ec);
      if (ec) return absl::InternalError(absl::StrCat("cannot copy ", src.string(), ": ", ec.message()));
    }
  }
  // The header promises a generation_config.json; a source directory without one gets ours from the config.
  if (!fs::exists(fs::path(out_dir) / "generation_config.json")) {
    RETURN_IF_ERROR(WriteFileAtomically(out_dir + "/generation_config.json", GenerationConfigToJson(model.config())));
  }
  return absl::OkStatus();
}

}  // namespace verl
