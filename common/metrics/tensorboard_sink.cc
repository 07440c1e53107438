#include "common/metrics/tensorboard_sink.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>

#include "absl/strings/str_cat.h"
#include "common/metrics/crc32c.h"
#include "common/status/status_macros.h"
#include "tensorboard/event.pb.h"

namespace verl {
namespace {

constexpr int kDtString = 7;  // TensorFlow's DataType DT_STRING

double WallTime() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void PutU64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void PutU32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
uint64_t GetU64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}
uint32_t GetU32(const char* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

}  // namespace

absl::StatusOr<std::unique_ptr<TensorBoardSink>> TensorBoardSink::Open(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::PermissionDeniedError(absl::StrCat("cannot create TensorBoard directory '", dir, "'"));
  char host[256] = "localhost";
  gethostname(host, sizeof(host) - 1);
  const std::string path = absl::StrCat(dir, "/events.out.tfevents.", static_cast<int64_t>(WallTime()), ".", host,
                                        ".", getpid());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return absl::PermissionDeniedError(absl::StrCat("cannot create TensorBoard event file '", path, "'"));
  std::unique_ptr<TensorBoardSink> sink(new TensorBoardSink(path, std::move(out)));
  tensorboard::Event header;
  header.set_wall_time(WallTime());
  header.set_file_version("brain.Event:2");
  absl::Status s = sink->WriteRecord(header.SerializeAsString());
  if (!s.ok()) return s;
  return sink;
}

TensorBoardSink::~TensorBoardSink() { (void)Close(); }

absl::Status TensorBoardSink::WriteRecord(const std::string& data) {
  std::string header;
  PutU64(header, data.size());
  std::string record = header;
  PutU32(record, MaskedCrc32c(header.data(), header.size()));
  record += data;
  PutU32(record, MaskedCrc32c(data.data(), data.size()));
  out_.write(record.data(), static_cast<std::streamsize>(record.size()));
  out_.flush();
  if (!out_) return absl::DataLossError(absl::StrCat("cannot write TensorBoard event file '", path_, "'"));
  return absl::OkStatus();
}

absl::Status TensorBoardSink::Log(int64_t step, const std::map<std::string, double>& metrics) {
  tensorboard::Event event;
  event.set_wall_time(WallTime());
  event.set_step(step);
  tensorboard::Summary* summary = event.mutable_summary();
  for (const auto& [tag, value] : metrics) {
    if (!std::isfinite(value)) continue;
    tensorboard::SummaryValue* v = summary->add_value();
    v->set_tag(tag);
    v->set_simple_value(static_cast<float>(value));
  }
  return WriteRecord(event.SerializeAsString());
}

absl::Status TensorBoardSink::LogText(int64_t step, const std::string& tag, const std::string& markdown) {
  tensorboard::Event event;
  event.set_wall_time(WallTime());
  event.set_step(step);
  tensorboard::SummaryValue* v = event.mutable_summary()->add_value();
  v->set_tag(tag);
  // The text plugin's metadata; its content, TextPluginData at version 0, serialises to nothing.
  v->mutable_metadata()->mutable_plugin_data()->set_plugin_name("text");
  tensorboard::Tensor* t = v->mutable_tensor();
  t->set_dtype(kDtString);
  t->mutable_tensor_shape()->add_dim()->set_size(1);
  t->add_string_val(markdown);
  return WriteRecord(event.SerializeAsString());
}

absl::Status TensorBoardSink::Close() {
  if (out_.is_open()) out_.close();
  return absl::OkStatus();
}

namespace {

// Calls `each` with every Event of the file at `path`, checking the records' CRCs.
absl::Status ForEachEvent(const std::string& path, const std::function<void(const tensorboard::Event&)>& each) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open TensorBoard event file '", path, "'"));
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t pos = 0;
  while (pos < bytes.size()) {
    auto bad = [&](const std::string& what) {
      return absl::DataLossError(absl::StrCat(path, ": record at offset ", pos, ": ", what));
    };
    if (bytes.size() - pos < 12) return bad("truncated header");
    const uint64_t len = GetU64(bytes.data() + pos);
    if (GetU32(bytes.data() + pos + 8) != MaskedCrc32c(bytes.data() + pos, 8)) return bad("length CRC mismatch");
    if (bytes.size() - pos - 12 < len + 4) return bad("truncated data");
    const char* data = bytes.data() + pos + 12;
    if (GetU32(data + len) != MaskedCrc32c(data, len)) return bad("data CRC mismatch");
    tensorboard::Event event;
    if (!event.ParseFromArray(data, static_cast<int>(len))) return bad("not an Event");
    each(event);
    pos += 12 + len + 4;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<TensorBoardScalar>> ReadTensorBoardScalars(const std::string& path) {
  std::vector<TensorBoardScalar> out;
  RETURN_IF_ERROR(ForEachEvent(path, [&](const tensorboard::Event& event) {
    for (const auto& v : event.summary().value()) {
      // Like TensorBoard: a value without simple_value is not a scalar.
      if (v.value_case() == tensorboard::SummaryValue::kSimpleValue) {
        out.push_back({event.step(), v.tag(), v.simple_value()});
      }
    }
  }));
  return out;
}

absl::StatusOr<std::vector<TensorBoardText>> ReadTensorBoardTexts(const std::string& path) {
  std::vector<TensorBoardText> out;
  RETURN_IF_ERROR(ForEachEvent(path, [&](const tensorboard::Event& event) {
    for (const auto& v : event.summary().value()) {
      if (v.metadata().plugin_data().plugin_name() == "text" && v.has_tensor() && v.tensor().dtype() == kDtString &&
          v.tensor().string_val_size() == 1) {
        out.push_back({event.step(), v.tag(), v.tensor().string_val(0)});
      }
    }
  }));
  return out;
}

}  // namespace verl
