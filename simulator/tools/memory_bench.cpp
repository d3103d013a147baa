/* memory_bench: the calibration's memory microbenchmarks (calibration/microbench/numa_bench.c,
 * Intel MLC's loaded latency, CUDA bandwidthTest) simulated on a numasim platform with numasim's
 * own memory model (simulator/src/memory_model.hpp), so that the model can be compared with the
 * measurements it claims to reproduce (bench/memory_microbench.py, the calibration's validate
 * step). Scenario:
 *
 *   memory_bench PLATFORM.xml NODE kernel KERNEL D0_S BYTES T D alone|all REPS
 *       numa_bench's cell (T, D): threads on cores of NUMA node T run KERNEL on data of NUMA
 *       node D, REPS calls each, a call taking D0_S seconds with local idle memory and moving
 *       BYTES; alone: one thread (T's first core); all: every core of the node runs the kernel,
 *       T's cores on D's data, the others on their own node's data.
 *   memory_bench PLATFORM.xml NODE stream BYTES T D THREADS
 *       THREADS cores of T each read BYTES from D at once (STREAM/MLC bandwidth).
 *   memory_bench PLATFORM.xml NODE triad BYTES T D THREADS
 *       STREAM's triad a[i] = b[i] + s * c[i] on THREADS cores of T, arrays on D, BYTES counted
 *       per thread as STREAM counts them (24 per element). Ordinary stores write-allocate: the
 *       line of a[i] is read before it is written (a read for ownership), so the memory moves 32
 *       bytes per element, 24 towards the core and 8 back (docs/references/platform-facts.md,
 *       "Write-allocate").
 *   memory_bench PLATFORM.xml NODE memcpy BYTES T D THREADS
 *       THREADS cores of T each memcpy BYTES within D's memory, counted as bytes copied; a large
 *       memcpy uses streaming stores (no read for ownership): BYTES towards the core, BYTES back.
 *   memory_bench PLATFORM.xml NODE latency T D THREADS [COPY_DST]
 *       MLC --loaded_latency: THREADS cores of D stream from D's memory while one core of T
 *       probes the latency of D's memory; with COPY_DST, a copy from D's RAM to that host (a
 *       GPU's or NIC's DMA) streams too, loading the controller as numasim counts copies
 *       (numa_effects.cpp stream_demand: at the rate its route gives it alone).
 *   memory_bench PLATFORM.xml NODE copy SRC_HOST DST_HOST BYTES
 *       one copy (e.g. ram1 -> gpu0, a cross-socket host-to-device copy).
 *   memory_bench PLATFORM.xml NODE dma SRC_HOST DST_HOST BYTES D THREADS
 *       a device's DMA of BYTES between NUMA node D's RAM and a GPU or NIC (SRC -> DST; D's RAM
 *       is one of them) while THREADS cores of D stream from D's memory for its whole length
 *       (greedy, as STREAM's or MLC's traffic threads; a core's reads and write-backs are one flow,
 *       as numasim's kernel flows carry a kernel's), everything counted in the controller's load at
 *       the rate its route gives it alone, as numasim counts copies; the DMA runs as numasim runs
 *       it (MemorySystem::dma_copy). THREADS = 0: the DMA alone.
 *
 * Prints one JSON object: the medians of the measured calls (kernel), the aggregate bandwidth
 * (stream, copy) or the probe's latency and the controller's utilisation (latency).
 */
#include "error.hpp"
#include "flows.hpp"
#include "memory_model.hpp"
#include "network.hpp"
#include "platform.hpp"
#include "sleep.hpp"

#include <simgrid/s4u.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

XBT_LOG_NEW_DEFAULT_CATEGORY(memory_bench, "Memory microbenchmarks on a numasim platform");

namespace sg4 = simgrid::s4u;
using numasim::kMaxNumaNodes;
using numasim::MachineNode;
using numasim::MemorySystem;

