#include "report.hpp"
#include "error.hpp"
#include "json.hpp"

#include <cstdio>

#include <xbt/log.h>

XBT_LOG_NEW_DEFAULT_SUBCATEGORY(numasim_report, numasim, "numasim JSON summary");

namespace numasim {

namespace {
std::string num(double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.12g", x);
  return buf;
}
} // namespace

std::string summary_json(const Summary& s, uint64_t seed, double wall_s) {
  std::string o = "{";
  o += "\"bytes_by_link_class\": {";
  bool first = true;
  for (const auto& [cls, bytes] : s.bytes_by_link_class) { // std::map: sorted keys
    o += (first ? "" : ", ") + ("\"" + json_escape(cls) + "\": ") + num(bytes);
    first = false;
  }
  o += "}";
  // CPU workers of each rank: a trace lists only the workers that ran a task (testbed diagnose)
  o += ", \"cpu_workers_by_rank\": [";
  for (size_t r = 0; r < s.cpu_workers_by_rank.size(); r++)
    o += (r ? ", " : "") + std::to_string(s.cpu_workers_by_rank[r]);
  o += "]";
  o += ", \"eviction_writebacks\": " + std::to_string(s.eviction_writebacks);
  o += ", \"evictions\": " + std::to_string(s.evictions);
  o += ", \"makespan_s\": " + num(s.makespan);
  o += ", \"mpi_messages\": " + std::to_string(s.mpi_messages);
  o += ", \"numa\": {"; // NUMA mechanisms (numa_effects.cpp)
  first = true;
  for (const auto& [k, v] : s.numa) {
    o += (first ? "" : ", ") + ("\"" + json_escape(k) + "\": ") + num(v);
    first = false;
  }
  o += "}";
  o += ", \"overcommits\": " + std::to_string(s.overcommits);
  o += ", \"runtime_costs\": {"; // threads' copies and allocation calls (datawizard/)
  first = true;
  for (const auto& [k, v] : s.runtime_costs) {
    o += (first ? "" : ", ") + ("\"" + json_escape(k) + "\": ") + num(v);
    first = false;
  }
  o += "}";
  o += ", \"seed\": " + std::to_string(seed);
  o += ", \"tasks\": " + std::to_string(s.tasks);
  o += ", \"tasks_by_kind\": {\"gemm\": " + std::to_string(s.by_kind[3]) +
       ", \"getrf\": " + std::to_string(s.by_kind[0]) +
       ", \"trsm\": " + std::to_string(s.by_kind[1] + s.by_kind[2]) + "}";
  o += ", \"tasks_by_worker_type\": {\"cpu\": " + std::to_string(s.on_cpu) +
       ", \"cuda\": " + std::to_string(s.on_cuda) + "}";
  o += ", \"transfers\": " + std::to_string(s.transfers);
  o += ", \"wall_s\": " + num(wall_s);
  o += ", \"workers\": " + std::to_string(s.workers);
  o += ", \"workers_by_type\": {\"cpu\": " + std::to_string(s.cpu_workers) +
       ", \"cuda\": " + std::to_string(s.cuda_workers) + "}";
  o += "}";
  return o;
}

} // namespace numasim
