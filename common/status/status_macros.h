#ifndef VERL_COMMON_STATUS_STATUS_MACROS_H_
#define VERL_COMMON_STATUS_STATUS_MACROS_H_

// RETURN_IF_ERROR / ASSIGN_OR_RETURN for absl::Status, which Debian 12's Abseil (20220623) does not ship.
//
//   RETURN_IF_ERROR(LoadFile(path));
//   ASSIGN_OR_RETURN(auto config, ParseConfig(text));
//
// Context is added with verl::Annotate(status, "while loading " + path), which keeps the code and prefixes the message.

#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace verl {

// Returns `status` with "context: " prepended to its message; OK stays OK.
inline absl::Status Annotate(const absl::Status& status, std::string_view context) {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat(absl::string_view(context.data(), context.size()), ": ", status.message()));
}

namespace status_internal {
inline const absl::Status& AsStatus(const absl::Status& s) { return s; }
template <typename T>
const absl::Status& AsStatus(const absl::StatusOr<T>& s) {
  return s.status();
}
}  // namespace status_internal

}  // namespace verl

#define VERL_STATUS_CONCAT_INNER_(a, b) a##b
#define VERL_STATUS_CONCAT_(a, b) VERL_STATUS_CONCAT_INNER_(a, b)

#define RETURN_IF_ERROR(expr)                                                          \
  do {                                                                                 \
    const ::absl::Status verl_status_ = ::verl::status_internal::AsStatus((expr));     \
    if (!verl_status_.ok()) return verl_status_;                                       \
  } while (0)

#define VERL_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                \
  if (!tmp.ok()) return tmp.status();               \
  lhs = std::move(tmp).value()

#define ASSIGN_OR_RETURN(lhs, expr) \
  VERL_ASSIGN_OR_RETURN_IMPL_(VERL_STATUS_CONCAT_(verl_statusor_, __LINE__), lhs, expr)

#endif  // VERL_COMMON_STATUS_STATUS_MACROS_H_
