#include "common/status/status_macros.h"

#include <catch2/catch.hpp>

#include "common/status/grpc_status.h"

namespace verl {
namespace {

absl::StatusOr<int> ParsePositive(int v) {
  if (v <= 0) return absl::InvalidArgumentError("not positive");
  return v;
}

absl::StatusOr<int> Twice(int v) {
  ASSIGN_OR_RETURN(int x, ParsePositive(v));
  return 2 * x;
}

absl::Status Check(int v) {
  RETURN_IF_ERROR(Twice(v));
  return absl::OkStatus();
}

TEST_CASE("ASSIGN_OR_RETURN passes values and errors through") {
  REQUIRE(Twice(3).value() == 6);
  REQUIRE(Twice(-1).status().code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(Check(-1).message() == "not positive");
  REQUIRE(Check(1).ok());
}

TEST_CASE("Annotate prefixes context and keeps the code") {
  absl::Status s = Annotate(absl::NotFoundError("no file"), "loading x.yaml");
  REQUIRE(s.code() == absl::StatusCode::kNotFound);
  REQUIRE(s.message() == "loading x.yaml: no file");
  REQUIRE(Annotate(absl::OkStatus(), "ctx").ok());
}

TEST_CASE("grpc and absl status codes round-trip") {
  absl::Status s = absl::DeadlineExceededError("slow");
  grpc::Status g = ToGrpcStatus(s);
  REQUIRE(g.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED);
  REQUIRE(FromGrpcStatus(g) == s);
}

}  // namespace
}  // namespace verl
