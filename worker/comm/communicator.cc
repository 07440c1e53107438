#include "worker/comm/communicator.h"

namespace verl {

std::string_view ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kMin: return "min";
    case ReduceOp::kAvg: return "avg";
  }
  return "unknown";
}

}  // namespace verl
