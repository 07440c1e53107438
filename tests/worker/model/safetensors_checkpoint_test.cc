#include "worker/model/safetensors_checkpoint.h"

#include <catch2/catch.hpp>

#include <filesystem>
#include <set>

#include "nlohmann/json.hpp"
#include "tests/test_dir.h"

namespace verl {
namespace {

using testing::ReadFile;
using testing::TestDir;
using testing::WriteFile;

HostTensor Filled(DType dtype, std::vector<int64_t> shape, char fill) {
  HostTensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.bytes.assign(static_cast<size_t>(t.numel() * DTypeSize(dtype)), fill);
  return t;
}

std::set<std::string> Files(const std::string& dir) {
  std::set<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) out.insert(e.path().filename().string());
  return out;
}

std::vector<std::pair<std::string, HostTensor>> SampleTensors() {
  return {
      {"embed", Filled(DType::kFloat32, {10, 10}, 'a')},  // 400 bytes
      {"l0.w", Filled(DType::kBFloat16, {50}, 'b')},      // 100
      {"l0.b", Filled(DType::kBFloat16, {50}, 'c')},      // 100
      {"l1.w", Filled(DType::kBFloat16, {100}, 'd')},     // 200
      {"huge", Filled(DType::kFloat32, {300}, 'e')},      // 1200: bigger than the limit
      {"norm", Filled(DType::kFloat32, {25}, 'f')},       // 100
  };
}

TEST_CASE("sharded safetensors write and read back through the index", "[safetensors]") {
  TestDir dir("ckpt_sharded");
  const auto tensors = SampleTensors();
  REQUIRE(WriteShardedSafetensors(dir.path(), tensors, /*max_shard_bytes=*/500).ok());

  // HF split: [embed, l0.w] (500), [huge] alone, [l0.b, l1.w, norm] (400).
  CHECK(Files(dir.path()) == std::set<std::string>{"model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
                                                   "model-00003-of-00003.safetensors", "model.safetensors.index.json"});
  const nlohmann::json index = nlohmann::json::parse(ReadFile(dir.file("model.safetensors.index.json")));
  CHECK(index["metadata"]["total_size"].get<uint64_t>() == 2100);
  CHECK(index["weight_map"]["embed"] == "model-00001-of-00003.safetensors");
  CHECK(index["weight_map"]["l0.w"] == "model-00001-of-00003.safetensors");
  CHECK(index["weight_map"]["huge"] == "model-00002-of-00003.safetensors");
  CHECK(index["weight_map"]["l0.b"] == "model-00003-of-00003.safetensors");
  CHECK(index["weight_map"]["norm"] == "model-00003-of-00003.safetensors");
  CHECK(index["weight_map"].size() == tensors.size());

  absl::StatusOr<SafetensorsCheckpoint> ckpt = SafetensorsCheckpoint::Open(dir.path());
  REQUIRE(ckpt.ok());
  CHECK(ckpt->files().size() == 3);
  CHECK(ckpt->names() == std::vector<std::string>{"embed", "huge", "l0.b", "l0.w", "l1.w", "norm"});
  for (const auto& [name, t] : tensors) {
    INFO(name);
    absl::StatusOr<SafetensorsFile::TensorView> v = ckpt->Get(name);
    REQUIRE(v.ok());
    CHECK(v->dtype == t.dtype);
    CHECK(v->shape == t.shape);
    CHECK(std::string(static_cast<const char*>(v->data), v->nbytes) == t.bytes);
  }
  for (const SafetensorsFile& f : ckpt->files()) CHECK(f.metadata().at("format") == "pt");

  absl::StatusOr<SafetensorsFile::TensorView> missing = ckpt->Get("lm_head.weight");
  CHECK(missing.status().code() == absl::StatusCode::kNotFound);
  CHECK_THAT(std::string(missing.status().message()), Catch::Contains("lm_head.weight") && Catch::Contains(dir.path()));

  // Re-saving below the limit gives one model.safetensors and removes the shards and the index.
  REQUIRE(WriteShardedSafetensors(dir.path(), tensors, /*max_shard_bytes=*/1 << 20).ok());
  CHECK(Files(dir.path()) == std::set<std::string>{"model.safetensors"});
  ckpt = SafetensorsCheckpoint::Open(dir.path());
  REQUIRE(ckpt.ok());
  CHECK(ckpt->files().size() == 1);
  CHECK(ckpt->size() == tensors.size());

  // And back to shards: the single file goes away.
  REQUIRE(WriteShardedSafetensors(dir.path(), tensors, /*max_shard_bytes=*/1000).ok());
  CHECK(Files(dir.path()).count("model.safetensors") == 0);
  CHECK(Files(dir.path()).count("model.safetensors.index.json") == 1);
  ckpt = SafetensorsCheckpoint::Open(dir.path());
  REQUIRE(ckpt.ok());
  CHECK(ckpt->size() == tensors.size());
}

TEST_CASE("sharded write rejects duplicate names across shards", "[safetensors]") {
  TestDir dir("ckpt_dupwrite");
  absl::Status s = WriteShardedSafetensors(
      dir.path(), {{"x", Filled(DType::kUInt8, {8}, 'a')}, {"x", Filled(DType::kUInt8, {8}, 'b')}}, 8);
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(s.message()), Catch::Contains("'x'"));
}