namespace {
[[noreturn]] void usage(const char* argv0) {
  std::cerr << "usage: " << argv0
            << " PLATFORM.xml NODE kernel KERNEL D0_S BYTES T D alone|all REPS\n"
               "       PLATFORM.xml NODE stream BYTES T D THREADS\n"
               "       PLATFORM.xml NODE triad BYTES T D THREADS\n"
               "       PLATFORM.xml NODE memcpy BYTES T D THREADS\n"
               "       PLATFORM.xml NODE latency T D THREADS [COPY_DST]\n"
               "       PLATFORM.xml NODE copy SRC_HOST DST_HOST BYTES\n"
               "       PLATFORM.xml NODE dma SRC_HOST DST_HOST BYTES D THREADS\n";
  std::exit(2);
}

double number(const char* text, const char* what, bool integer = false) {
  char* end = nullptr;
  double v = std::strtod(text, &end);
  if (end == text || *end || !(v >= 0) || v > 1e18 || (integer && v != static_cast<long>(v))) {
    std::cerr << "error: " << what << ": expected a "
              << (integer ? "non-negative integer" : "non-negative number") << ", got '" << text << "'\n";
    std::exit(2);
  }
  return v;
}

std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

std::vector<sg4::Host*> cores_of(const MachineNode& n, int numa) {
  std::vector<sg4::Host*> out;
  for (const auto& c : n.cpus)
    if (c.numa == numa)
      out.push_back(c.host);
  return out;
}

// The first `threads` cores of NUMA node t (1..its core count).
std::vector<sg4::Host*> thread_cores(const MachineNode& n, int t, int threads) {
  auto cores = cores_of(n, t);
  if (threads < 1 || threads > static_cast<int>(cores.size()))
    throw numasim::InputError(
        "", "THREADS", "1.." + std::to_string(cores.size()) + " (cores of node " + std::to_string(t) + ")");
  cores.resize(threads);
  return cores;
}

double median(std::vector<double> v) {
  if (v.empty())
    return 0;
  std::sort(v.begin(), v.end());
  size_t k = v.size() / 2;
  return v.size() % 2 ? v[k] : 0.5 * (v[k - 1] + v[k]);
}

size_t kernel_flows = 0; // kernel traffic flows simulated (one per node read through a flow), all calls

// One call of a kernel on `core` (NUMA node t) with its traffic from node d: the same
// computation numasim does for a CPU task (numa_effects.cpp run_task).
double kernel_call(MemorySystem& mem, double sigma, sg4::Host* core, int t, int d, double d0, double bytes) {
  double by_node[kMaxNumaNodes] = {0, 0, 0, 0};
  by_node[d] = bytes;
  const double start = sg4::Engine::get_clock();
  mem.begin_kernel(t, by_node, d0);
  const double dur = mem.stretched(sigma, t, by_node, d0);
  std::array<numasim::FlowId, kMaxNumaNodes> traffic{};
  const size_t n = mem.start_traffic(core, t, by_node, dur, traffic);
  kernel_flows += n;
  if (dur > 0)
    numasim::sleep_for(dur);
  for (size_t i = 0; i < n; i++)
    numasim::wait_flow(traffic[i]);
  mem.end_kernel(t, by_node, d0);
  return sg4::Engine::get_clock() - start;
}
} // namespace

