#include "worker/comm/free_ports.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "worker/comm/scoped_fd.h"

namespace verl {

absl::StatusOr<std::vector<int>> PickFreeLoopbackPorts(int n) {
  if (n < 0) return absl::InvalidArgumentError(absl::StrCat("PickFreeLoopbackPorts: n must be >= 0, got ", n));
  // Keep every socket bound until all are picked so the kernel hands out distinct ports.
  std::vector<ScopedFd> sockets;
  std::vector<int> ports;
  for (int i = 0; i < n; ++i) {
    ScopedFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd.valid()) {
      return absl::UnavailableError(absl::StrCat("PickFreeLoopbackPorts: socket(): ", std::strerror(errno)));
    }
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      return absl::UnavailableError(absl::StrCat("PickFreeLoopbackPorts: bind(127.0.0.1:0): ", std::strerror(errno)));
    }
    socklen_t len = sizeof(addr);
    if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      return absl::UnavailableError(absl::StrCat("PickFreeLoopbackPorts: getsockname(): ", std::strerror(errno)));
    }
    ports.push_back(ntohs(addr.sin_port));
    sockets.push_back(std::move(fd));
  }
  return ports;
}

absl::StatusOr<std::vector<std::string>> PickFreeLoopbackAddresses(int n) {
  absl::StatusOr<std::vector<int>> ports = PickFreeLoopbackPorts(n);
  if (!ports.ok()) return ports.status();
  std::vector<std::string> addresses;
  for (int port : *ports) addresses.push_back(absl::StrCat("127.0.0.1:", port));
  return addresses;
}

}  // namespace verl
