#include "common/metrics/jsonl_sink.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <system_error>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "common/data/atomic_write.h"

namespace verl {

absl::StatusOr<std::unique_ptr<JsonlSink>> JsonlSink::Open(const std::string& path) {
  const std::filesystem::path p(path);
  if (p.has_parent_path()) {
    std::error_code ec;
    std::filesystem::create_directories(p.parent_path(), ec);
    if (ec) {
      return absl::PermissionDeniedError(absl::StrCat("cannot create the directory of metrics file '", path,
                                                      "': ", ec.message()));
    }
  }
  std::ofstream out(path, std::ios::out | std::ios::app | std::ios::binary);
  if (!out) return absl::PermissionDeniedError(absl::StrCat("cannot open metrics file '", path, "' for appending"));
  return std::unique_ptr<JsonlSink>(new JsonlSink(path, std::move(out)));
}

absl::Status JsonlSink::KeepStepsUpTo(const std::string& path, int64_t last_step) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::OkStatus();
  std::string kept;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    // A last line without its newline was torn by a crash mid-write: the step it held is logged again on resume.
    if (j.is_discarded() && in.eof()) break;
    if (!j.is_discarded() && j.is_object() && j.contains("step") && j["step"].is_number_integer() &&
        j["step"].get<int64_t>() > last_step) {
      continue;
    }
    kept += line + "\n";
  }
  in.close();
  // Written whole and flushed before it replaces the old file: a full disk leaves the old lines, not a torn file.
  return WriteFileAtomically(path, kept);
}

JsonlSink::JsonlSink(std::string path, std::ofstream out) : path_(std::move(path)), out_(std::move(out)) {}

JsonlSink::~JsonlSink() { (void)Close(); }

std::string JsonlSink::FormatLine(int64_t step, const std::map<std::string, double>& metrics) {
  // ordered_json keeps "step" first, as verl writes it; "data" keys are inserted in sorted (std::map) order.
  nlohmann::ordered_json data = nlohmann::ordered_json::object();
  for (const auto& [key, value] : metrics) {
    data[key] = std::isfinite(value) ? nlohmann::ordered_json(value) : nlohmann::ordered_json(nullptr);
  }
  nlohmann::ordered_json line = nlohmann::ordered_json::object();
  line["step"] = step;
  line["data"] = std::move(data);
  // Replace invalid UTF-8 in metric names instead of throwing.
  return line.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

absl::Status JsonlSink::Log(int64_t step, const std::map<std::string, double>& metrics) {
  if (closed_) return absl::FailedPreconditionError(absl::StrCat("metrics file '", path_, "' is closed"));
  out_ << FormatLine(step, metrics) << '\n';
  out_.flush();
  if (!out_) return absl::DataLossError(absl::StrCat("error writing step ", step, " to metrics file '", path_, "'"));
  return absl::OkStatus();
}

absl::Status JsonlSink::Close() {
  if (closed_) return absl::OkStatus();
  closed_ = true;
  out_.close();
  if (out_.fail()) return absl::DataLossError(absl::StrCat("error closing metrics file '", path_, "'"));
  return absl::OkStatus();
}

}  // namespace verl