int main(int argc, char* argv[]) {
  sg4::Engine engine(&argc, argv);
  if (argc < 4)
    usage(argv[0]);
  const std::string file = argv[1], node_name = argv[2], what = argv[3];
  const bool own = numasim::configure_network_model();
  numasim::reset_flows();
  if (!std::ifstream(file)) {
    std::cerr << "error: " << file << ": expected a readable numasim platform file\n";
    return 2;
  }
  try {
    try {
      engine.load_platform(file);
    } catch (const std::exception& e) { // SimGrid's parse errors: one line, not a backtrace
      throw numasim::InputError(file, "", std::string("a valid SimGrid platform (") + e.what() + ")");
    }
    if (own)
      numasim::install_ethernet_factors(engine);
    engine.seal_platform();
    auto nodes = numasim::discover_platform(engine, file);
    auto it =
        std::find_if(nodes.begin(), nodes.end(), [&](const MachineNode& n) { return n.name == node_name; });
    if (it == nodes.end())
      throw numasim::InputError(file, "node " + node_name, "a node of the platform");
    const MachineNode& node = *it;
    MemorySystem mem(node, file);
    auto numa_arg = [&](const char* text, const char* key) {
      double v = number(text, key, true);
      if (v >= mem.nnuma())
        throw numasim::InputError(
            "", key, "a NUMA node of " + node_name + " (0.." + std::to_string(mem.nnuma() - 1) + ")");
      return static_cast<int>(v);
    };
    auto host_pair = [&](const char* a, const char* b) { // the copy's two ends, both hosts of the platform
      sg4::Host* src = sg4::Host::by_name_or_null(a);
      sg4::Host* dst = sg4::Host::by_name_or_null(b);
      if (!src || !dst)
        throw numasim::InputError(file, std::string("host ") + (src ? b : a), "a host of the platform");
      return std::pair{src, dst};
    };

    if (what == "kernel" && argc == 11) {
      const std::string kernel = argv[4];
      const double d0 = number(argv[5], "D0_S"), bytes = number(argv[6], "BYTES");
      const int t = numa_arg(argv[7], "T"), d = numa_arg(argv[8], "D");
      const std::string load = argv[9];
      const int reps = static_cast<int>(number(argv[10], "REPS", true));
      if ((load != "alone" && load != "all") || reps < 1)
        usage(argv[0]);
      const double sigma = mem.params().stall(kernel);
      std::vector<double> measured;
      for (int numa = 0; numa < mem.nnuma(); numa++) {
        auto cores = cores_of(node, numa);
        for (size_t i = 0; i < cores.size(); i++) {
          const bool is_measured = numa == t && (load == "all" || i == 0);
          if (load == "alone" && !is_measured)
            continue;
          const int data = is_measured ? d : numa;
          sg4::Actor::create(
              "k" + std::to_string(numa) + "." + std::to_string(i), cores[i],
              [&mem, &measured, sigma, core = cores[i], numa, data, d0, bytes, reps, is_measured] {
                for (int r = 0; r < reps; r++) {
                  double s = kernel_call(mem, sigma, core, numa, data, d0, bytes);
                  if (is_measured)
                    measured.push_back(s);
                }
              });
        }
      }
      engine.run();
      std::cout << "{\"scenario\": \"kernel\", \"kernel\": \"" << kernel
                << "\", \"stall_fraction\": " << num(sigma) << ", \"thread_node\": " << t
                << ", \"data_node\": " << d << ", \"load\": \"" << load
                << "\", \"calls\": " << measured.size() << ", \"flows\": " << kernel_flows
                << ", \"median_s\": " << num(median(measured)) << "}\n";
    } else if ((what == "stream" || what == "triad" || what == "memcpy") && argc == 8) {
      const double bytes = number(argv[4], "BYTES");
      const int t = numa_arg(argv[5], "T"), d = numa_arg(argv[6], "D");
      const auto cores = thread_cores(node, t, static_cast<int>(number(argv[7], "THREADS", true)));
      // stream: BYTES read; triad: 24 of every 32 bytes moved go to the core, 8 come back;
      // memcpy: each copied byte read and written once.
      const double in = bytes, out = what == "triad" ? bytes / 3 : what == "memcpy" ? bytes : 0;
      double end = 0;
      for (size_t i = 0; i < cores.size(); i++)
        sg4::Actor::create("s" + std::to_string(i), cores[i], [&, core = cores[i]] {
          auto read = numasim::start_flow(mem.ram(d), core, in);
          if (out > 0)
            numasim::run_flow(core, mem.ram(d), out);
          numasim::wait_flow(read);
          end = std::max(end, sg4::Engine::get_clock());
        });
      engine.run();
      std::cout << "{\"scenario\": \"" << what << "\", \"thread_node\": " << t << ", \"data_node\": " << d
                << ", \"threads\": " << cores.size()
                << ", \"bandwidth_Bps\": " << num(static_cast<double>(cores.size()) * bytes / end) << "}\n";
    } else if (what == "latency" && (argc == 7 || argc == 8)) {
      const int t = numa_arg(argv[4], "T"), d = numa_arg(argv[5], "D");
      const int threads = static_cast<int>(number(argv[6], "THREADS", true));
      auto loaders = cores_of(node, d);
      auto probes = cores_of(node, t);
      // The probe only reads the model's latency (it moves nothing): it may share a loader's core.
      const size_t probe = 0;
      if (threads > static_cast<int>(loaders.size()) || probes.empty())
        throw numasim::InputError("", "THREADS",
                                  "at most the " + std::to_string(loaders.size()) + " cores of node " +
                                      std::to_string(d));
      // The loaders stream greedily (MLC's traffic threads without delay): their rate is what the
      // links give them; the controller's utilisation is that rate, then the probe reads.
      sg4::Host* copy_dst = argc == 8 ? sg4::Host::by_name_or_null(argv[7]) : nullptr;
      if (argc == 8 && !copy_dst)
        throw numasim::InputError(file, std::string("host ") + argv[7], "a host of the platform");
      double latency = 0, utilisation = 0;
      sg4::Actor::create("probe", probes[probe], [&] {
        const double bytes = 1e9;
        const double copy_rate = copy_dst ? numasim::route_latency_bandwidth(mem.ram(d), copy_dst).second : 0;
        mem.add_stream(d, copy_rate);
        std::vector<numasim::FlowId> load;
        if (copy_dst)
          load.push_back(numasim::start_flow(mem.ram(d), copy_dst, bytes));
        for (int i = 0; i < threads; i++)
          load.push_back(numasim::start_flow(mem.ram(d), loaders[i], bytes));
        for (int i = 0; i < threads; i++)
          numasim::wait_flow(load[i + (copy_dst ? 1 : 0)]);
        const double elapsed = sg4::Engine::get_clock();
        double by_node[kMaxNumaNodes] = {0, 0, 0, 0};
        by_node[d] = threads * bytes;
        mem.begin_kernel(t, by_node, elapsed);
        latency = mem.latency_s(t, d);
        utilisation = mem.utilisation(d);
        mem.end_kernel(t, by_node, elapsed);
        if (copy_dst)
          numasim::wait_flow(load.front());
        mem.add_stream(d, -copy_rate);
      });
      engine.run();
      std::cout << "{\"scenario\": \"latency\", \"thread_node\": " << t << ", \"data_node\": " << d
                << ", \"threads\": " << threads << ", \"utilisation\": " << num(utilisation)
                << ", \"latency_s\": " << num(latency) << "}\n";
    } else if (what == "copy" && argc == 7) {
      auto [src, dst] = host_pair(argv[4], argv[5]);
      const double bytes = number(argv[6], "BYTES");
      double end = 0;
      sg4::Actor::create("copy", src, [&] {
        numasim::run_flow(src, dst, bytes);
        end = sg4::Engine::get_clock();
      });
      engine.run();
      std::cout << "{\"scenario\": \"copy\", \"src\": \"" << argv[4] << "\", \"dst\": \"" << argv[5]
                << "\", \"bandwidth_Bps\": " << num(bytes / end) << "}\n";
    } else if (what == "dma" && argc == 9) {
      auto [src, dst] = host_pair(argv[4], argv[5]);
      const double bytes = number(argv[6], "BYTES");
      const int d = numa_arg(argv[7], "D");
      const int threads = static_cast<int>(number(argv[8], "THREADS", true));
      if (src != mem.ram(d) && dst != mem.ram(d))
        throw numasim::InputError(file, std::string("hosts ") + argv[4] + ", " + argv[5],
                                  "one of them the RAM of NUMA node " + std::to_string(d));
      const bool to_memory = dst == mem.ram(d);
      const auto cores = threads > 0 ? thread_cores(node, d, threads) : std::vector<sg4::Host*>{};
      const auto [latency, rate] = numasim::route_latency_bandwidth(src, dst);
      double loaders = 0;
      for (auto* c : cores)
        loaders += numasim::route_latency_bandwidth(mem.ram(d), c).second;
      double elapsed = 0, utilisation = 0, window = 0;
      MemorySystem::DmaRun run;
      sg4::Actor::create("dma", to_memory ? src : dst, [&] {
        mem.add_stream(d, loaders + rate);
        std::vector<numasim::FlowId> load;
        for (auto* c : cores) // longer than any DMA of the scenario: cancelled when it ends
          load.push_back(numasim::start_flow(mem.ram(d), c, 1e12));
        utilisation = mem.utilisation(d);
        window = mem.dma_window_Bps(d, to_memory);
        const double start = sg4::Engine::get_clock();
        run = mem.dma_copy(src, dst, bytes, d, to_memory, latency, rate);
        elapsed = sg4::Engine::get_clock() - start;
        for (auto f : load)
          numasim::cancel_flow(f);
        mem.add_stream(d, -(loaders + rate));
      });
      engine.run();
      std::cout << "{\"scenario\": \"dma\", \"src\": \"" << argv[4] << "\", \"dst\": \"" << argv[5]
                << "\", \"data_node\": " << d << ", \"threads\": " << threads
                << ", \"utilisation\": " << num(utilisation)
                << ", \"window_Bps\": " << (std::isfinite(window) ? num(window) : "null")
                << ", \"flows\": " << run.flows
                << ", \"window_bound\": " << (run.window_bound ? "true" : "false")
                << ", \"bandwidth_Bps\": " << num(bytes / elapsed) << "}\n";
    } else
      usage(argv[0]);
  } catch (const numasim::InputError& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  }
  return 0;
}
