#include "worker/model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <exception>
#include <limits>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace verl {
namespace {

// The Rust reference implementation refuses headers above 100 MB; so do we (a corrupt length would otherwise make us
// try to parse gigabytes).
constexpr uint64_t kMaxHeaderBytes = 100ull * 1000 * 1000;
constexpr std::string_view kMetadataKey = "__metadata__";

std::string Quote(std::string_view s) { return absl::StrCat("'", absl::string_view(s.data(), s.size()), "'"); }

absl::Status OsError(int error_number, std::string_view what, const std::string& path) {
  return absl::ErrnoToStatus(error_number, absl::StrCat(absl::string_view(what.data(), what.size()), " ", path));
}

// Reads a non-negative JSON integer into `out`; false when `value` is not one.
bool GetNonNegative(const nlohmann::json& value, uint64_t* out) {
  if (value.is_number_unsigned()) {
    *out = value.get<uint64_t>();
    return true;
  }
  if (value.is_number_integer()) {
    const int64_t v = value.get<int64_t>();
    if (v < 0) return false;
    *out = static_cast<uint64_t>(v);
    return true;
  }
  return false;
}

// Largest alignment first, as the Rust writer orders its Dtype enum in reverse.
int DTypeWriteRank(DType dtype) {
  switch (dtype) {
    case DType::kInt64: return 0;
    case DType::kFloat32: return 1;
    case DType::kInt32: return 2;
    case DType::kBFloat16: return 3;
    case DType::kFloat16: return 4;
    case DType::kUInt8: return 5;
    case DType::kBool: return 6;
  }
  return 7;
}

// numel * dtype size with overflow detection; nullopt on overflow or a negative dimension.
std::optional<uint64_t> ByteSize(const std::vector<int64_t>& shape, DType dtype) {
  uint64_t n = static_cast<uint64_t>(DTypeSize(dtype));
  for (int64_t d : shape) {
    if (d < 0) return std::nullopt;
    const uint64_t ud = static_cast<uint64_t>(d);
    if (ud != 0 && n > std::numeric_limits<uint64_t>::max() / ud) return std::nullopt;
    n *= ud;
  }
  return n;
}

}  // namespace

std::string FormatShape(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) absl::StrAppend(&s, i ? ", " : "", shape[i]);
  return s + "]";
}

namespace {

// Writes all of [data, data + n) to `fd`, retrying on EINTR and short writes. Returns errno, 0 on success.
int WriteAll(int fd, const char* data, size_t n) {
  constexpr size_t kChunk = size_t{1} << 30;
  while (n > 0) {
    const ssize_t w = ::write(fd, data, std::min(n, kChunk));
    if (w < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (w == 0) return EIO;  // no progress on a regular file: never retry forever
    data += w;
    n -= static_cast<size_t>(w);
  }
  return 0;
}

}  // namespace

std::string_view SafetensorsDTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return "F32";
    case DType::kBFloat16: return "BF16";
    case DType::kFloat16: return "F16";
    case DType::kInt64: return "I64";
    case DType::kInt32: return "I32";
    case DType::kUInt8: return "U8";
    case DType::kBool: return "BOOL";
  }
  return "UNKNOWN";
}

std::optional<DType> ParseSafetensorsDType(std::string_view name) {
  for (DType d : {DType::kFloat32, DType::kBFloat16, DType::kFloat16, DType::kInt64, DType::kInt32, DType::kUInt8,
                  DType::kBool}) {
    if (SafetensorsDTypeName(d) == name) return d;
  }
  return std::nullopt;
}

int64_t SafetensorsFile::TensorView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

HostTensor SafetensorsFile::TensorView::ToHostTensor() const {
  HostTensor t;
  t.dtype = dtype;
  t.shape = shape;
  t.bytes.assign(static_cast<const char*>(data), nbytes);
  return t;
}

SafetensorsFile::SafetensorsFile(SafetensorsFile&& other) noexcept
    : path_(std::move(other.path_)),
      mapping_(std::exchange(other.mapping_, nullptr)),
      file_size_(std::exchange(other.file_size_, 0)),
      data_start_(std::exchange(other.data_start_, 0)),
      entries_(std::move(other.entries_)),
      metadata_(std::move(other.metadata_)) {
  other.entries_.clear();
  other.metadata_.clear();
}

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& other) noexcept {
  if (this != &other) {
    Release();
    path_ = std::move(other.path_);
    mapping_ = std::exchange(other.mapping_, nullptr);
    file_size_ = std::exchange(other.file_size_, 0);
    data_start_ = std::exchange(other.data_start_, 0);
    entries_ = std::move(other.entries_);
    metadata_ = std::move(other.metadata_);
    other.entries_.clear();
    other.metadata_.clear();
  }
  return *this;
}

