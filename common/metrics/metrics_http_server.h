#ifndef VERL_COMMON_METRICS_METRICS_HTTP_SERVER_H_
#define VERL_COMMON_METRICS_METRICS_HTTP_SERVER_H_

// A minimal HTTP/1.1 server for Prometheus scrapes: GET (or HEAD) /metrics answers 200 with the body the handler
// returns; any other path is 404, another method on /metrics is 405, a request that is not HTTP/1.x is 400, a
// request head over `max_request_bytes` is 431, and a client that does not finish its request head within
// `request_timeout_ms` is dropped. Every response closes the connection (Prometheus reconnects per scrape). Request
// bodies are never read.
//
// One thread runs poll() over the listening socket and the open connections, so a slow or hostile client cannot
// block the others. The handler runs on that thread; it must be thread-safe with respect to the rest of the process
// (PrometheusRegistry::Render is). Stop() (or the destructor) closes the socket and joins the thread.

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"

namespace verl {

struct MetricsHttpServerOptions {
  // "ipv4:port", "[ipv6]:port", "localhost:port" (127.0.0.1) or ":port" (0.0.0.0, every IPv4 interface). Host names
  // are not resolved (no DNS at startup). Port 0 takes a free port; port() reports it. Default: loopback only, any
  // free port.
  std::string listen = "127.0.0.1:0";
  // Largest request head (request line + headers) accepted, in bytes. Default: 8 KiB.
  size_t max_request_bytes = 8192;
  // A connection whose request head is not complete after this long is closed. Default: 5000 ms.
  int request_timeout_ms = 5000;
  // Connections served at once. When all are open, a new one takes the place of the oldest that is not being answered
  // (a stalled client's), or is closed if every one is being answered. Default: 64.
  int max_connections = 64;
};

class MetricsHttpServer {
 public:
  // The body and Content-Type of a /metrics response.
  struct Response {
    std::string content_type;
    std::string body;
  };
  using Handler = std::function<Response()>;

  // Binds and listens on options.listen and starts serving. InvalidArgument for an unparsable address or a host that
  // is not a numeric address;
  // Unavailable (naming the address and errno text) when the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(const MetricsHttpServerOptions& options,
                                                                  Handler handler);
  ~MetricsHttpServer();
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  // Stops serving: closes the listening socket and the open connections, joins the thread. Idempotent.
  void Stop();

  // The bound port (the real one when options.listen asked for port 0).
  int port() const { return port_; }
  // "host:port" of the bound socket, e.g. "127.0.0.1:41234" or "[::1]:9400".
  const std::string& address() const { return address_; }
  // Requests answered so far, any status (for tests and logs).
  int64_t requests_served() const { return requests_served_.load(); }

 private:
  MetricsHttpServer(MetricsHttpServerOptions options, Handler handler, int listen_fd, int wake_read_fd,
                    int wake_write_fd, int port, std::string address);
  void Serve();

  const MetricsHttpServerOptions options_;
  const Handler handler_;
  int listen_fd_;
  int wake_read_fd_;   // a pipe: Stop() writes a byte to wake poll()
  int wake_write_fd_;
  const int port_;
  const std::string address_;
  std::atomic<int64_t> requests_served_{0};
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace verl

#endif  // VERL_COMMON_METRICS_METRICS_HTTP_SERVER_H_
