// The memory system of one machine node: where a CPU kernel's memory traffic goes and how long
// the kernel takes given where its operands live and how loaded the memory controllers are
// (docs/memory-model.md). Two mechanisms, both from the literature:
//  - bandwidth (roofline, Williams et al., CACM 2009): every byte a kernel moves, local or
//    remote, loads the memory controller of the node holding the pages at the kernel's average
//    rate (bytes / duration). When, at the kernel's start, that traffic could limit it (its rate
//    above what its path, core link + controller + inter-socket link, carries alone; or the
//    controller oversubscribed by the running kernels' and copies' rates; or, for remote pages,
//    the inter-socket link by the remote kernels' rates), it is a SimGrid flow from the RAM of
//    the node holding the pages to the kernel's core, concurrent with the computation, sharing the
//    links max-min with other flows, GPU DMA and the NIC's DMA; the kernel ends when both are
//    done. The decision is made once, at the start: a kernel that started below saturation keeps
//    no flow and is not stretched by a later saturation. Otherwise no flow could lengthen the
//    kernel, and none is simulated: a kernel's traffic is spread over its duration in reality,
//    while a flow runs as a burst at the start (SimGrid 3.32 ignores Comm::set_rate on
//    host-to-host comms), loading the controller at full core speed for several ms and slowing
//    copies that a spread load leaves alone (and costing 43 % of numasim's time at the study's
//    scale).
//  - latency (the PaStiX NUMA factors, INRIA RR-7498; Intel MLC loaded-latency curves): a kernel
//    spends a fraction sigma of its local, idle-memory time stalled on memory latency; that part
//    scales with the latency of the path to its pages, which grows with the controller's
//    utilisation (loaded-latency curve) and with the inter-socket hop.
// Used by numasim (numa_effects.cpp) and by the microbenchmark simulator (tools/memory_bench.cpp),
// so that the mechanism validated on the microbenchmarks is the one the LU runs on.
#pragma once
#include "flows.hpp"
#include "platform.hpp"

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace numasim {

constexpr int kMaxNumaNodes = 4; // NUMA nodes per machine node that numasim tracks page by page

struct MemoryParams {
  // (controller utilisation, latency / idle latency), increasing utilisations; empty: latency
  // independent of the load. Zone property numa_loaded_latency = "u:ratio,u:ratio,...".
  std::vector<std::pair<double, double>> loaded_latency;
  // Fraction of a kernel's local idle-memory duration stalled on memory latency, by kernel name
  // (dgemm, dtrsm, dgetrf_nopiv, daxpy...): zone properties numa_stall_fraction_<kernel>.
  std::vector<std::pair<std::string, double>> stall_fraction;
  // Spread of a kernel's duration on remote pages relative to local ones (ratio of the relative
  // standard deviations of numa_bench's remote and local cells with every core busy), by kernel
  // name: zone properties numa_variability_remote_<kernel>; absent: 1 (the same i.i.d. spread).
  std::vector<std::pair<std::string, double>> variability_remote;
  // A peripheral's DMA through the controller (docs/memory-model.md, "DMA under memory load";
  // Vuppalapati et al., "Understanding the Host Network", SIGCOMM 2024, section 4): the IIO holds
  // at most `credits` cache lines in flight per direction, each for the domain's latency, so a
  // DMA stream runs at most at credits * 64 B / latency. Reads of host memory (host -> device):
  // zone properties numa_dma_read_credits, numa_dma_read_latency_s; writes (device -> host):
  // numa_dma_write_credits, numa_dma_write_latency_s; a core's line fill buffers:
  // numa_core_credits. 0 (absent): that part of the mechanism is off.
  double dma_read_credits = 0, dma_read_latency_s = 0;
  double dma_write_credits = 0, dma_write_latency_s = 0;
  double core_credits = 0;

  static MemoryParams from_zone(const sg4::NetZone* zone, const std::string& platform_file);
  double latency_ratio(double utilisation) const;        // piecewise linear, flat outside the points
  double stall(const std::string& kernel) const;         // 0 when the description gives none
  double remote_spread(const std::string& kernel) const; // 1 when the description gives none
};

class MemorySystem {
public:
  MemorySystem(const MachineNode& node, const std::string& platform_file);

  int nnuma() const { return static_cast<int>(ram_.size()); }
  sg4::Host* ram(int numa) const { return ram_[numa]; }
  const MemoryParams& params() const { return p_; }
  // Utilisation of NUMA node `numa`'s memory controller now: the average traffic rates of the
  // kernels running on its pages (bytes / duration) over its bandwidth, at most 1; 0 without a
  // controller link. (Average rates, not the flows' instantaneous ones: the flows run in bursts.)
  double utilisation(int numa) const;
  // A kernel on a core of node `thread_numa` moving bytes_by_node[p] bytes in `d` seconds starts /
  // ends (utilisation bookkeeping: the controllers, and the inter-socket traffic of remote pages).
  void begin_kernel(int thread_numa, const double* bytes_by_node, double d);
  void end_kernel(int thread_numa, const double* bytes_by_node, double d);
  // A copy stream (GPU or NIC DMA, a CPU copy of StarPU-MPI) reading or writing node `numa`'s
  // pages at `rate_Bps` starts (positive) or ends (negative): it loads the controller as a
  // kernel's traffic does, so the kernels reading through it see the loaded latency.
  void add_stream(int numa, double rate_Bps);
  // Average rate of the running kernels' traffic on link `l` (B/s): on a memory controller, the
  // kernels reading its pages; on an inter-socket link, the kernels reading remote pages across
  // it; 0 on any other link (copies are not counted here).
  double kernel_load(const sg4::Link* l) const;
  // The same sum from the terms that apply to l, listed once (kernel_terms), in kernel_load's
  // order (the same result to the bit): {p, -1} a controller's kernels, {p, t} node t's kernels
  // reading node p across l.
  using KernelTerms = std::vector<std::pair<int8_t, int8_t>>;
  KernelTerms kernel_terms(const sg4::Link* l) const;
  double kernel_load(const KernelTerms& terms) const {
    double load = 0;
    for (const auto& [p, t] : terms)
      load += t < 0 ? kernel_demand_[p] : remote_demand_[t][p];
    return load;
  }
  bool carries_kernel_traffic(const sg4::Link* l) const; // a controller or an inter-socket link of this node
  int controller_of(const sg4::Link* l) const;           // the NUMA node whose controller l is, -1: none
  // Latency of a load from a core of `thread_numa` to pages on `data_numa`, now (s).
  double latency_s(int thread_numa, int data_numa) const;
  // Duration of a kernel whose local idle-memory duration is `d0`, moving bytes_by_node[p] bytes
  // to/from node p (kMaxNumaNodes entries): d0 * (1 + sigma * (rho - 1)), rho the byte-weighted
  // latency of its pages over the idle local latency.
  double stretched(double sigma, int thread_numa, const double* bytes_by_node, double d0) const;
  // Starts the traffic of a kernel of duration `d` (after begin_kernel) on `core` (NUMA node
  // `thread_numa`) from each node whose pages it reads where that traffic could be bandwidth-bound
  // (see above; SimGrid then shares the links max-min, the core's link capping one core's rate);
  // returns the number of flows put in `out`.
  size_t start_traffic(sg4::Host* core, int thread_numa, const double* bytes_by_node, double d,
                       std::array<FlowId, kMaxNumaNodes>& out) const;
  // DMA of a peripheral reading (to_memory false) or writing (true) NUMA node `numa`'s pages, now.
  // Its credit window's rate: credits * 64 B over the domain's unloaded latency plus the
  // controller's queueing delay at its present utilisation (the loaded-latency curve's extra over
  // the idle local latency); infinite when the description gives no credits for that direction.
  double dma_window_Bps(int numa, bool to_memory) const;
  // How many SimGrid flows a DMA copy starting now is made of, so that max-min sharing at the
  // controller gives it its share of the requests in flight (Little's law with one queue: a
  // stream's share of a saturated controller is its outstanding requests over everyone's): a read
  // of host memory holds dma_read_credits lines in flight where a core holds core_credits, so on
  // a controller oversubscribed now it is round(dma_read_credits / core_credits) flows; a write,
  // posted and competing with the cores' posted write-backs for the write queue, one flow; one
  // flow too on a controller that is not oversubscribed (no sharing to decide) or without the
  // parameters.
  int dma_flows(int numa, bool to_memory) const;
  bool oversubscribed(int numa) const; // the running kernels' and copies' rates exceed the controller
  // One DMA copy of `bytes` from `src` to `dst` (node `numa`'s RAM on one end, the device on the
  // other; route latency and lone-flow rate given), in the calling actor: decided at its start,
  // as the kernels' flows are, it has the shares of dma_flows(...) SimGrid flows (one flow weighted so
  // where exact, network.hpp flows_merge), and it ends no earlier than its
  // credit window allows (latency + bytes / dma_window_Bps). numasim's copies
  // (numa_effects.cpp run_legs) and memory_bench's `dma` scenario both run it.
  struct DmaRun {
    int flows = 1;
    bool window_bound = false; // the window was below the route's rate
  };
  DmaRun dma_copy(sg4::Host* src, sg4::Host* dst, double bytes, int numa, bool to_memory,
                  double route_latency, double route_rate) const;

private:
  MemoryParams p_;
  std::vector<sg4::Host*> ram_;
  std::vector<sg4::Link*> controller_;
  std::vector<double> demand_;                    // B/s of the running kernels and copies, per controller
  std::vector<double> kernel_demand_;             // B/s of the running kernels alone, per controller
  std::vector<std::vector<double>> idle_latency_; // [thread numa][data numa], route latency (s)
  std::vector<std::vector<double>>
      remote_demand_;                        // [thread numa][data numa], B/s of kernels reading remotely
  std::vector<std::vector<double>> path_bw_; // [thread numa][data numa], narrowest link (B/s)
  std::vector<std::vector<double>> qpi_bw_;  // [thread numa][data numa], inter-socket link (inf: none)
  std::vector<std::vector<std::vector<const sg4::Link*>>> qpi_links_; // [thread numa][data numa]
  bool on_inter_socket_route(int t, int p, const sg4::Link* l) const; // l is on qpi_links_[t][p], t != p
};

} // namespace numasim
