#include "common/config/flag_reader.h"

#include <iostream>
#include <utility>

namespace verl {

FlagReader::FlagReader(std::string program, std::vector<std::string> args)
    : program_(std::move(program)), args_(std::move(args)) {}

bool FlagReader::Next() {
  if (started_) ++index_;
  started_ = true;
  if (index_ >= args_.size()) return false;
  const std::string& a = args_[index_];
  const size_t eq = a.find('=');
  has_inline_ = a.rfind("--", 0) == 0 && eq != std::string::npos;
  name_ = has_inline_ ? a.substr(0, eq) : a;
  inline_value_ = has_inline_ ? a.substr(eq + 1) : std::string();
  return true;
}

bool FlagReader::Value(std::string* out) {
  if (has_inline_) {
    *out = inline_value_;
    return true;
  }
  if (index_ + 1 >= args_.size()) {
    std::cerr << program_ << ": " << name_ << " needs a value\n";
    return false;
  }
  *out = args_[++index_];
  return true;
}

bool FlagReader::NoValue() {
  if (!has_inline_) return true;
  std::cerr << program_ << ": " << name_ << " takes no value, got '" << arg() << "'\n";
  return false;
}

void FlagReader::Unknown() const { std::cerr << program_ << ": unknown argument '" << arg() << "'\n"; }

}  // namespace verl
