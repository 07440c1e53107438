#include "worker/model/random_model.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/data/atomic_write.h"
#include "common/status/status_macros.h"
#include "worker/model/dtype_convert.h"
#include "worker/model/safetensors.h"

namespace verl {
namespace {

namespace fs = std::filesystem;

// FNV-1a: a fixed, portable hash so a tensor's stream depends only on (seed, name).
uint64_t HashName(const std::string& name) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : name) {
    h ^= ch;
    h *= 1099511628211ull;
  }
  return h;
}

// SplitMix64 finalizer, to decorrelate nearby seeds before they seed the Mersenne twister.
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// A uniform double in (0, 1]: 53 random bits, never 0 (log(0) would be -inf).
double UniformOpenClosed(std::mt19937_64& gen) { return (static_cast<double>(gen() >> 11) + 1.0) * 0x1.0p-53; }

// Fills `out` with N(0, stddev) samples in pairs by the Box-Muller transform.
void FillNormal(uint64_t seed, double stddev, std::vector<float>& out) {
  std::mt19937_64 gen(seed);
  constexpr double kTwoPi = 6.283185307179586476925286766559;
  for (size_t i = 0; i < out.size(); i += 2) {
    const double u1 = UniformOpenClosed(gen);
    const double u2 = UniformOpenClosed(gen);
    const double radius = std::sqrt(-2.0 * std::log(u1)) * stddev;
    out[i] = static_cast<float>(radius * std::cos(kTwoPi * u2));
    if (i + 1 < out.size()) out[i + 1] = static_cast<float>(radius * std::sin(kTwoPi * u2));
  }
}

std::string EncodeFloats(const std::vector<float>& values, DType dtype) {
  std::string bytes;
  if (dtype == DType::kFloat32) {
    bytes.resize(values.size() * sizeof(float));
    std::memcpy(bytes.data(), values.data(), bytes.size());
    return bytes;
  }
  std::vector<uint16_t> half(values.size());
  if (dtype == DType::kBFloat16) {
    Float32ToBFloat16(values.data(), half.data(), values.size());
  } else {
    Float32ToFloat16(values.data(), half.data(), values.size());
  }
  bytes.resize(half.size() * sizeof(uint16_t));
  std::memcpy(bytes.data(), half.data(), bytes.size());
  return bytes;
}

}  // namespace

absl::Status WriteRandomDecoder(const std::string& model_dir, const DecoderConfig& config, uint64_t seed, DType dtype,
                                double init_std) {
  if (dtype != DType::kFloat32 && dtype != DType::kBFloat16 && dtype != DType::kFloat16) {
    return absl::InvalidArgumentError(absl::StrCat("WriteRandomDecoder(", model_dir, "): dtype ",
                                                   std::string(TorchDTypeName(dtype)), " is not a floating-point type"));
  }
  if (!(init_std >= 0)) {
    return absl::InvalidArgumentError(absl::StrCat("WriteRandomDecoder(", model_dir, "): init_std ", init_std,
                                                   " must be non-negative"));
  }
  for (auto [key, value] : {std::pair<const char*, int64_t>{"vocab_size", config.vocab_size},
                            {"hidden_size", config.hidden_size},
                            {"intermediate_size", config.intermediate_size},
                            {"num_hidden_layers", config.num_hidden_layers},
                            {"num_attention_heads", config.num_attention_heads},
                            {"num_key_value_heads", config.num_key_value_heads},
                            {"head_dim", config.head_dim},
                            {"max_position_embeddings", config.max_position_embeddings}}) {
    if (value <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("WriteRandomDecoder(", model_dir, "): config key '", key, "' must be positive, got ", value));
    }
  }
  if (config.model_type != "qwen2" && config.model_type != "llama") {
    return absl::InvalidArgumentError(absl::StrCat("WriteRandomDecoder(", model_dir, "): model_type '",
                                                   config.model_type, "' is not supported (qwen2, llama)"));
  }

  const fs::path dir(model_dir);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return absl::PermissionDeniedError(absl::StrCat("cannot create directory ", model_dir, ": ", ec.message()));

  DecoderConfig written = config;
  written.torch_dtype = std::string(TorchDTypeName(dtype));
  RETURN_IF_ERROR(WriteFileAtomically((dir / "config.json").string(), DecoderConfigToJson(written)));
  RETURN_IF_ERROR(WriteFileAtomically((dir / "generation_config.json").string(), GenerationConfigToJson(written)));

  // Tensors are independent streams, so they are generated in parallel for large models; the bytes do not depend on
  // the thread count.
  const std::vector<ParamSpec> specs = DecoderParamSpecs(config);
  std::vector<std::pair<std::string, HostTensor>> tensors(specs.size());
  int64_t total_numel = 0;
  for (const ParamSpec& spec : specs) total_numel += spec.numel();
  std::atomic<size_t> next{0};
  auto worker = [&] {
    std::vector<float> values;
    for (size_t i = next.fetch_add(1); i < specs.size(); i = next.fetch_add(1)) {
      const ParamSpec& spec = specs[i];
      values.assign(static_cast<size_t>(spec.numel()), 0.0f);
      switch (spec.init) {
        case ParamInit::kNormal: FillNormal(Mix(seed ^ Mix(HashName(spec.name))), init_std, values); break;
        case ParamInit::kOnes: std::fill(values.begin(), values.end(), 1.0f); break;
        case ParamInit::kZeros: break;
      }
      tensors[i].first = spec.name;
      tensors[i].second.dtype = dtype;
      tensors[i].second.shape = spec.shape;
      tensors[i].second.bytes = EncodeFloats(values, dtype);
    }
  };
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  const size_t num_threads = total_numel < (int64_t{1} << 24) ? 1 : std::min<size_t>({hw, 16, specs.size()});
  std::vector<std::thread> threads;
  for (size_t t = 1; t < num_threads; ++t) threads.emplace_back(worker);
  worker();
  for (std::thread& t : threads) t.join();
  return WriteSafetensors((dir / "model.safetensors").string(), tensors, {{"format", "pt"}});
}

}  // namespace verl
