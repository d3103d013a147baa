// Writing outputs (--out summary, trace, transfers): every write checked, nothing half-written.
#pragma once
#include <functional>
#include <ostream>
#include <stdexcept>
#include <string>

namespace numasim {

// The environment failed an output (disk full, permissions, a missing folder): main()
// prints "error: <path>: <reason>" and exits 1.
class OutputError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

// Writes `path` with `fill`: into a temporary sibling (.NAME.tmp-PID) renamed over `path`
// only once every byte is written and the file closed. An existing non-regular file
// (/dev/stdout, a pipe, a device) is written in place, never replaced. On failure the
// temporary file is removed, `path` is left as it was, and OutputError names `path`; a
// directory at `path` is an InputError naming `key`.
void write_output(const std::string& path, const std::string& key,
                  const std::function<void(std::ostream&)>& fill);

// Writes `text` to standard output and flushes it; OutputError if that fails.
void write_stdout(const std::string& text);

} // namespace numasim
