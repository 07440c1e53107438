#include "common/metrics/metrics_http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <exception>
#include <list>
#include <vector>

#include "absl/strings/str_cat.h"

namespace verl {
namespace {

using Clock = std::chrono::steady_clock;

std::string ErrnoText(int err) { return std::strerror(err); }

bool SetNonBlocking(int fd) {
  const int flags = ::fcntl(fd, F_GETFL, 0);
  return flags >= 0 && ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0;
}

// Splits "host:port", "[v6]:port" or ":port". False when malformed.
bool SplitHostPort(const std::string& listen, std::string* host, int* port) {
  const size_t colon = listen.rfind(':');
  if (colon == std::string::npos) return false;
  std::string h = listen.substr(0, colon);
  const std::string p = listen.substr(colon + 1);
  if (!h.empty() && h.front() == '[') {
    if (h.size() < 2 || h.back() != ']') return false;
    h = h.substr(1, h.size() - 2);
  } else if (h.find(':') != std::string::npos) {
    return false;  // a bare IPv6 address is ambiguous: it must be bracketed
  }
  if (p.empty() || p.size() > 5) return false;
  int value = 0;
  for (char c : p) {
    if (c < '0' || c > '9') return false;
    value = value * 10 + (c - '0');
  }
  if (value > 65535) return false;
  if (h.empty()) h = "0.0.0.0";
  if (h == "localhost") h = "127.0.0.1";
  *host = h;
  *port = value;
  return true;
}

std::string Reason(int code) {
  switch (code) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    default: return "Error";
  }
}

std::string MakeResponse(int code, const std::string& content_type, const std::string& body, bool head_only,
                         const std::string& extra_headers = "") {
  std::string out = absl::StrCat("HTTP/1.1 ", code, " ", Reason(code), "\r\nContent-Type: ", content_type,
                                 "\r\nContent-Length: ", body.size(), "\r\nConnection: close\r\n", extra_headers,
                                 "\r\n");
  if (!head_only) out += body;
  return out;
}

std::string ErrorResponse(int code, const std::string& extra_headers = "") {
  return MakeResponse(code, "text/plain; charset=utf-8", absl::StrCat(code, " ", Reason(code), "\n"), false,
                      extra_headers);
}

bool IsTokenChar(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
         std::strchr("!#$%&'*+-.^_`|~", c) != nullptr;
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(const MetricsHttpServerOptions& options,
                                                                            Handler handler) {
  std::string host;
  int port = 0;
  if (!SplitHostPort(options.listen, &host, &port)) {
    return absl::InvalidArgumentError(absl::StrCat("metrics listen address '", options.listen,
                                                   "': expected ip:port, [ipv6]:port, localhost:port or :port (port 0-65535)"));
  }
  if (!handler) return absl::InvalidArgumentError("MetricsHttpServer: no handler");
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV | AI_NUMERICHOST;  // never a DNS lookup
  addrinfo* found = nullptr;
  const std::string port_text = std::to_string(port);
  if (const int rc = ::getaddrinfo(host.c_str(), port_text.c_str(), &hints, &found); rc != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics listen address '", options.listen, "': '", host, "' is not a numeric IP address (", gai_strerror(rc), ")"));
  }
  int fd = -1;
  std::string last_error = "no address";
  for (addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) {
    fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      last_error = ErrnoText(errno);
      continue;
    }
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && ::listen(fd, 64) == 0 && SetNonBlocking(fd)) break;
    last_error = ErrnoText(errno);
    ::close(fd);
    fd = -1;
  }
  ::freeaddrinfo(found);
  if (fd < 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on metrics address '", options.listen, "': ", last_error));
  }
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  char text[INET6_ADDRSTRLEN] = "?";
  int bound_port = port;
  std::string address;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len) == 0) {
    if (bound.ss_family == AF_INET6) {
      const auto* a = reinterpret_cast<const sockaddr_in6*>(&bound);
      ::inet_ntop(AF_INET6, &a->sin6_addr, text, sizeof(text));
      bound_port = ntohs(a->sin6_port);
      address = absl::StrCat("[", text, "]:", bound_port);
    } else {
      const auto* a = reinterpret_cast<const sockaddr_in*>(&bound);
      ::inet_ntop(AF_INET, &a->sin_addr, text, sizeof(text));
      bound_port = ntohs(a->sin_port);
      address = absl::StrCat(text, ":", bound_port);
    }
  }
  int wake[2];
  if (::pipe2(wake, O_CLOEXEC | O_NONBLOCK) != 0) {
    const int err = errno;
    ::close(fd);
    return absl::ResourceExhaustedError(absl::StrCat("metrics server: pipe2: ", ErrnoText(err)));
  }
  std::unique_ptr<MetricsHttpServer> server(
      new MetricsHttpServer(options, std::move(handler), fd, wake[0], wake[1], bound_port, address));
  server->thread_ = std::thread([s = server.get()] { s->Serve(); });
  return server;
}

