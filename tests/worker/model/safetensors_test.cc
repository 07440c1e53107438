#include "worker/model/safetensors.h"

#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <random>
#include <span>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "tests/test_dir.h"

namespace verl {
namespace {

using testing::ReadFile;
using testing::TestDir;
using testing::WriteFile;

HostTensor PatternTensor(DType dtype, std::vector<int64_t> shape, uint32_t seed) {
  HostTensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.bytes.resize(static_cast<size_t>(t.numel() * DTypeSize(dtype)));
  std::mt19937 gen(seed);
  for (char& c : t.bytes) c = static_cast<char>(dtype == DType::kBool ? gen() % 2 : gen() & 0xff);
  return t;
}

uint64_t HeaderLength(const std::string& file_bytes) {
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(file_bytes[i]);
  return n;
}

// A file with the given header text and data bytes, byte by byte as the format describes.
void WriteRaw(const std::string& path, const std::string& header, const std::string& data) {
  std::string bytes(8, '\0');
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  WriteFile(path, bytes + header + data);
}

std::string ViewBytes(const SafetensorsFile::TensorView& v) {
  return std::string(static_cast<const char*>(v.data), v.nbytes);
}

TEST_CASE("safetensors round trip of every dtype is byte exact", "[safetensors]") {
  TestDir dir("st_roundtrip");
  const std::vector<std::pair<std::string, HostTensor>> tensors = {
      {"f32", PatternTensor(DType::kFloat32, {3, 5}, 1)},   {"bf16", PatternTensor(DType::kBFloat16, {7}, 2)},
      {"f16", PatternTensor(DType::kFloat16, {2, 2, 3}, 3)}, {"i64", PatternTensor(DType::kInt64, {4}, 4)},
      {"i32", PatternTensor(DType::kInt32, {1, 9}, 5)},     {"u8", PatternTensor(DType::kUInt8, {13}, 6)},
      {"bool", PatternTensor(DType::kBool, {5}, 7)},        {"scalar", PatternTensor(DType::kFloat32, {}, 8)},
      {"empty", PatternTensor(DType::kBFloat16, {0, 4}, 9)},
  };
  const std::string path = dir.file("t.safetensors");
  REQUIRE(WriteSafetensors(path, tensors).ok());

  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path);
  REQUIRE(file.ok());
  CHECK(file->size() == tensors.size());
  CHECK(file->names() ==
        std::vector<std::string>{"bf16", "bool", "empty", "f16", "f32", "i32", "i64", "scalar", "u8"});
  CHECK(file->metadata().empty());
  for (const auto& [name, t] : tensors) {
    INFO(name);
    absl::StatusOr<SafetensorsFile::TensorView> v = file->Get(name);
    REQUIRE(v.ok());
    CHECK(v->dtype == t.dtype);
    CHECK(v->shape == t.shape);
    CHECK(v->nbytes == t.bytes.size());
    CHECK(ViewBytes(*v) == t.bytes);
    HostTensor copy = v->ToHostTensor();
    CHECK(copy.bytes == t.bytes);
    CHECK(copy.shape == t.shape);
  }
  absl::StatusOr<SafetensorsFile::TensorView> scalar = file->Get("scalar");
  CHECK(scalar->numel() == 1);
  CHECK(scalar->nbytes == 4);

  // Layout as the HF library writes it: padded header, dtype alignment order then name, contiguous data.
  const std::string raw = ReadFile(path);
  const uint64_t header_len = HeaderLength(raw);
  CHECK(header_len % 8 == 0);
  const std::string header_text = raw.substr(8, header_len);
  CHECK(header_text.front() == '{');
  const nlohmann::ordered_json header = nlohmann::ordered_json::parse(header_text);
  std::vector<std::string> order;
  uint64_t expected_offset = 0;
  for (auto it = header.begin(); it != header.end(); ++it) {
    order.push_back(it.key());
    CHECK(it.value()["data_offsets"][0].get<uint64_t>() == expected_offset);
    expected_offset = it.value()["data_offsets"][1].get<uint64_t>();
  }
  CHECK(order == std::vector<std::string>{"i64", "f32", "scalar", "i32", "bf16", "empty", "f16", "u8", "bool"});
  CHECK(raw.size() == 8 + header_len + expected_offset);
  // Nothing but the file itself is left in the directory (the temporary was renamed).
  int entries = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir.path())) ++entries;
  CHECK(entries == 1);
}

