#ifndef VERL_TESTS_COMMON_TEXT_TEXT_TEST_UTIL_H_
#define VERL_TESTS_COMMON_TEXT_TEXT_TEST_UTIL_H_

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>

namespace verl::testing {

// A fresh directory under the system temp dir, removed when the object goes away.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    const auto stamp = std::chrono::steady_clock::now().time_since_epoch().count();
    path_ = std::filesystem::temp_directory_path() /
            ("verl_text_test_" + std::to_string(stamp) + "_" + std::to_string(counter++));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  // Writes `contents` to `name` inside the directory and returns the full path.
  std::string Write(const std::string& name, const std::string& contents) const {
    const std::filesystem::path p = path_ / name;
    std::ofstream(p, std::ios::binary) << contents;
    return p.string();
  }
  std::string Path(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

}  // namespace verl::testing

#endif  // VERL_TESTS_COMMON_TEXT_TEXT_TEST_UTIL_H_
