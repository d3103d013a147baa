// One error type for bad input: names the file, the key and what was expected
// (docs/interfaces.md §7). main() prints it as "error: ..." and exits 2.
#pragma once
#include <stdexcept>
#include <string>

namespace numasim {

class InputError : public std::runtime_error {
public:
  InputError(const std::string& file, const std::string& key, const std::string& expected)
      : std::runtime_error(compose(file, key, expected)) {}

private:
  static std::string compose(const std::string& file, const std::string& key, const std::string& expected) {
    std::string where = file;
    if (!key.empty())
      where += (where.empty() ? "" : ": ") + key;
    return where.empty() ? "expected " + expected : where + ": expected " + expected;
  }
};

} // namespace numasim
