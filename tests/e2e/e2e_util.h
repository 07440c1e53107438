#ifndef VERL_TESTS_E2E_E2E_UTIL_H_
#define VERL_TESTS_E2E_E2E_UTIL_H_

// Shared by the end-to-end tests: a verl-worker daemon started by hand (as on another node), and a job's
// metrics.jsonl read back by step.

#include <catch2/catch.hpp>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tests/controller/test_util.h"

namespace verl::testing {

// A verl-worker started by hand listening on `listen` ("127.0.0.1:0": any port) with `extra` flags; `address` is
// what it wrote to its ready file. Killed (SIGKILL) on destruction.
struct HandStartedWorker {
  std::unique_ptr<ChildProcess> process;
  std::string address;

  HandStartedWorker(const TestDir& dir, const std::string& id, const std::vector<std::string>& extra = {},
                    const std::string& listen = "127.0.0.1:0") {
    const std::string ready = dir.file(id + ".ready");
    std::vector<std::string> argv = {Bin("verl-worker"), "--listen", listen, "--ready-file", ready, "--worker-id", id};
    argv.insert(argv.end(), extra.begin(), extra.end());
    process = std::make_unique<ChildProcess>(argv, dir.file(id + ".out"), dir.file(id + ".err"));
    REQUIRE(WaitFor([&] { return std::filesystem::exists(ready); }, 30));
    address = ReadFile(ready);
    while (!address.empty() && (address.back() == '\n' || address.back() == '\r')) address.pop_back();
    REQUIRE_FALSE(address.empty());
  }
};

// step -> the "data" object of each {"step", "data"} line of a metrics.jsonl (a line still being written is
// skipped); *counts, when given, gets how many lines each step had.
inline std::map<int, nlohmann::json> ReadMetricsJsonl(const std::string& path, std::map<int, int>* counts = nullptr) {
  std::map<int, nlohmann::json> steps;
  std::istringstream lines(ReadFile(path));
  for (std::string line; std::getline(lines, line);) {
    if (line.empty()) continue;
    const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) continue;
    const int step = j["step"].get<int>();
    steps[step] = j["data"];
    if (counts) ++(*counts)[step];
  }
  return steps;
}

}  // namespace verl::testing

#endif  // VERL_TESTS_E2E_E2E_UTIL_H_
