#include <catch2/catch.hpp>

#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "common/metrics/metrics_http_server.h"
#include "common/metrics/prometheus_registry.h"
#include "tests/common/metrics/http_test_client.h"

namespace verl {
namespace {

using testing::ConnectLoopback;
using testing::HttpGet;
using testing::ParseResponse;
using testing::RawRequest;
using testing::ReadAll;
using testing::SendAll;

std::unique_ptr<MetricsHttpServer> StartServer(MetricsHttpServerOptions options = {}, std::string body = "up 1\n") {
  auto server = MetricsHttpServer::Start(options, [body] {
    return MetricsHttpServer::Response{PrometheusRegistry::kContentType, body};
  });
  INFO(server.status().ToString());
  REQUIRE(server.ok());
  return std::move(server).value();
}

TEST_CASE("MetricsHttpServer serves GET /metrics on a free port", "[prometheus][http]") {
  auto server = StartServer();
  REQUIRE(server->port() > 0);
  CHECK(server->address() == "127.0.0.1:" + std::to_string(server->port()));
  const auto r = HttpGet(server->port(), "/metrics");
  REQUIRE(r.status == 200);
  CHECK(r.body == "up 1\n");
  CHECK(r.headers.find("Content-Type: text/plain; version=0.0.4; charset=utf-8") != std::string::npos);
  CHECK(r.headers.find("Content-Length: 5") != std::string::npos);
  // A query string is ignored; HTTP/1.0 and HEAD work.
  CHECK(HttpGet(server->port(), "/metrics?x=1").status == 200);
  const auto head = ParseResponse(RawRequest(server->port(), "HEAD /metrics HTTP/1.0\r\n\r\n"));
  CHECK(head.status == 200);
  CHECK(head.body.empty());
  // Bare-LF line endings, as some hand-written clients send.
  CHECK(ParseResponse(RawRequest(server->port(), "GET /metrics HTTP/1.1\nHost: x\n\n")).status == 200);
  CHECK(server->requests_served() == 4);
}

TEST_CASE("MetricsHttpServer answers errors for other paths, methods and malformed requests", "[prometheus][http]") {
  MetricsHttpServerOptions options;
  options.max_request_bytes = 1024;
  auto server = StartServer(options);
  const int port = server->port();
  CHECK(HttpGet(port, "/").status == 404);
  CHECK(HttpGet(port, "/metricsx").status == 404);
  CHECK(HttpGet(port, "/../etc/passwd").status == 404);
  const auto post = ParseResponse(RawRequest(port, "POST /metrics HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc"));
  CHECK(post.status == 405);
  CHECK(post.headers.find("Allow: GET, HEAD") != std::string::npos);
  for (const std::string& bad : {std::string("\x00\x01\x02\xff\r\n\r\n", 8), std::string("GET\r\n\r\n"),
                                std::string("GET /metrics\r\n\r\n"), std::string("GET /metrics HTTP/2.0\r\n\r\n"),
                                std::string("GET  /metrics HTTP/1.1\r\n\r\n"), std::string(" / HTTP/1.1\r\n\r\n"),
                                std::string("G(T /metrics HTTP/1.1\r\n\r\n"), std::string("\r\n\r\n")}) {
    INFO(bad);
    CHECK(ParseResponse(RawRequest(port, bad)).status == 400);
  }
  // An oversized head is refused without waiting for its end.
  std::string huge = "GET /metrics HTTP/1.1\r\nX-Pad: " + std::string(4096, 'a');
  CHECK(ParseResponse(RawRequest(port, huge)).status == 431);
  // Clients that connect and leave, or leave mid-request, do not disturb the server.
  for (int i = 0; i < 5; ++i) {
    const int fd = ConnectLoopback(port);
    REQUIRE(fd >= 0);
    if (i % 2) SendAll(fd, "GET /met");
    ::close(fd);
  }
  CHECK(HttpGet(port, "/metrics").status == 200);
}

TEST_CASE("MetricsHttpServer drops clients that stall and keeps serving others", "[prometheus][http]") {
  MetricsHttpServerOptions options;
  options.request_timeout_ms = 200;
  auto server = StartServer(options);
  const int slow = ConnectLoopback(server->port());
  REQUIRE(slow >= 0);
  SendAll(slow, "GET /metrics HTTP/1.1\r\n");  // never finishes its head
  // Others are served while the slow one waits.
  const auto t0 = std::chrono::steady_clock::now();
  CHECK(HttpGet(server->port(), "/metrics").status == 200);
  const std::string dropped = ReadAll(slow, 2000);
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ::close(slow);
  CHECK(ParseResponse(dropped).status == 408);
  CHECK(waited < 1.5);
}

TEST_CASE("MetricsHttpServer: a client holding every connection slot cannot shut a scrape out", "[prometheus][http]") {
  MetricsHttpServerOptions options;
  options.max_connections = 4;
  options.request_timeout_ms = 60000;  // the stalled ones would stay for a minute
  auto server = StartServer(options);
  std::vector<int> stalled;
  for (int i = 0; i < 2 * options.max_connections; ++i) {
    const int fd = ConnectLoopback(server->port());
    REQUIRE(fd >= 0);
    SendAll(fd, "GET /metrics HTTP/1.1\r\n");  // never finishes its head
    stalled.push_back(fd);
  }
  // The scrape takes the oldest stalled connection's place.
  CHECK(HttpGet(server->port(), "/metrics").status == 200);
  CHECK(HttpGet(server->port(), "/metrics").status == 200);
  for (int fd : stalled) ::close(fd);
}

TEST_CASE("MetricsHttpServer serves many concurrent scrapes of a changing registry", "[prometheus][http]") {
  auto registry = std::make_shared<PrometheusRegistry>();
  REQUIRE(registry->DeclareCounter("verl_updates_total", "updates").ok());
  REQUIRE(registry->IncrementCounter("verl_updates_total", {}).ok());  // the series exists before the first scrape
  auto server = MetricsHttpServer::Start({}, [registry] {
    return MetricsHttpServer::Response{PrometheusRegistry::kContentType, registry->Render()};
  });
  REQUIRE(server.ok());
  const int port = (*server)->port();
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    for (int i = 0; !stop.load(); ++i) {
      (void)registry->IncrementCounter("verl_updates_total", {});
      (void)registry->SetStepMetrics({{"rank", "0"}}, {{"actor/pg_loss", i * 0.5}, {"timing_s/gen", 1.0 * i}});
    }
  });
  std::atomic<int> ok{0};
  std::vector<std::thread> scrapers;
  for (int t = 0; t < 4; ++t) {
    scrapers.emplace_back([&] {
      double last = -1;
      for (int i = 0; i < 10; ++i) {
        const auto r = HttpGet(port, "/metrics");
        const size_t at = r.body.find("\nverl_updates_total ");
        if (r.status != 200 || at == std::string::npos) {
          WARN("scrape failed: status " << r.status << ", body size " << r.body.size());
          continue;
        }
        const double value = std::stod(r.body.substr(at + 20));
        if (value >= last && r.body.find("process_resident_memory_bytes") != std::string::npos) ++ok;
        last = value;
      }
    });
  }
  for (auto& s : scrapers) s.join();
  stop = true;
  writer.join();
  CHECK(ok.load() == 40);  // every scrape answered, counters monotonic
}

