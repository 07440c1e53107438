#ifndef VERL_TESTS_TOOLS_RUN_COMMAND_H_
#define VERL_TESTS_TOOLS_RUN_COMMAND_H_

// Runs a built tool as a subprocess (through /bin/sh) and captures its exit code, stdout and stderr.

#include <sys/wait.h>

#include <catch2/catch.hpp>

#include <cstdio>
#include <string>
#include <vector>

#include "tests/test_dir.h"

namespace verl::testing {

struct RunResult {
  int exit_code = -1;  // -1 when the process did not exit normally
  std::string out;
  std::string err;
};

// Single-quotes `s` for /bin/sh.
inline std::string ShellQuote(const std::string& s) {
  std::string q = "'";
  for (char c : s) {
    if (c == '\'') {
      q += "'\\''";
    } else {
      q += c;
    }
  }
  return q + "'";
}

// Runs `binary args...`; stderr goes through a file in `scratch`.
inline RunResult RunCommand(const std::string& binary, const std::vector<std::string>& args, const TestDir& scratch) {
  std::string cmd = ShellQuote(binary);
  for (const std::string& a : args) cmd += " " + ShellQuote(a);
  const std::string err_path = scratch.file("stderr.txt");
  cmd += " 2>" + ShellQuote(err_path);
  RunResult r;
  FILE* pipe = ::popen(cmd.c_str(), "r");
  REQUIRE(pipe != nullptr);
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), pipe)) > 0) r.out.append(buf, n);
  const int status = ::pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.err = ReadFile(err_path);
  return r;
}

}  // namespace verl::testing

#endif  // VERL_TESTS_TOOLS_RUN_COMMAND_H_