SafetensorsFile::~SafetensorsFile() { Release(); }

void SafetensorsFile::Release() noexcept {
  if (mapping_ != nullptr) ::munmap(mapping_, file_size_);
  mapping_ = nullptr;
}

absl::StatusOr<SafetensorsFile> SafetensorsFile::Open(const std::string& path) {
  SafetensorsFile file;
  file.path_ = path;

  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return OsError(errno, "cannot open safetensors file", path);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return OsError(err, "cannot stat safetensors file", path);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat("safetensors file ", path, " is not a regular file"));
  }
  const size_t file_size = static_cast<size_t>(st.st_size);
  if (file_size < 8) {
    ::close(fd);
    return absl::DataLossError(
        absl::StrCat("safetensors file ", path, " is truncated: ", file_size, " bytes, the 8-byte header length is missing"));
  }
  void* mapping = ::mmap(nullptr, file_size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_errno = errno;
  ::close(fd);  // the mapping keeps the file alive
  if (mapping == MAP_FAILED) return OsError(map_errno, "cannot mmap safetensors file", path);
  file.mapping_ = mapping;
  file.file_size_ = file_size;

  const auto* bytes = static_cast<const unsigned char*>(mapping);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | bytes[i];
  if (header_len > kMaxHeaderBytes) {
    return absl::DataLossError(absl::StrCat("safetensors file ", path, ": header length ", header_len,
                                            " exceeds the 100 MB limit (corrupt file?)"));
  }
  if (header_len > file_size - 8) {
    return absl::DataLossError(absl::StrCat("safetensors file ", path, " is truncated: header length ", header_len,
                                            " but only ", file_size - 8, " bytes follow the length field"));
  }
  file.data_start_ = 8 + static_cast<size_t>(header_len);
  const size_t data_size = file_size - file.data_start_;

  const char* header_begin = reinterpret_cast<const char*>(bytes + 8);
  nlohmann::json header =
      nlohmann::json::parse(header_begin, header_begin + header_len, /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) {
    return absl::DataLossError(absl::StrCat("safetensors file ", path, ": header is not a JSON object"));
  }

  try {
    for (auto it = header.begin(); it != header.end(); ++it) {
      const std::string& name = it.key();
      const nlohmann::json& value = it.value();
      if (name == kMetadataKey) {
        if (value.is_null()) continue;
        if (!value.is_object()) {
          return absl::InvalidArgumentError(
              absl::StrCat("safetensors file ", path, ": \"__metadata__\" is not an object of strings"));
        }
        for (auto m = value.begin(); m != value.end(); ++m) {
          if (!m.value().is_string()) {
            return absl::InvalidArgumentError(absl::StrCat("safetensors file ", path, ": \"__metadata__\" key ",
                                                           Quote(m.key()), " is not a string"));
          }
          file.metadata_[m.key()] = m.value().get<std::string>();
        }
        continue;
      }
      const std::string where = absl::StrCat("safetensors file ", path, ", tensor ", Quote(name));
      if (!value.is_object()) return absl::InvalidArgumentError(absl::StrCat(where, ": entry is not an object"));
      auto dtype_it = value.find("dtype");
      if (dtype_it == value.end() || !dtype_it->is_string()) {
        return absl::InvalidArgumentError(absl::StrCat(where, ": missing or non-string \"dtype\""));
      }
      const std::string dtype_name = dtype_it->get<std::string>();
      const std::optional<DType> dtype = ParseSafetensorsDType(dtype_name);
      if (!dtype) {
        return absl::UnimplementedError(absl::StrCat(where, ": dtype ", Quote(dtype_name),
                                                     " is not supported (supported: F32, BF16, F16, I64, I32, U8, BOOL)"));
      }
      auto shape_it = value.find("shape");
      if (shape_it == value.end() || !shape_it->is_array()) {
        return absl::InvalidArgumentError(absl::StrCat(where, ": missing or non-array \"shape\""));
      }
      Entry entry;
      entry.dtype = *dtype;
      for (const auto& d : *shape_it) {
        uint64_t dim = 0;
        if (!GetNonNegative(d, &dim) || dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
          return absl::InvalidArgumentError(
              absl::StrCat(where, ": \"shape\" ", shape_it->dump(), " has an entry that is not a non-negative integer"));
        }
        entry.shape.push_back(static_cast<int64_t>(dim));
      }
      auto off_it = value.find("data_offsets");
      uint64_t begin = 0, end = 0;
      if (off_it == value.end() || !off_it->is_array() || off_it->size() != 2 || !GetNonNegative((*off_it)[0], &begin) ||
          !GetNonNegative((*off_it)[1], &end)) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": \"data_offsets\" must be [begin, end] with non-negative integers"));
      }
      if (begin > end || end > data_size) {
        return absl::DataLossError(absl::StrCat(where, ": data_offsets [", begin, ", ", end,
                                                "] out of range of the data buffer (", data_size, " bytes)"));
      }
      const std::optional<uint64_t> expected = ByteSize(entry.shape, entry.dtype);
      if (!expected || *expected != end - begin) {
        return absl::DataLossError(absl::StrCat(where, ": data_offsets [", begin, ", ", end, "] span ", end - begin,
                                                " bytes but shape ", FormatShape(entry.shape), " of ", dtype_name,
                                                " needs ", expected ? absl::StrCat(*expected) : "an overflowing number of",
                                                " bytes"));
      }
      entry.begin = static_cast<size_t>(begin);
      entry.end = static_cast<size_t>(end);
      file.entries_.emplace(name, std::move(entry));
    }
  } catch (const nlohmann::json::exception& e) {
    return absl::DataLossError(absl::StrCat("safetensors file ", path, ": malformed header: ", e.what()));
  }

  // Overlapping tensors would alias each other's bytes; the format forbids it.
  std::vector<std::pair<size_t, const std::string*>> by_offset;
  for (const auto& [name, entry] : file.entries_) {
    if (entry.end > entry.begin) by_offset.emplace_back(entry.begin, &name);
  }
  std::sort(by_offset.begin(), by_offset.end());
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const Entry& prev = file.entries_.at(*by_offset[i - 1].second);
    if (prev.end > by_offset[i].first) {
      return absl::DataLossError(absl::StrCat("safetensors file ", path, ": tensors ", Quote(*by_offset[i - 1].second),
                                              " and ", Quote(*by_offset[i].second), " overlap"));
    }
  }
  return file;
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  out.reserve(entries_.size());
  for (const auto& [name, entry] : entries_) out.push_back(name);
  return out;
}

