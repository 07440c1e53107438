#include "common/data/sampler.h"

#include <algorithm>
#include <numeric>
#include <random>
#include <utility>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"

namespace verl {
namespace {

// Uniform integer in [0, bound] from a 64-bit engine, by rejection (no modulo bias). std::uniform_int_distribution
// is not used because its algorithm differs between standard libraries.
uint64_t UniformUpTo(std::mt19937_64& rng, uint64_t bound) {
  if (bound == UINT64_MAX) return rng();
  const uint64_t range = bound + 1;
  const uint64_t threshold = (0 - range) % range;  // 2^64 mod range: values below it would bias the result.
  uint64_t r = rng();
  while (r < threshold) r = rng();
  return r % range;
}

}  // namespace

std::string ResumableSampler::State::ToJson() const {
  return nlohmann::json{{"epoch", epoch}, {"cursor", cursor}}.dump();
}

absl::StatusOr<ResumableSampler::State> ResumableSampler::State::FromJson(const std::string& text) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat("sampler state: expected a JSON object, got '", text, "'"));
  }
  State state;
  for (auto [key, field] : {std::pair{"epoch", &state.epoch}, std::pair{"cursor", &state.cursor}}) {
    auto it = j.find(key);
    if (it == j.end() || !it->is_number_integer()) {
      return absl::InvalidArgumentError(absl::StrCat("sampler state: key '", key, "' must be an integer in '", text, "'"));
    }
    *field = it->get<int64_t>();
  }
  return state;
}

ResumableSampler::ResumableSampler(int64_t dataset_size, int64_t batch_size, bool shuffle, uint64_t seed,
                                   bool drop_last)
    : dataset_size_(std::max<int64_t>(dataset_size, 0)),
      batch_size_(batch_size),
      shuffle_(shuffle),
      seed_(seed),
      drop_last_(drop_last) {
  BuildPermutation();
}

absl::StatusOr<ResumableSampler> ResumableSampler::Create(int64_t dataset_size, int64_t batch_size, bool shuffle,
                                                          uint64_t seed, bool drop_last) {
  if (dataset_size <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("sampler: dataset_size must be positive, got ", dataset_size));
  }
  if (batch_size <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("sampler: batch_size must be positive, got ", batch_size));
  }
  if (drop_last && batch_size > dataset_size) {
    return absl::InvalidArgumentError(absl::StrCat("sampler: batch_size ", batch_size, " exceeds dataset_size ",
                                                   dataset_size, " with drop_last, so an epoch would have no batch"));
  }
  return ResumableSampler(dataset_size, batch_size, shuffle, seed, drop_last);
}

int64_t ResumableSampler::steps_per_epoch() const {
  if (dataset_size_ <= 0 || batch_size_ <= 0) return 0;
  return drop_last_ ? dataset_size_ / batch_size_ : (dataset_size_ + batch_size_ - 1) / batch_size_;
}

void ResumableSampler::BuildPermutation() {
  permutation_.resize(dataset_size_);
  std::iota(permutation_.begin(), permutation_.end(), int64_t{0});
  if (!shuffle_ || dataset_size_ < 2) return;
  std::mt19937_64 rng(seed_ + static_cast<uint64_t>(epoch_));
  for (int64_t i = dataset_size_ - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(UniformUpTo(rng, static_cast<uint64_t>(i)));
    std::swap(permutation_[i], permutation_[j]);
  }
}

std::vector<int64_t> ResumableSampler::NextBatch() {
  if (steps_per_epoch() == 0) return {};
  const int64_t remaining = dataset_size_ - cursor_;
  if (remaining == 0 || (drop_last_ && remaining < batch_size_)) {
    ++epoch_;
    cursor_ = 0;
    BuildPermutation();
  }
  const int64_t take = std::min(batch_size_, dataset_size_ - cursor_);
  std::vector<int64_t> batch(permutation_.begin() + cursor_, permutation_.begin() + cursor_ + take);
  cursor_ += take;
  return batch;
}

absl::Status ResumableSampler::Restore(State state) {
  if (state.epoch < 0) {
    return absl::InvalidArgumentError(absl::StrCat("sampler: cannot restore epoch ", state.epoch, " (must be >= 0)"));
  }
  if (state.cursor < 0 || state.cursor > dataset_size_) {
    return absl::InvalidArgumentError(absl::StrCat("sampler: cannot restore cursor ", state.cursor,
                                                   ": must be in [0, dataset_size=", dataset_size_, "]"));
  }
  const bool new_epoch = state.epoch != epoch_;
  epoch_ = state.epoch;
  cursor_ = state.cursor;
  if (new_epoch) BuildPermutation();
  return absl::OkStatus();
}

}  // namespace verl
