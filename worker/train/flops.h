#pragma once

// Model FLOPs utilisation as verl reports it (`perf/mfu/actor`, verl's FlopsCounter for Qwen2/Llama):
//   FLOPs of an update = 6 * dense parameters * tokens + 12 * sum(seqlen^2) * head_dim * heads * layers,
// where the dense parameters are the layers' projections plus the embedding and LM head counted as two
// vocab x hidden matrices, and head_dim = hidden / heads; MFU = FLOPs * ppo_epochs / seconds / the device's peak.

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "worker/model/hf_config.h"

namespace verl {

// FLOPs of one forward + backward over sequences of `seqlens` tokens (verl's estimate_flops, before dividing by time).
double EstimateTrainingFlops(const DecoderConfig& config, const std::vector<int64_t>& seqlens);

// The dense bf16 peak verl assumes for a device, by its name (e.g. "NVIDIA H200": 989e12); nullopt for one it
// does not know (and for CPUs), where verl's MFU is 0 and we report none.
std::optional<double> PromisedFlops(std::string_view device_name);

}  // namespace verl
