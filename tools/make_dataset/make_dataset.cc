// verl-make-dataset: writes a synthetic train/test dataset pair in verl's layout.
//
//   verl-make-dataset --task repeat_letter --out-dir DIR [--train-size 2048] [--val-size 64] [--seed 1]
//                     [--format parquet|jsonl]
//
// Writes DIR/train.<format> and DIR/test.<format> (DIR is created if needed). Tasks are described in
// common/data/synthetic_tasks.h. Flags take their value as the next argument or after '='. Exit status 0 on success,
// 2 on a usage error, 1 when writing fails.

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/strings/str_join.h"
#include "common/data/dataset.h"
#include "common/data/synthetic_tasks.h"

namespace {

constexpr char kUsage[] =
    "usage: verl-make-dataset --task repeat_letter|gsm8k_synthetic|digit_sums --out-dir DIR [--train-size 2048]\n"
    "                         [--val-size 64] [--seed 1] [--format parquet|jsonl]\n";

int UsageError(const std::string& message) {
  std::fprintf(stderr, "verl-make-dataset: %s\n%s", message.c_str(), kUsage);
  return 2;
}

template <typename T>
bool ParseNumber(const std::string& text, T* out) {
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, *out);
  return ec == std::errc() && ptr == end && !text.empty();
}

}  // namespace

int main(int argc, char** argv) {
  std::map<std::string, std::string> flags = {{"task", ""},          {"out-dir", ""}, {"train-size", "2048"},
                                              {"val-size", "64"},    {"seed", "1"},   {"format", "parquet"}};
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (arg.substr(0, 2) != "--") return UsageError("unexpected argument '" + std::string(arg) + "'");
    arg.remove_prefix(2);
    std::string name(arg.substr(0, arg.find('=')));
    auto it = flags.find(name);
    if (it == flags.end()) return UsageError("unknown flag '--" + name + "'");
    if (arg.find('=') != std::string_view::npos) {
      it->second = std::string(arg.substr(arg.find('=') + 1));
    } else if (i + 1 < argc) {
      it->second = argv[++i];
    } else {
      return UsageError("flag '--" + name + "' needs a value");
    }
  }

  const std::string& task = flags["task"];
  const std::string& out_dir = flags["out-dir"];
  const std::string& format = flags["format"];
  int64_t train_size = 0;
  int64_t val_size = 0;
  uint64_t seed = 0;
  if (task.empty()) return UsageError("--task is required (" + absl::StrJoin(verl::SyntheticTaskNames(), ", ") + ")");
  const std::vector<std::string> tasks = verl::SyntheticTaskNames();
  if (std::find(tasks.begin(), tasks.end(), task) == tasks.end()) {
    return UsageError("unknown --task '" + task + "' (known: " + absl::StrJoin(tasks, ", ") + ")");
  }
  if (out_dir.empty()) return UsageError("--out-dir is required");
  if (format != "parquet" && format != "jsonl") {
    return UsageError("--format must be parquet or jsonl, got '" + format + "'");
  }
  if (!ParseNumber(flags["train-size"], &train_size) || train_size <= 0) {
    return UsageError("--train-size must be a positive integer, got '" + flags["train-size"] + "'");
  }
  if (!ParseNumber(flags["val-size"], &val_size) || val_size <= 0) {
    return UsageError("--val-size must be a positive integer, got '" + flags["val-size"] + "'");
  }
  if (!ParseNumber(flags["seed"], &seed)) {
    return UsageError("--seed must be a non-negative integer, got '" + flags["seed"] + "'");
  }

  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) {
    std::fprintf(stderr, "verl-make-dataset: %s: cannot create directory: %s\n", out_dir.c_str(),
                 ec.message().c_str());
    return 1;
  }
  for (const auto& [split, size] : {std::pair{std::string("train"), train_size}, std::pair{std::string("test"), val_size}}) {
    auto examples = verl::MakeSyntheticTask(task, split, size, seed);
    if (!examples.ok()) return UsageError(std::string(examples.status().message()));
    const std::string path = (std::filesystem::path(out_dir) / (split + "." + format)).string();
    const absl::Status status = format == "parquet" ? verl::WriteParquet(path, *examples)
                                                    : verl::WriteJsonl(path, *examples);
    if (!status.ok()) {
      std::fprintf(stderr, "verl-make-dataset: %s\n", status.ToString().c_str());
      return 1;
    }
    std::printf("wrote %lld %s examples of task %s to %s\n", static_cast<long long>(examples->size()), split.c_str(),
                task.c_str(), path.c_str());
  }
  return 0;
}
