// libFuzzer: the safetensors reader on arbitrary bytes (header length, JSON header, dtypes, shapes, offsets), then the
// tensor decoding the model loader does: every tensor viewed, copied out, and 16-bit floats widened to float32.
// Must never crash, hang or read outside the file; errors are statuses.

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "worker/model/dtype_convert.h"
#include "worker/model/safetensors.h"

namespace {

const std::string& Path() {
  static const std::string path = "/tmp/verl_safetensors_fuzz_" + std::to_string(::getpid()) + ".safetensors";
  return path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (FILE* f = std::fopen(Path().c_str(), "wb")) {
    std::fwrite(data, 1, size, f);
    std::fclose(f);
  } else {
    return 0;
  }
  auto file = verl::SafetensorsFile::Open(Path());
  if (!file.ok()) return 0;
  for (const std::string& name : file->names()) {
    auto view = file->Get(name);
    if (!view.ok()) continue;
    verl::HostTensor host = view->ToHostTensor();
    const size_t n = host.bytes.size() / 2;
    std::vector<float> widened(n);
    const auto* half = reinterpret_cast<const uint16_t*>(host.bytes.data());
    if (host.dtype == verl::DType::kBFloat16) verl::BFloat16ToFloat32(half, widened.data(), n);
    if (host.dtype == verl::DType::kFloat16) verl::Float16ToFloat32(half, widened.data(), n);
  }
  return 0;
}
