#include "worker/comm/host_communicator.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <thread>
#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status/status_macros.h"
#include "worker/model/dtype_convert.h"

namespace verl {
namespace {

constexpr uint32_t kMagic = 0x4d4f4356;  // "VCOM"
constexpr uint32_t kProtocolVersion = 1;
constexpr size_t kHelloSize = 16;

absl::string_view AbslView(std::string_view s) { return absl::string_view(s.data(), s.size()); }

std::string Errno() { return std::strerror(errno); }

bool Is16BitFloat(DType dtype) { return dtype == DType::kBFloat16 || dtype == DType::kFloat16; }

// Splits `count` elements into `parts` contiguous chunks whose sizes differ by at most one; returns parts + 1
// offsets (in elements).
std::vector<int64_t> ChunkOffsets(int64_t count, int parts) {
  std::vector<int64_t> offsets(parts + 1, 0);
  const int64_t base = count / parts;
  const int64_t extra = count % parts;
  for (int i = 0; i < parts; ++i) offsets[i + 1] = offsets[i] + base + (i < extra ? 1 : 0);
  return offsets;
}

int Mod(int a, int n) { return ((a % n) + n) % n; }

template <typename T>
void ReduceInto(T* dst, const T* src, int64_t n, ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
      break;
    case ReduceOp::kMax:
      for (int64_t i = 0; i < n; ++i) {
        if constexpr (std::is_floating_point_v<T>) {
          if (std::isnan(dst[i])) continue;
          if (std::isnan(src[i]) || src[i] > dst[i]) dst[i] = src[i];
        } else {
          dst[i] = std::max(dst[i], src[i]);
        }
      }
      break;
    case ReduceOp::kMin:
      for (int64_t i = 0; i < n; ++i) {
        if constexpr (std::is_floating_point_v<T>) {
          if (std::isnan(dst[i])) continue;
          if (std::isnan(src[i]) || src[i] < dst[i]) dst[i] = src[i];
        } else {
          dst[i] = std::min(dst[i], src[i]);
        }
      }
      break;
  }
}

void ReduceBytes(char* dst, const char* src, int64_t n, DType compute_dtype, ReduceOp op) {
  switch (compute_dtype) {
    case DType::kFloat32:
      ReduceInto(reinterpret_cast<float*>(dst), reinterpret_cast<const float*>(src), n, op);
      break;
    case DType::kInt32:
      ReduceInto(reinterpret_cast<int32_t*>(dst), reinterpret_cast<const int32_t*>(src), n, op);
      break;
    case DType::kInt64:
      ReduceInto(reinterpret_cast<int64_t*>(dst), reinterpret_cast<const int64_t*>(src), n, op);
      break;
    default:
      break;
  }
}

template <typename T>
void DivideBy(T* data, int64_t n, int divisor) {
  for (int64_t i = 0; i < n; ++i) data[i] = static_cast<T>(data[i] / static_cast<T>(divisor));
}

void DivideBytes(char* data, int64_t n, DType compute_dtype, int divisor) {
  switch (compute_dtype) {
    case DType::kFloat32:
      DivideBy(reinterpret_cast<float*>(data), n, divisor);
      break;
    case DType::kInt32:
      DivideBy(reinterpret_cast<int32_t*>(data), n, divisor);
      break;
    case DType::kInt64:
      DivideBy(reinterpret_cast<int64_t*>(data), n, divisor);
      break;
    default:
      break;
  }
}

// Widens `count` 16-bit floats to float32.
void Widen(const void* src, float* dst, int64_t count, DType dtype) {
  const auto* bits = static_cast<const uint16_t*>(src);
  if (dtype == DType::kBFloat16) {
    BFloat16ToFloat32(bits, dst, static_cast<size_t>(count));
  } else {
    Float16ToFloat32(bits, dst, static_cast<size_t>(count));
  }
}

// Narrows `count` float32 to 16-bit floats, round to nearest even.
void Narrow(const float* src, void* dst, int64_t count, DType dtype) {
  auto* bits = static_cast<uint16_t*>(dst);
  if (dtype == DType::kBFloat16) {
    Float32ToBFloat16(src, bits, static_cast<size_t>(count));
  } else {
    Float32ToFloat16(src, bits, static_cast<size_t>(count));
  }
}

// A zero-initialized byte buffer aligned for any element type we reduce.
class WorkBuffer {
 public:
  explicit WorkBuffer(int64_t bytes) : storage_(static_cast<size_t>((bytes + 7) / 8), 0) {}
  char* data() { return reinterpret_cast<char*>(storage_.data()); }

 private:
  std::vector<int64_t> storage_;
};

void EncodeU32(uint32_t v, unsigned char* out) {
  for (int i = 0; i < 4; ++i) out[i] = static_cast<unsigned char>(v >> (8 * i));
}
uint32_t DecodeU32(const unsigned char* in) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(in[i]) << (8 * i);
  return v;
}

