// The JSON summary of a run (docs/interfaces.md §4), keys in a fixed order.
#pragma once
#include "runtime.hpp"

#include <string>

namespace numasim {
std::string summary_json(const Summary& s, uint64_t seed, double wall_s);
// Writes to a temporary file then renames it: no half-written output on failure.
void write_file_atomically(const std::string& path, const std::string& content);
} // namespace numasim
