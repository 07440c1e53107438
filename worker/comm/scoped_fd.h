#ifndef VERL_WORKER_COMM_SCOPED_FD_H_
#define VERL_WORKER_COMM_SCOPED_FD_H_

// A move-only owner of a POSIX file descriptor; closes it on destruction. -1 means "none".

#include <unistd.h>

#include <utility>

namespace verl {

class ScopedFd {
 public:
  ScopedFd() = default;
  explicit ScopedFd(int fd) : fd_(fd) {}
  ScopedFd(const ScopedFd&) = delete;
  ScopedFd& operator=(const ScopedFd&) = delete;
  ScopedFd(ScopedFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  ScopedFd& operator=(ScopedFd&& other) noexcept {
    if (this != &other) Reset(std::exchange(other.fd_, -1));
    return *this;
  }
  ~ScopedFd() { Reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  // Closes the current descriptor (if any) and takes ownership of `fd`.
  void Reset(int fd = -1) noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

}  // namespace verl

#endif  // VERL_WORKER_COMM_SCOPED_FD_H_