TEST_CASE("safetensors header padding is a multiple of 8 for every header length", "[safetensors]") {
  TestDir dir("st_pad");
  for (int name_len = 1; name_len <= 9; ++name_len) {
    const std::string path = dir.file(absl::StrCat("p", name_len, ".safetensors"));
    REQUIRE(WriteSafetensors(path, {{std::string(name_len, 'x'), PatternTensor(DType::kUInt8, {3}, 1)}}).ok());
    const std::string raw = ReadFile(path);
    const uint64_t header_len = HeaderLength(raw);
    CHECK(header_len % 8 == 0);
    const std::string header_text = raw.substr(8, header_len);
    const size_t close = header_text.find_last_of('}');
    CHECK(header_text.find_first_not_of(' ', close + 1) == std::string::npos);  // padded with spaces
    CHECK(header_len - close - 1 < 8);
    REQUIRE(SafetensorsFile::Open(path).ok());
  }
}

TEST_CASE("safetensors metadata round trips and is written first", "[safetensors]") {
  TestDir dir("st_meta");
  const std::string path = dir.file("m.safetensors");
  const std::map<std::string, std::string> metadata = {{"format", "pt"}, {"step", "12"}};
  REQUIRE(WriteSafetensors(path, {{"w", PatternTensor(DType::kFloat32, {2}, 1)}}, metadata).ok());
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path);
  REQUIRE(file.ok());
  CHECK(file->metadata() == metadata);
  CHECK(file->names() == std::vector<std::string>{"w"});
  const std::string raw = ReadFile(path);
  CHECK(raw.substr(8, 16) == "{\"__metadata__\":");
}

TEST_CASE("safetensors views stay valid after the file object is moved", "[safetensors]") {
  TestDir dir("st_move");
  const std::string path = dir.file("m.safetensors");
  HostTensor t = PatternTensor(DType::kInt32, {100}, 3);
  REQUIRE(WriteSafetensors(path, {{"a", t}}).ok());
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path);
  REQUIRE(file.ok());
  SafetensorsFile::TensorView view = file->Get("a").value();
  SafetensorsFile moved = std::move(file).value();
  CHECK(ViewBytes(view) == t.bytes);
  SafetensorsFile assigned = std::move(moved);
  CHECK(ViewBytes(assigned.Get("a").value()) == t.bytes);
  CHECK(assigned.path() == path);
}

TEST_CASE("safetensors TensorRef overload writes without copies and overwrites atomically", "[safetensors]") {
  TestDir dir("st_ref");
  const std::string path = dir.file("r.safetensors");
  std::vector<float> values = {1.5f, -2.0f, 3.25f};
  REQUIRE(WriteSafetensors(path, {TensorRef{"v", DType::kFloat32, {3}, values.data(), 12}}).ok());
  values[0] = 7.0f;
  REQUIRE(WriteSafetensors(path, {TensorRef{"v", DType::kFloat32, {3}, values.data(), 12}}).ok());
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path);
  REQUIRE(file.ok());
  float back[3];
  std::memcpy(back, file->Get("v")->data, 12);
  CHECK(back[0] == 7.0f);
  CHECK(back[2] == 3.25f);
}

