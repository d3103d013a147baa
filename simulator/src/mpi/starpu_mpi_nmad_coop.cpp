#include "mpi/starpu_mpi_nmad_coop.hpp"

namespace numasim {

namespace {
// ceil(log2(x)) for x >= 1: a binomial tree's height, its number of steps
int log2_ceil(int x) {
  int h = 0;
  while ((1 << h) < x)
    h++;
  return h;
}
} // namespace

std::vector<int> mcast_children(McastTree kind, int nodes, int i) {
  std::vector<int> c;
  switch (kind) {
  case McastTree::binomial:
    // Step s works at level h - 1 - s (levels numbered from the leaves): node i sends to i + 2^level
    // when i is a multiple of 2^(level + 1) and that node exists. The root's first child heads the
    // largest subtree.
    for (int level = log2_ceil(nodes) - 1; level >= 0; level--) {
      const int skip = 1 << level;
      if (i % (2 * skip) == 0 && i + skip < nodes)
        c.push_back(i + skip);
    }
    break;
  case McastTree::chain:
    if (i + 1 < nodes)
      c.push_back(i + 1);
    break;
  case McastTree::flat:
    if (i == 0)
      for (int k = 1; k < nodes; k++)
        c.push_back(k);
    break;
  }
  return c;
}

int mcast_parent(McastTree kind, int nodes, int i) {
  if (i <= 0 || i >= nodes)
    return -1;
  switch (kind) {
  case McastTree::binomial: {
    int skip = 1; // i receives at the level of its lowest set bit, from i - 2^level
    while (i % (2 * skip) != skip)
      skip *= 2;
    return i - skip;
  }
  case McastTree::chain:
    return i - 1;
  case McastTree::flat:
    return 0;
  }
  return -1;
}

} // namespace numasim
