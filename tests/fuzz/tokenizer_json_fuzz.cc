// libFuzzer: the tokenizer.json loader on arbitrary text (JSON structure, model type, vocab and merges, pre-tokenizer
// and normalizer specs, added tokens), then, when it loads, encoding and decoding with it.

#include <cstdint>
#include <string>
#include <vector>

#include "common/text/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string json(reinterpret_cast<const char*>(data), size);
  auto tok = verl::Tokenizer::FromJson(json, "<fuzz>");
  if (!tok.ok()) return 0;
  for (const char* text : {"Hello, world! 123 ", "  \n\t<|endoftext|>x", "\xe4\xbd\xa0\xe5\xa5\xbd \xf0\x9f\x98\x80"}) {
    std::vector<int32_t> ids = tok->Encode(text);
    (void)tok->Decode(ids);
  }
  std::vector<int32_t> all;
  for (int32_t id = -2; id < 64 && id < tok->vocab_size() + 2; ++id) all.push_back(id);
  (void)tok->Decode(all, /*skip_special_tokens=*/true);
  return 0;
}
