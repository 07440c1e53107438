#ifndef VERL_COMMON_DATA_SAMPLER_H_
#define VERL_COMMON_DATA_SAMPLER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace verl {

// Yields batches of dataset indices, epoch after epoch, and can be checkpointed and resumed exactly.
//
// Epoch e visits a permutation of [0, dataset_size): the identity when shuffle is off, else a Fisher-Yates shuffle
// driven by std::mt19937_64 seeded with seed + e (with our own unbiased bounded draw, so the order is the same with
// every standard library). Batches are consecutive slices of that permutation. With drop_last the final short batch
// of an epoch is skipped; without it that batch is returned short. Batches never straddle two epochs.
//
// A sampler restored from state() yields exactly the batches the original would have yielded next.
// Thread-compatible: calls on one sampler must be serialised by the caller.
class ResumableSampler {
 public:
  // Where the sampler stands: `epoch` is the epoch whose permutation is in use, `cursor` how many of its indices
  // have been handed out. A fresh sampler is {0, 0}.
  struct State {
    int64_t epoch = 0;
    int64_t cursor = 0;

    // {"epoch": E, "cursor": C}, for checkpoints.
    std::string ToJson() const;
    // Parses ToJson's output; InvalidArgument naming the problem for malformed text, missing keys, non-integers.
    static absl::StatusOr<State> FromJson(const std::string& text);

    bool operator==(const State&) const = default;
  };

  // Preconditions: dataset_size > 0, batch_size > 0, and batch_size <= dataset_size when drop_last (otherwise an
  // epoch would have no batch). Violations are not fatal: steps_per_epoch() is then 0 and NextBatch() returns an
  // empty vector. Use Create() to get an error instead.
  ResumableSampler(int64_t dataset_size, int64_t batch_size, bool shuffle, uint64_t seed, bool drop_last = true);

  // Like the constructor, but InvalidArgument (naming the offending value) when the preconditions do not hold.
  static absl::StatusOr<ResumableSampler> Create(int64_t dataset_size, int64_t batch_size, bool shuffle,
                                                 uint64_t seed, bool drop_last = true);

  // Returns the next batch (batch_size indices, or fewer for the last batch of an epoch without drop_last) and
  // advances; when the current epoch is exhausted it first moves to the next epoch.
  std::vector<int64_t> NextBatch();

  // Batches per epoch: floor(size / batch) with drop_last, ceil(size / batch) without.
  int64_t steps_per_epoch() const;

  State state() const { return {epoch_, cursor_}; }

  // Moves to `state`. InvalidArgument when epoch < 0 or cursor is outside [0, dataset_size]; the sampler is then
  // unchanged.
  absl::Status Restore(State state);

  int64_t dataset_size() const { return dataset_size_; }
  int64_t batch_size() const { return batch_size_; }

 private:
  void BuildPermutation();

  int64_t dataset_size_;
  int64_t batch_size_;
  bool shuffle_;
  uint64_t seed_;
  bool drop_last_;
  int64_t epoch_ = 0;
  int64_t cursor_ = 0;
  std::vector<int64_t> permutation_;  // of epoch_
};

}  // namespace verl

#endif  // VERL_COMMON_DATA_SAMPLER_H_
