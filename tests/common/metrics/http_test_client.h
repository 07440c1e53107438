#ifndef VERL_TESTS_COMMON_METRICS_HTTP_TEST_CLIENT_H_
#define VERL_TESTS_COMMON_METRICS_HTTP_TEST_CLIENT_H_

// A minimal blocking HTTP client over a real TCP socket for tests: sends raw bytes, reads until the server closes.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>

namespace verl::testing {

// Connects to 127.0.0.1:`port`; -1 on failure.
inline int ConnectLoopback(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

inline bool SendAll(int fd, const std::string& data) {
  size_t sent = 0;
  while (sent < data.size()) {
    const ssize_t n = ::send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return false;
    sent += static_cast<size_t>(n);
  }
  return true;
}

// Reads until EOF, an error, or `timeout_ms` in total.
inline std::string ReadAll(int fd, int timeout_ms = 3000) {
  std::string out;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  char buf[4096];
  while (true) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) break;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left)) <= 0) break;
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

// Sends `request` verbatim to 127.0.0.1:`port` and returns everything the server sent back before closing.
inline std::string RawRequest(int port, const std::string& request, int timeout_ms = 3000) {
  const int fd = ConnectLoopback(port);
  if (fd < 0) return "";
  SendAll(fd, request);
  std::string response = ReadAll(fd, timeout_ms);
  ::close(fd);
  return response;
}

struct HttpResponse {
  int status = 0;  // 0: no parsable response
  std::string headers;
  std::string body;
};

inline HttpResponse ParseResponse(const std::string& raw) {
  HttpResponse r;
  const size_t end = raw.find("\r\n\r\n");
  if (raw.rfind("HTTP/1.", 0) != 0 || end == std::string::npos || raw.size() < 12) return r;
  r.status = std::stoi(raw.substr(9, 3));
  r.headers = raw.substr(0, end);
  r.body = raw.substr(end + 4);
  return r;
}

inline HttpResponse HttpGet(int port, const std::string& target) {
  return ParseResponse(
      RawRequest(port, "GET " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"));
}

}  // namespace verl::testing

#endif  // VERL_TESTS_COMMON_METRICS_HTTP_TEST_CLIENT_H_
