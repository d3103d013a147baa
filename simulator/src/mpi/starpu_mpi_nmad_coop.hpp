// StarPU-MPI over NewMadeleine sends a bag of cooperative sends as one multicast
// (mpi/src/nmad/starpu_mpi_nmad_coop.c _starpu_mpi_submit_coop_sends: nm_mcast_isend with the bag's
// destinations and priorities in the bag's order and NM_COLL_TREE_DEFAULT): the owner sends to a
// few receivers, which forward the data to the others along a tree (Denis et al., "Using Dynamic
// Broadcasts to improve Task-Based Runtime Performances", Euro-Par 2020).
//
// The tree over a bag of n receivers has n + 1 nodes: index 0 is the owner (the root), index i the
// bag's i-th destination, as NewMadeleine numbers a collective's nodes relative to its root. The
// shapes are NewMadeleine's (nmad/interfaces/coll/include/nm_coll_trees.h): binomial
// (nm_coll_binomial_step), chain (nm_coll_chain_step) and flat (nm_coll_flat_step). A tree is
// walked in steps (nmad/interfaces/coll/src/nm_coll_bcast.c nm_coll_ibcast_step): at each step a
// node receives from its parent or sends to its child of that step, and starts the next step only
// when that request completed, so a node forwards only the data it has wholly received, and sends
// to its children one after the other, in step order. A flat tree is one step: the root sends to
// every receiver at once, as StarPU's MPI backend does.
#pragma once
#include "config.hpp"

#include <vector>

namespace numasim {

// The indices node `i` of an `nodes`-node tree sends to, in the order it sends to them.
std::vector<int> mcast_children(McastTree kind, int nodes, int i);
// The index node `i` receives from (-1 for the root).
int mcast_parent(McastTree kind, int nodes, int i);

} // namespace numasim
