// StarPU-MPI's data placement rules as the task graph is built (lu_dag.cpp): owner computes
// (mpi/src/starpu_mpi_task_insert.c) and the cache of received data (mpi/src/starpu_mpi_cache.c):
// a tile version read on another rank is sent there once and read from the cache afterwards.
#pragma once
#include "lu_dag.hpp"

#include <cstdint>
#include <unordered_map>
#include <utility>
#include <vector>

namespace numasim {

// Owner computes: a task runs on the rank owning the tile it writes.
inline uint16_t owner_computes(const RunConfig& cfg, uint32_t written_tile) {
  return static_cast<uint16_t>(cfg.owner[written_tile]);
}

class ReceptionCache {
public:
  // The reception of version `version` of `tile` by `rank` from its owner: a new message the first
  // time (appended to `receptions`), the cached copy afterwards. Returns its id and whether it is new.
  std::pair<uint32_t, bool> find_or_add(std::vector<Reception>& receptions, uint32_t tile, uint32_t version,
                                        uint16_t owner, uint16_t rank) {
    uint64_t key = (static_cast<uint64_t>(tile) << 32) | (static_cast<uint64_t>(version) << 16) | rank;
    auto [it, inserted] = index_.try_emplace(key, static_cast<uint32_t>(receptions.size()));
    if (inserted)
      receptions.push_back({tile, version, owner, rank});
    return {it->second, inserted};
  }

private:
  std::unordered_map<uint64_t, uint32_t> index_; // looked up only, never iterated
};

} // namespace numasim