TEST_CASE("safetensors TensorRef fetch: each tensor's bytes asked for in write order, one at a time", "[safetensors]") {
  TestDir dir("st_fetch");
  const std::string path = dir.file("f.safetensors");
  // Staged one at a time in a buffer the next fetch overwrites, as a device tensor copied to the host would be.
  std::vector<float> staged;
  std::vector<std::string> asked;
  auto fetcher = [&](const std::string& name, std::vector<float> values) {
    return [&, name, values]() {
      asked.push_back(name);
      staged = values;
      return std::as_bytes(std::span<const float>(staged));
    };
  };
  const std::vector<float> kept = {9.0f};
  std::vector<TensorRef> refs = {TensorRef{"b", DType::kFloat32, {2}, nullptr, 8, fetcher("b", {1.0f, 2.0f})},
                                 TensorRef{"a", DType::kFloat32, {3}, nullptr, 12, fetcher("a", {3.0f, 4.0f, 5.0f})},
                                 TensorRef{"c", DType::kFloat32, {1}, kept.data(), 4}};
  REQUIRE(WriteSafetensors(path, refs).ok());
  CHECK(asked == std::vector<std::string>{"a", "b"});  // write order (by name within a dtype); "c" has its data
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path);
  REQUIRE(file.ok());
  auto floats = [&](const std::string& name) {
    const auto view = file->Get(name).value();
    std::vector<float> v(view.nbytes / 4);
    std::memcpy(v.data(), view.data, view.nbytes);
    return v;
  };
  CHECK(floats("a") == std::vector<float>{3.0f, 4.0f, 5.0f});
  CHECK(floats("b") == std::vector<float>{1.0f, 2.0f});
  CHECK(floats("c") == kept);
  // A fetch that throws fails the write, naming the tensor, and leaves the file that was there.
  refs[0].fetch = []() -> std::span<const std::byte> { throw std::runtime_error("device copy failed"); };
  absl::Status s = WriteSafetensors(path, refs);
  CHECK(s.code() == absl::StatusCode::kInternal);
  CHECK_THAT(std::string(s.message()), Catch::Contains("'b'") && Catch::Contains("device copy failed"));
  REQUIRE(SafetensorsFile::Open(path).ok());
  CHECK(std::distance(std::filesystem::directory_iterator(dir.path()), std::filesystem::directory_iterator()) == 1);
  // So does one whose bytes are not the size the header already promised (a tensor converted on the way, say).
  refs[0].fetch = fetcher("b", {1.0f, 2.0f, 3.0f});
  s = WriteSafetensors(path, refs);
  CHECK(s.code() == absl::StatusCode::kInternal);
  CHECK_THAT(std::string(s.message()),
             Catch::Contains("'b'") && Catch::Contains("got 12 bytes") && Catch::Contains("F32 [2]) says 8"));
  file = SafetensorsFile::Open(path);  // the file there now, not the mapping opened above
  REQUIRE(file.ok());
  CHECK(floats("b") == std::vector<float>{1.0f, 2.0f});
  CHECK(std::distance(std::filesystem::directory_iterator(dir.path()), std::filesystem::directory_iterator()) == 1);
  // Neither data nor fetch: refused before anything is written.
  refs[0].fetch = nullptr;
  CHECK(WriteSafetensors(path, refs).code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("safetensors writer rejects inconsistent input", "[safetensors]") {
  TestDir dir("st_bad_write");
  const std::string path = dir.file("bad.safetensors");
  HostTensor wrong = PatternTensor(DType::kFloat32, {2, 2}, 1);
  wrong.bytes.pop_back();
  absl::Status s = WriteSafetensors(path, {{"wrong", wrong}});
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(s.message()), Catch::Contains("'wrong'") && Catch::Contains("15 bytes"));

  s = WriteSafetensors(path, {{"a", PatternTensor(DType::kFloat32, {1}, 1)}, {"a", PatternTensor(DType::kUInt8, {1}, 1)}});
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(s.message()), Catch::Contains("duplicate") && Catch::Contains("'a'"));

  s = WriteSafetensors(path, {{"__metadata__", PatternTensor(DType::kUInt8, {1}, 1)}});
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);

  s = WriteSafetensors(dir.file("no/such/dir/x.safetensors"), {{"a", PatternTensor(DType::kUInt8, {1}, 1)}});
  CHECK_FALSE(s.ok());
  CHECK_THAT(std::string(s.message()), Catch::Contains("no/such/dir"));
  CHECK_FALSE(std::filesystem::exists(path));
}

