#include "perfmodel_bus.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

XBT_LOG_NEW_DEFAULT_SUBCATEGORY(numasim_bus, numasim, "numasim bus model");

namespace numasim {

int LinkClasses::id(const std::string& cls) {
  auto it = std::find(names_.begin(), names_.end(), cls);
  if (it != names_.end())
    return static_cast<int>(it - names_.begin());
  names_.push_back(cls);
  bytes_.push_back(0);
  return static_cast<int>(names_.size() - 1);
}

BusModel::BusModel(const Topology& topo, LinkClasses& classes) : topo_(topo), classes_(classes) {
  routes_.resize(topo_.mem().size() * topo_.mem().size());
}

BusModel::Route& BusModel::route(int gsrc, int gdst) {
  Route& r = routes_[static_cast<size_t>(gsrc) * topo_.mem().size() + gdst];
  if (!r.known) {
    std::vector<sg4::Link*> links;
    double lat = 0;
    topo_.mem(gsrc).host->route_to(topo_.mem(gdst).host, links, &lat);
    r.latency = lat;
    r.bandwidth = std::numeric_limits<double>::infinity();
    for (auto* l : links) {
      r.bandwidth = std::min(r.bandwidth, l->get_bandwidth());
      r.links.push_back(l->get_name());
      r.classes.push_back(classes_.id(link_class(l->get_name())));
    }
    // Between two RAM nodes StarPU calibrates a thread's memcpy (core/perfmodel/perfmodel_bus.c
    // measure_bandwidth_latency_between_numa), the copy numasim runs (Topology::copy_thread).
    const MemNode &s = topo_.mem(gsrc), &d = topo_.mem(gdst);
    if (!s.gpu && !d.gpu && s.rank == d.rank && s.host != d.host)
      r.bandwidth = std::min(r.bandwidth, topo_.copy_thread(d.rank, d.numa).rate);
    r.known = true;
  }
  return r;
}

double BusModel::calibrated(int gsrc, int gdst, double bytes) {
  if (gsrc == gdst)
    return 0;
  const Route& r = route(gsrc, gdst);
  return r.latency + (std::isfinite(r.bandwidth) && r.bandwidth > 0 ? bytes / r.bandwidth : 0);
}

double BusModel::estimate(int gsrc, int gdst, double bytes) {
  if (gsrc == gdst)
    return 0;
  // StarPU's bus model, core/perfmodel/perfmodel_bus.c starpu_transfer_predict:
  // latency + size / bandwidth * 2 * ngpus. ngpus is starpu_bus_get_ngpus(), which stays at its
  // default, the node's number of CUDA devices in use (profiling/profiling.c), for every bus
  // whose route crosses a shared host link or starts from RAM (core/simgrid.c
  // _starpu_simgrid_count_ngpus only sets it for single-link GPU routes or PCI "through" links).
  const Route& r = route(gsrc, gdst);
  const MemNode& src = topo_.mem(gsrc);
  double ngpus = src.gpu && r.classes.size() == 1 ? 1.0 : topo_.cuda_devices(src.rank);
  return r.latency + (std::isfinite(r.bandwidth) && r.bandwidth > 0 ? bytes / r.bandwidth * 2 * ngpus : 0);
}

} // namespace numasim
