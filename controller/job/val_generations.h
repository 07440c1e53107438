#ifndef VERL_CONTROLLER_JOB_VAL_GENERATIONS_H_
#define VERL_CONTROLLER_JOB_VAL_GENERATIONS_H_

// verl's trainer.log_val_generations (RayPPOTrainer._maybe_log_val_generations and
// ValidationGenerationsLogger.log_generations_to_tensorboard, verl b178a3cd): which validation samples are logged,
// and the Markdown text they are logged as.

#include <cstdint>
#include <string>
#include <vector>

namespace verl {

struct ValGeneration {
  std::string input;   // the prompt, decoded without special tokens
  std::string output;  // the response, decoded without special tokens
  double score = 0;
};

// The order numpy's legacy RandomState(seed).shuffle leaves n items in, as indices into the original order: MT19937
// seeded by init_genrand(seed), Fisher-Yates from the last item, each index drawn by masked rejection
// (random_interval). n must be below 2^32.
std::vector<int64_t> NumpyLegacyShuffle(int64_t n, uint32_t seed);

// verl's choice of the samples to log: sorted by input (a stable sort, as Python's), shuffled as
// RandomState(42).shuffle, the first `count`.
std::vector<ValGeneration> PickValGenerations(std::vector<ValGeneration> samples, int64_t count);

// verl's text for TensorBoard: a title with the step, then per sample its input, output and score (as Python's str).
std::string ValGenerationsMarkdown(int64_t step, const std::vector<ValGeneration>& samples);

}  // namespace verl

#endif  // VERL_CONTROLLER_JOB_VAL_GENERATIONS_H_
