// verlctl: the command-line client of `verl-controller serve` (proto/verl/v1/job.proto).
//
//   verlctl [global flags] submit JOB.yaml [key=value ...] [--name NAME] [--watch]
//   verlctl [global flags] list
//   verlctl [global flags] status JOB_ID
//   verlctl [global flags] watch JOB_ID
//   verlctl [global flags] cancel JOB_ID
//   verlctl [global flags] logs JOB_ID [--follow]
//
// Global flags (anywhere on the line): --server HOST:PORT ($VERL_SERVER, default 127.0.0.1:50051), --token TOKEN |
// --token-file FILE ($VERL_JOB_TOKEN), --tls-ca FILE (TLS; the CA that signed the server), --tls-cert/--tls-key
// (client certificate), --tls-server-name NAME (the name the certificate must carry, when it is not the host of
// --server), --timeout SECONDS (unary calls, default 30), --json (machine-readable output: one JSON object per
// line, protobuf's JSON mapping with the proto's field names).
//
// Exit status: 0 success (watch: the job succeeded); 1 the server refused or could not be reached (the gRPC code and
// message are printed); 2 bad usage; 4 the watched job failed; 5 it was cancelled.

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <google/protobuf/util/json_util.h>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/config/flag_reader.h"
#include "common/rpc/credentials.h"
#include "verl/v1/job.grpc.pb.h"

