#include "controller/service/job_store.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <google/protobuf/util/json_util.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/data/atomic_write.h"
#include "common/status/status_macros.h"
#include "spdlog/spdlog.h"

namespace verl {
namespace fs = std::filesystem;
namespace {

constexpr char kIdPrefix[] = "job-";

// The number in "job-000042", or -1.
int64_t IdNumber(const std::string& id) {
  if (id.rfind(kIdPrefix, 0) != 0) return -1;
  int64_t n = 0;
  const std::string digits = id.substr(sizeof(kIdPrefix) - 1);
  if (digits.empty() || !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }) ||
      !absl::SimpleAtoi(digits, &n)) {
    return -1;
  }
  return n;
}

std::string ToJsonLine(const google::protobuf::Message& message) {
  std::string json;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(message, &json, options);
  return json;
}

}  // namespace

absl::StatusOr<std::unique_ptr<JobStore>> JobStore::Open(const std::string& state_dir) {
  if (state_dir.empty()) return absl::InvalidArgumentError("--state-dir must not be empty");
  const std::string jobs = (fs::path(state_dir) / "jobs").string();
  std::error_code ec;
  fs::create_directories(jobs, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create the state directory '", jobs, "': ", ec.message()));
  return std::unique_ptr<JobStore>(new JobStore(jobs));
}

std::string JobStore::JobDir(const std::string& job_id) const { return jobs_dir_ + "/" + job_id; }

absl::StatusOr<std::vector<JobStore::StoredJob>> JobStore::LoadAll() {
  std::vector<std::pair<int64_t, std::string>> ids;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(jobs_dir_, ec)) {
    const std::string name = entry.path().filename().string();
    const int64_t n = IdNumber(name);
    if (n < 0 || !entry.is_directory()) continue;
    ids.emplace_back(n, name);
  }
  if (ec) return absl::InternalError(absl::StrCat("cannot list '", jobs_dir_, "': ", ec.message()));
  std::sort(ids.begin(), ids.end());
  std::vector<StoredJob> jobs;
  for (const auto& [n, id] : ids) {
    last_id_ = std::max(last_id_, n);
    const std::string path = JobDir(id) + "/job.json";
    std::ifstream in(path);
    if (!in) {
      // A directory without job.json: the server died between creating it and the first save. Nothing was accepted.
      spdlog::warn("{}: no job.json; ignored", JobDir(id));
      continue;
    }
    std::stringstream text;
    text << in.rdbuf();
    StoredJob stored;
    google::protobuf::util::JsonParseOptions options;
    auto parsed = google::protobuf::util::JsonStringToMessage(text.str(), &stored.job, options);
    if (!parsed.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("job state file '", path, "' does not parse: ", std::string(parsed.message())));
    }
    if (stored.job.id() != id) {
      return absl::InvalidArgumentError(
          absl::StrCat("job state file '", path, "' holds job id '", stored.job.id(), "', not '", id, "'"));
    }
    std::ifstream metrics(MetricsPath(id));
    std::string line;
    int64_t line_no = 0;
    bool torn = false;
    while (std::getline(metrics, line)) {
      ++line_no;
      if (line.empty()) continue;
      v1::StepMetrics record;
      if (!google::protobuf::util::JsonStringToMessage(line, &record, options).ok()) {
        spdlog::warn("{}:{}: unreadable metrics record (cut short?); the history of {} ends before it",
                     MetricsPath(id), line_no, id);
        torn = true;
        break;
      }
      stored.metrics.push_back(std::move(record));
    }
    metrics.close();
    if (torn) {
      // Cut the file back to the records kept: a record appended after the torn bytes would join their line and be
      // lost with it at the next load.
      std::string kept;
      for (const auto& r : stored.metrics) absl::StrAppend(&kept, ToJsonLine(r), "\n");
      RETURN_IF_ERROR(WriteFileAtomically(MetricsPath(id), kept));
    }
    jobs.push_back(std::move(stored));
  }
  return jobs;
}

std::string JobStore::NextId() { return absl::StrFormat("%s%06d", kIdPrefix, ++last_id_); }

absl::Status JobStore::Save(const v1::Job& job) {
  const std::string dir = JobDir(job.id());
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create '", dir, "': ", ec.message()));
  return WriteFileAtomically(dir + "/job.json", ToJsonLine(job) + "\n");
}

absl::Status JobStore::AppendMetrics(const std::string& job_id, const v1::StepMetrics& record,
                                     const std::vector<v1::StepMetrics>& kept, bool rewrite) {
  const std::string path = MetricsPath(job_id);
  if (rewrite) {
    std::string text;
    for (const auto& r : kept) absl::StrAppend(&text, ToJsonLine(r), "\n");
    if (absl::Status s = WriteFileAtomically(path, text); !s.ok()) return s;
  }
  std::ofstream out(path, std::ios::app);
  out << ToJsonLine(record) << "\n";
  out.flush();
  if (!out) return absl::InternalError(absl::StrCat("cannot append to '", path, "'"));
  return absl::OkStatus();
}

}  // namespace verl
