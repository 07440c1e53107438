// libFuzzer: the job config parser on arbitrary YAML (anchors, types, interpolation ${...}, unknown keys), and on
// arbitrary command-line overrides (the first line of the input), through validation to a JobConfig.

#include <cstdint>
#include <string>
#include <vector>

#include "common/config/config_loader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  (void)verl::LoadConfigFromString(input, "<fuzz>", {});
  const size_t newline = input.find('\n');
  const std::string override = input.substr(0, newline);
  const std::string yaml = newline == std::string::npos ? "" : input.substr(newline + 1);
  (void)verl::LoadConfigFromString(yaml, "<fuzz>", {override});
  return 0;
}