struct Hello {
  uint32_t magic = kMagic;
  uint32_t version = kProtocolVersion;
  int32_t rank = 0;
  int32_t world_size = 0;
};

void EncodeHello(const Hello& h, unsigned char* out) {
  EncodeU32(h.magic, out);
  EncodeU32(h.version, out + 4);
  EncodeU32(static_cast<uint32_t>(h.rank), out + 8);
  EncodeU32(static_cast<uint32_t>(h.world_size), out + 12);
}
Hello DecodeHello(const unsigned char* in) {
  Hello h;
  h.magic = DecodeU32(in);
  h.version = DecodeU32(in + 4);
  h.rank = static_cast<int32_t>(DecodeU32(in + 8));
  h.world_size = static_cast<int32_t>(DecodeU32(in + 12));
  return h;
}

// Milliseconds until `deadline` for poll(): 0 when past, -1 for an infinite deadline, rounded up otherwise.
int PollTimeoutMs(absl::Time deadline) {
  if (deadline == absl::InfiniteFuture()) return -1;
  const absl::Duration left = deadline - absl::Now();
  if (left <= absl::ZeroDuration()) return 0;
  const int64_t ms = absl::ToInt64Milliseconds(absl::Ceil(left, absl::Milliseconds(1)));
  return static_cast<int>(std::min<int64_t>(ms, std::numeric_limits<int>::max()));
}

absl::Time DeadlineAfter(absl::Duration timeout) {
  if (timeout == absl::InfiniteDuration()) return absl::InfiniteFuture();
  return absl::Now() + timeout;
}

bool SetNonBlocking(int fd) {
  const int flags = ::fcntl(fd, F_GETFL, 0);
  return flags >= 0 && ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0;
}

// Splits "host:port" / "[v6]:port".
absl::Status ParseHostPort(const std::string& address, std::string* host, std::string* port) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size()) {
    return absl::InvalidArgumentError(absl::StrCat("address \"", address, "\" is not host:port"));
  }
  *host = address.substr(0, colon);
  *port = address.substr(colon + 1);
  if (host->size() >= 2 && host->front() == '[' && host->back() == ']') *host = host->substr(1, host->size() - 2);
  long value = 0;
  for (char c : *port) {
    if (c < '0' || c > '9') {
      return absl::InvalidArgumentError(absl::StrCat("address \"", address, "\" has a non-numeric port"));
    }
    value = std::min(value * 10 + (c - '0'), 100000L);
  }
  if (value > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("address \"", address, "\" has a port above 65535"));
  }
  return absl::OkStatus();
}

struct AddrInfoDeleter {
  void operator()(addrinfo* ai) const { ::freeaddrinfo(ai); }
};
using AddrInfoPtr = std::unique_ptr<addrinfo, AddrInfoDeleter>;

absl::StatusOr<AddrInfoPtr> Resolve(const std::string& address, bool passive) {
  std::string host, port;
  absl::Status parsed = ParseHostPort(address, &host, &port);
  if (!parsed.ok()) return parsed;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
  addrinfo* result = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &result);
  if (rc != 0) {
    return absl::InvalidArgumentError(absl::StrCat("cannot resolve \"", address, "\": ", ::gai_strerror(rc)));
  }
  return AddrInfoPtr(result);
}

std::string SockaddrString(const sockaddr* sa) {
  char host[NI_MAXHOST] = {0};
  char serv[NI_MAXSERV] = {0};
  const socklen_t len = sa->sa_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
  if (::getnameinfo(sa, len, host, sizeof(host), serv, sizeof(serv), NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return "?";
  }
  return sa->sa_family == AF_INET6 ? absl::StrCat("[", host, "]:", serv) : absl::StrCat(host, ":", serv);
}

std::string PeerAddress(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "?";
  return SockaddrString(reinterpret_cast<sockaddr*>(&ss));
}

// Blocking-with-deadline helpers for the handshake on a non-blocking socket. `what` names the peer for errors.
absl::Status WriteAll(int fd, const unsigned char* data, size_t size, absl::Time deadline, const std::string& what) {
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::send(fd, data + done, size - done, MSG_NOSIGNAL);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
      return absl::UnavailableError(absl::StrCat("sending handshake to ", what, ": ", Errno()));
    }
    pollfd p{fd, POLLOUT, 0};
    const int rc = ::poll(&p, 1, PollTimeoutMs(deadline));
    if (rc == 0) return absl::DeadlineExceededError(absl::StrCat("timed out sending handshake to ", what));
    if (rc < 0 && errno != EINTR) return absl::UnavailableError(absl::StrCat("poll(): ", Errno()));
  }
  return absl::OkStatus();
}

