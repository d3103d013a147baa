#include "config.hpp"
#include "error.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <sys/resource.h>
#include <unistd.h>

#include <xbt/log.h>

XBT_LOG_NEW_DEFAULT_SUBCATEGORY(numasim_config, numasim, "numasim run description");

namespace numasim {

const char* kind_name(TaskKind k) {
  switch (k) {
  case TaskKind::getrf:
    return "getrf";
  case TaskKind::trsm_row:
  case TaskKind::trsm_col:
    return "trsm";
  case TaskKind::gemm:
    return "gemm";
  }
  return "?";
}

namespace {
// Largest CPU/GPU id accepted in StarPU id lists: StarPU's STARPU_NMAXWORKERS is far below it;
// it only keeps a typo from allocating gigabytes.
constexpr long kMaxCpuId = 65535;
long parse_int(const std::string& s, const std::string& file, const std::string& key,
               const std::string& expected) {
  char* end = nullptr;
  long v = std::strtol(s.c_str(), &end, 10);
  if (s.empty() || *end)
    throw InputError(file, key, expected + ", got '" + s + "'");
  return v;
}
double parse_double(const std::string& s, const std::string& file, const std::string& key) {
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (s.empty() || *end || !std::isfinite(v))
    throw InputError(file, key, "a number, got '" + s + "'");
  return v;
}
double nonnegative(double v, const std::string& file, const std::string& key, const std::string& text) {
  if (v < 0)
    throw InputError(file, key, "a number >= 0, got '" + text + "'");
  return v;
}
// StarPU reads counts and ids with starpu_get_env_number (include/starpu_helper.h), which asserts
// "cannot be negative": -1 is only its internal "not set", never a value a user may give
// (testbed/starpu/variables.py refuses the same values for every engine).
int count_of(long v, const std::string& file, const std::string& key, const std::string& text) {
  if (v < 0 || v > 1000000)
    throw InputError(file, key, "a count in 0..1000000 (StarPU asserts >= 0), got '" + text + "'");
  return static_cast<int>(v);
}
// An id; larger values would wrap when narrowed to int.
int cpu_id(const std::string& s, const std::string& file, const std::string& key) {
  long v = parse_int(s, file, key, "a CPU id");
  if (v < 0 || v > kMaxCpuId)
    throw InputError(file, key, "a CPU id in 0.." + std::to_string(kMaxCpuId) + ", got '" + s + "'");
  return static_cast<int>(v);
}
bool parse_bool01(const std::string& s, const std::string& file, const std::string& key) {
  long v = parse_int(s, file, key, "0 or 1");
  if (v != 0 && v != 1)
    throw InputError(file, key, "0 or 1, got '" + s + "'");
  return v == 1;
}
// STARPU_WORKERS_CPUID: ids, ranges "a-b" and open ranges "a-" separated by spaces or commas
// (src/core/topology.c _starpu_initialize_workers_bindid; expanded per machine, numasim:
// topology.cpp expand_cpuids).
std::vector<CpuIdRange> parse_cpuid_list(const std::string& s, const std::string& file,
                                         const std::string& key) {
  std::vector<CpuIdRange> out;
  std::string t = s;
  std::replace(t.begin(), t.end(), ',', ' ');
  std::istringstream in(t);
  std::string item;
  const std::string range = "ranges a-b with 0 <= a <= b <= " + std::to_string(kMaxCpuId) + " (or open, a-)";
  while (in >> item) {
    auto dash = item.find('-', 1);
    long a = parse_int(item.substr(0, dash), file, key, "integers or ranges a-b, a-");
    long b = a;
    if (dash != std::string::npos)
      b = dash + 1 == item.size() ? -1
                                  : parse_int(item.substr(dash + 1), file, key, "integers or ranges a-b, a-");
    if (a < 0 || a > kMaxCpuId || (b != -1 && (b < a || b > kMaxCpuId)))
      throw InputError(file, key, range + ", got '" + item + "'");
    out.push_back({static_cast<int>(a), static_cast<int>(b)});
    if (out.size() > static_cast<size_t>(kMaxCpuId) + 1)
      throw InputError(file, key, "at most " + std::to_string(kMaxCpuId + 1) + " ids");
  }
  return out;
}

// "0 1 2", "0,1,2" or ranges "0-3" (StarPU's CUDA device list, src/core/topology.c
// _starpu_initialize_workers_deviceid; used by numasim: topology.cpp place_threads).
std::vector<int> parse_id_list(const std::string& s, const std::string& file, const std::string& key) {
  std::vector<int> out;
  for (const CpuIdRange& r : parse_cpuid_list(s, file, key)) {
    if (r.last < 0)
      throw InputError(file, key,
                       "ranges a-b with 0 <= a <= b <= " + std::to_string(kMaxCpuId) + ", got '" +
                           std::to_string(r.first) + "-'");
    for (long x = r.first; x <= r.last; x++)
      out.push_back(static_cast<int>(x));
    // A list longer than any machine's PU count is a typo ("0-99999999" would allocate GBs).
    if (out.size() > static_cast<size_t>(kMaxCpuId) + 1)
      throw InputError(file, key, "at most " + std::to_string(kMaxCpuId + 1) + " ids");
  }
  return out;
}

// StarPU asserts an id list holds at least one entry (src/core/topology.c
// _starpu_initialize_workers_bindid and _starpu_initialize_workers_deviceid: "there must be at
// least one entry", STARPU_ASSERT(i != 0)): an empty STARPU_WORKERS_CPUID/CUDAID aborts it.
template <class T>
std::vector<T> nonempty(std::vector<T> ids, const std::string& file, const std::string& key) {
  if (ids.empty())
    throw InputError(file, key, "at least one id (StarPU asserts one)");
  return ids;
}

// A typo in a key ("variabilty", "distrbution") would otherwise leave the default in force
// silently; every object of the run description lists the keys it may hold.
void known_keys(const Json& obj, const std::string& file, const std::string& where,
                std::initializer_list<const char*> keys) {
  for (const auto& [k, v] : obj.object) {
    bool known = false;
    for (const char* key : keys)
      known = known || k == key;
    if (known)
      continue;
    std::string list;
    for (const char* key : keys)
      list += (list.empty() ? "" : ", ") + std::string(key);
    throw InputError(file, where + k, "a known key here (one of " + list + "; docs/interfaces.md §4)");
  }
}
// An integer in [lo, hi] written as a JSON number without fraction ("seed": "abc" or 1.5 is an error,
// not 0 or 1).
int64_t integer_in(const Json* v, const std::string& file, const std::string& key, int64_t lo, int64_t hi) {
  if (!v || v->type != Json::Type::Number || !v->integral || v->integer < lo || v->integer > hi)
    throw InputError(file, key, "an integer in " + std::to_string(lo) + ".." + std::to_string(hi));
  return v->integer;
}
} // namespace

namespace {
// Variables with no effect on a simulated run (output, calibration, tracing).
bool inert_variable(const std::string& k) {
  static const std::set<std::string> inert = {"STARPU_SILENT",
                                              "STARPU_HOSTNAME",
                                              "STARPU_CALIBRATE",
                                              "STARPU_FXT_PREFIX",
                                              "STARPU_FXT_TRACE",
                                              "STARPU_GENERATE_TRACE",
                                              "STARPU_WORKER_STATS",
                                              "STARPU_BUS_STATS",
                                              "STARPU_MEMORY_STATS",
                                              "STARPU_PROFILING",
                                              "STARPU_MALLOC_SIMULATION_FOLD",
                                              "STARPU_SIMGRID_CUDA_MALLOC_COST",
                                              "STARPU_PERF_MODEL_DIR",
                                              "STARPU_HOME",
                                              "STARPU_LOGFILENAME",
                                              "STARPU_MPI_STATS",
                                              "STARPU_COMM_STATS",
                                              "STARPU_DISPLAY_BINDINGS",
                                              "STARPU_ENABLE_STATS"};
  return inert.count(k) > 0;
}
// Inert variables that StarPU reads as integers (starpu_get_env_number, include/starpu_helper.h:
// strtol to the end, "must contain an integer" then STARPU_ABORT, a negative value asserts): a
// value StarPU would abort on is refused as StarPU-SimGrid refuses it. An empty string is 0 there.
void check_inert_integer(const std::string& k, const std::string& v, const std::string& file,
                         const std::string& key) {
  static const std::set<std::string> integers = {
      "STARPU_SILENT",    "STARPU_CALIBRATE",    "STARPU_FXT_TRACE",        "STARPU_WORKER_STATS",
      "STARPU_BUS_STATS", "STARPU_MEMORY_STATS", "STARPU_PROFILING",        "STARPU_MALLOC_SIMULATION_FOLD",
      "STARPU_MPI_STATS", "STARPU_COMM_STATS",   "STARPU_DISPLAY_BINDINGS", "STARPU_ENABLE_STATS"};
  if (!integers.count(k) || v.empty())
    return;
  long n = parse_int(v, file, key, "an integer (StarPU aborts otherwise)");
  if (n < 0 || n > std::numeric_limits<int>::max())
    throw InputError(file, key,
                     "an integer in 0.." + std::to_string(std::numeric_limits<int>::max()) +
                         " (StarPU aborts otherwise), got '" + v + "'");
}

Scheduler parse_sched(const std::string& v, const std::string& file, const std::string& key) {
  if (v == "dmda")
    return Scheduler::dmda;
  if (v == "dmdas")
    return Scheduler::dmdas;
  if (v == "dmdasd")
    return Scheduler::dmdasd;
  if (v == "eager")
    return Scheduler::eager;
  if (v == "lws")
    return Scheduler::lws;
  throw InputError(file, key,
                   "one of dmda, dmdas, dmdasd, eager, lws (schedulers numasim models), got '" + v + "'");
}

// Scheduler, data and model variables; false if `k` is none of them.
bool set_runtime_variable(StarpuEnv& e, const std::string& k, const std::string& v, const std::string& file,
                          const std::string& key) {
  if (k == "STARPU_SCHED")
    e.sched = parse_sched(v, file, key);
  else if (k == "STARPU_SCHED_ALPHA")
    e.alpha = nonnegative(parse_double(v, file, key), file, key, v);
  else if (k == "STARPU_SCHED_BETA")
    e.beta = nonnegative(parse_double(v, file, key), file, key, v);
  else if (k == "STARPU_SCHED_GAMMA")
    e.gamma = nonnegative(parse_double(v, file, key), file, key, v);
  else if (k == "STARPU_PREFETCH")
    e.prefetch = parse_bool01(v, file, key);
  else if (k == "STARPU_CUDA_PIPELINE") {
    long depth = parse_int(v, file, key, "a non-negative integer");
    if (depth < 0 || depth > 1000000) // checked before narrowing to int
      throw InputError(file, key, "an integer in 0..1000000, got '" + v + "'");
    e.cuda_pipeline = static_cast<int>(depth);
  } else if (k == "STARPU_USE_NUMA")
    e.use_numa = parse_bool01(v, file, key);
  else if (k == "STARPU_PERF_MODEL_HOMOGENEOUS_CUDA")
    e.homogeneous_cuda = parse_bool01(v, file, key);
  else if (k == "STARPU_PERF_MODEL_HOMOGENEOUS_CPU")
    e.homogeneous_cpu = parse_bool01(v, file, key);
  else if (k == "STARPU_CUDA_ONLY_FAST_ALLOC_OTHER_MEMNODES") // starpu_getenv_number_default: nonzero = on
    e.cuda_only_fast_alloc_other_memnodes = parse_int(v, file, key, "an integer") != 0;
  else if (k == "TESTBED_NUMA_BALANCING") // factor G (testbed/run/factors.py), numa_balancing.cpp
    e.numa_balancing = parse_bool01(v, file, key);
  else
    return false;
  return true;
}

// Worker counts and thread binding (numasim: topology.cpp); false if `k` is none of them.
bool set_thread_variable(StarpuEnv& e, const std::string& k, const std::string& v, const std::string& file,
                         const std::string& key) {
  // Unset (-1 in StarpuEnv) is StarPU's "as many as there are"; a given count is >= 0 (count_of).
  if (k == "STARPU_NCPU" || k == "STARPU_NCPUS")
    e.ncpu = count_of(parse_int(v, file, key, "an integer"), file, key, v);
  else if (k == "STARPU_NCUDA")
    e.ncuda = count_of(parse_int(v, file, key, "an integer"), file, key, v);
  else if (k == "STARPU_RESERVE_NCPU")
    e.reserve_ncpu = count_of(parse_int(v, file, key, "an integer"), file, key, v);
  else if (k == "STARPU_WORKERS_CPUID")
    e.workers_cpuid = nonempty(parse_cpuid_list(v, file, key), file, key);
  else if (k == "STARPU_WORKERS_CUDAID")
    e.workers_cudaid = nonempty(parse_id_list(v, file, key), file, key);
  else if (k == "STARPU_MAIN_THREAD_CPUID")
    e.main_thread_cpuid = cpu_id(v, file, key);
  else if (k == "STARPU_MAIN_THREAD_BIND")
    e.main_thread_bind = parse_bool01(v, file, key);
  else if (k == "STARPU_MPI_THREAD_CPUID")
    e.mpi_thread_cpuid = cpu_id(v, file, key);
  else
    return false;
  return true;
}
} // namespace

StarpuEnv parse_starpu_env(const std::map<std::string, std::string>& env, const std::string& file) {
  StarpuEnv e;
  for (const auto& [k, v] : env) {
    std::string key = "env." + k;
    if (set_runtime_variable(e, k, v, file, key) || set_thread_variable(e, k, v, file, key))
      continue;
    if (inert_variable(k)) {
      check_inert_integer(k, v, file, key);
      continue;
    }
    throw InputError(file, key,
                     "a StarPU variable numasim interprets (STARPU_SCHED, STARPU_SCHED_ALPHA/BETA/GAMMA, "
                     "STARPU_PREFETCH, STARPU_CUDA_PIPELINE, STARPU_USE_NUMA, STARPU_NCPU, STARPU_NCUDA, "
                     "STARPU_RESERVE_NCPU, STARPU_WORKERS_CPUID, STARPU_WORKERS_CUDAID, "
                     "STARPU_MAIN_THREAD_CPUID, STARPU_MAIN_THREAD_BIND, STARPU_MPI_THREAD_CPUID, "
                     "STARPU_PERF_MODEL_HOMOGENEOUS_CPU/CUDA, TESTBED_NUMA_BALANCING)");
  }
  if (!e.homogeneous_cpu)
    throw InputError(file, "env.STARPU_PERF_MODEL_HOMOGENEOUS_CPU",
                     "1 (per-core CPU models are not modelled)");
  return e;
}

namespace {
std::string str_at(const std::string& file, const Json& parent, const std::string& key,
                   const std::string& where) {
  const Json* v = parent.find(key);
  if (!v || v->type != Json::Type::String)
    throw InputError(file, where + key, "a string");
  return v->string;
}
double num_at(const std::string& file, const Json& parent, const std::string& key, const std::string& where) {
  const Json* v = parent.find(key);
  if (!v || v->type != Json::Type::Number)
    throw InputError(file, where + key, "a number");
  return v->number;
}
// Env values are strings, as environment variables are: a number's text would be JSON's, not the
// user's (1e3, 1.0, true), which StarPU would have read differently or aborted on.
std::string env_value(const std::string& file, const Json& v, const std::string& key) {
  if (v.type != Json::Type::String)
    throw InputError(file, key, "a string (an environment variable's text, e.g. \"1\")");
  return v.string;
}

// perfmodels, symbols, dag, getrf_on_cuda
void read_models(const Json& j, RunConfig& c) {
  const std::string& file = c.file;
  const Json* pm = j.find("perfmodels");
  if (!pm || pm->type != Json::Type::Object || pm->object.empty())
    throw InputError(file, "perfmodels", "an object {machine type: StarPU sampling directory}");
  for (const auto& [m, dir] : pm->object) {
    // A directory whose files are named by the machine type, or {"dir", "host"}: a real machine's
    // raw sampling directory whose files carry its host name (testbed/starpu/sampling_dir.py).
    if (dir.type == Json::Type::Object) {
      known_keys(dir, file, "perfmodels." + m + ".", {"dir", "host"});
      c.perfmodels[m] = str_at(file, dir, "dir", "perfmodels." + m + ".");
      c.perfmodel_hosts[m] = str_at(file, dir, "host", "perfmodels." + m + ".");
      if (c.perfmodel_hosts[m].empty() || c.perfmodel_hosts[m].find('/') != std::string::npos)
        throw InputError(file, "perfmodels." + m + ".host", "a host name (no '/')");
      continue;
    }
    if (dir.type != Json::Type::String)
      throw InputError(file, "perfmodels." + m, "a directory path or {\"dir\", \"host\"}");
    c.perfmodels[m] = dir.string;
    c.perfmodel_hosts[m] = m;
  }
  // Chameleon's codelet symbols by default; "trsm_row"/"trsm_col" override "trsm" (StarPU's LU
  // example has two models: trsm_ll solves the row panel A(k,n), trsm_ru the column panel A(m,k),
  // examples/lu/xlu.c create_task_trsm_ll/ru).
  std::string getrf = "dgetrf_nopiv", trsm = "dtrsm", gemm = "dgemm";
  std::string trsm_row, trsm_col;
  if (const Json* s = j.find("symbols")) {
    if (s->type != Json::Type::Object)
      throw InputError(file, "symbols", "an object {kind: perf-model symbol}");
    for (const auto& [k, v] : s->object) {
      if (v.type != Json::Type::String)
        throw InputError(file, "symbols." + k, "a string");
      if (k == "getrf")
        getrf = v.string;
      else if (k == "trsm")
        trsm = v.string;
      else if (k == "trsm_row")
        trsm_row = v.string;
      else if (k == "trsm_col")
        trsm_col = v.string;
      else if (k == "gemm")
        gemm = v.string;
      else if (k == "plrnt")
        continue; // matrix generation is not simulated (data start in place)
      else
        throw InputError(file, "symbols." + k, "one of getrf, trsm, trsm_row, trsm_col, gemm, plrnt");
    }
  }
  c.symbols[0] = getrf;
  c.symbols[1] = trsm_row.empty() ? trsm : trsm_row;
  c.symbols[2] = trsm_col.empty() ? trsm : trsm_col;
  c.symbols[3] = gemm;
  if (const Json* d = j.find("dag")) {
    if (d->type != Json::Type::String || (d->string != "chameleon" && d->string != "starpu-lu-example"))
      throw InputError(file, "dag", "\"chameleon\" or \"starpu-lu-example\"");
    c.dag = d->string;
  }
  if (const Json* a = j.find("getrf_on_cuda")) {
    if (a->type != Json::Type::Bool)
      throw InputError(file, "getrf_on_cuda", "true or false");
    c.kind_on_cuda[0] = a->boolean;
  }
}

void read_distribution(const Json& w, RunConfig& c) {
  const std::string& file = c.file;
  if (const Json* d = w.find("distribution")) {
    if (d->type != Json::Type::Object)
      throw InputError(file, "workload.distribution", "an object {kind, p, q} or {kind, path}");
    c.dist_kind = str_at(file, *d, "kind", "workload.distribution.");
    if (c.dist_kind == "block-cyclic") {
      known_keys(*d, file, "workload.distribution.", {"kind", "p", "q"});
      // 0 (or absent): chosen from the node count; the bound keeps p*q from overflowing.
      if (d->has("p"))
        c.p = static_cast<int>(integer_in(d->find("p"), file, "workload.distribution.p", 0, 1 << 20));
      if (d->has("q"))
        c.q = static_cast<int>(integer_in(d->find("q"), file, "workload.distribution.q", 0, 1 << 20));
    } else if (c.dist_kind == "file" || c.dist_kind == "heterogeneous") {
      known_keys(*d, file, "workload.distribution.", {"kind", "path"});
      c.dist_path = str_at(file, *d, "path", "workload.distribution.");
    } else
      throw InputError(file, "workload.distribution.kind", "block-cyclic, file or heterogeneous");
  }
}

void read_workload(const Json& j, RunConfig& c) {
  const std::string& file = c.file;
  const Json* w = j.find("workload");
  if (!w || w->type != Json::Type::Object)
    throw InputError(file, "workload", "an object {kind: lu, n, b, distribution}");
  known_keys(*w, file, "workload.", {"kind", "n", "b", "distribution"});
  if (str_at(file, *w, "kind", "workload.") != "lu")
    throw InputError(file, "workload.kind", "\"lu\"");
  double n = num_at(file, *w, "n", "workload."), b = num_at(file, *w, "b", "workload.");
  if (n <= 0 || b <= 0 || std::fmod(n, b) != 0 || n != std::floor(n) || b != std::floor(b))
    throw InputError(file, "workload.n/b", "positive integers with n a multiple of b");
  // Before any allocation: the task graph grows as (n/b)^3 / 3 and tile footprints with b^2.
  if (b > kMaxTileSize || n / b > kMaxTiles)
    throw InputError(file, "workload.n/b",
                     "b <= " + std::to_string(kMaxTileSize) + " and n/b <= " + std::to_string(kMaxTiles) +
                         " tiles per dimension");
  c.n = static_cast<int>(n);
  c.b = static_cast<int>(b);
  c.nt = c.n / c.b;
  check_memory_need(c.nt, file);
  read_distribution(*w, c);
}

// env, env_per_machine
void read_envs(const Json& j, RunConfig& c) {
  const std::string& file = c.file;
  if (const Json* e = j.find("env")) {
    if (e->type != Json::Type::Object)
      throw InputError(file, "env", "an object of STARPU_* variables");
    for (const auto& [k, v] : e->object)
      c.env_raw[k] = env_value(file, v, "env." + k);
  }
  c.env = parse_starpu_env(c.env_raw, file);
  if (const Json* pm = j.find("env_per_machine")) {
    if (pm->type != Json::Type::Object)
      throw InputError(file, "env_per_machine", "an object {machine type: {VAR: value}}");
    for (const auto& [machine, vars] : pm->object) {
      if (vars.type != Json::Type::Object)
        throw InputError(file, "env_per_machine." + machine, "an object of STARPU_* variables");
      if (!c.perfmodels.count(machine)) { // a typo would leave the machine's ranks with `env` silently
        std::string list;
        for (const auto& [m, dir] : c.perfmodels)
          list += (list.empty() ? "" : ", ") + m;
        throw InputError(file, "env_per_machine." + machine, "a machine type of the run (" + list + ")");
      }
      std::map<std::string, std::string> merged = c.env_raw;
      for (const auto& [k, v] : vars.object) {
        c.env_machine_raw[machine][k] = env_value(file, v, "env_per_machine." + machine + "." + k);
        merged[k] = c.env_machine_raw[machine][k];
      }
      c.env_machine[machine] = parse_starpu_env(merged, file);
    }
  }
}

// mechanisms: {name: true|false}, every name one of mechanisms.hpp's
void read_mechanisms(const Json& j, RunConfig& c) {
  const Json* m = j.find("mechanisms");
  if (!m)
    return;
  std::string names;
  for (const auto& info : kMechanisms)
    names += (names.empty() ? "" : ", ") + std::string(info.name);
  if (m->type != Json::Type::Object)
    throw InputError(c.file, "mechanisms", "an object {mechanism: true or false} of " + names);
  for (const auto& [name, value] : m->object) {
    Mechanism id;
    if (!mechanism_by_name(name, id))
      throw InputError(c.file, "mechanisms." + name, "a mechanism of numasim (" + names + ")");
    if (value.type != Json::Type::Bool)
      throw InputError(c.file, "mechanisms." + name, "true or false");
    c.mechanisms.set(id, value.boolean);
  }
  if (!c.mechanisms(Mechanism::kernel_variability))
    c.variability = false;
}

// seed, variability, mpi, mechanisms
void read_options(const Json& j, RunConfig& c) {
  const std::string& file = c.file;
  if (const Json* s = j.find("seed"))
    c.seed = static_cast<uint64_t>(integer_in(s, file, "seed", 0, std::numeric_limits<int64_t>::max()));
  if (const Json* v = j.find("variability")) {
    if (v->type != Json::Type::Bool)
      throw InputError(file, "variability", "true or false");
    c.variability = v->boolean;
  }
  if (const Json* m = j.find("mpi")) {
    if (m->type != Json::Type::Object)
      throw InputError(file, "mpi", "an object {overhead_s, memory_node, backend, tree}");
    known_keys(*m, file, "mpi.", {"overhead_s", "memory_node", "backend", "tree"});
    if (const Json* b = m->find("backend")) {
      if (b->type != Json::Type::String || (b->string != "nmad" && b->string != "mpi"))
        throw InputError(file, "mpi.backend", "\"nmad\" or \"mpi\"");
      c.mpi_backend = b->string == "mpi" ? MpiBackend::mpi : MpiBackend::nmad;
    }
    if (const Json* t = m->find("tree")) {
      if (t->type != Json::Type::String ||
          (t->string != "binomial" && t->string != "chain" && t->string != "flat"))
        throw InputError(file, "mpi.tree", "\"binomial\", \"chain\" or \"flat\"");
      c.mpi_tree = t->string == "chain"  ? McastTree::chain
                   : t->string == "flat" ? McastTree::flat
                                         : McastTree::binomial;
    }
    if (const Json* n = m->find("memory_node")) {
      if (n->type != Json::Type::String || (n->string != "main_ram" && n->string != "choose_node"))
        throw InputError(file, "mpi.memory_node", "\"main_ram\" or \"choose_node\"");
      c.mpi_choose_node = n->string == "choose_node";
    }
    if (m->has("overhead_s")) {
      c.mpi_overhead_s = num_at(file, *m, "overhead_s", "mpi.");
      if (c.mpi_overhead_s < 0)
        throw InputError(file, "mpi.overhead_s", "a duration >= 0 s");
    }
  }
  read_mechanisms(j, c);
}

// trace, transfers, events; relative paths are made relative to the run description's directory
void read_paths(const Json& j, RunConfig& c) {
  const std::string& file = c.file;
  // Relative paths are relative to the run description's directory.
  std::string base = file.find('/') == std::string::npos ? "" : file.substr(0, file.rfind('/') + 1);
  auto rel = [&](std::string& path) {
    if (!path.empty() && path[0] != '/' && !base.empty())
      path = base + path;
  };
  rel(c.platform);
  for (auto& [m, dir] : c.perfmodels)
    rel(dir);
  rel(c.dist_path);
  if (const Json* t = j.find("trace"); t && !t->is_null())
    c.trace = str_at(file, j, "trace", "");
  if (const Json* t = j.find("transfers"); t && !t->is_null())
    c.transfers = str_at(file, j, "transfers", "");
  if (const Json* t = j.find("events"); t && !t->is_null())
    c.events = str_at(file, j, "events", "");
  rel(c.trace);
  rel(c.transfers);
  rel(c.events);
}
} // namespace

RunConfig RunConfig::from_json(const Json& j, const std::string& file) {
  RunConfig c;
  c.file = file;
  if (j.type != Json::Type::Object)
    throw InputError(file, "", "a JSON object (run description)");
  known_keys(j, file, "",
             {"platform", "perfmodels", "symbols", "dag", "getrf_on_cuda", "workload", "env",
              "env_per_machine", "seed", "variability", "mpi", "mechanisms", "trace", "transfers", "events"});
  c.platform = str_at(file, j, "platform", "");
  read_models(j, c);
  read_workload(j, c);
  read_envs(j, c);
  read_options(j, c);
  read_paths(j, c);
  return c;
}

void RunConfig::resolve_distribution(int nranks) {
  owner.assign(static_cast<size_t>(nt) * nt, 0);
  if (dist_kind == "block-cyclic") {
    if (p <= 0 && q <= 0) { // most square grid p <= q with p*q = nranks
      p = 1;
      for (int d = 1; d * d <= nranks; d++)
        if (nranks % d == 0)
          p = d;
      q = nranks / p;
    } else if (p <= 0)
      p = nranks / std::max(q, 1);
    else if (q <= 0)
      q = nranks / p;
    if (static_cast<long long>(p) * q != nranks) // p, q <= 2^20 each: the product fits in 64 bits
      throw InputError(file, "workload.distribution.p/q",
                       "p*q equal to the number of nodes (" + std::to_string(nranks) + "), got " +
                           std::to_string(p) + "x" + std::to_string(q));
    // Chameleon's 2D block-cyclic: rank of tile (m, n) = (m mod p) * q + (n mod q).
    for (int m = 0; m < nt; m++)
      for (int n2 = 0; n2 < nt; n2++)
        owner[static_cast<size_t>(m) * nt + n2] = (m % p) * q + (n2 % q);
    return;
  }
  std::istringstream in(read_input_file(dist_path, "", "a tile distribution file (docs/interfaces.md §5)"));
  std::string line;
  int row = 0;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#' || line.find_first_not_of(" \t\r") == std::string::npos)
      continue;
    if (row >= nt)
      throw InputError(dist_path, "line " + std::to_string(row + 1), std::to_string(nt) + " rows only");
    std::istringstream ls(line);
    int col = 0, r;
    while (ls >> r) {
      if (col >= nt || r < 0 || r >= nranks)
        throw InputError(dist_path, "row " + std::to_string(row),
                         std::to_string(nt) + " ranks in 0.." + std::to_string(nranks - 1));
      owner[static_cast<size_t>(row) * nt + col++] = r;
    }
    if (col != nt)
      throw InputError(dist_path, "row " + std::to_string(row), std::to_string(nt) + " integers");
    row++;
  }
  if (row != nt)
    throw InputError(dist_path, "rows", std::to_string(nt) + " rows, got " + std::to_string(row));
}

