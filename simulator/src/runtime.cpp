#include "runtime.hpp"
#include "error.hpp"
#include "flows.hpp"
#include "network.hpp"
#include "sleep.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include <xbt/config.hpp>

XBT_LOG_NEW_DEFAULT_SUBCATEGORY(numasim_runtime, numasim, "numasim StarPU runtime model");

namespace numasim {

Simulation::Simulation(sg4::Engine& engine, RunConfig cfg)
    : engine_(engine), cfg_(std::move(cfg)), rng_(cfg_.seed) {
  reset_sleeps();
  precision_ = simgrid::config::get_value<double>("surf/precision");
  load_platform();
  reset_flows(); // after the network model's configuration, which it reads
  dag_ = build_lu_dag(cfg_);
  bus_ = std::make_unique<BusModel>(*topo_, classes_);
  DataWizard::Hooks hooks{[this](uint32_t waiter) { operand_ready(waiter); },
                          [this](uint32_t r) { mpi_->delivered(r); },
                          [this](int gdst) { ram_copy_queued(gdst); }};
  data_ = std::make_unique<DataWizard>(*topo_, *bus_, classes_, dag_, cfg_, progress_, std::move(hooks));
  sched_ = make_sched_policy({cfg_, *topo_, dag_, *data_});
  const uint32_t ntasks = static_cast<uint32_t>(dag_.tasks.size());
  mpi_ = std::make_unique<MpiRuntime>(*topo_, dag_, *data_, cfg_, progress_,
                                      [this, ntasks](uint32_t r) { release(ntasks + r, -1); });
  // pages, kernel traffic, thread paths (numa_effects.cpp)
  numa_ = std::make_unique<NumaEffects>(*topo_, *data_, dag_, cfg_, progress_, classes_);
  numa_->init();
  numa_->set_gpu_kernel([this](const Worker& w, double start, double duration) {
    gpu_kernel(topo_->workers()[w.id], start, duration);
  });
  data_->set_mover(numa_.get());
  if (!cfg_.events.empty()) {
    events_ = std::make_unique<RuntimeEvents>();
    data_->set_events(events_.get());
    mpi_->set_events(events_.get());
  }
}

Simulation::~Simulation() = default;

// The platform, its nodes, the tile distribution and StarPU's configuration of every node.
void Simulation::load_platform() {
  // CM02 with LV08's factors on Ethernet routes only, unless --cfg chose a model (network.hpp).
  const bool own_network_model = configure_network_model();
  // SimGrid reports a missing file as a runtime error (exit 1, an environment fault); here it is the
  // run description's `platform` key that is wrong.
  if (std::error_code ec;
      !std::filesystem::is_regular_file(cfg_.platform, ec) || !std::ifstream(cfg_.platform))
    throw InputError(cfg_.file, "platform", "a readable SimGrid platform file, got '" + cfg_.platform + "'");
  // A file SimGrid cannot parse or build (malformed XML, an unknown element, a route naming no
  // host) is bad input too: one line naming it, exit 2, not a failure of the environment.
  try {
    engine_.load_platform(cfg_.platform);
  } catch (const std::exception& e) {
    const std::string what = e.what();
    throw InputError(cfg_.platform, "",
                     "a valid SimGrid platform file (" + what.substr(0, what.find('\n')) + ")");
  }
  if (own_network_model)
    install_ethernet_factors(engine_);
  engine_.seal_platform(); // routes are queried before the run (estimates, tests)
  std::vector<MachineNode> nodes = discover_platform(engine_, cfg_.platform);
  cfg_.resolve_distribution(static_cast<int>(nodes.size()));
  if (nodes.size() > 65535)
    throw InputError(cfg_.platform, "nodes", "at most 65535 nodes");
  topo_ = std::make_unique<Topology>(cfg_, std::move(nodes));
}

// A copy a task (or an MPI send) waited for landed (DataWizard::Hooks::ready).
void Simulation::operand_ready(uint32_t waiter) {
  if (waiter & kRecvFlag) { // an MPI send waiting for the data to reach RAM
    mpi_->data_ready(waiter & ~kRecvFlag);
    return;
  }
  Task& t = dag_.tasks[waiter];
  if (--t.pending == 0 && t.worker >= 0)
    wake(topo_->workers()[t.worker]);
}

// A copy between RAM nodes waits for a thread that drives its destination: one that sleeps (idle,
// or waiting for its task's inputs) is woken, the node's CPU workers first, then the CUDA drivers
// (datawizard/data_request.c _starpu_post_data_request -> _starpu_wake_all_blocked_workers_on_node;
// the first woken takes it), then a CUDA driver whose kernel is running: it polls meanwhile
// (Simulation::gpu_kernel). When all are busy, the first to finish its task or copy takes it.
void Simulation::ram_copy_queued(int gdst) {
  ram_threads_ = true;
  const int rank = topo_->mem(gdst).rank;
  for (int pass = 0; pass < 2; pass++)
    for (int wid : topo_->rank_workers(rank)) {
      Worker& w = topo_->workers()[wid];
      if (w.cuda == (pass == 1) && w.suspended && data_->drives(w, gdst)) {
        wake(w);
        return;
      }
    }
  for (int wid : topo_->rank_workers(rank)) {
    Worker& w = topo_->workers()[wid];
    if (w.in_kernel && data_->drives(w, gdst)) {
      w.in_kernel = false;
      w.interrupted = true;
      numasim::interrupt_sleep(w.actor.get());
      return;
    }
  }
}

// StarPU's CUDA driver launches a kernel asynchronously (codelets flagged STARPU_CUDA_ASYNC, as
// Chameleon's and apps/lu's are, with STARPU_CUDA_PIPELINE >= 1) and goes on polling: each turn of
// drivers/cuda/driver_cuda.c _starpu_cuda_driver_run_once checks the kernels in flight, then
// progresses the requests of every memory node it drives (__starpu_datawizard_progress), its GPU's
// and every NUMA node's, while the kernel runs (non-blocking drivers, configure's default outside
// SimGrid; the same in the 1.3 branch of the study's era). So the driver takes a NUMA node's copy
// request as soon as it is posted, and the thread's time in it (the memcpy, a pinned allocation)
// delays the notice of the kernel's end and the next launch. With STARPU_CUDA_PIPELINE=0 the
// driver waits for each kernel (cudaStreamSynchronize): it sleeps through it.
void Simulation::gpu_kernel(Worker& w, double start, double duration) {
  const int gmem = topo_->global_mem(w.rank, w.mem);
  if (cfg_.env.cuda_pipeline < 1 || !ram_threads_) {
    if (duration > 0)
      numasim::sleep_for(duration);
    // A pinned allocation on the node during the kernel pauses it (DataWizard::wait_out_holds).
    data_->wait_out_holds(gmem, -1, start);
    return;
  }
  for (;;) {
    // the kernel's end, paused by the pinned allocations known so far
    const double left = data_->paused_end(gmem, start, duration) - sg4::Engine::get_clock();
    if (left < precision_) // below SimGrid's precision a sleep would be rounded up to it: ended
      return;
    if (progress_one(w))
      continue;
    w.in_kernel = true;
    w.interrupted = false;
    numasim::sleep_for(left);
    w.in_kernel = false;
  }
}

bool Simulation::progress_one(Worker& w) {
  if (!ram_threads_)
    return false;
  const int32_t c = data_->take_ram_copy(w);
  if (c < 0)
    return false;
  data_->run_ram_copy(static_cast<uint32_t>(c), w);
  return true;
}

double Simulation::sample_duration(const Worker& w, TaskKind k) {
  double mean = w.length[static_cast<int>(k)];
  double sd = w.dev[static_cast<int>(k)];
  if (!cfg_.variability || sd <= 0 || mean <= 0)
    return mean;
  // Lognormal with the calibrated mean and standard deviation (durations stay positive).
  double s2 = std::log1p((sd * sd) / (mean * mean));
  double mu = std::log(mean) - s2 / 2;
  return std::exp(mu + std::sqrt(s2) * normal_(rng_));
}

void Simulation::prepare(Worker& w, uint32_t task) {
  // _starpu_fetch_task_input (datawizard/coherency.cpp): every operand must be valid on the
  // worker's memory node.
  Task& t = dag_.tasks[task];
  t.worker = w.id;
  data_->fetch_task(t, task, w);
}

// How long a task holds its CUDA worker: the kernel plus the worker thread's host time per task
// (pop, data checks, launch, completion and termination; calibration/microbench/
// starpu_task_overhead.c measures it). With STARPU_CUDA_PIPELINE >= 2 the worker queues the next
// kernel behind the running one (src/drivers/cuda/driver_cuda.c, pipeline of async tasks), so
// when tasks run back to back the host time overlaps the previous kernel: the worker then
// advances by max(host, kernel), the steady state of a two-stage pipeline; after an idle gap
// nothing overlaps and the task costs host + kernel. The overlap is not complete: the driver
// records the next task's start (_starpu_driver_start_job in _starpu_cuda_driver_run_once) only
// after it has detected the previous task's end (cudaEventQuery) and terminated it
// (finish_job_on_cuda: _starpu_driver_end_job, then the job's termination, which releases
// its successors and pushes them through the scheduler in this thread), and the next kernel
// is often not queued yet because its inputs are fetched asynchronously after the pop
// (_starpu_fetch_task_input, launched on a later loop iteration). A real FxT trace shows that
// part as the gap between two back-to-back tasks of the CUDA worker (prop task_gap_s): the
// worker then advances by max(host, gap + kernel).
double Simulation::cuda_occupancy(const Worker& w, double kernel) const {
  if (w.task_overhead <= 0 && w.task_gap <= 0)
    return kernel;
  bool back_to_back = cfg_.env.cuda_pipeline >= 2 && sg4::Engine::get_clock() <= w.last_end;
  return back_to_back ? std::max(w.task_overhead, w.task_gap + kernel) : w.task_overhead + kernel;
}

// The first task of a kernel in a process keeps its CUDA worker longer: StarPU creates the
// cuBLAS/cuSOLVER handles at start (starpu_cublas_init, src/drivers/cuda/starpu_cublas.c:
// init_cublas_func -> cublasInit, starpu_cublas_v2.c: cublasCreate + cublasSetStream;
// starpu_cusolver.c: cusolverDnCreate + cusolverDnSetStream) but runs no
// kernel, so the routine's first call sets up the library's state on the worker thread, inside
// the task (start_job_on_cuda, src/drivers/cuda/driver_cuda.c, calls the codelet synchronously
// on that thread). Not CUDA's lazy module loading: with CUDA_MODULE_LOADING=EAGER the real runs
// kept it (bench/data/gpu-device-h100/startup.jsonl). Charged once per worker and kernel; the
// scheduler's estimate, from the models, does not include it (a frozen model is calibrated on
// the steady durations).
double Simulation::first_call(Worker& w, TaskKind kind) {
  const int slot = kind == TaskKind::getrf ? 0 : kind == TaskKind::gemm ? 2 : 1;
  if (w.called[slot])
    return 0;
  w.called[slot] = true;
  return w.first_call[slot];
}

void Simulation::execute(Worker& w, uint32_t task) {
  Task& t = dag_.tasks[task];
  double d = sample_duration(w, t.kind);
  if (w.cuda) {
    // The driver thread is in cudaMalloc/cudaFree, or the device in an implicit synchronisation
    // (a page-locked allocation): the launch waits (DataWizard::gpu_alloc_call).
    const double left =
        data_->mem_state(topo_->global_mem(w.rank, w.mem)).blocked_until - sg4::Engine::get_clock();
    if (left > 0)
      numasim::sleep_for(left);
    if (cfg_.mechanisms(Mechanism::launch_costs))
      d = cuda_occupancy(w, d) + first_call(w, t.kind);
  }
  const double start = numa_->run_task(w, task, d); // remote traffic, faults, GPU launch path
  const double end = sg4::Engine::get_clock();
  if (!dag_.spans.empty()) // a trace is asked for
    dag_.spans[task] = {start, end};
  w.last_end = end;
  data_->task_done(t, w); // the written replica becomes the only valid one
  w.executed++;
  sched_->post_exec(w);
  sum_.by_kind[static_cast<int>(t.kind)]++;
  (w.cuda ? sum_.on_cuda : sum_.on_cpu)++;
  progress_.done_tasks++;
  last_task_end_ = end;
  release(task, w.id);
  if (progress_.done_tasks == dag_.tasks.size())
    finish_all();
}

void Simulation::release(uint32_t node_id, int releasing_worker) {
  const uint32_t ntasks = static_cast<uint32_t>(dag_.tasks.size());
  uint32_t b, e;
  if (node_id < ntasks) {
    b = dag_.tasks[node_id].succ_begin;
    e = dag_.tasks[node_id].succ_end;
  } else {
    b = dag_.receptions[node_id - ntasks].succ_begin;
    e = dag_.receptions[node_id - ntasks].succ_end;
  }
  for (uint32_t i = b; i < e; i++) {
    uint32_t s = dag_.succ[i];
    if (s >= ntasks)
      mpi_->trigger(s - ntasks);
    else if (--dag_.ndeps[s] == 0)
      push(s, releasing_worker);
  }
}

// A ready task enters the scheduler (core/sched_policy.c _starpu_push_task; FxT's JOB_PUSH).
void Simulation::push(uint32_t task, int releasing_worker) {
  const int rank = dag_.tasks[task].rank;
  if (task >= submitted_[rank]) { // ready before the main thread submitted it
    deferred_[rank].push_back(task);
    return;
  }
  if (events_) {
    const double now = sg4::Engine::get_clock();
    events_->add(EventType::Push, now, now, -1, dag_.tasks[task].rank, task);
  }
  sched_->push(task, releasing_worker);
}

void Simulation::worker_loop(int wid) {
  Worker& w = topo_->workers()[wid];
  size_t depth = w.cuda ? static_cast<size_t>(std::max(1, cfg_.env.cuda_pipeline)) : 1;
  // Runs one RAM->RAM copy this worker's thread drives, if one waits (StarPU's driver loops
  // progress their memory nodes' requests at each turn, before taking a task:
  // drivers/cpu/driver_cpu.c _starpu_cpu_driver_run_once -> __starpu_datawizard_progress).
  auto copy_one = [&] { return progress_one(w); };
  while (!progress_.finished) {
    if (copy_one())
      continue;
    while (w.inflight.size() < depth) {
      int32_t task = sched_->pop(w);
      if (task < 0)
        break;
      if (events_) { // FxT's JOB_POP
        const double now = sg4::Engine::get_clock();
        events_->add(EventType::Pop, now, now, w.id, w.rank, task);
      }
      prepare(w, static_cast<uint32_t>(task));
      w.inflight.push_back(static_cast<uint32_t>(task));
    }
    if (w.inflight.empty() || dag_.tasks[w.inflight.front()].pending > 0) {
      if (copy_one()) // a task waiting for its inputs: the thread progresses requests meanwhile
        continue;
      w.suspended = true; // resumed by a push or by the arrival of an operand
      const double t0 = sg4::Engine::get_clock();
      sg4::this_actor::suspend();
      if (events_)
        events_->add(EventType::Sleeping, t0, sg4::Engine::get_clock(), w.id, w.rank);
      continue;
    }
    uint32_t task = w.inflight.front();
    w.inflight.pop_front();
    execute(w, task);
  }
}

void Simulation::finish_all() {
  progress_.finished = true;
  sum_.makespan = sg4::Engine::get_clock();
  for (auto& w : topo_->workers())
    wake(w);
  mpi_->finish();
  data_->finish();
}

void Simulation::fill_summary() {
  sum_.tasks = progress_.done_tasks;
  for (size_t c = 0; c < classes_.names().size(); c++)
    sum_.bytes_by_link_class[classes_.names()[c]] = classes_.bytes(static_cast<int>(c));
  sum_.numa = numa_->summary();
  const DataCounters& dc = data_->counters();
  sum_.transfers = dc.transfers;
  sum_.mpi_messages = dc.mpi_messages;
  sum_.evictions = dc.evictions;
  sum_.overcommits = dc.overcommits;
  sum_.eviction_writebacks = dc.eviction_writebacks;
  sum_.runtime_costs = {{"gpu_free_s", dc.gpu_free_s},
                        {"gpu_frees", static_cast<double>(dc.gpu_frees)},
                        {"gpu_malloc_s", dc.gpu_malloc_s},
                        {"gpu_mallocs", static_cast<double>(dc.gpu_mallocs)},
                        {"pinned_alloc_s", dc.pinned_alloc_s},
                        {"pinned_allocs", static_cast<double>(dc.pinned_allocs)},
                        {"pinned_allocs_cpu", static_cast<double>(dc.pinned_allocs_cpu)},
                        {"pinned_allocs_main", static_cast<double>(dc.pinned_allocs_main)},
                        {"pinned_allocs_cuda", static_cast<double>(dc.pinned_allocs_cuda)},
                        {"pinned_allocs_unthreaded", static_cast<double>(dc.pinned_allocs_unthreaded)},
                        {"pinned_gpu_stall_s", dc.pinned_gpu_stall_s},
                        {"ram_copy_pinned_allocs_cuda", static_cast<double>(dc.ram_copy_pinned_allocs_cuda)},
                        {"thread_copies", static_cast<double>(dc.thread_copies)},
                        {"thread_copy_s", dc.thread_copy_s}};
  sum_.workers = topo_->workers().size();
  sum_.cpu_workers_by_rank.assign(topo_->nranks(), 0);
  for (const auto& w : topo_->workers()) {
    (w.cuda ? sum_.cuda_workers : sum_.cpu_workers)++;
    if (!w.cuda)
      sum_.cpu_workers_by_rank[w.rank]++;
  }
}

// StarPU-MPI of the study's era receives a tile into a buffer that the thread acquiring the
// handle allocates, synchronously: mpi/src/starpu_mpi_task_insert.c
// _starpu_mpi_exchange_data_before_execution -> starpu_mpi_irecv_detached -> starpu_mpi.c
// _starpu_mpi_isend_irecv_common acquires it on STARPU_MAIN_RAM in W mode; with no earlier access
// the acquire is granted in the submitting thread, and datawizard/coherency.c
// _starpu_create_request_to_fetch_data allocates at once (memalloc.c _starpu_allocate_memory_on_node,
// pinned with CUDA workers: malloc.c _starpu_malloc_flags_on_node, cudaHostAlloc, no hwloc
// binding), then nmad/starpu_mpi_nmad.c _starpu_mpi_submit_ready_request posts the receive from
// that thread (starpu-1.3 of April 2020, 0055900). So the application's main thread, submitting
// the whole graph, pins one buffer per tile it receives (the StarPU-MPI cache keeps it; Chameleon
// flushes nothing before the end) at the submission of the tile's first local reader, holding the
// node's GPUs as any pinned allocation, and the tasks after it are submitted once it returns.
bool Simulation::submits_slowly(int rank) const {
  return cfg_.mechanisms(Mechanism::reception_buffers) && cfg_.mechanisms(Mechanism::pinned_alloc) &&
         numa_->pinned(rank) && data_->pinned_cost_per_mib(rank) > 0;
}

void Simulation::main_thread(int rank) {
  const uint32_t ntasks = static_cast<uint32_t>(dag_.tasks.size());
  for (uint32_t r = 0; r < dag_.receptions.size(); r++) {
    const Reception& rc = dag_.receptions[r];
    if (rc.dst != rank)
      continue;
    submit_until(rank, rc.first_reader);
    mpi_->allocate_buffer(r);
    mpi_->post(r);
  }
  submit_until(rank, ntasks);
}

void Simulation::submit_until(int rank, uint32_t bound) {
  submitted_[rank] = std::max(submitted_[rank], bound);
  auto& waiting = deferred_[rank];
  if (waiting.empty())
    return;
  std::sort(waiting.begin(), waiting.end());
  const auto end = std::lower_bound(waiting.begin(), waiting.end(), bound);
  const std::vector<uint32_t> now(waiting.begin(), end);
  waiting.erase(waiting.begin(), end);
  for (uint32_t t : now) // pushing may switch to other actors: the list is settled first
    push(t, -1);
}

Summary Simulation::run() {
  for (auto& w : topo_->workers())
    w.actor = sg4::Actor::create(w.name, w.host, [this, id = w.id] { worker_loop(id); });
  mpi_->start_actors();
  numa_->start_actors();
  const uint32_t ntasks = static_cast<uint32_t>(dag_.tasks.size());
  submitted_.assign(topo_->nranks(), ntasks);
  deferred_.assign(topo_->nranks(), {});
  for (int rank = 0; rank < static_cast<int>(topo_->nranks()); rank++)
    if (submits_slowly(rank)) {
      submitted_[rank] = 0;
      for (uint32_t r = 0; r < dag_.receptions.size(); r++)
        if (dag_.receptions[r].dst == rank)
          mpi_->hold_until_posted(r);
      sg4::Actor::create(nodes()[rank].name + ".main", nodes()[rank].cpus.front().host,
                         [this, rank] { main_thread(rank); });
    }
  // StarPU 1.4.10 allocates a reception's buffer on the node it chose when the reception is
  // posted, at the submission of the tile's first local reader (MpiRuntime::reception_node): on a
  // rank whose main thread is not simulated, all of them now, in submission order.
  if (mpi_->choose_node())
    for (uint32_t r = 0; r < dag_.receptions.size(); r++)
      if (!submits_slowly(dag_.receptions[r].dst))
        mpi_->note_buffer(r);
  // The main thread submits the whole graph at t=0; ready tasks are pushed in submission order.
  sg4::Actor::create("main", nodes()[0].cpus.front().host, [this] {
    if (dag_.tasks.empty()) {
      finish_all();
      return;
    }
    for (uint32_t r : dag_.ready_recvs)
      mpi_->trigger(r);
    for (uint32_t t : dag_.ready)
      push(t, -1);
  });
  engine_.run();
  const FlowCounts fc = flow_counts();
  XBT_VERB("flows: %llu alone on their route (%llu of them taken back into SimGrid), %llu SimGrid's",
           static_cast<unsigned long long>(fc.alone), static_cast<unsigned long long>(fc.taken_back),
           static_cast<unsigned long long>(fc.simgrid));
  if (!progress_.finished) // SimGrid ran out of events with tasks left: name what they wait for
    throw std::runtime_error(stall_report(4));
  fill_summary();
  return sum_;
}

} // namespace numasim