absl::Status ReadAll(int fd, unsigned char* data, size_t size, absl::Time deadline, const std::string& what) {
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::recv(fd, data + done, size - done, 0);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n == 0) {
      return absl::UnavailableError(absl::StrCat(what, " closed the connection during the handshake"));
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      return absl::UnavailableError(absl::StrCat("reading handshake from ", what, ": ", Errno()));
    }
    pollfd p{fd, POLLIN, 0};
    const int rc = ::poll(&p, 1, PollTimeoutMs(deadline));
    if (rc == 0) return absl::DeadlineExceededError(absl::StrCat("timed out waiting for the handshake of ", what));
    if (rc < 0 && errno != EINTR) return absl::UnavailableError(absl::StrCat("poll(): ", Errno()));
  }
  return absl::OkStatus();
}

absl::StatusOr<ScopedFd> Listen(const std::string& address, int backlog) {
  absl::StatusOr<AddrInfoPtr> ai = Resolve(address, /*passive=*/true);
  if (!ai.ok()) return ai.status();
  std::string last_error = "no usable address";
  for (addrinfo* a = ai->get(); a != nullptr; a = a->ai_next) {
    ScopedFd fd(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol));
    if (!fd.valid()) {
      last_error = absl::StrCat("socket(): ", Errno());
      continue;
    }
    const int one = 1;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd.get(), a->ai_addr, a->ai_addrlen) != 0) {
      last_error = absl::StrCat("bind(): ", Errno());
      continue;
    }
    if (::listen(fd.get(), backlog) != 0) {
      last_error = absl::StrCat("listen(): ", Errno());
      continue;
    }
    return fd;
  }
  return absl::UnavailableError(absl::StrCat("cannot listen on ", address, ": ", last_error));
}

// Connects to `address`, retrying refused connections until `deadline` (the peer may not be listening yet).
absl::StatusOr<ScopedFd> ConnectWithRetry(const std::string& address, absl::Time deadline, const std::string& what) {
  absl::StatusOr<AddrInfoPtr> ai = Resolve(address, /*passive=*/false);
  if (!ai.ok()) return ai.status();
  std::string last_error = "no attempt made";
  absl::Duration backoff = absl::Milliseconds(5);
  while (true) {
    for (addrinfo* a = ai->get(); a != nullptr; a = a->ai_next) {
      ScopedFd fd(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol));
      if (!fd.valid()) {
        last_error = absl::StrCat("socket(): ", Errno());
        continue;
      }
      int rc = ::connect(fd.get(), a->ai_addr, a->ai_addrlen);
      if (rc != 0 && errno == EINPROGRESS) {
        pollfd p{fd.get(), POLLOUT, 0};
        rc = ::poll(&p, 1, PollTimeoutMs(deadline));
        if (rc == 0) {
          last_error = "connect() did not complete";
          continue;
        }
        int err = 0;
        socklen_t len = sizeof(err);
        ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
        if (err != 0) {
          last_error = absl::StrCat("connect(): ", std::strerror(err));
          continue;
        }
        return fd;
      }
      if (rc == 0) return fd;
      last_error = absl::StrCat("connect(): ", Errno());
    }
    if (absl::Now() + backoff >= deadline) break;
    std::this_thread::sleep_for(absl::ToChronoMilliseconds(backoff));
    backoff = std::min(backoff * 2, absl::Milliseconds(100));
  }
  return absl::DeadlineExceededError(
      absl::StrCat("could not connect to ", what, " within the connect timeout (last error: ", last_error, ")"));
}

void SetNoDelay(int fd) {
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

}  // namespace

absl::StatusOr<HostListener> HostCommunicator::Listen(const std::string& address) {
  std::string host, port;
  RETURN_IF_ERROR(ParseHostPort(address, &host, &port));
  // The backlog only needs to hold the peers that connect before accept() runs; the group size is not known yet.
  ASSIGN_OR_RETURN(ScopedFd fd, verl::Listen(address, 128));
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&bound), &len) != 0) {
    return absl::InternalError(absl::StrCat("getsockname() on ", address, ": ", Errno()));
  }
  const int bound_port = bound.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                                                     : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  const bool v6 = host.find(':') != std::string::npos;
  return HostListener{std::move(fd), absl::StrCat(v6 ? "[" : "", host, v6 ? "]" : "", ":", bound_port)};
}

absl::StatusOr<std::unique_ptr<HostCommunicator>> HostCommunicator::Create(const HostCommunicatorOptions& options) {
  return Create(options, HostListener{});
}

