// What StarPU's memory manager knows of a RAM memory node (StarPU datawizard/memory_manager.c):
// its size and the bytes StarPU allocated there. RAM is not limited in numasim (nothing waits for
// RAM or is evicted from it); StarPU 1.4.10 reads these numbers to choose where StarPU-MPI
// receives a tile (mpi/starpu_mpi.cpp MpiRuntime::reception_node).
#include "datawizard/datawizard.hpp"

#include <algorithm>

namespace numasim {

void DataWizard::init_ram_accounting() {
  ram_used_.assign(topo_.mem().size(), 0.0);
  ram_order_.assign(topo_.nranks(), {});
  // StarPU's numbering of the RAM memory nodes: with STARPU_USE_NUMA, core/topology.c
  // _starpu_init_numa_node registers one per NUMA node of the CPU workers, in worker order (the
  // first is STARPU_MAIN_RAM); numasim has one RAM node per NUMA node of the machine, local index =
  // NUMA index (Topology::add_memory_nodes), so the nodes of no CPU worker come last.
  for (size_t r = 0; r < topo_.nranks(); r++) {
    auto& order = ram_order_[r];
    order.push_back(topo_.home(static_cast<int>(r)));
    for (const auto& wp : topo_.threads(static_cast<int>(r)).workers)
      if (!wp.cuda && wp.numa < nram_[r] && std::find(order.begin(), order.end(), wp.numa) == order.end())
        order.push_back(wp.numa);
    for (int l = 0; l < nram_[r]; l++)
      if (std::find(order.begin(), order.end(), l) == order.end())
        order.push_back(l);
  }
}

void DataWizard::count_ram_buffer(int gdst) {
  // A buffer StarPU allocates for a replica goes through memalloc.c _starpu_allocate_interface ->
  // malloc.c _starpu_malloc_on_node with the node's default flags, STARPU_MALLOC_COUNT included
  // (_starpu_malloc_init: STARPU_MALLOC_PINNED | STARPU_MALLOC_COUNT), which adds its size to the
  // node's used_size (starpu_memory_allocate). The tiles apps/lu and Chameleon allocate
  // themselves and register (starpu_malloc_flags without STARPU_MALLOC_COUNT) are not counted.
  // It would shrink at a free (starpu_memory_deallocate): numasim frees no RAM buffer, and
  // StarPU frees none during the LU either (an invalidated replica keeps its buffer; RAM is not
  // full, so nothing is evicted; StarPU-MPI's cache flush, which frees a received tile's buffers,
  // mpi/src/starpu_mpi_cache.c, needs a second version of the tile received by the rank, which the
  // LU never sends).
  ram_used_[gdst] += tile_bytes_;
}

double DataWizard::available(int rank, int local) const {
  // memory_manager.c starpu_memory_get_available: global_size - used_size, or -1 for a node whose
  // global size is 0 (unknown).
  const int g = global(rank, local);
  const double size = topo_.mem(g).global_size;
  return size == 0 ? -1.0 : size - ram_used_[g];
}

} // namespace numasim
