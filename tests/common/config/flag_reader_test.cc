#include "common/config/flag_reader.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

namespace verl {
namespace {

TEST_CASE("FlagReader takes --name value and --name=value alike", "[config]") {
  FlagReader r("prog", {"--listen", "0.0.0.0:1", "--state-dir=/state", "--token=a=b", "--empty=", "--quiet",
                        "key=value", "+x=1", "-c", "f.yaml"});
  std::string v;
  REQUIRE(r.Next());
  CHECK(r.name() == "--listen");
  REQUIRE(r.Value(&v));
  CHECK(v == "0.0.0.0:1");
  REQUIRE(r.Next());
  CHECK(r.name() == "--state-dir");
  REQUIRE(r.Value(&v));
  CHECK(v == "/state");
  REQUIRE(r.Next());
  CHECK(r.name() == "--token");
  REQUIRE(r.Value(&v));
  CHECK(v == "a=b");  // only the first '=' separates
  REQUIRE(r.Next());
  REQUIRE(r.Value(&v));
  CHECK(v.empty());
  REQUIRE(r.Next());
  CHECK(r.name() == "--quiet");
  CHECK(r.NoValue());
  REQUIRE(r.Next());  // positional arguments keep their '='
  CHECK(r.name() == "key=value");
  CHECK(r.arg() == "key=value");
  REQUIRE(r.Next());
  CHECK(r.name() == "+x=1");
  REQUIRE(r.Next());
  CHECK(r.name() == "-c");
  REQUIRE(r.Value(&v));
  CHECK(v == "f.yaml");
  CHECK_FALSE(r.Next());
  CHECK_FALSE(r.Next());
}

TEST_CASE("FlagReader refuses a missing value and a value given to a switch", "[config]") {
  std::string v = "unchanged";
  FlagReader missing("prog", {"--listen"});
  REQUIRE(missing.Next());
  CHECK_FALSE(missing.Value(&v));
  CHECK(v == "unchanged");

  FlagReader switched("prog", {"--quiet=yes"});
  REQUIRE(switched.Next());
  CHECK(switched.name() == "--quiet");
  CHECK_FALSE(switched.NoValue());

  FlagReader none("prog", {});
  CHECK_FALSE(none.Next());
}

}  // namespace
}  // namespace verl