namespace {

using verl::FlagReader;
using verl::v1::Job;
using verl::v1::JobService;

constexpr int kExitRpc = 1;
constexpr int kExitUsage = 2;
constexpr int kExitJobFailed = 4;
constexpr int kExitJobCancelled = 5;

void Usage(std::ostream& out) {
  out << "usage: verlctl [--server HOST:PORT] [--token T | --token-file F] [--tls-ca F [--tls-cert F --tls-key F]]\n"
         "               [--tls-server-name NAME] [--timeout S] [--json] COMMAND ...\n"
         "commands:\n"
         "  submit JOB.yaml [key=value ...] [--name NAME] [--watch]   queue a job (config validated by the server)\n"
         "  list                                                      all jobs, newest first\n"
         "  status JOB_ID                                             one job\n"
         "  watch JOB_ID                                              live state and step metrics until it ends\n"
         "  cancel JOB_ID                                             cancel a queued or running job\n"
         "  logs JOB_ID [--follow]                                    the job's log\n"
         "environment: VERL_SERVER, VERL_JOB_TOKEN\n"
         "exit status: 0 ok, 1 RPC error, 2 usage, 4 watched job failed, 5 watched job cancelled\n";
}

struct Flags {
  std::string server = "127.0.0.1:50051";
  std::string token;
  std::string token_file;
  verl::ClientTlsFiles tls;
  std::string tls_server_name;
  double timeout_s = 30;
  bool json = false;
  std::vector<std::string> positional;
  std::string name;
  bool watch = false;
  bool follow = false;
};

std::string StateName(verl::v1::JobState s) {
  std::string name = verl::v1::JobState_Name(s);
  const std::string prefix = "JOB_STATE_";
  if (name.rfind(prefix, 0) == 0) name = name.substr(prefix.size());
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
  return name;
}

std::string Json(const google::protobuf::Message& m) {
  std::string out;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(m, &out, options);
  return out;
}

std::string FormatTime(int64_t ms) {
  if (ms <= 0) return "-";
  const std::time_t t = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

std::string Progress(const Job& j) {
  if (j.total_steps() <= 0) return j.current_step() > 0 ? absl::StrCat(j.current_step()) : "-";
  return absl::StrCat(j.current_step(), "/", j.total_steps());
}

// The metrics a person watches, in this order, when present.
std::string MetricsLine(int64_t step, int64_t total, const google::protobuf::Map<std::string, double>& m) {
  static const std::vector<std::pair<std::string, std::string>> kShown = {
      {"critic/score/mean", "score"},       {"actor/pg_loss", "pg_loss"},
      {"actor/kl_loss", "kl"},              {"actor/entropy", "entropy"},
      {"response_length/mean", "resp_len"}, {"perf/throughput", "tok/s"},
      {"timing_s/step", "s/step"}};
  std::string line = step == 0 ? std::string("validation before training")
                               : (total > 0 ? absl::StrCat("step ", step, "/", total) : absl::StrCat("step ", step));
  for (const auto& [key, label] : kShown) {
    if (auto it = m.find(key); it != m.end()) absl::StrAppend(&line, " | ", label, " ", absl::StrFormat("%.4g", it->second));
  }
  for (const auto& [key, value] : m) {
    if (key.rfind("val-core/", 0) == 0) absl::StrAppend(&line, " | ", key, " ", absl::StrFormat("%.4g", value));
  }
  return line;
}

bool IsEnded(verl::v1::JobState s) {
  return s == verl::v1::JOB_STATE_SUCCEEDED || s == verl::v1::JOB_STATE_FAILED || s == verl::v1::JOB_STATE_CANCELLED;
}

void PrintStateLine(const Job& j) {
  std::cout << j.id() << " " << StateName(j.state());
  if (!j.error().empty()) std::cout << ": " << j.error();
  std::cout << std::endl;
}

void PrintJob(const Job& j) {
  std::cout << "id:         " << j.id() << "\n"
            << "name:       " << j.name() << "\n"
            << "state:      " << StateName(j.state()) << (j.stage().empty() ? "" : " (" + j.stage() + ")") << "\n"
            << "progress:   " << Progress(j) << "\n"
            << "submitted:  " << FormatTime(j.submit_time_ms()) << "\n"
            << "started:    " << FormatTime(j.start_time_ms()) << "\n"
            << "ended:      " << FormatTime(j.end_time_ms()) << "\n";
  if (j.restarts() > 0) std::cout << "restarts:   " << j.restarts() << "\n";
  if (!j.error().empty()) std::cout << "error:      " << j.error() << "\n";
  if (j.overrides_size() > 0) {
    std::cout << "overrides: ";
    for (const auto& o : j.overrides()) std::cout << " " << o;
    std::cout << "\n";
  }
  if (!j.last_metrics().empty()) std::cout << "last:       " << MetricsLine(j.current_step(), j.total_steps(), j.last_metrics()) << "\n";
}

int RpcError(const std::string& what, const grpc::Status& s) {
  // gRPC's codes are the canonical ones, so absl names them ("UNAUTHENTICATED", ...).
  std::cerr << "verlctl: " << what << ": " << absl::StatusCodeToString(static_cast<absl::StatusCode>(s.error_code()))
            << ": " << s.error_message() << "\n";
  return kExitRpc;
}

class Client {
 public:
  Client(const Flags& flags, std::shared_ptr<grpc::Channel> channel)
      : flags_(flags), stub_(JobService::NewStub(std::move(channel))) {}

  // A context with the token and, for unary calls, the deadline.
  std::unique_ptr<grpc::ClientContext> Context(bool unary) const {
    auto ctx = std::make_unique<grpc::ClientContext>();
    if (!flags_.token.empty()) ctx->AddMetadata(verl::kAuthorizationMetadataKey, verl::BearerTokenMetadata(flags_.token));
    if (unary) {
      ctx->set_deadline(std::chrono::system_clock::now() +
                        std::chrono::milliseconds(static_cast<int64_t>(flags_.timeout_s * 1000)));
    }
    return ctx;
  }

  int Submit() {
    if (flags_.positional.size() < 2) {
      std::cerr << "verlctl submit: needs the job file\n";
      return kExitUsage;
    }
    const std::string& path = flags_.positional[1];
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      std::cerr << "verlctl submit: cannot read '" << path << "'\n";
      return kExitUsage;
    }
    std::stringstream text;
    text << in.rdbuf();
    verl::v1::SubmitJobRequest req;
    req.set_config_yaml(text.str());
    for (size_t i = 2; i < flags_.positional.size(); ++i) req.add_overrides(flags_.positional[i]);
    req.set_name(flags_.name);
    Job job;
    auto ctx = Context(true);
    grpc::Status s = stub_->SubmitJob(ctx.get(), req, &job);
    if (!s.ok()) return RpcError(absl::StrCat("submit ", path), s);
    if (flags_.json) {
      std::cout << Json(job) << "\n";
    } else {
      std::cout << "submitted " << job.id() << " (" << job.name() << ")\n";
    }
    std::cout.flush();
    return flags_.watch ? Watch(job.id()) : 0;
  }

  int List() {
    verl::v1::ListJobsResponse resp;
    auto ctx = Context(true);
    grpc::Status s = stub_->ListJobs(ctx.get(), verl::v1::ListJobsRequest(), &resp);
    if (!s.ok()) return RpcError("list", s);
    if (flags_.json) {
      for (const Job& j : resp.jobs()) std::cout << Json(j) << "\n";
      return 0;
    }
    std::cout << absl::StrFormat("%-12s %-24s %-10s %-18s %-10s %s\n", "ID", "NAME", "STATE", "STAGE", "STEP",
                                 "SUBMITTED");
    for (const Job& j : resp.jobs()) {
      std::cout << absl::StrFormat("%-12s %-24s %-10s %-18s %-10s %s\n", j.id(), j.name(), StateName(j.state()),
                                   j.stage().empty() ? "-" : j.stage(), Progress(j), FormatTime(j.submit_time_ms()));
    }
    return 0;
  }

  int Status(const std::string& id) {
    verl::v1::GetJobRequest req;
    req.set_job_id(id);
    Job job;
    auto ctx = Context(true);
    grpc::Status s = stub_->GetJob(ctx.get(), req, &job);
    if (!s.ok()) return RpcError(absl::StrCat("status ", id), s);
    if (flags_.json) {
      std::cout << Json(job) << "\n";
    } else {
      PrintJob(job);
    }
    return 0;
  }

  int Watch(const std::string& id) {
    verl::v1::WatchJobRequest req;
    req.set_job_id(id);
    auto ctx = Context(false);
    auto reader = stub_->WatchJob(ctx.get(), req);
    verl::v1::JobEvent ev;
    verl::v1::JobState last = verl::v1::JOB_STATE_UNSPECIFIED;
    Job final_job;
    int64_t total = 0;
    int64_t last_step = -1;
    while (reader->Read(&ev)) {
      if (flags_.json) {
        std::cout << Json(ev) << std::endl;
      } else if (ev.has_job()) {
        // An ended job's state is printed last, after the history that follows it.
        if (!IsEnded(ev.job().state())) PrintStateLine(ev.job());
        final_job = ev.job();
      } else if (ev.has_metrics()) {
        if (ev.metrics().step() <= last_step) {
          std::cout << "(re-running from step " << ev.metrics().step()
                    << " after a recovery; the lines above from there on are replaced)" << std::endl;
        }
        last_step = ev.metrics().step();
        std::cout << MetricsLine(ev.metrics().step(), total, ev.metrics().metrics()) << std::endl;
      }
      if (ev.has_job()) {
        last = ev.job().state();
        total = ev.job().total_steps();
      }
    }
    grpc::Status s = reader->Finish();
    if (!flags_.json && IsEnded(final_job.state())) PrintStateLine(final_job);
    if (!s.ok()) return RpcError(absl::StrCat("watch ", id), s);
    if (last == verl::v1::JOB_STATE_FAILED) return kExitJobFailed;
    if (last == verl::v1::JOB_STATE_CANCELLED) return kExitJobCancelled;
    return 0;
  }

  int Cancel(const std::string& id) {
    verl::v1::CancelJobRequest req;
    req.set_job_id(id);
    Job job;
    auto ctx = Context(true);
    grpc::Status s = stub_->CancelJob(ctx.get(), req, &job);
    if (!s.ok()) return RpcError(absl::StrCat("cancel ", id), s);
    if (flags_.json) {
      std::cout << Json(job) << "\n";
    } else if (job.state() == verl::v1::JOB_STATE_RUNNING) {
      std::cout << id << ": cancelling (it stops at its next cancellation point)\n";
    } else {
      std::cout << id << ": " << StateName(job.state()) << "\n";
    }
    return 0;
  }

  int Logs(const std::string& id) {
    verl::v1::GetJobLogsRequest req;
    req.set_job_id(id);
    req.set_follow(flags_.follow);
    auto ctx = Context(false);
    auto reader = stub_->GetJobLogs(ctx.get(), req);
    verl::v1::LogChunk chunk;
    while (reader->Read(&chunk)) std::cout << chunk.data() << std::flush;
    grpc::Status s = reader->Finish();
    if (!s.ok()) return RpcError(absl::StrCat("logs ", id), s);
    return 0;
  }

 private:
  const Flags& flags_;
  std::unique_ptr<JobService::Stub> stub_;
};

// Parses global and command flags from anywhere on the line; the rest is positional. False on a usage error.
bool ParseFlags(int argc, char** argv, Flags* f) {
  if (const char* env = std::getenv("VERL_SERVER"); env && *env) f->server = env;
  if (const char* env = std::getenv("VERL_JOB_TOKEN"); env && *env) f->token = env;
  FlagReader flags("verlctl", std::vector<std::string>(argv + 1, argv + argc));
  while (flags.Next()) {
    const std::string& a = flags.name();
    std::string v;
    if (a == "--server") {
      if (!flags.Value(&f->server)) return false;
    } else if (a == "--token") {
      if (!flags.Value(&f->token)) return false;
    } else if (a == "--token-file") {
      if (!flags.Value(&f->token_file)) return false;
    } else if (a == "--tls-ca") {
      if (!flags.Value(&f->tls.ca)) return false;
    } else if (a == "--tls-cert") {
      if (!flags.Value(&f->tls.cert)) return false;
    } else if (a == "--tls-key") {
      if (!flags.Value(&f->tls.key)) return false;
    } else if (a == "--tls-server-name") {
      if (!flags.Value(&f->tls_server_name)) return false;
    } else if (a == "--timeout") {
      if (!flags.Value(&v)) return false;
      if (!absl::SimpleAtod(v, &f->timeout_s) || f->timeout_s <= 0) {
        std::cerr << "verlctl: --timeout must be a positive number of seconds, got '" << v << "'\n";
        return false;
      }
    } else if (a == "--json") {
      if (!flags.NoValue()) return false;
      f->json = true;
    } else if (a == "--name") {
      if (!flags.Value(&f->name)) return false;
    } else if (a == "--watch") {
      if (!flags.NoValue()) return false;
      f->watch = true;
    } else if (a == "--follow" || a == "-f") {
      if (!flags.NoValue()) return false;
      f->follow = true;
    } else if (a == "--help" || a == "-h") {
      Usage(std::cout);
      std::exit(0);
    } else if (a.rfind("--", 0) == 0) {
      std::cerr << "verlctl: unknown flag '" << flags.arg() << "'\n";
      return false;
    } else {
      f->positional.push_back(flags.arg());
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  if (!ParseFlags(argc, argv, &flags) || flags.positional.empty()) {
    Usage(std::cerr);
    return kExitUsage;
  }
  if (!flags.token_file.empty()) {
    auto token = verl::ReadTokenFile(flags.token_file);
    if (!token.ok()) {
      std::cerr << "verlctl: --token-file: " << token.status().message() << "\n";
      return kExitUsage;
    }
    flags.token = *token;
  }
  auto creds = verl::MakeChannelCredentials(flags.tls);
  if (!creds.ok()) {
    std::cerr << "verlctl: " << creds.status().message() << "\n";
    return kExitUsage;
  }
  grpc::ChannelArguments args;
  if (!flags.tls_server_name.empty()) args.SetSslTargetNameOverride(flags.tls_server_name);
  Client client(flags, grpc::CreateCustomChannel(flags.server, *creds, args));

  const std::string& command = flags.positional[0];
  const bool needs_id = command == "status" || command == "watch" || command == "cancel" || command == "logs";
  if (needs_id && flags.positional.size() != 2) {
    std::cerr << "verlctl " << command << ": needs exactly one job id\n";
    return kExitUsage;
  }
  if (command == "submit") return client.Submit();
  if (command == "list") return client.List();
  if (command == "status") return client.Status(flags.positional[1]);
  if (command == "watch") return client.Watch(flags.positional[1]);
  if (command == "cancel") return client.Cancel(flags.positional[1]);
  if (command == "logs") return client.Logs(flags.positional[1]);
  std::cerr << "verlctl: unknown command '" << command << "'\n";
  Usage(std::cerr);
  return kExitUsage;
}
