// verl-bench-tokenizer: encode throughput of verl::Tokenizer on a corpus file (BENCHMARKS.md B0).
//
//   verl-bench-tokenizer --tokenizer tokenizer.json --corpus FILE [--mode whole|lines] [--min-seconds 1]
//                        [--ids-out FILE]
//   verl-bench-tokenizer --train-merges N --corpus FILE --out tokenizer.json [--train-bytes B]
//
// Benchmark mode encodes the corpus (one Encode of the whole text, or one Encode per line with its "\n" kept)
// repeatedly, single-threaded, until at least --min-seconds have passed, and prints one JSON object:
//   {tokens_per_s, bytes_per_s, mb, vocab, tokens, mode, iterations, seconds, cold_tokens_per_s}
// where tokens is the count per pass, mb the corpus size in MB (1e6 bytes), and cold_tokens_per_s the first pass
// alone (before the BPE cache is warm). --ids-out writes the ids of one pass, space-separated, one line per encoded
// text, for comparison with another tokenizer.
// Train mode trains a byte-level BPE (TrainByteLevelBpeTokenizerJson, Qwen2-style) with N merges on the first
// --train-bytes bytes of the corpus's lines (default: all) and writes the tokenizer.json.
// Exit status: 0 ok, 2 usage error, 1 runtime error (unreadable file, bad tokenizer).

#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/text/bpe_trainer.h"
#include "common/text/tokenizer.h"

namespace {

const char* kUsage =
    "usage: verl-bench-tokenizer --tokenizer tokenizer.json --corpus FILE [--mode whole|lines] [--min-seconds 1]\n"
    "                            [--ids-out FILE]\n"
    "       verl-bench-tokenizer --train-merges N --corpus FILE --out tokenizer.json [--train-bytes B]\n";

int Usage(const std::string& message) {
  std::fprintf(stderr, "verl-bench-tokenizer: %s\n%s", message.c_str(), kUsage);
  return 2;
}

int Fail(const std::string& message) {
  std::fprintf(stderr, "verl-bench-tokenizer: %s\n", message.c_str());
  return 1;
}

// The lines of `text`, each with its trailing "\n" (the last one may lack it); their concatenation is `text`.
std::vector<std::string_view> SplitLines(std::string_view text) {
  std::vector<std::string_view> lines;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    end = end == std::string_view::npos ? text.size() : end + 1;
    lines.push_back(text.substr(start, end - start));
    start = end;
  }
  return lines;
}

int Train(const std::map<std::string, std::string>& flags, const std::string& corpus) {
  int merges;
  long long max_bytes;
  try {
    merges = std::stoi(flags.at("train-merges"));
    max_bytes = flags.at("train-bytes").empty() ? static_cast<long long>(corpus.size())
                                                : std::stoll(flags.at("train-bytes"));
  } catch (const std::exception&) {
    return Usage("--train-merges and --train-bytes need integers");
  }
  std::vector<std::string> texts;
  long long used = 0;
  for (std::string_view line : SplitLines(corpus)) {
    if (used >= max_bytes) break;
    texts.emplace_back(line);
    used += static_cast<long long>(line.size());
  }
  auto json = verl::TrainByteLevelBpeTokenizerJson(texts, merges, {"<|endoftext|>", "<|im_start|>", "<|im_end|>"});
  if (!json.ok()) return Fail(std::string(json.status().message()));
  std::ofstream out(flags.at("out"), std::ios::binary | std::ios::trunc);
  out << *json;
  if (!out) return Fail("cannot write '" + flags.at("out") + "'");
  std::printf("{\"trained_merges\": %d, \"train_bytes\": %lld, \"out\": \"%s\"}\n", merges, used,
              flags.at("out").c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::map<std::string, std::string> flags = {{"tokenizer", ""},    {"corpus", ""},       {"mode", "whole"},
                                              {"min-seconds", "1"}, {"ids-out", ""},      {"train-merges", ""},
                                              {"out", ""},          {"train-bytes", ""}};
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (arg.rfind("--", 0) != 0 || !flags.count(arg.substr(2))) return Usage("unknown flag '" + arg + "'");
    if (i + 1 >= argc) return Usage("flag '" + arg + "' needs a value");
    flags[arg.substr(2)] = argv[++i];
  }
  if (flags["corpus"].empty()) return Usage("--corpus is required");
  std::ifstream in(flags["corpus"], std::ios::binary);
  if (!in) return Fail("cannot open corpus '" + flags["corpus"] + "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  const std::string corpus = ss.str();

  if (!flags["train-merges"].empty()) {
    if (flags["out"].empty()) return Usage("--train-merges needs --out");
    return Train(flags, corpus);
  }
  if (flags["tokenizer"].empty()) return Usage("--tokenizer is required");
  const std::string mode = flags["mode"];
  if (mode != "whole" && mode != "lines") return Usage("--mode must be whole or lines, got '" + mode + "'");
  double min_seconds;
  try {
    min_seconds = std::stod(flags["min-seconds"]);
  } catch (const std::exception&) {
    return Usage("--min-seconds needs a number, got '" + flags["min-seconds"] + "'");
  }
  auto tokenizer = verl::Tokenizer::FromFile(flags["tokenizer"]);
  if (!tokenizer.ok()) return Fail(std::string(tokenizer.status().message()));

  std::vector<std::string_view> texts;
  if (mode == "whole") {
    texts.push_back(corpus);
  } else {
    texts = SplitLines(corpus);
  }

  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  int64_t tokens_per_pass = 0;
  int64_t iterations = 0;
  double cold_seconds = 0;
  double seconds = 0;
  std::vector<std::vector<int32_t>> first_ids;
  do {
    int64_t tokens = 0;
    for (std::string_view text : texts) {
      std::vector<int32_t> ids = tokenizer->Encode(text);
      tokens += static_cast<int64_t>(ids.size());
      if (iterations == 0 && !flags["ids-out"].empty()) first_ids.push_back(std::move(ids));
    }
    if (iterations == 0) {
      tokens_per_pass = tokens;
      cold_seconds = std::chrono::duration<double>(Clock::now() - start).count();
    }
    ++iterations;
    seconds = std::chrono::duration<double>(Clock::now() - start).count();
  } while (seconds < min_seconds);

  if (!flags["ids-out"].empty()) {
    std::ofstream ids_out(flags["ids-out"], std::ios::binary | std::ios::trunc);
    for (const std::vector<int32_t>& ids : first_ids) {
      for (size_t i = 0; i < ids.size(); ++i) ids_out << (i ? " " : "") << ids[i];
      ids_out << "\n";
    }
    if (!ids_out) return Fail("cannot write '" + flags["ids-out"] + "'");
  }
  const double total_tokens = static_cast<double>(tokens_per_pass) * static_cast<double>(iterations);
  nlohmann::json out = {
      {"tokens_per_s", total_tokens / seconds},
      {"bytes_per_s", static_cast<double>(corpus.size()) * static_cast<double>(iterations) / seconds},
      {"mb", static_cast<double>(corpus.size()) / 1e6},
      {"vocab", tokenizer->vocab_size()},
      {"tokens", tokens_per_pass},
      {"mode", mode},
      {"texts", texts.size()},
      {"iterations", iterations},
      {"seconds", seconds},
      {"cold_tokens_per_s", static_cast<double>(tokens_per_pass) / cold_seconds}};
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
