// verl-worker: one daemon per node. Serves WorkerService on --listen and hosts --ranks CPU ranks, each on its own
// thread.
//
//   verl-worker --listen 127.0.0.1:0 --ready-file /tmp/w0.ready --worker-id w0 [--ranks 2] [--comm-host 10.0.0.5]
//
// --comm-host is the address other workers reach this one's ranks at for collectives (the host backend); it defaults
// to the --listen host, and must be given when that is a wildcard (0.0.0.0 or [::]). With --device cuda, local rank i
// runs on GPU i. --metrics-listen serves Prometheus metrics of the worker (RPC durations and errors per method,
// generated tokens per rank, process memory) on http://HOST:PORT/metrics.
// With port 0 the kernel picks a free port; the address actually bound is written to --ready-file (atomically) once
// the server accepts calls, which is how a launching controller learns it. SIGTERM/SIGINT or a Shutdown RPC stop it:
// the call in flight may finish (at most 10 s more), a second signal exits at once.

#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "common/config/flag_reader.h"
#include "common/metrics/metrics_http_server.h"
#include "common/metrics/prometheus_registry.h"
#include "spdlog/spdlog.h"
#include "worker/rank/rank_interface.h"
#include "worker/service/worker_service.h"

namespace {

struct Flags {
  std::string listen = "127.0.0.1:0";
  std::string ready_file;
  std::string worker_id = "worker-0";
  int ranks = 1;
  std::string comm_host;
  std::string device = "cpu";
  std::string metrics_listen;  // empty: no /metrics endpoint
};

void Usage() {
  std::cerr << "usage: verl-worker [--listen HOST:PORT] [--ready-file PATH] [--worker-id ID] [--ranks N] "
               "[--comm-host HOST] [--device cpu|cuda] [--metrics-listen HOST:PORT]\n"
               "(a flag's value may also follow an '=': --listen=0.0.0.0:50052)\n";
}

bool ParseFlags(int argc, char** argv, Flags* flags) {
  verl::FlagReader reader("verl-worker", std::vector<std::string>(argv + 1, argv + argc));
  while (reader.Next()) {
    const std::string& arg = reader.name();
    std::string v;
    if (arg == "--help" || arg == "-h") {
      Usage();
      std::exit(0);
    }
    if (arg != "--listen" && arg != "--ready-file" && arg != "--worker-id" && arg != "--ranks" &&
        arg != "--comm-host" && arg != "--metrics-listen" && arg != "--device") {
      reader.Unknown();
      return false;
    }
    if (!reader.Value(&v)) return false;
    if (arg == "--listen") {
      flags->listen = v;
    } else if (arg == "--ready-file") {
      flags->ready_file = v;
    } else if (arg == "--worker-id") {
      flags->worker_id = v;
    } else if (arg == "--ranks") {
      int n = 0;
      if (!absl::SimpleAtoi(v, &n) || n < 1 || n > 1024) {
        std::cerr << "verl-worker: --ranks must be a number from 1 to 1024, got '" << v << "'\n";
        return false;
      }
      flags->ranks = n;
    } else if (arg == "--comm-host") {
      flags->comm_host = v;
    } else if (arg == "--metrics-listen") {
      flags->metrics_listen = v;
    } else if (arg == "--device") {
      if (v != "cpu" && v != "cuda") {
        std::cerr << "verl-worker: --device must be cpu or cuda, got '" << v << "'\n";
        return false;
      }
      flags->device = v;
    }
  }
  return true;
}

std::mutex g_mu;
std::condition_variable g_cv;
bool g_stop = false;

void RequestStop() {
  {
    std::lock_guard<std::mutex> lock(g_mu);
    g_stop = true;
  }
  g_cv.notify_all();
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  if (!ParseFlags(argc, argv, &flags)) {
    Usage();
    return 2;
  }
  spdlog::set_pattern("[%H:%M:%S.%e] [" + flags.worker_id + "] [%l] %v");
  // The CUDA caching allocator grows its segments in place instead of holding blocks of fixed sizes: the rollout's KV
  // cache and the trainer's passes then reuse one pool from step to step, where fixed blocks split differently each
  // step and new ones are allocated (B3: 24.6 GB reserved after three steps against 19.2, 9.57 against 9.18 s a step;
  // docs/decisions.md). Read once, at the allocator's first use; a PYTORCH_CUDA_ALLOC_CONF of the user's is kept.
  if (flags.device == "cuda") setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True", /*overwrite=*/0);

  // Signals are taken by a dedicated thread with sigwait, so the handlers never run arbitrary code.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  // The first signal stops gracefully (the call in flight finishes); a second one exits at once.
  std::thread signal_thread([signals] {
    int sig = 0;
    sigwait(&signals, &sig);
    RequestStop();
    sigwait(&signals, &sig);
    _exit(1);
  });
  signal_thread.detach();

  std::string comm_host = flags.comm_host;
  if (comm_host.empty()) {
    comm_host = flags.listen.substr(0, flags.listen.rfind(':'));
    if (comm_host.size() >= 2 && comm_host.front() == '[') comm_host = comm_host.substr(1, comm_host.size() - 2);
    if (comm_host == "0.0.0.0" || comm_host == "::" || comm_host.empty()) {
      std::cerr << "verl-worker: --listen " << flags.listen
                << " is a wildcard address; give --comm-host, the address other workers reach this host at\n";
      return 2;
    }
  }
  std::vector<std::unique_ptr<verl::RankInterface>> ranks;
  for (int i = 0; i < flags.ranks; ++i) ranks.push_back(verl::CreateCpuRank(i));
  // Prometheus /metrics of this worker (its RPCs, generated tokens, process), when asked for.
  std::shared_ptr<verl::PrometheusRegistry> registry;
  std::unique_ptr<verl::MetricsHttpServer> metrics_server;
  if (!flags.metrics_listen.empty()) {
    registry = std::make_shared<verl::PrometheusRegistry>();
    verl::MetricsHttpServerOptions o;
    o.listen = flags.metrics_listen;
    auto server = verl::MetricsHttpServer::Start(o, [registry] {
      return verl::MetricsHttpServer::Response{verl::PrometheusRegistry::kContentType, registry->Render()};
    });
    if (!server.ok()) {
      std::cerr << "verl-worker: --metrics-listen " << flags.metrics_listen << ": " << server.status().message()
                << "\n";
      return 2;
    }
    metrics_server = *std::move(server);
    spdlog::info("prometheus metrics: http://{}/metrics", metrics_server->address());
  }
  verl::WorkerServiceImpl service(flags.worker_id, std::move(ranks), comm_host, flags.device, RequestStop, registry);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(flags.listen, grpc::InsecureServerCredentials(), &port);
  builder.SetMaxReceiveMessageSize(1 << 30);
  builder.SetMaxSendMessageSize(1 << 30);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || port == 0) {
    spdlog::error("cannot listen on {}", flags.listen);
    return 1;
  }
  const std::string host = flags.listen.substr(0, flags.listen.rfind(':'));
  const std::string address = host + ":" + std::to_string(port);
  spdlog::info("serving WorkerService on {} (pid {}) with {} rank(s)", address, getpid(), flags.ranks);
  if (!flags.ready_file.empty()) {
    const std::string tmp = flags.ready_file + ".tmp";
    {
      std::ofstream out(tmp);
      out << address << "\n";
    }
    std::filesystem::rename(tmp, flags.ready_file);
  }

  {
    std::unique_lock<std::mutex> lock(g_mu);
    g_cv.wait(lock, [] { return g_stop; });
  }
  spdlog::info("shutting down");
  // A rank busy with a long call would hold the graceful stop up; nobody is waiting for its result any more.
  std::thread([] {
    std::this_thread::sleep_for(std::chrono::seconds(10));
    _exit(1);
  }).detach();
  // Short grace: in-flight calls finish, idle client channels do not hold the exit up for long.
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  server->Wait();
  return 0;
}