void check_cfg_option(const std::string& arg) {
  const std::string opt = arg.substr(std::string("--cfg=").size());
  size_t colon = opt.find(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == opt.size())
    throw InputError("--cfg", opt, "KEY:VALUE (a SimGrid option, e.g. network/model:SMPI)");
  const std::string key = opt.substr(0, colon), value = opt.substr(colon + 1);
  // The models and optimization levels of SimGrid 3.32 (`numasim RUN.json --help-models`).
  static const std::map<std::string, std::set<std::string>> models = {
      {"host/model", {"default", "compound", "ptask_L07"}},
      {"cpu/model", {"Cas01"}},
      {"network/model", {"LV08", "Constant", "SMPI", "IB", "CM02", "ns-3"}},
      {"cpu/optim", {"Lazy", "TI", "Full"}},
      {"network/optim", {"Lazy", "TI", "Full"}}};
  // numasim's own option (flows.cpp): SimGrid's boolean spellings (xbt/config.cpp parse_bool).
  if (key == "numasim/lone-flows" &&
      !std::set<std::string>{"yes", "no", "on", "off", "true", "false", "1", "0"}.count(value))
    throw InputError("--cfg", key,
                     "yes or no (a boolean: yes/no, on/off, true/false, 1/0), got '" + value + "'");
  auto it = models.find(key);
  if (it != models.end() && !it->second.count(value)) {
    std::string list;
    for (const auto& m : it->second)
      list += (list.empty() ? "" : ", ") + m;
    throw InputError("--cfg", key, "one of " + list + " (SimGrid's models), got '" + value + "'");
  }
}

