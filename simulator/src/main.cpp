// numasim: simulate one run described by a JSON file (docs/interfaces.md §4).
//   numasim RUN.json [--out SUMMARY.json] [SimGrid --cfg=... / --log=... options]
#include "error.hpp"
#include "output.hpp"
#include "report.hpp"
#include "runtime.hpp"

#include <chrono>
#include <cstdio>
#include <cstring>

XBT_LOG_NEW_DEFAULT_SUBCATEGORY(numasim_main, numasim, "numasim main");

int main(int argc, char** argv) {
  auto t0 = std::chrono::steady_clock::now();
  std::string run_file, out_file;
  std::vector<char*> sg_args = {argv[0]};
  std::string quiet = "--log=root.thresh:warning";
  sg_args.push_back(quiet.data());
  // SimGrid gives every actor an 8 MiB stack by default: with ~500 actors (workers, copy
  // runners, MPI threads) that is 4 GB of address space for < 100 MB used, above the
  // `ulimit -v` of many batch schedulers. numasim's actors recurse little (no actor parses
  // input); 512 KiB each. A later --cfg=contexts/stack-size:N overrides it.
  std::string stack = "--cfg=contexts/stack-size:512";
  sg_args.push_back(stack.data());
  for (int i = 1; i < argc; i++) {
    if (!std::strcmp(argv[i], "--out") && i + 1 < argc)
      out_file = argv[++i];
    else if (!std::strncmp(argv[i], "--", 2))
      sg_args.push_back(argv[i]);
    else if (run_file.empty())
      run_file = argv[i];
    else {
      std::fprintf(stderr, "error: unexpected argument '%s'\n", argv[i]);
      return 2;
    }
  }
  if (run_file.empty()) {
    std::fprintf(stderr, "usage: %s RUN.json [--out SUMMARY.json]\n", argv[0]);
    return 2;
  }
  try {
    auto cfg = numasim::RunConfig::from_json(numasim::load_json_file(run_file), run_file);
    int sg_argc = static_cast<int>(sg_args.size());
    simgrid::s4u::Engine engine(&sg_argc, sg_args.data());
    numasim::Simulation sim(engine, cfg);
    numasim::Summary s = sim.run();
    if (!cfg.trace.empty())
      sim.write_trace(cfg.trace);
    if (!cfg.transfers.empty())
      sim.write_transfers(cfg.transfers);
    double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::string json = numasim::summary_json(s, cfg.seed, wall);
    if (out_file.empty())
      numasim::write_stdout(json + "\n");
    else
      numasim::write_output(out_file, "--out", [&json](std::ostream& out) { out << json << '\n'; });
  } catch (const numasim::InputError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) { // the environment (numasim::OutputError: disk full, permissions), ...
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
