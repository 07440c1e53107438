#ifndef VERL_COMMON_DATA_ATOMIC_WRITE_H_
#define VERL_COMMON_DATA_ATOMIC_WRITE_H_

#include <functional>
#include <string>

#include "absl/status/status.h"

namespace verl {

// Calls `write(temp_path)`, where temp_path is a fresh sibling of `path` (same directory, so the rename cannot cross
// file systems), then renames temp_path onto `path`. If `write` fails or the rename fails the temporary file is
// removed and `path` is left untouched; the returned error names `path`. Readers of `path` therefore see either the
// old file or the complete new one. Thread-safe (temporary names are unique per process and call).
absl::Status WriteAtomically(const std::string& path, const std::function<absl::Status(const std::string&)>& write);

// WriteAtomically with `contents` as the whole file, flushed to disk (fsync) before the rename and its directory after
// it, so after a crash the file is the old one or the complete new one, and after a return the new one. Errors name
// the file and the system's reason (e.g. "No space left on device").
absl::Status WriteFileAtomically(const std::string& path, const std::string& contents);

// Flushes directory `dir`'s entries to disk (fsync on the directory; "" is the working directory), so that a rename
// or a new file in it survives a crash. File systems that cannot sync a directory (EINVAL, ENOTSUP) count as synced.
// Errors name the directory.
absl::Status SyncDirectory(const std::string& dir);

}  // namespace verl

#endif  // VERL_COMMON_DATA_ATOMIC_WRITE_H_
