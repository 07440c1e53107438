#ifndef VERL_COMMON_METRICS_CRC32C_H_
#define VERL_COMMON_METRICS_CRC32C_H_

// CRC-32C (Castagnoli), as TFRecord files (TensorBoard event files) checksum their records, and the "masked" form
// they store: ((crc >> 15) | (crc << 17)) + 0xa282ead8.

#include <cstddef>
#include <cstdint>

namespace verl {

uint32_t Crc32c(const void* data, size_t size);
uint32_t MaskedCrc32c(const void* data, size_t size);

}  // namespace verl

#endif  // VERL_COMMON_METRICS_CRC32C_H_
