// Cooperative sends (mpi/src/starpu_mpi_coop_sends.c, on by default: STARPU_MPI_COOP_SENDS,
// mpi/src/starpu_mpi_private.c): StarPU gathers the detached sends of one value of a data into one
// bag, acquires the data once for the whole bag and hands the bag to the backend, which sends it
// (mpi/starpu_mpi.hpp: each copy from the owner, or NewMadeleine's multicast).
#pragma once
#include "lu_dag.hpp"

#include <cstdint>
#include <span>
#include <vector>

namespace numasim {

struct CoopSends {
  std::vector<uint32_t> group_of; // per reception: its bag
  std::vector<uint32_t> first;    // per bag, and one past the last: its members' range in `members`
  std::vector<uint32_t> members;  // receptions, bag after bag, each bag in StarPU's send order
  size_t ngroups() const { return first.empty() ? 0 : first.size() - 1; }
  std::span<const uint32_t> group(uint32_t g) const {
    return {members.data() + first[g], members.data() + first[g + 1]};
  }
};

// The bags of a task graph submitted at once (numasim's main thread submits the whole graph at
// t = 0, runtime.cpp):
// * a send joins the bag of its data while that bag is open (_starpu_mpi_coop_send; the cache
//   makes every destination of a bag distinct); a bag closes when the data is acquired
//   (_starpu_mpi_coop_sends_data_ready) or when a write to the data is submitted
//   (_starpu_mpi_data_flush). A value written by a task is acquired after that task ends, by
//   which time every read of it was submitted: its bag holds all its receptions. Initial data has
//   no writer: its acquisition completes as the first send is submitted
//   (starpu_data_acquire_on_node_cb_sequential_consistency_sync_jobids fetches a valid copy at
//   once), so each of its sends is a bag of its own;
// * a bag's members are sorted by priority, highest first, ties in submission order
//   (_starpu_mpi_coop_sends_optimize: qsort by prio; glibc 2.36's qsort is a merge sort, which
//   keeps ties in order).
CoopSends build_coop_sends(const Dag& dag);

} // namespace numasim
