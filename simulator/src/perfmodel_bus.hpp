// StarPU's bus model between memory nodes (core/perfmodel/perfmodel_bus.c starpu_transfer_predict)
// over the platform's routes, and the link classes (membus, qpi, pcie, ...) that the summary counts
// bytes by.
#pragma once
#include "topology.hpp"

#include <string>
#include <vector>

namespace numasim {

// Link classes in order of first use, with the bytes that crossed each.
class LinkClasses {
public:
  int id(const std::string& cls); // adds the class on first use
  void add_bytes(int id, double bytes) { bytes_[id] += bytes; }
  const std::vector<std::string>& names() const { return names_; }
  double bytes(int id) const { return bytes_[id]; }

private:
  std::vector<std::string> names_;
  std::vector<double> bytes_;
};

class BusModel {
public:
  BusModel(const Topology& topo, LinkClasses& classes);
  // Predicted time of a copy of `bytes` between two memory nodes (global indices).
  double estimate(int gsrc, int gdst, double bytes);
  // The bus calibration's own figure for that copy, latency + bytes / bandwidth (StarPU's
  // latency_matrix and bandwidth_matrix, measured one copy at a time on an idle node): what
  // `estimate` scales by 2 * ngpus.
  double calibrated(int gsrc, int gdst, double bytes);
  std::vector<std::string> route_links(int gsrc, int gdst) { return route(gsrc, gdst).links; }

private:
  struct Route {
    bool known = false;
    double latency = 0, bandwidth = 0;
    std::vector<int> classes;
    std::vector<std::string> links;
  };
  const Topology& topo_;
  LinkClasses& classes_;
  std::vector<Route> routes_; // dense [gsrc * nmem + gdst]
  Route& route(int gsrc, int gdst);
};

} // namespace numasim
