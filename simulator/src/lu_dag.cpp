#include "lu_dag.hpp"
#include "mpi/starpu_mpi_cache.hpp"

#include <algorithm>
#include <stdexcept>
#include <utility>

#include <xbt/log.h>

XBT_LOG_NEW_DEFAULT_SUBCATEGORY(numasim_lu_dag, numasim, "numasim LU task graph");

namespace numasim {

namespace {
class Builder {
public:
  explicit Builder(const RunConfig& cfg) : cfg_(cfg), nt_(cfg.nt) {
    size_t ntiles = static_cast<size_t>(nt_) * nt_;
    last_writer_.assign(ntiles, kNone);
    version_.assign(ntiles, 0);
    readers_.resize(ntiles);
    int nranks = 0;
    for (int r : cfg_.owner)
      nranks = std::max(nranks, r + 1);
    dag_.ntiles = ntiles;
    dag_.handle_index.assign(static_cast<size_t>(nranks) * ntiles, kNone);
    dag_.handle_tile.resize(ntiles);
    dag_.handle_rank.resize(ntiles);
    for (uint32_t tile = 0; tile < ntiles; tile++) { // the owners' handles: the tiles' indices
      dag_.handle_tile[tile] = tile;
      dag_.handle_rank[tile] = static_cast<uint16_t>(cfg_.owner[tile]);
      dag_.handle_index[static_cast<size_t>(cfg_.owner[tile]) * ntiles + tile] = tile;
    }
  }

  void add(TaskKind kind, int k, int prio, std::initializer_list<std::pair<int, int>> operands) {
    Task t;
    t.kind = kind;
    t.prio = prio;
    t.step = static_cast<uint16_t>(k);
    uint32_t tiles[3];
    for (auto [m, n] : operands)
      tiles[t.nbuf++] = static_cast<uint32_t>(m * nt_ + n);
    uint32_t written = tiles[t.nbuf - 1];
    t.rank = owner_computes(cfg_, written);
    for (uint8_t i = 0; i < t.nbuf; i++)
      t.handles[i] = handle(t.rank, tiles[i]);
    uint32_t id = static_cast<uint32_t>(dag_.tasks.size());
    dag_.tasks.push_back(t);
    dag_.ndeps.push_back(0);
    dag_.count_by_kind[static_cast<int>(kind)]++;
    for (uint8_t i = 0; i + 1 < t.nbuf; i++)
      read(id, tiles[i], t.rank, t.handles[i]);
    write(id, written);
  }

  Dag finish() {
    const uint32_t ntasks = static_cast<uint32_t>(dag_.tasks.size());
    const size_t nnodes = ntasks + dag_.receptions.size();
    auto node = [ntasks](uint32_t id) { return id >= kRecvBase ? ntasks + (id - kRecvBase) : id; };
    std::vector<uint32_t> count(nnodes + 1, 0);
    for (auto& [from, to] : edges_)
      count[node(from) + 1]++;
    for (size_t i = 0; i < nnodes; i++)
      count[i + 1] += count[i];
    dag_.succ.resize(edges_.size());
    std::vector<uint32_t> fill(count.begin(), count.end() - 1);
    for (auto& [from, to] : edges_) // stable: successors keep insertion order
      dag_.succ[fill[node(from)]++] = node(to);
    for (uint32_t i = 0; i < ntasks; i++) {
      dag_.tasks[i].succ_begin = count[i];
      dag_.tasks[i].succ_end = count[i + 1];
      if (dag_.ndeps[i] == 0)
        dag_.ready.push_back(i);
    }
    for (size_t r = 0; r < dag_.receptions.size(); r++) {
      dag_.receptions[r].succ_begin = count[ntasks + r];
      dag_.receptions[r].succ_end = count[ntasks + r + 1];
    }
    if (!cfg_.trace.empty())
      dag_.spans.resize(ntasks);
    edges_.clear();
    edges_.shrink_to_fit();
    return std::move(dag_);
  }

private:
  // Receptions get provisional node ids until the number of tasks is known.
  static constexpr uint32_t kRecvBase = 0x80000000u;
  const RunConfig& cfg_;
  int nt_;
  Dag dag_;
  std::vector<uint32_t> last_writer_, version_;
  std::vector<std::vector<uint32_t>> readers_;       // local readers since the last write (WAR)
  ReceptionCache cache_;                             // mpi/starpu_mpi_cache.hpp
  std::vector<std::pair<uint32_t, uint32_t>> edges_; // (from, to) with provisional reception ids