TEST_CASE("safetensors reader reports corrupt files naming file and tensor", "[safetensors]") {
  TestDir dir("st_bad_read");

  SECTION("missing file") {
    absl::StatusOr<SafetensorsFile> f = SafetensorsFile::Open(dir.file("nope.safetensors"));
    CHECK(f.status().code() == absl::StatusCode::kNotFound);
    CHECK_THAT(std::string(f.status().message()), Catch::Contains("nope.safetensors"));
  }
  SECTION("shorter than the length field") {
    WriteFile(dir.file("short.safetensors"), "abc");
    absl::StatusOr<SafetensorsFile> f = SafetensorsFile::Open(dir.file("short.safetensors"));
    CHECK(f.status().code() == absl::StatusCode::kDataLoss);
    CHECK_THAT(std::string(f.status().message()), Catch::Contains("short.safetensors") && Catch::Contains("truncated"));
  }
  SECTION("truncated data") {
    const std::string path = dir.file("trunc.safetensors");
    REQUIRE(WriteSafetensors(path, {{"big", PatternTensor(DType::kFloat32, {64}, 1)}}).ok());
    std::filesystem::resize_file(path, std::filesystem::file_size(path) - 10);
    absl::StatusOr<SafetensorsFile> f = SafetensorsFile::Open(path);
    CHECK(f.status().code() == absl::StatusCode::kDataLoss);
    CHECK_THAT(std::string(f.status().message()),
               Catch::Contains("trunc.safetensors") && Catch::Contains("'big'") && Catch::Contains("out of range"));
  }
  SECTION("truncated header") {
    const std::string path = dir.file("trunc_header.safetensors");
    REQUIRE(WriteSafetensors(path, {{"big", PatternTensor(DType::kFloat32, {1}, 1)}}).ok());
    std::filesystem::resize_file(path, 20);
    absl::StatusOr<SafetensorsFile> f = SafetensorsFile::Open(path);
    CHECK(f.status().code() == absl::StatusCode::kDataLoss);
    CHECK_THAT(std::string(f.status().message()), Catch::Contains("truncated: header length"));
  }
  SECTION("offsets out of range") {
    WriteRaw(dir.file("oor.safetensors"), R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
             std::string(8, '\0'));
    absl::StatusOr<SafetensorsFile> f = SafetensorsFile::Open(dir.file("oor.safetensors"));
    CHECK(f.status().code() == absl::StatusCode::kDataLoss);
    CHECK_THAT(std::string(f.status().message()), Catch::Contains("oor.safetensors") && Catch::Contains("'w'") &&
                                                      Catch::Contains("[4, 12]"));
  }
  SECTION("size inconsistent with shape") {
    WriteRaw(dir.file("size.safetensors"), R"({"w":{"dtype":"BF16","shape":[3],"data_offsets":[0,8]}})",
             std::string(8, '\0'));
    absl::StatusOr<SafetensorsFile> f = SafetensorsFile::Open(dir.file("size.safetensors"));
    CHECK(f.status().code() == absl::StatusCode::kDataLoss);
    CHECK_THAT(std::string(f.status().message()), Catch::Contains("'w'") && Catch::Contains("needs 6"));
  }
  SECTION("overlapping tensors") {
    WriteRaw(dir.file("overlap.safetensors"),
             R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}})",
             std::string(6, '\0'));
    absl::StatusOr<SafetensorsFile> f = SafetensorsFile::Open(dir.file("overlap.safetensors"));
    CHECK(f.status().code() == absl::StatusCode::kDataLoss);
    CHECK_THAT(std::string(f.status().message()), Catch::Contains("overlap"));
  }
  SECTION("unknown dtype") {
    WriteRaw(dir.file("f64.safetensors"), R"({"d":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})",
             std::string(8, '\0'));
    absl::StatusOr<SafetensorsFile> f = SafetensorsFile::Open(dir.file("f64.safetensors"));
    CHECK(f.status().code() == absl::StatusCode::kUnimplemented);
    CHECK_THAT(std::string(f.status().message()),
               Catch::Contains("f64.safetensors") && Catch::Contains("'d'") && Catch::Contains("'F64'"));
  }
  SECTION("header not JSON") {
    WriteRaw(dir.file("json.safetensors"), "{not json", "");
    absl::StatusOr<SafetensorsFile> f = SafetensorsFile::Open(dir.file("json.safetensors"));
    CHECK(f.status().code() == absl::StatusCode::kDataLoss);
    CHECK_THAT(std::string(f.status().message()), Catch::Contains("json.safetensors"));
  }
  SECTION("absurd header length") {
    WriteFile(dir.file("huge.safetensors"), std::string(8, '\xff') + "{}");
    absl::StatusOr<SafetensorsFile> f = SafetensorsFile::Open(dir.file("huge.safetensors"));
    CHECK(f.status().code() == absl::StatusCode::kDataLoss);
  }
  SECTION("negative shape") {
    WriteRaw(dir.file("neg.safetensors"), R"({"n":{"dtype":"U8","shape":[-1],"data_offsets":[0,0]}})", "");
    absl::StatusOr<SafetensorsFile> f = SafetensorsFile::Open(dir.file("neg.safetensors"));
    CHECK(f.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(f.status().message()), Catch::Contains("'n'") && Catch::Contains("shape"));
  }
  SECTION("missing tensor names the file") {
    const std::string path = dir.file("ok.safetensors");
    REQUIRE(WriteSafetensors(path, {{"present", PatternTensor(DType::kUInt8, {1}, 1)}}).ok());
    absl::StatusOr<SafetensorsFile> f = SafetensorsFile::Open(path);
    REQUIRE(f.ok());
    CHECK_FALSE(f->Contains("absent"));
    absl::StatusOr<SafetensorsFile::TensorView> v = f->Get("absent");
    CHECK(v.status().code() == absl::StatusCode::kNotFound);
    CHECK_THAT(std::string(v.status().message()), Catch::Contains("'absent'") && Catch::Contains(path));
  }
}