absl::StatusOr<std::unique_ptr<HostCommunicator>> HostCommunicator::Create(const HostCommunicatorOptions& options,
                                                                           HostListener pre_bound) {
  const int rank = options.rank;
  const int world = options.world_size;
  if (world < 1) {
    return absl::InvalidArgumentError(absl::StrCat("HostCommunicator: world_size must be >= 1, got ", world));
  }
  if (rank < 0 || rank >= world) {
    return absl::InvalidArgumentError(absl::StrCat("HostCommunicator: rank ", rank, " is outside [0, ", world, ")"));
  }
  if (static_cast<int>(options.addresses.size()) != world) {
    return absl::InvalidArgumentError(
        absl::StrCat("HostCommunicator: addresses has ", options.addresses.size(), " entries, world_size is ", world));
  }
  if (options.connect_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("HostCommunicator: connect_timeout must be positive");
  }
  const std::string prefix = absl::StrCat("HostCommunicator rank ", rank, " of ", world, ": ");
  auto annotate = [&](const absl::Status& s) { return absl::Status(s.code(), absl::StrCat(prefix, s.message())); };
  for (int j = 0; j < world; ++j) {
    std::string host, port;
    absl::Status parsed = ParseHostPort(options.addresses[j], &host, &port);
    if (!parsed.ok()) return annotate(Annotate(parsed, absl::StrCat("addresses[", j, "]")));
  }

  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_NONBLOCK | O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat(prefix, "pipe2(): ", Errno()));
  }
  ScopedFd wake_read(pipe_fds[0]);
  ScopedFd wake_write(pipe_fds[1]);
  std::vector<ScopedFd> peers(world);
  const absl::Time deadline = DeadlineAfter(options.connect_timeout);

  if (world > 1) {
    absl::StatusOr<ScopedFd> listener = pre_bound.fd.valid() ? absl::StatusOr<ScopedFd>(std::move(pre_bound.fd))
                                                             : verl::Listen(options.addresses[rank], world);
    if (!listener.ok()) return annotate(listener.status());

    const Hello mine{kMagic, kProtocolVersion, rank, world};
    unsigned char my_hello[kHelloSize];
    EncodeHello(mine, my_hello);

    // Connect to every lower rank: send our hello, then check theirs.
    for (int j = 0; j < rank; ++j) {
      const std::string what = absl::StrCat("rank ", j, " at ", options.addresses[j]);
      absl::StatusOr<ScopedFd> fd = ConnectWithRetry(options.addresses[j], deadline, what);
      if (!fd.ok()) return annotate(fd.status());
      RETURN_IF_ERROR(annotate(WriteAll(fd->get(), my_hello, kHelloSize, deadline, what)));
      unsigned char buf[kHelloSize];
      RETURN_IF_ERROR(annotate(ReadAll(fd->get(), buf, kHelloSize, deadline, what)));
      const Hello theirs = DecodeHello(buf);
      if (theirs.magic != kMagic || theirs.version != kProtocolVersion) {
        return annotate(absl::InvalidArgumentError(
            absl::StrCat(what, " is not a HostCommunicator of protocol version ", kProtocolVersion)));
      }
      if (theirs.world_size != world) {
        return annotate(absl::InvalidArgumentError(absl::StrCat("world size mismatch with ", what, ": it has ",
                                                                theirs.world_size, ", this rank has ", world)));
      }
      if (theirs.rank != j) {
        return annotate(
            absl::InvalidArgumentError(absl::StrCat("the process listening at ", options.addresses[j],
                                                    " says it is rank ", theirs.rank, ", expected rank ", j)));
      }
      SetNoDelay(fd->get());
      peers[j] = std::move(*fd);
    }

    // Accept every higher rank: read its hello, answer with ours (so a mismatched peer learns why), then check.
    int missing = world - 1 - rank;
    while (missing > 0) {
      pollfd p{listener->get(), POLLIN, 0};
      const int rc = ::poll(&p, 1, PollTimeoutMs(deadline));
      if (rc < 0 && errno == EINTR) continue;
      if (rc < 0) return annotate(absl::InternalError(absl::StrCat("poll(): ", Errno())));
      if (rc == 0) {
        std::vector<std::string> absent;
        for (int j = rank + 1; j < world; ++j) {
          if (!peers[j].valid()) absent.push_back(absl::StrCat("rank ", j, " at ", options.addresses[j]));
        }
        return annotate(
            absl::DeadlineExceededError(absl::StrCat("timed out after ", absl::FormatDuration(options.connect_timeout),
                                                     " waiting for ", absl::StrJoin(absent, ", "), " to connect")));
      }
      ScopedFd fd(::accept4(listener->get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
      if (!fd.valid()) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED) continue;
        return annotate(absl::InternalError(absl::StrCat("accept(): ", Errno())));
      }
      const std::string from = PeerAddress(fd.get());
      const std::string what = absl::StrCat("the peer connecting from ", from);
      unsigned char buf[kHelloSize];
      RETURN_IF_ERROR(annotate(ReadAll(fd.get(), buf, kHelloSize, deadline, what)));
      RETURN_IF_ERROR(annotate(WriteAll(fd.get(), my_hello, kHelloSize, deadline, what)));
      const Hello theirs = DecodeHello(buf);
      if (theirs.magic != kMagic || theirs.version != kProtocolVersion) {
        return annotate(absl::InvalidArgumentError(
            absl::StrCat(what, " is not a HostCommunicator of protocol version ", kProtocolVersion)));
      }
      const int j = theirs.rank;
      const std::string listed =
          (j >= 0 && j < world) ? absl::StrCat(" (rank ", j, " is listed at ", options.addresses[j], ")") : "";
      if (theirs.world_size != world) {
        return annotate(absl::InvalidArgumentError(absl::StrCat("world size mismatch with ", what, listed, ": it has ",
                                                                theirs.world_size, ", this rank has ", world)));
      }
      if (j <= rank || j >= world) {
        return annotate(absl::InvalidArgumentError(absl::StrCat(what, " claims rank ", j, "; only ranks ", rank + 1,
                                                                "..", world - 1, " connect to this rank")));
      }
      if (peers[j].valid()) {
        return annotate(absl::InvalidArgumentError(
            absl::StrCat("duplicate rank ", j, ": ", what, " claims a rank already connected", listed)));
      }
      SetNoDelay(fd.get());
      peers[j] = std::move(fd);
      --missing;
    }
  }
  return std::unique_ptr<HostCommunicator>(new HostCommunicator(rank, world, options.addresses, std::move(peers),
                                                                std::move(wake_read), std::move(wake_write)));
}