  void edge(uint32_t from, uint32_t to) {
    edges_.emplace_back(from, to);
    if (to < kRecvBase && ++dag_.ndeps[to] == 0)
      throw std::length_error("numasim: a task with more than 65535 predecessors");
  }
  uint32_t node_of_recv(uint32_t r) const { return kRecvBase + r; }
  // The tile's handle on `rank` (Dag::handle_of), a new one at the rank's first use of a tile it
  // does not own.
  uint32_t handle(uint16_t rank, uint32_t tile) {
    uint32_t& h = dag_.handle_index[static_cast<size_t>(rank) * dag_.ntiles + tile];
    if (h == kNone) {
      if (dag_.handle_tile.size() == kNone)
        throw std::length_error("numasim: more than 2^32 - 1 data handles");
      h = static_cast<uint32_t>(dag_.handle_tile.size());
      dag_.handle_tile.push_back(tile);
      dag_.handle_rank.push_back(rank);
    }
    return h;
  }
  void read(uint32_t task, uint32_t tile, uint16_t rank, uint32_t handle) {
    uint32_t writer = last_writer_[tile];
    if (cfg_.owner[tile] == rank) {
      if (writer != kNone)
        edge(writer, task);
      readers_[tile].push_back(task);
      return;
    }
    auto [r, inserted] =
        cache_.find_or_add(dag_.receptions, handle, tile, version_[tile],
                           static_cast<uint16_t>(cfg_.owner[tile]), rank, dag_.tasks[task].prio);
    if (inserted) {
      dag_.receptions[r].first_reader = task;
      if (writer != kNone)
        edge(writer, node_of_recv(r));
      else
        dag_.ready_recvs.push_back(r);
    }
    edge(node_of_recv(r), task);
  }
  void write(uint32_t task, uint32_t tile) {
    if (last_writer_[tile] != kNone && last_writer_[tile] != task)
      edge(last_writer_[tile], task);
    for (uint32_t r : readers_[tile])
      if (r != task)
        edge(r, task);
    readers_[tile].clear();
    last_writer_[tile] = task;
    version_[tile]++;
  }
};
} // namespace

// StarPU's examples/lu/xlu_implicit.c (dw_codelet_facto_v3, create_task_*): per step k, getrf,
// then for each i the row and the column trsm (trsm_ll on A(k,i), trsm_ru on A(i,k)), then the
// updates A(i,j) for i, j; "bottom-level-based" priorities 3NT-3k, 3NT-(2k+i), 3NT-(k+i+j).
static Dag build_starpu_example_dag(Builder& b, int NT) {
  for (int k = 0; k < NT; k++) {
    b.add(TaskKind::getrf, k, 3 * NT - 3 * k, {{k, k}});
    for (int i = k + 1; i < NT; i++) {
      b.add(TaskKind::trsm_row, k, 3 * NT - (2 * k + i), {{k, k}, {k, i}});
      b.add(TaskKind::trsm_col, k, 3 * NT - (2 * k + i), {{k, k}, {i, k}});
    }
    for (int i = k + 1; i < NT; i++)
      for (int j = k + 1; j < NT; j++)
        b.add(TaskKind::gemm, k, 3 * NT - (k + i + j), {{i, k}, {k, j}, {i, j}});
  }
  return b.finish();
}

Dag build_lu_dag(const RunConfig& cfg) {
  Builder b(cfg);
  const int NT = cfg.nt;
  if (cfg.dag == "starpu-lu-example")
    return build_starpu_example_dag(b, NT);
  // Chameleon pzgetrf_nopiv.c: per step k, getrf, the column panel, the row panel, then updates.
  for (int k = 0; k < NT; k++) {
    b.add(TaskKind::getrf, k, 2 * NT - 2 * k, {{k, k}});
    for (int m = k + 1; m < NT; m++)
      b.add(TaskKind::trsm_col, k, 2 * NT - 2 * k - m, {{k, k}, {m, k}});
    for (int n = k + 1; n < NT; n++)
      b.add(TaskKind::trsm_row, k, 2 * NT - 2 * k - n, {{k, k}, {k, n}});
    for (int n = k + 1; n < NT; n++)
      for (int m = k + 1; m < NT; m++)
        b.add(TaskKind::gemm, k, 2 * NT - 2 * k - n - m, {{m, k}, {k, n}, {m, n}});
  }
  return b.finish();
}

} // namespace numasim
