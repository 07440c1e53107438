// libFuzzer: encoding arbitrary bytes with a byte-level BPE tokenizer (trained at start-up, with special tokens), and
// the round trip: for ASCII text without special-token markers, Decode(Encode(x)) must give x back exactly.

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "common/text/bpe_trainer.h"
#include "common/text/tokenizer.h"

namespace {
std::unique_ptr<verl::Tokenizer> g_tokenizer;
}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  auto json = verl::TrainByteLevelBpeTokenizerJson(
      {"the quick brown fox jumps over the lazy dog", "int main() { return 0; }", "1234567890 + 42 = 1234567932",
       "    indented\n\ttabbed\r\n", "\xe4\xbd\xa0\xe5\xa5\xbd\xe4\xb8\x96\xe7\x95\x8c"},
      200, {"<|endoftext|>", "<|im_start|>", "<|im_end|>"});
  if (!json.ok()) std::abort();
  auto tok = verl::Tokenizer::FromJson(*json, "<trained>");
  if (!tok.ok()) std::abort();
  g_tokenizer = std::make_unique<verl::Tokenizer>(std::move(*tok));
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::vector<int32_t> ids = g_tokenizer->Encode(text);
  const std::string back = g_tokenizer->Decode(ids, false, verl::Tokenizer::InvalidUtf8::kKeep);
  bool ascii = true;
  for (unsigned char c : text) ascii = ascii && c < 0x80;
  if (ascii && text.find("<|") == std::string::npos && back != text) std::abort();  // a real bug: report it
  (void)g_tokenizer->Encode(text, /*parse_special=*/false);
  return 0;
}