HostCommunicator::HostCommunicator(int rank, int world_size, std::vector<std::string> addresses,
                                   std::vector<ScopedFd> peers, ScopedFd wake_read, ScopedFd wake_write)
    : rank_(rank),
      world_size_(world_size),
      addresses_(std::move(addresses)),
      peers_(std::move(peers)),
      wake_read_(std::move(wake_read)),
      wake_write_(std::move(wake_write)) {}

HostCommunicator::~HostCommunicator() = default;

void HostCommunicator::Abort() {
  if (aborted_.exchange(true)) return;
  // Reset every connection so all peers notice at once (POLLHUP/POLLERR), and replace each descriptor by /dev/null
  // instead of closing it so a concurrent poll()/recv() in the caller thread never touches a reused descriptor.
  ScopedFd null_fd(::open("/dev/null", O_RDWR | O_CLOEXEC));
  for (int j = 0; j < world_size_; ++j) {
    const int fd = peers_[j].get();
    if (fd < 0) continue;
    const linger hard{1, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &hard, sizeof(hard));
    if (null_fd.valid()) {
      ::dup2(null_fd.get(), fd);
    } else {
      ::shutdown(fd, SHUT_RDWR);
    }
  }
  const char byte = 1;
  [[maybe_unused]] ssize_t n = ::write(wake_write_.get(), &byte, 1);
}

std::string HostCommunicator::Prefix() const {
  return absl::StrCat("HostCommunicator rank ", rank_, " of ", world_size_, ": ");
}

std::string HostCommunicator::PeerName(int peer) const {
  return absl::StrCat("peer rank ", peer, " (", addresses_[peer], ")");
}

absl::Status HostCommunicator::CheckUsable(std::string_view op_name) const {
  if (aborted_.load()) {
    return absl::AbortedError(absl::StrCat(Prefix(), AbslView(op_name), ": this communicator was aborted"));
  }
  if (!broken_.ok()) {
    return absl::Status(broken_.code(),
                        absl::StrCat(Prefix(), AbslView(op_name),
                                     ": communicator unusable after an earlier error: ", broken_.message()));
  }
  return absl::OkStatus();
}

