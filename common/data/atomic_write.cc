#include "common/data/atomic_write.h"

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"

namespace verl {

absl::Status WriteAtomically(const std::string& path, const std::function<absl::Status(const std::string&)>& write) {
  static std::atomic<uint64_t> counter{0};
  const std::string temp_path = absl::StrCat(path, ".tmp-", static_cast<int64_t>(::getpid()), "-", counter++);
  absl::Status status = write(temp_path);
  std::error_code ec;
  if (status.ok()) {
    std::filesystem::rename(temp_path, path, ec);
    if (ec) {
      status = absl::InternalError(absl::StrCat(path, ": cannot rename ", temp_path, " into place: ", ec.message()));
    }
  }
  if (!status.ok()) std::filesystem::remove(temp_path, ec);
  return status;
}

}  // namespace verl
