#include "common/data/atomic_write.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
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

absl::Status SyncDirectory(const std::string& dir) {
  const std::string name = dir.empty() ? "." : dir;
  const int fd = ::open(name.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return absl::InternalError(absl::StrCat("cannot open directory '", name, "': ", std::strerror(errno)));
  int err = ::fsync(fd) == 0 ? 0 : errno;
  ::close(fd);
  if (err == EINVAL || err == ENOTSUP) err = 0;
  if (err != 0) return absl::InternalError(absl::StrCat("cannot sync directory '", name, "': ", std::strerror(err)));
  return absl::OkStatus();
}

absl::Status WriteFileAtomically(const std::string& path, const std::string& contents) {
  absl::Status status = WriteAtomically(path, [&](const std::string& temp_path) -> absl::Status {
    const int fd = ::open(temp_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return absl::InternalError(absl::StrCat("cannot write '", temp_path, "': ", std::strerror(errno)));
    size_t done = 0;
    while (done < contents.size()) {
      const ssize_t n = ::write(fd, contents.data() + done, contents.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        const int err = errno;
        ::close(fd);
        return absl::InternalError(absl::StrCat("cannot write '", temp_path, "': ", std::strerror(err)));
      }
      done += static_cast<size_t>(n);
    }
    if (::fsync(fd) != 0) {
      const int err = errno;
      ::close(fd);
      return absl::InternalError(absl::StrCat("cannot sync '", temp_path, "': ", std::strerror(err)));
    }
    if (::close(fd) != 0) {
      return absl::InternalError(absl::StrCat("cannot close '", temp_path, "': ", std::strerror(errno)));
    }
    return absl::OkStatus();
  });
  if (!status.ok()) return status;
  return SyncDirectory(std::filesystem::path(path).parent_path().string());
}

}  // namespace verl
