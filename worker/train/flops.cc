#include "worker/train/flops.h"

#include <utility>

namespace verl {

double EstimateTrainingFlops(const DecoderConfig& c, const std::vector<int64_t>& seqlens) {
  const double hidden = static_cast<double>(c.hidden_size);
  const double heads = static_cast<double>(c.num_attention_heads);
  const double head_dim = static_cast<double>(c.hidden_size / c.num_attention_heads);  // as verl, not config.head_dim
  const double kv = static_cast<double>(c.num_key_value_heads) * head_dim;
  const double mlp = hidden * static_cast<double>(c.intermediate_size) * 3;
  const double attn_linear = hidden * (heads * head_dim + 2 * kv + heads * head_dim);
  const double dense =
      (mlp + attn_linear) * static_cast<double>(c.num_hidden_layers) + static_cast<double>(c.vocab_size) * hidden * 2;
  double tokens = 0, squares = 0;
  for (int64_t s : seqlens) {
    tokens += static_cast<double>(s);
    squares += static_cast<double>(s) * static_cast<double>(s);
  }
  return 6 * dense * tokens + 12 * squares * head_dim * heads * static_cast<double>(c.num_hidden_layers);
}

std::optional<double> PromisedFlops(std::string_view name) {
  // verl's table (verl/utils/flops_counter.py get_device_flops), most specific names first ("H20" is in "H200").
  static constexpr std::pair<std::string_view, double> kPeaks[] = {
      {"B200", 2250e12}, {"MI300X", 1336e12}, {"H100", 989e12}, {"H800", 989e12},   {"H200", 989e12},
      {"H20", 148e12},   {"A100", 312e12},    {"A800", 312e12}, {"L40", 181.05e12}, {"L20", 119.5e12},
  };
  for (const auto& [key, peak] : kPeaks) {
    if (name.find(key) != std::string_view::npos) return peak;
  }
  return std::nullopt;
}

}  // namespace verl