void check_memory_need(int nt, const std::string& file) {
  // Peak resident memory (/usr/bin/time -f %M, KiB) grows by 146-153 bytes per task: chifflet-1,
  // b = 192, NT = 40 / 80 / 120 (22,140 / 173,880 / 583,220 tasks): 43,944 / 65,812 / 127,040 KiB;
  // g5k-lille-21, b = 960, NT = 50 / 100 (42,925 / 338,350 tasks): 53,728 / 95,888 KiB. The
  // largest slope (153 B), rounded up.
  constexpr double kBytesPerTask = 160;
  const double tasks = static_cast<double>(nt) * (nt + 1) * (2.0 * nt + 1) / 6;
  const double need = tasks * kBytesPerTask;
  double have = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGESIZE));
  struct rlimit lim {};
  if (getrlimit(RLIMIT_AS, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY)
    have = std::min(have, static_cast<double>(lim.rlim_cur));
  if (have > 0 && need > have) {
    int fit = 1;
    while (static_cast<double>(fit + 1) * (fit + 2) * (2.0 * fit + 3) / 6 * kBytesPerTask <= have)
      fit++;
    char msg[256];
    std::snprintf(msg, sizeof msg,
                  "at most %d tiles per dimension on this machine: n/b = %d is %.3g tasks, ~%.0f GiB of task "
                  "graph at ~160 bytes each, above its %.0f GiB (physical memory or ulimit -v)",
                  fit, nt, tasks, need / (1 << 30), have / (1 << 30));
    throw InputError(file, "workload.n/b", msg);
  }
}
} // namespace numasim
