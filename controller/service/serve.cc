#include "controller/service/serve.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <thread>

#include <grpcpp/ext/health_check_service_server_builder_option.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include "absl/strings/numbers.h"
#include "common/config/flag_reader.h"
#include "common/metrics/metrics_http_server.h"
#include "common/metrics/prometheus_registry.h"
#include "common/rpc/credentials.h"
#include "controller/service/job_service.h"
#include "spdlog/sinks/dist_sink.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

namespace verl {
namespace {

constexpr char kTokenEnv[] = "VERL_JOB_TOKEN";

void Usage(std::ostream& out) {
  out << "usage: verl-controller serve [--listen HOST:PORT] [--state-dir DIR] [--token-file FILE | --insecure-no-auth]\n"
         "                            [--tls-cert FILE --tls-key FILE [--tls-client-ca FILE]]\n"
         "                            [--metrics-listen HOST:PORT] [--max-request-bytes N] [--ready-file FILE]\n"
         "                            [--log-level LEVEL]\n"
         "  --listen HOST:PORT      JobService address (default 127.0.0.1:50051; port 0 picks a free one)\n"
         "  --state-dir DIR         jobs, their metrics and logs, kept across restarts (default ./verl-state)\n"
         "  --token-file FILE       bearer token every call must carry (or $VERL_JOB_TOKEN); required unless\n"
         "  --insecure-no-auth      accepts calls without a token\n"
         "  --tls-cert, --tls-key   serve TLS with this PEM certificate chain and key\n"
         "  --tls-client-ca FILE    require client certificates signed by this CA (mutual TLS)\n"
         "  --metrics-listen H:P    Prometheus /metrics of every job (job_id label) and verl_jobs{state}\n"
         "  --max-request-bytes N   largest request accepted (default 4194304); larger ones: RESOURCE_EXHAUSTED\n"
         "  --ready-file FILE       write the bound address here once serving\n"
         "A flag's value may also follow an '=' (--listen=0.0.0.0:50051).\n";
}

std::mutex g_mu;
std::condition_variable g_cv;
bool g_stop = false;

}  // namespace

int ServeMain(const std::vector<std::string>& args, const std::string& worker_binary) {
  // Block SIGTERM/SIGINT before any thread exists (gRPC starts its own at first use): a dedicated thread takes them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::string listen = "127.0.0.1:50051", state_dir = "verl-state", token_file, metrics_listen, ready_file;
  std::string log_level = "info";
  ServerTlsFiles tls;
  bool no_auth = false;
  int64_t max_request_bytes = 4 << 20;
  FlagReader flags("verl-controller serve", args);
  while (flags.Next()) {
    const std::string& a = flags.name();
    auto value = [&](std::string* out) { return flags.Value(out); };
    std::string v;
    bool ok = true;
    if (a == "--listen") ok = value(&listen);
    else if (a == "--state-dir") ok = value(&state_dir);
    else if (a == "--token-file") ok = value(&token_file);
    else if (a == "--insecure-no-auth") no_auth = ok = flags.NoValue();
    else if (a == "--tls-cert") ok = value(&tls.cert);
    else if (a == "--tls-key") ok = value(&tls.key);
    else if (a == "--tls-client-ca") ok = value(&tls.client_ca);
    else if (a == "--metrics-listen") ok = value(&metrics_listen);
    else if (a == "--ready-file") ok = value(&ready_file);
    else if (a == "--log-level") ok = value(&log_level);
    else if (a == "--max-request-bytes") {
      ok = value(&v);
      if (ok && (!absl::SimpleAtoi(v, &max_request_bytes) || max_request_bytes < 1024 ||
                 max_request_bytes > (int64_t{1} << 30))) {
        std::cerr << "verl-controller serve: --max-request-bytes must be an integer in [1024, 2^30], got '" << v
                  << "'\n";
        return 2;
      }
    } else if (a == "--help" || a == "-h") {
      Usage(std::cout);
      return 0;
    } else {
      flags.Unknown();
      Usage(std::cerr);
      return 2;
    }
    if (!ok) return 2;
  }

  // Log to stderr, and through `tee` into the running job's log file.
  auto tee = std::make_shared<spdlog::sinks::dist_sink_mt>();
  auto logger = std::make_shared<spdlog::logger>(
      "controller", spdlog::sinks_init_list{std::make_shared<spdlog::sinks::stderr_color_sink_mt>(), tee});
  logger->set_level(spdlog::level::from_str(log_level));
  logger->set_pattern("[%H:%M:%S] [controller] [%l] %v");
  logger->flush_on(spdlog::level::trace);  // job log lines land in order with the console progress
  spdlog::set_default_logger(logger);

  JobServiceOptions options;
  options.state_dir = state_dir;
  options.default_worker_binary = worker_binary;
  options.log_tee = tee;
  if (!token_file.empty()) {
    auto token = ReadTokenFile(token_file);
    if (!token.ok()) {
      std::cerr << "verl-controller serve: --token-file: " << token.status().message() << "\n";
      return 2;
    }
    options.token = *token;
  } else if (const char* env = std::getenv(kTokenEnv); env != nullptr && *env != '\0') {
    options.token = env;
  } else if (!no_auth) {
    std::cerr << "verl-controller serve: no token: give --token-file FILE (or $" << kTokenEnv
              << "), or --insecure-no-auth to accept every caller\n";
    return 2;
  }
  if (options.token.empty()) spdlog::warn("no token: every caller is accepted (--insecure-no-auth)");
  auto creds = MakeServerCredentials(tls);
  if (!creds.ok()) {
    std::cerr << "verl-controller serve: " << creds.status().message() << "\n";
    return 2;
  }

  std::unique_ptr<MetricsHttpServer> metrics_server;
  if (!metrics_listen.empty()) {
    options.prometheus = std::make_shared<PrometheusRegistry>();
    MetricsHttpServerOptions o;
    o.listen = metrics_listen;
    auto registry = options.prometheus;
    auto server = MetricsHttpServer::Start(o, [registry] {
      return MetricsHttpServer::Response{PrometheusRegistry::kContentType, registry->Render()};
    });
    if (!server.ok()) {
      std::cerr << "verl-controller serve: --metrics-listen " << metrics_listen << ": " << server.status().message()
                << "\n";
      return 2;
    }
    metrics_server = *std::move(server);
    spdlog::info("prometheus metrics: http://{}/metrics", metrics_server->address());
  }

  auto service = JobService::Create(options);
  if (!service.ok()) {
    std::cerr << "verl-controller serve: " << service.status().message() << "\n";
    return 1;
  }

  std::thread([signals] {
    int sig = 0;
    sigwait(&signals, &sig);
    {
      std::lock_guard<std::mutex> lock(g_mu);
      g_stop = true;
    }
    g_cv.notify_all();
    sigwait(&signals, &sig);
    _exit(1);
  }).detach();

  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(listen, *creds, &port);
  builder.SetMaxReceiveMessageSize(static_cast<int>(max_request_bytes));
  builder.RegisterService(service->get());
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || port == 0) {
    std::cerr << "verl-controller serve: cannot listen on " << listen << " (address in use, or bad TLS files)\n";
    return 1;
  }
  server->GetHealthCheckService()->SetServingStatus("verl.v1.JobService", true);
  const std::string address = listen.substr(0, listen.rfind(':')) + ":" + std::to_string(port);
  spdlog::info("serving JobService on {} ({}, {}; pid {})", address, tls.cert.empty() ? "plaintext" : "TLS",
               options.token.empty() ? "no token" : "bearer token", getpid());
  if (!ready_file.empty()) {
    const std::string tmp = ready_file + ".tmp";
    {
      std::ofstream out(tmp);
      out << address << "\n";
    }
    std::error_code ec;
    std::filesystem::rename(tmp, ready_file, ec);
  }
  (*service)->Start();

  {
    std::unique_lock<std::mutex> lock(g_mu);
    g_cv.wait(lock, [] { return g_stop; });
  }
  spdlog::info("shutting down: the running job (if any) is interrupted and stays queued");
  server->GetHealthCheckService()->SetServingStatus("verl.v1.JobService", false);
  (*service)->Shutdown();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  server->Wait();
  return 0;
}

}  // namespace verl