TEST_CASE("checkpoint falls back to every *.safetensors file", "[safetensors]") {
  TestDir dir("ckpt_glob");
  REQUIRE(WriteSafetensors(dir.file("a.safetensors"), {{"one", Filled(DType::kUInt8, {1}, '1')}}).ok());
  REQUIRE(WriteSafetensors(dir.file("b.safetensors"), {{"two", Filled(DType::kUInt8, {1}, '2')}}).ok());
  WriteFile(dir.file("notes.txt"), "not weights");
  absl::StatusOr<SafetensorsCheckpoint> ckpt = SafetensorsCheckpoint::Open(dir.path());
  REQUIRE(ckpt.ok());
  CHECK(ckpt->names() == std::vector<std::string>{"one", "two"});
  CHECK(*static_cast<const char*>(ckpt->Get("two")->data) == '2');
}

TEST_CASE("checkpoint errors", "[safetensors]") {
  TestDir dir("ckpt_errors");

  SECTION("no safetensors in the directory") {
    WriteFile(dir.file("config.json"), "{}");
    absl::StatusOr<SafetensorsCheckpoint> ckpt = SafetensorsCheckpoint::Open(dir.path());
    CHECK(ckpt.status().code() == absl::StatusCode::kNotFound);
    CHECK_THAT(std::string(ckpt.status().message()), Catch::Contains(dir.path()) && Catch::Contains("no safetensors"));
  }
  SECTION("directory does not exist") {
    absl::StatusOr<SafetensorsCheckpoint> ckpt = SafetensorsCheckpoint::Open(dir.file("missing"));
    CHECK(ckpt.status().code() == absl::StatusCode::kNotFound);
  }
  SECTION("index references a missing file") {
    REQUIRE(WriteSafetensors(dir.file("s1.safetensors"), {{"a", Filled(DType::kUInt8, {1}, 'a')}}).ok());
    WriteFile(dir.file("model.safetensors.index.json"),
              R"({"metadata":{"total_size":2},"weight_map":{"a":"s1.safetensors","b":"s2.safetensors"}})");
    absl::StatusOr<SafetensorsCheckpoint> ckpt = SafetensorsCheckpoint::Open(dir.path());
    CHECK(ckpt.status().code() == absl::StatusCode::kNotFound);
    CHECK_THAT(std::string(ckpt.status().message()),
               Catch::Contains("s2.safetensors") && Catch::Contains("'b'") && Catch::Contains("index.json"));
  }
  SECTION("index places a tensor in the wrong shard") {
    REQUIRE(WriteSafetensors(dir.file("s1.safetensors"), {{"a", Filled(DType::kUInt8, {1}, 'a')}}).ok());
    REQUIRE(WriteSafetensors(dir.file("s2.safetensors"), {{"b", Filled(DType::kUInt8, {1}, 'b')}}).ok());
    WriteFile(dir.file("model.safetensors.index.json"),
              R"({"weight_map":{"a":"s2.safetensors","b":"s2.safetensors"}})");
    absl::StatusOr<SafetensorsCheckpoint> ckpt = SafetensorsCheckpoint::Open(dir.path());
    CHECK(ckpt.status().code() == absl::StatusCode::kDataLoss);
    CHECK_THAT(std::string(ckpt.status().message()), Catch::Contains("'a'"));
  }
  SECTION("malformed index") {
    WriteFile(dir.file("model.safetensors.index.json"), R"({"weight_map": [1, 2]})");
    absl::StatusOr<SafetensorsCheckpoint> ckpt = SafetensorsCheckpoint::Open(dir.path());
    CHECK(ckpt.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(ckpt.status().message()), Catch::Contains("weight_map"));
  }
  SECTION("duplicate tensor across shards") {
    REQUIRE(WriteSafetensors(dir.file("a.safetensors"), {{"dup", Filled(DType::kUInt8, {1}, 'a')}}).ok());
    REQUIRE(WriteSafetensors(dir.file("b.safetensors"), {{"dup", Filled(DType::kUInt8, {1}, 'b')}}).ok());
    absl::StatusOr<SafetensorsCheckpoint> ckpt = SafetensorsCheckpoint::Open(dir.path());
    CHECK(ckpt.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(ckpt.status().message()),
               Catch::Contains("'dup'") && Catch::Contains("a.safetensors") && Catch::Contains("b.safetensors"));
  }
  SECTION("a corrupt shard is reported with its path") {
    WriteFile(dir.file("model.safetensors"), "junk");
    absl::StatusOr<SafetensorsCheckpoint> ckpt = SafetensorsCheckpoint::Open(dir.path());
    CHECK(ckpt.status().code() == absl::StatusCode::kDataLoss);
    CHECK_THAT(std::string(ckpt.status().message()), Catch::Contains("model.safetensors"));
  }
}

}  // namespace
}  // namespace verl