absl::Status HostCommunicator::Exchange(std::string_view op_name, std::vector<Transfer>& transfers, absl::Time deadline,
                                        absl::Duration timeout) {
  const std::string op(op_name);
  auto fail = [&](absl::Status status) {
    if (aborted_.load()) {
      status = absl::AbortedError(absl::StrCat(Prefix(), op, ": this communicator was aborted"));
    }
    if (broken_.ok()) broken_ = status;
    return status;
  };
  // At most one active transfer per (peer, direction): the first unfinished one.
  std::vector<int> active_send(world_size_, -1), active_recv(world_size_, -1);
  // fds[j] is peer j (fd -1 for this rank, which poll() skips); fds[world_size_] is the wake pipe.
  std::vector<pollfd> fds(world_size_ + 1);
  while (true) {
    if (aborted_.load()) return fail(absl::AbortedError(""));
    std::fill(active_send.begin(), active_send.end(), -1);
    std::fill(active_recv.begin(), active_recv.end(), -1);
    bool pending = false;
    for (int t = 0; t < static_cast<int>(transfers.size()); ++t) {
      const Transfer& x = transfers[t];
      if (x.done >= x.size) continue;
      pending = true;
      std::vector<int>& active = x.is_send ? active_send : active_recv;
      if (active[x.peer] < 0) active[x.peer] = t;
    }
    if (!pending) return absl::OkStatus();
    for (int j = 0; j < world_size_; ++j) {
      short events = 0;
      if (active_send[j] >= 0) events |= POLLOUT;
      if (active_recv[j] >= 0) events |= POLLIN;
      // Uninvolved peers are polled with no events: poll() still reports POLLHUP/POLLERR when they reset.
      fds[j] = pollfd{j == rank_ ? -1 : peers_[j].get(), events, 0};
    }
    fds[world_size_] = pollfd{wake_read_.get(), POLLIN, 0};
    const int rc = ::poll(fds.data(), fds.size(), PollTimeoutMs(deadline));
    if (rc < 0) {
      if (errno == EINTR) continue;
      return fail(absl::InternalError(absl::StrCat(Prefix(), op, ": poll(): ", Errno())));
    }
    if (aborted_.load() || fds[world_size_].revents != 0) return fail(absl::AbortedError(""));
    if (rc == 0) {
      if (absl::Now() < deadline) continue;
      std::vector<std::string> waiting;
      for (int j = 0; j < world_size_; ++j) {
        for (int t : {active_recv[j], active_send[j]}) {
          if (t < 0) continue;
          const Transfer& x = transfers[t];
          waiting.push_back(absl::StrCat(PeerName(j), x.is_send ? " to receive" : " to send", " (", x.done, " of ",
                                         x.size, " bytes done)"));
        }
      }
      return fail(
          absl::DeadlineExceededError(absl::StrCat(Prefix(), op, " timed out after ", absl::FormatDuration(timeout),
                                                   " waiting for ", absl::StrJoin(waiting, "; "))));
    }
    int hung_up = -1;  // a peer whose connection was reset (first seen this round)
    for (int j = 0; j < world_size_; ++j) {
      const short revents = fds[j].revents;
      if (j == rank_ || revents == 0) continue;
      const int fd = peers_[j].get();
      if (active_recv[j] >= 0 && (revents & (POLLIN | POLLHUP | POLLERR))) {
        Transfer& x = transfers[active_recv[j]];
        while (x.done < x.size) {
          const ssize_t n = ::recv(fd, x.data + x.done, static_cast<size_t>(x.size - x.done), 0);
          if (n > 0) {
            x.done += n;
            continue;
          }
          if (n == 0) {
            return fail(absl::UnavailableError(
                absl::StrCat(Prefix(), op, ": ", PeerName(j), " closed the connection (it exited or aborted)")));
          }
          if (errno == EINTR) continue;
          if (errno == EAGAIN || errno == EWOULDBLOCK) break;
          return fail(absl::UnavailableError(absl::StrCat(Prefix(), op, ": connection to ", PeerName(j),
                                                          " was lost (it aborted or died): ", Errno())));
        }
      }
      if (active_send[j] >= 0 && (revents & (POLLOUT | POLLHUP | POLLERR))) {
        Transfer& x = transfers[active_send[j]];
        while (x.done < x.size) {
          const ssize_t n = ::send(fd, x.data + x.done, static_cast<size_t>(x.size - x.done), MSG_NOSIGNAL);
          if (n > 0) {
            x.done += n;
            continue;
          }
          if (n < 0 && errno == EINTR) continue;
          if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
          return fail(absl::UnavailableError(absl::StrCat(Prefix(), op, ": connection to ", PeerName(j),
                                                          " was lost (it aborted or died): ", Errno())));
        }
      }
      // A reset connection reports POLLHUP/POLLERR; a peer that merely closed after finishing (FIN) does not, so this
      // only fires for peers that aborted or died.
      if (hung_up < 0 && (revents & (POLLHUP | POLLERR | POLLNVAL))) hung_up = j;
    }
    // What a peer sent before it reset its connection is still read above (a peer that finished the operation and
    // then aborted, as a worker does when its call fails): the reset fails the operation only if anything is left to
    // move, with that peer or (an uninvolved peer's reset: the group is broken) another.
    if (hung_up >= 0 && std::any_of(transfers.begin(), transfers.end(),
                                    [](const Transfer& x) { return x.done < x.size; })) {
      return fail(absl::UnavailableError(
          absl::StrCat(Prefix(), op, ": connection to ", PeerName(hung_up), " was lost (it aborted or died)")));
    }
  }
}

namespace {

DType ComputeDType(DType dtype) { return Is16BitFloat(dtype) ? DType::kFloat32 : dtype; }

}  // namespace

absl::Status HostCommunicator::RingReduceScatter(std::string_view op_name, char* work,
                                                 const std::vector<int64_t>& offsets, DType compute_dtype, ReduceOp op,
                                                 absl::Time deadline, absl::Duration timeout) {
  const int w = world_size_;
  const int64_t esize = DTypeSize(compute_dtype);
  int64_t max_chunk = 0;
  for (int c = 0; c < w; ++c) max_chunk = std::max(max_chunk, offsets[c + 1] - offsets[c]);
  WorkBuffer incoming(max_chunk * esize);
  const int next = Mod(rank_ + 1, w);
  const int prev = Mod(rank_ - 1, w);
  // Step s: send chunk (r - s - 1), receive chunk (r - s - 2) and reduce it; after w - 1 steps chunk r is complete.
  for (int s = 0; s + 1 < w; ++s) {
    const int send_chunk = Mod(rank_ - s - 1, w);
    const int recv_chunk = Mod(rank_ - s - 2, w);
    const int64_t recv_count = offsets[recv_chunk + 1] - offsets[recv_chunk];
    std::vector<Transfer> transfers = {
        {next, true, work + offsets[send_chunk] * esize, (offsets[send_chunk + 1] - offsets[send_chunk]) * esize, 0},
        {prev, false, incoming.data(), recv_count * esize, 0}};
    RETURN_IF_ERROR(Exchange(op_name, transfers, deadline, timeout));
    ReduceBytes(work + offsets[recv_chunk] * esize, incoming.data(), recv_count, compute_dtype, op);
  }
  if (op == ReduceOp::kAvg) {
    DivideBytes(work + offsets[rank_] * esize, offsets[rank_ + 1] - offsets[rank_], compute_dtype, w);
  }
  return absl::OkStatus();
}

