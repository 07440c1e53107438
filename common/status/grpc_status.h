#ifndef VERL_COMMON_STATUS_GRPC_STATUS_H_
#define VERL_COMMON_STATUS_GRPC_STATUS_H_

// The one mapping between absl::Status and grpc::Status. Both use the canonical codes, so the code is kept as is
// and the message travels unchanged.

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace verl {

grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace verl

#endif  // VERL_COMMON_STATUS_GRPC_STATUS_H_
