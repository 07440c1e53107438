#ifndef VERL_WORKER_MODEL_RANDOM_MODEL_H_
#define VERL_WORKER_MODEL_RANDOM_MODEL_H_

// Randomly initialized HF decoder checkpoints: the tiny model of the tests and the benchmark models are made here, so
// nothing has to be downloaded.

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "worker/model/hf_config.h"
#include "worker/rank/host_tensor.h"

namespace verl {

// Writes `model_dir` (created if missing) as a loadable HF model directory: config.json (DecoderConfigToJson, with
// torch_dtype set to `dtype`), generation_config.json (eos/bos/pad ids) and model.safetensors holding every tensor of
// DecoderParamSpecs(config) in `dtype` (kFloat32, kBFloat16 or kFloat16). Weights are drawn from N(0, init_std) by
// our own generator (std::mt19937_64 seeded per tensor from `seed` and the tensor name, Box-Muller in double, rounded
// to nearest even), so the files are identical across machines and independent of tensor order; norms are 1 and
// biases 0. Errors: InvalidArgument for another dtype, a negative init_std or an invalid config (non-positive sizes);
// the file-system error naming the path otherwise.
absl::Status WriteRandomDecoder(const std::string& model_dir, const DecoderConfig& config, uint64_t seed, DType dtype,
                                double init_std = 0.02);

}  // namespace verl

#endif  // VERL_WORKER_MODEL_RANDOM_MODEL_H_