TEST_CASE("safetensors reader accepts hand-written files with holes and unsorted keys", "[safetensors]") {
  TestDir dir("st_hand");
  std::string data = "ABCDEFGH";
  WriteRaw(dir.file("h.safetensors"),
           R"({"z":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"__metadata__":{"k":"v"},)"
           R"("a":{"dtype":"I32","shape":[1],"data_offsets":[4,8]}}   )",
           data);
  absl::StatusOr<SafetensorsFile> f = SafetensorsFile::Open(dir.file("h.safetensors"));
  REQUIRE(f.ok());
  CHECK(f->metadata().at("k") == "v");
  CHECK(ViewBytes(f->Get("z").value()) == "AB");
  CHECK(ViewBytes(f->Get("a").value()) == "EFGH");
}

TEST_CASE("safetensors dtype names", "[safetensors]") {
  for (DType d : {DType::kFloat32, DType::kBFloat16, DType::kFloat16, DType::kInt64, DType::kInt32, DType::kUInt8,
                  DType::kBool}) {
    CHECK(ParseSafetensorsDType(SafetensorsDTypeName(d)) == d);
  }
  CHECK_FALSE(ParseSafetensorsDType("F64").has_value());
  CHECK(SafetensorsDTypeName(DType::kBFloat16) == "BF16");
}

}  // namespace
}  // namespace verl
