#include "mpi/starpu_mpi_coop_sends.hpp"

#include <algorithm>

namespace numasim {

CoopSends build_coop_sends(const Dag& dag) {
  const size_t n = dag.receptions.size();
  CoopSends c;
  c.group_of.assign(n, kNone);
  std::vector<uint8_t> initial(n, 0);
  for (uint32_t r : dag.ready_recvs)
    initial[r] = 1;
  // Receptions are numbered in submission order and a tile's versions only grow: the open bag of
  // a tile is the one of its latest version.
  std::vector<uint32_t> open(dag.ntiles, kNone); // per tile: its open bag's first reception
  std::vector<uint32_t> size;
  uint32_t ngroups = 0;
  for (uint32_t r = 0; r < n; r++) {
    const Reception& rc = dag.receptions[r];
    uint32_t& o = open[rc.tile];
    if (!initial[r] && o != kNone && dag.receptions[o].version == rc.version) {
      c.group_of[r] = c.group_of[o];
      size[c.group_of[r]]++;
      continue;
    }
    c.group_of[r] = ngroups++;
    size.push_back(1);
    o = initial[r] ? kNone : r;
  }
  c.first.assign(static_cast<size_t>(ngroups) + 1, 0);
  for (uint32_t g = 0; g < ngroups; g++)
    c.first[g + 1] = c.first[g] + size[g];
  c.members.resize(n);
  std::vector<uint32_t> fill(c.first.begin(), c.first.end() - 1);
  for (uint32_t r = 0; r < n; r++)
    c.members[fill[c.group_of[r]]++] = r;
  for (uint32_t g = 0; g < ngroups; g++)
    if (size[g] > 1)
      std::stable_sort(
          c.members.begin() + c.first[g], c.members.begin() + c.first[g + 1],
          [&](uint32_t a, uint32_t b) { return dag.receptions[a].prio > dag.receptions[b].prio; });
  return c;
}

} // namespace numasim
