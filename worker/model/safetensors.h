#ifndef VERL_WORKER_MODEL_SAFETENSORS_H_
#define VERL_WORKER_MODEL_SAFETENSORS_H_

// Reading and writing single safetensors files (https://huggingface.co/docs/safetensors), torch-free.
//
// Layout: 8-byte little-endian header length N, N bytes of JSON header
// {"__metadata__": {str: str}, "<name>": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...},
// then the data buffer; offsets are relative to the start of the buffer. Supported dtypes: F32, BF16, F16, I64, I32,
// U8, BOOL (the ones verl::DType has); any other dtype is an Unimplemented error naming the tensor.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/rank/host_tensor.h"

namespace verl {

// "[2, 3]": a shape as error messages print it.
std::string FormatShape(const std::vector<int64_t>& shape);

// The safetensors dtype string of `dtype` ("F32", "BF16", "F16", "I64", "I32", "U8", "BOOL").
std::string_view SafetensorsDTypeName(DType dtype);

// The DType of a safetensors dtype string, or nullopt when verl::DType has no such type.
std::optional<DType> ParseSafetensorsDType(std::string_view name);

// A read-only, memory-mapped safetensors file. Move-only; the mapping is released by the destructor, so every
// TensorView obtained from the file is valid only while the file object is alive (and not moved from).
// Const methods are safe to call from several threads.
class SafetensorsFile {
 public:
  // One tensor inside the mapping: row-major, little-endian, `nbytes` = numel * DTypeSize(dtype).
  struct TensorView {
    DType dtype = DType::kFloat32;
    std::vector<int64_t> shape;
    const void* data = nullptr;
    size_t nbytes = 0;

    int64_t numel() const;
    // A copy of the bytes as an owning HostTensor.
    HostTensor ToHostTensor() const;
  };

  // Maps `path` and parses and validates its header. Errors (all naming `path`): NotFound when the file does not
  // exist; DataLoss for a truncated file, a header that is not a JSON object, or offsets outside the data buffer,
  // inconsistent with shape * dtype size, or overlapping another tensor; InvalidArgument for malformed entries;
  // Unimplemented for a dtype verl::DType does not have (naming the tensor and dtype).
  static absl::StatusOr<SafetensorsFile> Open(const std::string& path);

  SafetensorsFile(SafetensorsFile&& other) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&& other) noexcept;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;
  ~SafetensorsFile();

  // Tensor names in lexicographic order (the "__metadata__" entry excluded).
  std::vector<std::string> names() const;
  bool Contains(const std::string& name) const;
  size_t size() const { return entries_.size(); }

  // The tensor `name`; NotFound naming the tensor and the file when absent.
  absl::StatusOr<TensorView> Get(const std::string& name) const;

  // The "__metadata__" entry (empty when the file has none).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  const std::string& path() const { return path_; }
  // Total file size in bytes.
  size_t file_size() const { return file_size_; }

 private:
  struct Entry {
    DType dtype;
    std::vector<int64_t> shape;
    size_t begin;  // relative to the data buffer
    size_t end;
  };

  SafetensorsFile() = default;
  void Release() noexcept;

  std::string path_;
  void* mapping_ = nullptr;  // nullptr when the file is empty of data or moved from
  size_t file_size_ = 0;
  size_t data_start_ = 0;  // 8 + header length
  std::map<std::string, Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

// A tensor to write, by reference: `data` must stay valid during the write call. Avoids copying large tensors.
// Or, with `data` null, `fetch` gives the bytes when the writer reaches the tensor (the tensors in write order, one at a
// time): they need to stay valid only until the next fetch or the end of the write, so a caller can stage one tensor
// at a time (a device tensor copied to the host). An exception it throws, or bytes of another size than `nbytes`
// (the header already says what follows), fails the write, naming the tensor.
struct TensorRef {
  std::string name;
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;
  const void* data = nullptr;
  size_t nbytes = 0;  // must equal numel(shape) * DTypeSize(dtype)
  std::function<std::span<const std::byte>()> fetch;
};

// Writes `tensors` to `path` in the layout HuggingFace's safetensors library produces: header JSON padded with spaces
// to a multiple of 8 bytes, "__metadata__" first, tensors ordered by dtype alignment (largest first) then name, data
// contiguous in that order. The file is written to a temporary file beside `path`, fsync'ed, and renamed over `path`,
// so readers never see a partial file. Errors: InvalidArgument for an empty, duplicate or reserved ("__metadata__")
// name, a negative dimension, or nbytes inconsistent with the shape (naming the tensor); the OS error, naming the
// path, when writing fails.
absl::Status WriteSafetensors(const std::string& path, const std::vector<TensorRef>& tensors,
                              const std::map<std::string, std::string>& metadata = {});

// Same, from owning tensors.
absl::Status WriteSafetensors(const std::string& path,
                              const std::vector<std::pair<std::string, HostTensor>>& tensors,
                              const std::map<std::string, std::string>& metadata = {});

// The TensorRef of an owning tensor (which must outlive the reference).
TensorRef MakeTensorRef(const std::string& name, const HostTensor& tensor);

}  // namespace verl

#endif  // VERL_WORKER_MODEL_SAFETENSORS_H_