TEST_CASE("MetricsHttpServer reports bad addresses and ports in use", "[prometheus][http]") {
  const auto handler = [] { return MetricsHttpServer::Response{"text/plain", ""}; };
  for (const char* addr : {"", "9400", "127.0.0.1", "127.0.0.1:", "127.0.0.1:65536", "127.0.0.1:-1",
                                 "127.0.0.1:http", "::1:9400", "[::1:9400"}) {
    MetricsHttpServerOptions o;
    o.listen = addr;
    INFO(addr);
    const auto s = MetricsHttpServer::Start(o, handler);
    CHECK(s.status().code() == absl::StatusCode::kInvalidArgument);
    if (!s.ok()) CHECK(s.status().message().find(addr) != absl::string_view::npos);
  }
  auto first = StartServer();
  MetricsHttpServerOptions taken;
  taken.listen = "127.0.0.1:" + std::to_string(first->port());
  const auto second = MetricsHttpServer::Start(taken, handler);
  CHECK(second.status().code() == absl::StatusCode::kUnavailable);
  CHECK(second.status().message().find(taken.listen) != absl::string_view::npos);
  MetricsHttpServerOptions unresolvable;
  unresolvable.listen = "no-such-host.invalid:0";
  CHECK(MetricsHttpServer::Start(unresolvable, handler).status().code() == absl::StatusCode::kInvalidArgument);
  MetricsHttpServerOptions localhost;
  localhost.listen = "localhost:0";
  const auto local = MetricsHttpServer::Start(localhost, handler);
  REQUIRE(local.ok());
  CHECK((*local)->address().rfind("127.0.0.1:", 0) == 0);
}

TEST_CASE("MetricsHttpServer stops promptly with idle connections open", "[prometheus][http]") {
  auto server = StartServer();
  const int port = server->port();
  const int idle = ConnectLoopback(port);
  REQUIRE(idle >= 0);
  const auto t0 = std::chrono::steady_clock::now();
  server->Stop();
  server->Stop();  // idempotent
  CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 0.5);
  CHECK(ReadAll(idle, 500).empty());  // closed without a response
  ::close(idle);
  CHECK(ConnectLoopback(port) < 0);  // nothing listens any more
  server.reset();
}

TEST_CASE("MetricsHttpServer answers a real HTTP client (curl)", "[prometheus][http]") {
  if (!std::filesystem::exists("/usr/bin/curl")) {
    WARN("curl not installed: skipped");
    return;
  }
  auto server = StartServer({}, "verl_actor_pg_loss -0.5\n");
  const std::string cmd = "/usr/bin/curl -sS --fail --max-time 5 -D - http://" + server->address() + "/metrics";
  FILE* pipe = ::popen(cmd.c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::string out;
  char buf[512];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), pipe)) > 0;) out.append(buf, n);
  CHECK(::pclose(pipe) == 0);
  CHECK(out.find("HTTP/1.1 200 OK") == 0);
  CHECK(out.find("\r\n\r\nverl_actor_pg_loss -0.5\n") != std::string::npos);
  const std::string missing = "/usr/bin/curl -s -o /dev/null -w '%{http_code}' http://" + server->address() + "/x";
  pipe = ::popen(missing.c_str(), "r");
  REQUIRE(pipe != nullptr);
  out.clear();
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), pipe)) > 0;) out.append(buf, n);
  ::pclose(pipe);
  CHECK(out == "404");
}

}  // namespace
}  // namespace verl