absl::Status HostCommunicator::RingAllGather(std::string_view op_name, char* buf,
                                             const std::vector<int64_t>& byte_offsets, absl::Time deadline,
                                             absl::Duration timeout) {
  const int w = world_size_;
  const int next = Mod(rank_ + 1, w);
  const int prev = Mod(rank_ - 1, w);
  // Step s: send chunk (r - s), receive chunk (r - s - 1).
  for (int s = 0; s + 1 < w; ++s) {
    const int send_chunk = Mod(rank_ - s, w);
    const int recv_chunk = Mod(rank_ - s - 1, w);
    std::vector<Transfer> transfers = {
        {next, true, buf + byte_offsets[send_chunk], byte_offsets[send_chunk + 1] - byte_offsets[send_chunk], 0},
        {prev, false, buf + byte_offsets[recv_chunk], byte_offsets[recv_chunk + 1] - byte_offsets[recv_chunk], 0}};
    RETURN_IF_ERROR(Exchange(op_name, transfers, deadline, timeout));
  }
  return absl::OkStatus();
}

absl::Status HostCommunicator::AllReduce(void* data, int64_t count, DType dtype, ReduceOp op, absl::Duration timeout) {
  const std::string prefix = absl::StrCat(Prefix(), "AllReduce: ");
  RETURN_IF_ERROR(CheckBuffer(prefix, data, count, dtype, "data"));
  RETURN_IF_ERROR(CheckReduction(prefix, dtype, op));
  RETURN_IF_ERROR(CheckUsable("AllReduce"));
  const absl::Time deadline = DeadlineAfter(timeout);
  const DType compute = ComputeDType(dtype);
  const int64_t esize = DTypeSize(compute);
  // 16-bit floats travel widened so the sum is rounded once; other dtypes are reduced in place.
  std::unique_ptr<WorkBuffer> widened;
  char* work = static_cast<char*>(data);
  if (Is16BitFloat(dtype)) {
    widened = std::make_unique<WorkBuffer>(count * esize);
    work = widened->data();
    Widen(data, reinterpret_cast<float*>(work), count, dtype);
  }
  const std::vector<int64_t> offsets = ChunkOffsets(count, world_size_);
  RETURN_IF_ERROR(RingReduceScatter("AllReduce", work, offsets, compute, op, deadline, timeout));
  std::vector<int64_t> byte_offsets(offsets.size());
  for (size_t i = 0; i < offsets.size(); ++i) byte_offsets[i] = offsets[i] * esize;
  RETURN_IF_ERROR(RingAllGather("AllReduce", work, byte_offsets, deadline, timeout));
  if (widened) Narrow(reinterpret_cast<const float*>(work), data, count, dtype);
  return absl::OkStatus();
}

absl::Status HostCommunicator::ReduceScatter(const void* send, void* recv, int64_t count, DType dtype, ReduceOp op,
                                             absl::Duration timeout) {
  const std::string prefix = absl::StrCat(Prefix(), "ReduceScatter: ");
  RETURN_IF_ERROR(CheckBuffer(prefix, send, count, dtype, "send"));
  RETURN_IF_ERROR(CheckBuffer(prefix, recv, count, dtype, "recv"));
  RETURN_IF_ERROR(CheckReduction(prefix, dtype, op));
  RETURN_IF_ERROR(CheckUsable("ReduceScatter"));
  const absl::Time deadline = DeadlineAfter(timeout);
  const DType compute = ComputeDType(dtype);
  const int64_t esize = DTypeSize(compute);
  const int64_t total = count * world_size_;
  WorkBuffer work(total * esize);
  if (Is16BitFloat(dtype)) {
    Widen(send, reinterpret_cast<float*>(work.data()), total, dtype);
  } else if (total > 0) {
    std::memcpy(work.data(), send, static_cast<size_t>(total * esize));
  }
  std::vector<int64_t> offsets(world_size_ + 1);
  for (int c = 0; c <= world_size_; ++c) offsets[c] = c * count;
  RETURN_IF_ERROR(RingReduceScatter("ReduceScatter", work.data(), offsets, compute, op, deadline, timeout));
  const char* mine = work.data() + offsets[rank_] * esize;
  if (Is16BitFloat(dtype)) {
    Narrow(reinterpret_cast<const float*>(mine), recv, count, dtype);
  } else if (count > 0) {
    std::memcpy(recv, mine, static_cast<size_t>(count * esize));
  }
  return absl::OkStatus();
}

