// StarPU history-based performance models (format version 45) and the task
// footprint of matrix operands, matched on StarPU 1.4.10:
//   src/core/perfmodel/perfmodel_history.c (file layout, parse_comb/parse_arch/
//   parse_per_arch_model_file/scan_history_entry),
//   src/datawizard/footprint.c (task footprint = crc over handle footprints),
//   src/datawizard/interfaces/matrix_interface.c (handle footprint of a matrix),
//   src/common/hash.c (big-endian CRC32C, polynomial 0x1EDC6F41).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace numasim {

uint32_t crc32c_be(uint32_t input, uint32_t inputcrc);
// Footprint of a task whose buffers are `nbuffers` nx×ny matrices.
uint32_t matrix_task_footprint(unsigned nbuffers, uint32_t nx, uint32_t ny);

struct HistoryEntry {
  uint32_t footprint = 0;
  uint64_t size = 0;
  double mean_us = 0;
  double dev_us = 0;
  unsigned nsample = 0;
};

// One device combination of a model ("cpu0_impl0", "cuda1_impl0", ...).
struct ArchModel {
  int devtype = 0; // 0 CPU, 1 CUDA, 2 OpenCL, 3 MIC (perfmodel_history.c comments)
  int devid = 0;
  int ncores = 1;
  std::vector<std::vector<HistoryEntry>> impls;
  std::string name() const; // StarPU's spelling, e.g. "cuda1" or "cpu" / "cpu_4"
};

struct PerfModel {
  std::string symbol;
  std::string path;
  std::vector<ArchModel> combs;

  // Loads `<sampling>/codelets/45/<symbol>.<host>`; throws InputError if absent or malformed.
  static PerfModel load(const std::string& sampling_dir, const std::string& symbol, const std::string& host);
  static PerfModel parse(const std::string& text, const std::string& path, const std::string& symbol);

  const ArchModel* arch(int devtype, int devid, int ncores) const;
  // Entry for implementation 0 matching the footprint, else the unique entry of that
  // size (models written with another interface footprint). nullptr if none. The size fallback
  // is numasim's own: StarPU finds a history entry by footprint only
  // (perfmodel_history.c __starpu_history_based_job_expected_perf) and StarPU-SimGrid stops on a
  // missing one, so the starpu-simgrid engine refuses such models (docs/interfaces.md §3.1).
  const HistoryEntry* lookup(int devtype, int devid, int ncores, uint32_t footprint, uint64_t size) const;
};

} // namespace numasim
