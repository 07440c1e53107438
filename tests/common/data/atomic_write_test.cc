#include "common/data/atomic_write.h"

#include <catch2/catch.hpp>

#include <filesystem>
#include <string>

#include "tests/test_dir.h"

namespace verl {
namespace {

using testing::ReadFile;
using testing::TestDir;

size_t Entries(const std::string& dir) {
  return static_cast<size_t>(std::distance(std::filesystem::directory_iterator(dir),
                                           std::filesystem::directory_iterator()));
}

TEST_CASE("WriteFileAtomically replaces the file whole and leaves no temporary behind", "[data]") {
  TestDir dir("atomic_write");
  const std::string path = dir.file("tracker.txt");
  REQUIRE(WriteFileAtomically(path, "4\n").ok());
  REQUIRE(WriteFileAtomically(path, "12\n").ok());
  CHECK(ReadFile(path) == "12\n");
  CHECK(Entries(dir.path()) == 1);
  // A directory that is not there: the error names the file, and nothing is created.
  const absl::Status s = WriteFileAtomically(dir.file("missing/tracker.txt"), "1\n");
  CHECK(s.code() == absl::StatusCode::kInternal);
  CHECK_THAT(std::string(s.message()), Catch::Contains("missing/tracker.txt"));
  CHECK(Entries(dir.path()) == 1);
}

TEST_CASE("SyncDirectory syncs a directory and names one it cannot open", "[data]") {
  TestDir dir("sync_dir");
  CHECK(SyncDirectory(dir.path()).ok());
  CHECK(SyncDirectory("").ok());  // the working directory
  absl::Status s = SyncDirectory(dir.file("nope"));
  CHECK(s.code() == absl::StatusCode::kInternal);
  CHECK_THAT(std::string(s.message()), Catch::Contains(dir.file("nope")) && Catch::Contains("No such file"));
  // A file is not a directory.
  testing::WriteFile(dir.file("f"), "x");
  s = SyncDirectory(dir.file("f"));
  CHECK_THAT(std::string(s.message()), Catch::Contains("Not a directory"));
}

}  // namespace
}  // namespace verl
