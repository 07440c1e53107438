#pragma once

#include <string>
#include <vector>

namespace verl {

// Walks a daemon's command line, taking each flag in either of the usual forms: `--name value` or `--name=value`
// (Kubernetes manifests and most launchers write the second). Errors are printed to stderr prefixed with the
// program's name, e.g. "verl-worker: --ranks needs a value".
//
//   FlagReader flags("verl-worker", std::vector<std::string>(argv + 1, argv + argc));
//   while (flags.Next()) {
//     if (flags.name() == "--listen") { if (!flags.Value(&listen)) return 2; }
//     else if (flags.name() == "--verbose") { if (!flags.NoValue()) return 2; verbose = true; }
//     else { flags.Unknown(); return 2; }
//   }
class FlagReader {
 public:
  FlagReader(std::string program, std::vector<std::string> args);

  // Moves to the next argument; false when none is left.
  bool Next();
  // The current argument's name: `--listen` for both `--listen x` and `--listen=x`; a positional argument as it is.
  const std::string& name() const { return name_; }
  // The current argument as written (for positional arguments and messages).
  const std::string& arg() const { return args_[index_]; }
  // The flag's value: the text after '=', else the next argument (which is then consumed). Prints "<program>: <name>
  // needs a value" and returns false when there is none.
  bool Value(std::string* out);
  // For a flag that takes no value: false, with a message, when one was given as `--name=value`.
  bool NoValue();
  // Prints "<program>: unknown argument '<arg>'".
  void Unknown() const;

 private:
  std::string program_;
  std::vector<std::string> args_;
  size_t index_ = 0;
  bool started_ = false;
  std::string name_;
  bool has_inline_ = false;
  std::string inline_value_;
};

}  // namespace verl
