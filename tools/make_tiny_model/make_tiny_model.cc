// verl-make-tiny-model: writes a small random Qwen2 model as an HF directory, with a byte-level BPE tokenizer trained
// on the quickstart task's text, so tests and the CPU quickstart need nothing from the network.
//
//   verl-make-tiny-model --out-dir models/tiny-qwen2 [--hidden 64] [--layers 2] [--heads 4] [--kv-heads 2]
//                        [--intermediate 256] [--merges 40] [--seed 1] [--vocab-size 0] [--rope-theta 10000]
//
// The directory holds config.json, generation_config.json, model.safetensors (float32, N(0, 0.02), fixed seed),
// tokenizer.json, tokenizer_config.json (ChatML chat template). The vocabulary is the tokenizer's, or --vocab-size
// rows when larger (the extra ids are never produced by the tokenizer, as in real models whose embedding is padded).
//
// BENCHMARKS.md's bench-0.5b (the Qwen2.5-0.5B architecture, random weights):
//   verl-make-tiny-model --out-dir models/bench-0.5b --hidden 896 --layers 24 --heads 14 --kv-heads 2 \
//       --intermediate 4864 --vocab-size 151936 --rope-theta 1000000

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/data/synthetic_tasks.h"
#include "common/text/bpe_trainer.h"
#include "common/text/chat_template.h"
#include "common/text/tokenizer.h"
#include "worker/model/hf_config.h"
#include "worker/model/random_model.h"

namespace {

int Fail(const std::string& message) {
  std::fprintf(stderr, "verl-make-tiny-model: %s\n", message.c_str());
  return 1;
}

const char* kUsage =
    "usage: verl-make-tiny-model --out-dir DIR [--hidden 64] [--layers 2] [--heads 4] [--kv-heads 2]\n"
    "                            [--intermediate 256] [--merges 40] [--seed 1] [--vocab-size 0]\n"
    "                            [--rope-theta 10000]\n";

// ChatML, as Qwen2.5's tokenizer_config.json spells it minus the default system prompt.
const char* kChatTemplate =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + "
    "'\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

}  // namespace

int main(int argc, char** argv) {
  std::map<std::string, std::string> flags = {{"out-dir", ""},         {"hidden", "64"}, {"layers", "2"},
                                              {"heads", "4"},          {"kv-heads", "2"}, {"intermediate", "256"},
                                              {"merges", "40"},        {"seed", "1"},     {"vocab-size", "0"},
                                              {"rope-theta", "10000"}};
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (arg.rfind("--", 0) != 0 || !flags.count(arg.substr(2)) || i + 1 >= argc) {
      std::fputs(kUsage, stderr);
      return Fail("unknown or incomplete flag '" + arg + "'");
    }
    flags[arg.substr(2)] = argv[++i];
  }
  if (flags["out-dir"].empty()) {
    std::fputs(kUsage, stderr);
    return Fail("--out-dir is required");
  }
  const std::string out = flags["out-dir"];
  int64_t hidden, layers, heads, kv_heads, intermediate, merges, seed, vocab_size;
  double rope_theta;
  try {
    hidden = std::stoll(flags["hidden"]);
    layers = std::stoll(flags["layers"]);
    heads = std::stoll(flags["heads"]);
    kv_heads = std::stoll(flags["kv-heads"]);
    intermediate = std::stoll(flags["intermediate"]);
    merges = std::stoll(flags["merges"]);
    seed = std::stoll(flags["seed"]);
    vocab_size = std::stoll(flags["vocab-size"]);
    rope_theta = std::stod(flags["rope-theta"]);
  } catch (const std::exception&) {
    return Fail("numeric flags need integer values");
  }

  // The tokenizer learns its merges from the text the quickstart will show it: chat-formatted prompts and answers.
  auto examples = verl::MakeSyntheticTask("repeat_letter", "train", 256, static_cast<uint64_t>(seed));
  if (!examples.ok()) return Fail(std::string(examples.status().message()));
  std::vector<std::string> corpus;
  for (const verl::Example& ex : *examples) {
    corpus.push_back(verl::ApplyChatTemplate(ex.prompt, true));
    corpus.push_back(std::string(8, ex.ground_truth.empty() ? 'a' : ex.ground_truth[0]));
  }
  const std::vector<std::string> specials = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
  auto tokenizer_json = verl::TrainByteLevelBpeTokenizerJson(corpus, static_cast<int>(merges), specials);
  if (!tokenizer_json.ok()) return Fail(std::string(tokenizer_json.status().message()));
  auto tokenizer = verl::Tokenizer::FromJson(*tokenizer_json, "trained tokenizer");
  if (!tokenizer.ok()) return Fail(std::string(tokenizer.status().message()));
  const int32_t endoftext = *tokenizer->TokenToId("<|endoftext|>");
  const int32_t im_end = *tokenizer->TokenToId("<|im_end|>");

  verl::DecoderConfig config;
  config.model_type = "qwen2";
  if (vocab_size != 0 && vocab_size < tokenizer->vocab_size()) {
    return Fail("--vocab-size " + std::to_string(vocab_size) + " is smaller than the tokenizer's " +
                std::to_string(tokenizer->vocab_size()) + " ids");
  }
  config.vocab_size = std::max<int64_t>(vocab_size, tokenizer->vocab_size());
  config.hidden_size = hidden;
  config.intermediate_size = intermediate;
  config.num_hidden_layers = layers;
  config.num_attention_heads = heads;
  config.num_key_value_heads = kv_heads;
  config.head_dim = hidden / heads;
  config.max_position_embeddings = 1024;
  config.rope_theta = rope_theta;
  config.rms_norm_eps = 1e-6;
  config.tie_word_embeddings = true;
  config.attention_bias = true;
  config.torch_dtype = "float32";
  config.eos_token_ids = {im_end, endoftext};
  config.pad_token_id = endoftext;
  absl::Status written = verl::WriteRandomDecoder(out, config, static_cast<uint64_t>(seed), verl::DType::kFloat32);
  if (!written.ok()) return Fail(std::string(written.message()));

  nlohmann::json tokenizer_config = {
      {"chat_template", kChatTemplate}, {"eos_token", "<|im_end|>"},         {"pad_token", "<|endoftext|>"},
      {"bos_token", nullptr},           {"model_max_length", 1024},          {"tokenizer_class", "Qwen2Tokenizer"},
      {"clean_up_tokenization_spaces", false}, {"errors", "replace"}};
  std::ofstream(out + "/tokenizer.json") << *tokenizer_json;
  std::ofstream(out + "/tokenizer_config.json") << tokenizer_config.dump(2) << "\n";
  std::printf("wrote %s: qwen2, hidden %lld, %lld layers, %lld heads (%lld kv), vocab %lld\n", out.c_str(),
              static_cast<long long>(hidden), static_cast<long long>(layers), static_cast<long long>(heads),
              static_cast<long long>(kv_heads), static_cast<long long>(config.vocab_size));
  return 0;
}