MetricsHttpServer::MetricsHttpServer(MetricsHttpServerOptions options, Handler handler, int listen_fd,
                                     int wake_read_fd, int wake_write_fd, int port, std::string address)
    : options_(std::move(options)),
      handler_(std::move(handler)),
      listen_fd_(listen_fd),
      wake_read_fd_(wake_read_fd),
      wake_write_fd_(wake_write_fd),
      port_(port),
      address_(std::move(address)) {}

MetricsHttpServer::~MetricsHttpServer() { Stop(); }

void MetricsHttpServer::Stop() {
  if (!stopping_.exchange(true)) {
    const char byte = 0;
    (void)!::write(wake_write_fd_, &byte, 1);
  }
  if (thread_.joinable()) thread_.join();
  for (int* fd : {&listen_fd_, &wake_read_fd_, &wake_write_fd_}) {
    if (*fd >= 0) ::close(*fd);
    *fd = -1;
  }
}

void MetricsHttpServer::Serve() {
  enum class Phase { kReading, kWriting, kDraining };
  struct Connection {
    int fd = -1;
    Phase phase = Phase::kReading;
    std::string in;
    std::string out;
    size_t sent = 0;
    Clock::time_point deadline;
    bool evicted = false;  // closed at its next turn to make room for a newer connection
  };
  std::list<Connection> conns;
  const auto timeout = std::chrono::milliseconds(options_.request_timeout_ms);
  // After the response, the peer gets this long to close its side before we do: closing a socket with unread input
  // sends a reset, which can destroy the response before the client reads it.
  const auto drain_timeout = std::chrono::milliseconds(1000);

  auto respond = [&](Connection& c, std::string response) {
    c.out = std::move(response);
    c.sent = 0;
    c.phase = Phase::kWriting;
    c.deadline = Clock::now() + timeout;
    requests_served_.fetch_add(1);
  };

  // Answers a complete request head (without the blank line).
  auto handle = [&](Connection& c, const std::string& head) {
    const size_t eol = head.find('\n');
    std::string line = head.substr(0, eol);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const size_t sp1 = line.find(' ');
    const size_t sp2 = sp1 == std::string::npos ? std::string::npos : line.find(' ', sp1 + 1);
    if (sp1 == 0 || sp2 == std::string::npos || line.find(' ', sp2 + 1) != std::string::npos) {
      respond(c, ErrorResponse(400));
      return;
    }
    const std::string method = line.substr(0, sp1);
    std::string target = line.substr(sp1 + 1, sp2 - sp1 - 1);
    const std::string version = line.substr(sp2 + 1);
    bool method_ok = true;
    for (char ch : method) method_ok = method_ok && IsTokenChar(ch);
    if (!method_ok || target.empty() || version.rfind("HTTP/1.", 0) != 0 || version.size() != 8) {
      respond(c, ErrorResponse(400));
      return;
    }
    if (const size_t q = target.find_first_of("?#"); q != std::string::npos) target.resize(q);
    if (target.rfind("http://", 0) == 0) {  // absolute-form: keep the path
      const size_t slash = target.find('/', 7);
      target = slash == std::string::npos ? "/" : target.substr(slash);
    }
    if (target != "/metrics") {
      respond(c, ErrorResponse(404));
      return;
    }
    if (method != "GET" && method != "HEAD") {
      respond(c, ErrorResponse(405, "Allow: GET, HEAD\r\n"));
      return;
    }
    try {
      Response r = handler_();
      respond(c, MakeResponse(200, r.content_type, r.body, method == "HEAD"));
    } catch (const std::exception&) {
      respond(c, ErrorResponse(500));
    }
  };

  std::vector<pollfd> fds;
  char buf[4096];
  while (!stopping_.load()) {
    fds.clear();
    fds.push_back({wake_read_fd_, POLLIN, 0});
    fds.push_back({listen_fd_, POLLIN, 0});
    auto next_deadline = Clock::now() + std::chrono::seconds(1);
    for (const Connection& c : conns) {
      fds.push_back({c.fd, static_cast<short>(c.phase == Phase::kWriting ? POLLOUT : POLLIN), 0});
      if (c.deadline < next_deadline) next_deadline = c.deadline;
    }
    const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(next_deadline - Clock::now()).count();
    const int ready = ::poll(fds.data(), fds.size(), static_cast<int>(std::max<int64_t>(0, wait) + 1));
    if (ready < 0 && errno != EINTR) break;
    if (stopping_.load()) break;

    if (ready > 0 && (fds[1].revents & POLLIN)) {
      while (true) {
        const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) break;  // EAGAIN, or a transient error such as EMFILE: retried on the next poll
        const auto live = std::count_if(conns.begin(), conns.end(), [](const Connection& c) { return !c.evicted; });
        if (live >= options_.max_connections) {
          // Full: the oldest connection that is not being answered (a stalled or finished client) makes room, so one
          // client holding every slot cannot shut the others out; if every one is being answered, this one waits.
          auto oldest = std::find_if(conns.begin(), conns.end(),
                                     [](const Connection& c) { return !c.evicted && c.phase != Phase::kWriting; });
          if (oldest == conns.end()) {
            ::close(fd);
            continue;
          }
          oldest->evicted = true;
        }
        Connection c;
        c.fd = fd;
        c.deadline = Clock::now() + timeout;
        conns.push_back(std::move(c));
      }
    }

    // Connections accepted in this round come after the polled ones; they are served from the next round on.
    size_t index = 2;
    const size_t polled = fds.size();
    const auto now = Clock::now();
    for (auto it = conns.begin(); it != conns.end() && index < polled; ++index) {
      Connection& c = *it;
      const short revents = fds[index].revents;
      bool close_now = c.evicted;
      if (close_now) {
        // made room for a newer connection (see the accept loop)
      } else if (c.phase == Phase::kReading && (revents & (POLLIN | POLLHUP | POLLERR))) {
        const ssize_t n = ::recv(c.fd, buf, sizeof(buf), 0);
        if (n > 0) {
          c.in.append(buf, static_cast<size_t>(n));
          size_t end = c.in.find("\r\n\r\n");
          if (end == std::string::npos) end = c.in.find("\n\n");
          if (end != std::string::npos && end <= options_.max_request_bytes) {
            handle(c, c.in.substr(0, end));
          } else if (c.in.size() > options_.max_request_bytes) {
            respond(c, ErrorResponse(431));
          }
        } else if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
          close_now = true;  // the client went away before finishing its request
        }
      } else if (c.phase == Phase::kWriting && (revents & (POLLOUT | POLLHUP | POLLERR))) {
        const ssize_t n = ::send(c.fd, c.out.data() + c.sent, c.out.size() - c.sent, MSG_NOSIGNAL);
        if (n > 0) {
          c.sent += static_cast<size_t>(n);
          if (c.sent == c.out.size()) {
            ::shutdown(c.fd, SHUT_WR);
            c.phase = Phase::kDraining;
            c.deadline = now + drain_timeout;
            c.out.clear();
            c.in.clear();
          }
        } else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
          close_now = true;
        }
      } else if (c.phase == Phase::kDraining && (revents & (POLLIN | POLLHUP | POLLERR))) {
        const ssize_t n = ::recv(c.fd, buf, sizeof(buf), 0);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) close_now = true;
      }
      if (!close_now && c.deadline <= now) {
        if (c.phase == Phase::kReading) {
          // Best effort: tell a slow client why, without waiting for it to read.
          const std::string r = ErrorResponse(408);
          (void)!::send(c.fd, r.data(), r.size(), MSG_NOSIGNAL);
        }
        close_now = true;
      }
      if (close_now) {
        ::close(c.fd);
        it = conns.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (Connection& c : conns) ::close(c.fd);
}

}  // namespace verl