absl::Status HostCommunicator::AllGather(const void* send, int64_t count, void* recv, DType dtype,
                                         absl::Duration timeout) {
  const std::string prefix = absl::StrCat(Prefix(), "AllGather: ");
  RETURN_IF_ERROR(CheckBuffer(prefix, send, count, dtype, "send"));
  RETURN_IF_ERROR(CheckBuffer(prefix, recv, count, dtype, "recv"));
  RETURN_IF_ERROR(CheckUsable("AllGather"));
  const absl::Time deadline = DeadlineAfter(timeout);
  const int64_t bytes = count * DTypeSize(dtype);
  char* out = static_cast<char*>(recv);
  if (bytes > 0 && out + rank_ * bytes != send) std::memmove(out + rank_ * bytes, send, static_cast<size_t>(bytes));
  std::vector<int64_t> byte_offsets(world_size_ + 1);
  for (int c = 0; c <= world_size_; ++c) byte_offsets[c] = c * bytes;
  return RingAllGather("AllGather", out, byte_offsets, deadline, timeout);
}

absl::Status HostCommunicator::Broadcast(void* data, int64_t count, DType dtype, int root, absl::Duration timeout) {
  const std::string prefix = absl::StrCat(Prefix(), "Broadcast: ");
  RETURN_IF_ERROR(CheckBuffer(prefix, data, count, dtype, "data"));
  if (root < 0 || root >= world_size_) {
    return absl::InvalidArgumentError(absl::StrCat(prefix, "root ", root, " is outside [0, ", world_size_, ")"));
  }
  RETURN_IF_ERROR(CheckUsable("Broadcast"));
  const absl::Time deadline = DeadlineAfter(timeout);
  const int64_t bytes = count * DTypeSize(dtype);
  std::vector<Transfer> transfers;
  if (rank_ == root) {
    for (int j = 0; j < world_size_; ++j) {
      if (j != rank_) transfers.push_back({j, true, static_cast<char*>(data), bytes, 0});
    }
  } else {
    transfers.push_back({root, false, static_cast<char*>(data), bytes, 0});
  }
  return Exchange("Broadcast", transfers, deadline, timeout);
}

absl::Status HostCommunicator::Send(const void* data, int64_t count, DType dtype, int peer, absl::Duration timeout) {
  const std::string prefix = absl::StrCat(Prefix(), "Send: ");
  RETURN_IF_ERROR(CheckBuffer(prefix, data, count, dtype, "data"));
  if (peer < 0 || peer >= world_size_ || peer == rank_) {
    return absl::InvalidArgumentError(
        absl::StrCat(prefix, "peer ", peer, " must be in [0, ", world_size_, ") and differ from this rank"));
  }
  RETURN_IF_ERROR(CheckUsable("Send"));
  std::vector<Transfer> transfers = {
      {peer, true, const_cast<char*>(static_cast<const char*>(data)), count * DTypeSize(dtype), 0}};
  return Exchange("Send", transfers, DeadlineAfter(timeout), timeout);
}

absl::Status HostCommunicator::Recv(void* data, int64_t count, DType dtype, int peer, absl::Duration timeout) {
  const std::string prefix = absl::StrCat(Prefix(), "Recv: ");
  RETURN_IF_ERROR(CheckBuffer(prefix, data, count, dtype, "data"));
  if (peer < 0 || peer >= world_size_ || peer == rank_) {
    return absl::InvalidArgumentError(
        absl::StrCat(prefix, "peer ", peer, " must be in [0, ", world_size_, ") and differ from this rank"));
  }
  RETURN_IF_ERROR(CheckUsable("Recv"));
  std::vector<Transfer> transfers = {{peer, false, static_cast<char*>(data), count * DTypeSize(dtype), 0}};
  return Exchange("Recv", transfers, DeadlineAfter(timeout), timeout);
}

absl::Status HostCommunicator::Barrier(absl::Duration timeout) {
  RETURN_IF_ERROR(CheckUsable("Barrier"));
  // One byte to and from every peer: each rank waits for all others directly, so a missing rank is named by all.
  std::vector<char> out(world_size_, 1), in(world_size_, 0);
  std::vector<Transfer> transfers;
  for (int j = 0; j < world_size_; ++j) {
    if (j == rank_) continue;
    transfers.push_back({j, true, &out[j], 1, 0});
    transfers.push_back({j, false, &in[j], 1, 0});
  }
  return Exchange("Barrier", transfers, DeadlineAfter(timeout), timeout);
}

}  // namespace verl
