// StarPU-MPI's data placement rules as the task graph is built (lu_dag.cpp): owner computes
// (mpi/src/starpu_mpi_task_insert.c) and the cache of received data (mpi/src/starpu_mpi_cache.c):
// a tile version read on another rank is sent there once and read from the cache afterwards.
#pragma once
#include "lu_dag.hpp"

#include <cstdint>
#include <utility>
#include <vector>

namespace numasim {

// Owner computes: a task runs on the rank owning the tile it writes.
inline uint16_t owner_computes(const RunConfig& cfg, uint32_t written_tile) {
  return static_cast<uint16_t>(cfg.owner[written_tile]);
}

class ReceptionCache {
public:
  // The reception of version `version` of `tile` by `rank` (its handle there: `handle`) from its
  // owner, for a task of priority `prio`: a new message the first time (appended to `receptions`), the cached
  // copy afterwards. Returns its id and whether it is new. A tile's versions only grow as the graph is built
  // and a read asks for the current one, so the latest reception per handle answers every lookup (StarPU
  // clears a tile's entries when a task writes it: starpu_mpi_task_insert.c
  // _starpu_mpi_clear_data_after_execution).
  std::pair<uint32_t, bool> find_or_add(std::vector<Reception>& receptions, uint32_t handle, uint32_t tile,
                                        uint32_t version, uint16_t owner, uint16_t rank, int32_t prio) {
    if (handle >= latest_.size())
      latest_.resize(static_cast<size_t>(handle) + 1, kNone);
    uint32_t& r = latest_[handle];
    if (r != kNone && receptions[r].version == version)
      return {r, false};
    r = static_cast<uint32_t>(receptions.size());
    receptions.push_back({tile, version, owner, rank, 0, 0, prio});
    return {r, true};
  }

private:
  std::vector<uint32_t> latest_; // per handle: its latest reception, kNone before the first
};

} // namespace numasim
