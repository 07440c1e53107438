#ifndef VERL_TESTS_COMMON_DATA_TEST_DIR_H_
#define VERL_TESTS_COMMON_DATA_TEST_DIR_H_

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <string>

namespace verl::testing {

// A fresh directory under the system temp dir, removed with its contents on destruction.
class TestDir {
 public:
  TestDir() {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            ("verl_data_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TestDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TestDir(const TestDir&) = delete;
  TestDir& operator=(const TestDir&) = delete;

  std::string File(const std::string& name) const { return (path_ / name).string(); }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace verl::testing

#endif  // VERL_TESTS_COMMON_DATA_TEST_DIR_H_
