// The JSON summary of a run (docs/interfaces.md §4), keys in a fixed order.
#pragma once
#include "runtime.hpp"

#include <string>

namespace numasim {
std::string summary_json(const Summary& s, uint64_t seed, double wall_s);
} // namespace numasim