bool SafetensorsFile::Contains(const std::string& name) const { return entries_.count(name) > 0; }

absl::StatusOr<SafetensorsFile::TensorView> SafetensorsFile::Get(const std::string& name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) {
    return absl::NotFoundError(absl::StrCat("tensor ", Quote(name), " not found in safetensors file ", path_));
  }
  const Entry& e = it->second;
  TensorView view;
  view.dtype = e.dtype;
  view.shape = e.shape;
  view.data = static_cast<const char*>(mapping_) + data_start_ + e.begin;
  view.nbytes = e.end - e.begin;
  return view;
}

TensorRef MakeTensorRef(const std::string& name, const HostTensor& tensor) {
  return TensorRef{name, tensor.dtype, tensor.shape, tensor.bytes.data(), tensor.bytes.size()};
}

absl::Status WriteSafetensors(const std::string& path, const std::vector<TensorRef>& tensors,
                              const std::map<std::string, std::string>& metadata) {
  // Validate and order.
  std::vector<const TensorRef*> order;
  order.reserve(tensors.size());
  for (const TensorRef& t : tensors) {
    const std::string where = absl::StrCat("writing safetensors file ", path, ", tensor ", Quote(t.name));
    if (t.name.empty() || t.name == kMetadataKey) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": empty or reserved tensor name"));
    }
    const std::optional<uint64_t> expected = ByteSize(t.shape, t.dtype);
    if (!expected) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": invalid shape ", FormatShape(t.shape)));
    }
    if (*expected != t.nbytes) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": ", t.nbytes, " bytes given but shape ",
                                                     FormatShape(t.shape), " of ", std::string(SafetensorsDTypeName(t.dtype)),
                                                     " needs ", *expected));
    }
    if (t.nbytes > 0 && t.data == nullptr && !t.fetch) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": null data"));
    }
    order.push_back(&t);
  }
  std::sort(order.begin(), order.end(), [](const TensorRef* a, const TensorRef* b) {
    const int ra = DTypeWriteRank(a->dtype), rb = DTypeWriteRank(b->dtype);
    if (ra != rb) return ra < rb;
    return a->name < b->name;
  });
  {
    std::vector<std::string_view> names;
    names.reserve(order.size());
    for (const TensorRef* t : order) names.push_back(t->name);
    std::sort(names.begin(), names.end());
    auto dup = std::adjacent_find(names.begin(), names.end());
    if (dup != names.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("writing safetensors file ", path, ": duplicate tensor name ", Quote(*dup)));
    }
  }

  std::string header_text;
  try {
    nlohmann::ordered_json header = nlohmann::ordered_json::object();
    if (!metadata.empty()) {
      nlohmann::ordered_json meta = nlohmann::ordered_json::object();
      for (const auto& [k, v] : metadata) meta[k] = v;
      header[std::string(kMetadataKey)] = std::move(meta);
    }
    uint64_t offset = 0;
    for (const TensorRef* t : order) {
      nlohmann::ordered_json info = nlohmann::ordered_json::object();
      info["dtype"] = std::string(SafetensorsDTypeName(t->dtype));
      info["shape"] = t->shape;
      info["data_offsets"] = {offset, offset + t->nbytes};
      header[t->name] = std::move(info);
      offset += t->nbytes;
    }
    header_text = header.dump();
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("writing safetensors file ", path, ": cannot encode the header (non-UTF-8 name?): ", e.what()));
  }
  header_text.append((8 - header_text.size() % 8) % 8, ' ');
  char length_bytes[8];
  uint64_t len = header_text.size();
  for (int i = 0; i < 8; ++i) length_bytes[i] = static_cast<char>((len >> (8 * i)) & 0xff);

  static std::atomic<uint64_t> counter{0};
  const std::string tmp_path = absl::StrCat(path, ".tmp.", ::getpid(), ".", counter.fetch_add(1));
  const int fd = ::open(tmp_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return OsError(errno, "cannot create temporary file", tmp_path);
  auto discard = [&]() {
    ::close(fd);
    ::unlink(tmp_path.c_str());
  };
  auto fail = [&](int err, std::string_view what) {
    discard();
    return OsError(err, what, tmp_path);
  };
  int err = WriteAll(fd, length_bytes, 8);
  if (err == 0) err = WriteAll(fd, header_text.data(), header_text.size());
  for (size_t i = 0; err == 0 && i < order.size(); ++i) {
    const TensorRef& t = *order[i];
    const void* data = t.data;
    if (data == nullptr && t.nbytes > 0) {
      std::string error;
      std::span<const std::byte> bytes;
      try {
        bytes = t.fetch();
      } catch (const std::exception& e) {
        error = e.what();
      } catch (...) {
        error = "an exception of unknown type";
      }
      if (error.empty() && bytes.size() != t.nbytes) {
        error = absl::StrCat("got ", bytes.size(), " bytes where its header entry (",
                             std::string(SafetensorsDTypeName(t.dtype)), " ",
                             FormatShape(t.shape), ") says ", t.nbytes);
      }
      data = bytes.data();
      if (!error.empty() || data == nullptr) {
        discard();
        return absl::InternalError(absl::StrCat("writing safetensors file ", path, ", tensor ", Quote(t.name),
                                                ": cannot get its bytes", error.empty() ? "" : ": ", error));
      }
    }
    err = WriteAll(fd, static_cast<const char*>(data), t.nbytes);
  }
  if (err != 0) return fail(err, "cannot write");
  if (::fsync(fd) != 0) return fail(errno, "cannot fsync");
  if (::close(fd) != 0) {
    const int close_err = errno;
    ::unlink(tmp_path.c_str());
    return OsError(close_err, "cannot close", tmp_path);
  }
  if (::rename(tmp_path.c_str(), path.c_str()) != 0) {
    const int rename_err = errno;
    ::unlink(tmp_path.c_str());
    return OsError(rename_err, absl::StrCat("cannot rename ", tmp_path, " to"), path);
  }
  return absl::OkStatus();
}

absl::Status WriteSafetensors(const std::string& path,
                              const std::vector<std::pair<std::string, HostTensor>>& tensors,
                              const std::map<std::string, std::string>& metadata) {
  std::vector<TensorRef> refs;
  refs.reserve(tensors.size());
  for (const auto& [name, tensor] : tensors) refs.push_back(MakeTensorRef(name, tensor));
  return WriteSafetensors(path, refs, metadata);
}

}  // namespace verl
