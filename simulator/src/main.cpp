// numasim: simulate one run described by a JSON file (docs/interfaces.md §4).
//   numasim RUN.json [--out SUMMARY.json] [SimGrid --cfg=... / --log=... options]
#include "error.hpp"
#include "mechanisms.hpp"
#include "output.hpp"
#include "report.hpp"
#include "runtime.hpp"

#include <simgrid/version.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>

XBT_LOG_NEW_DEFAULT_SUBCATEGORY(numasim_main, numasim, "numasim main");

#ifndef NUMASIM_COMMIT // set by simulator/CMakeLists.txt at configure time (git describe)
#define NUMASIM_COMMIT "unknown"
#endif

static const char* const USAGE = "usage: numasim RUN.json [--out SUMMARY.json] [SimGrid options]\n";

// `numasim --help`. SimGrid's own help options are handed to SimGrid, which prints and exits
// (src/simgrid/sg_config.cpp, sg_config_cmd_line: --help / --cfg-help, --help-aliases,
// --help-models, --help-tracing; xbt/log.cpp: --help-logs, --help-log-categories).
static const char* const HELP =
    "Simulates one run of the tiled LU on StarPU's runtime, modelled on SimGrid S4U, and prints\n"
    "its summary as one JSON object (docs/interfaces.md §4 and §6).\n"
    "\n"
    "arguments:\n"
    "  RUN.json              the run description (docs/interfaces.md §4), usually written by\n"
    "                        `testbed simulate --engine numasim`\n"
    "  --out SUMMARY.json    write the summary there instead of stdout (default: stdout)\n"
    "  -h, --help            this help, and exit\n"
    "  --version             numasim's commit and SimGrid's version, and exit\n"
    "  --mechanisms          the mechanisms a run description may switch off (`mechanisms`), as\n"
    "                        JSON, and exit\n"
    "\n"
    "SimGrid options (any other argument starting with --, passed to SimGrid as given):\n"
    "  --cfg=KEY:VALUE       a SimGrid configuration item, e.g. --cfg=network/model:SMPI,\n"
    "                        --cfg=surf/precision:1e-9, --cfg=tracing:yes; numasim sets\n"
    "                        --cfg=contexts/stack-size:512 (KiB per actor; a later one wins) and\n"
    "                        refuses contexts/nthreads other than 1; numasim's own item\n"
    "                        --cfg=numasim/lone-flows:no gives every flow to SimGrid, even one\n"
    "                        alone on its route (default yes: computed outside it, exactly)\n"
    "  --log=CATEGORY.thresh:LEVEL\n"
    "                        SimGrid's logging; numasim sets --log=root.thresh:warning (a later\n"
    "                        one wins; numasim's own categories are under `numasim`)\n"
    "  --cfg-help            every --cfg item with its default value, and exit\n"
    "  --help-models, --help-logs, --help-log-categories, --help-tracing, --help-aliases\n"
    "                        SimGrid's other help pages, and exit\n"
    "\n"
    "exit status: 0 done; 2 bad input (one line naming the file and key); 1 the environment\n"
    "(an output that cannot be written, a failure of SimGrid).\n";

// An argument mistake: one line naming it, exit 2 (docs/interfaces.md §11), not the usage block.
static int argument_error(const std::string& what) {
  std::fprintf(stderr, "error: numasim: %s (numasim --help)\n", what.c_str());
  return 2;
}

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
  bool simgrid_help = false; // a help page of SimGrid's: SimGrid prints it while starting
  for (int i = 1; i < argc; i++) {
    if (!std::strcmp(argv[i], "-h") || !std::strcmp(argv[i], "--help")) {
      std::printf("%s\n%s", USAGE, HELP);
      return 0;
    }
    if (!std::strcmp(argv[i], "--mechanisms")) {
      std::printf("%s\n", numasim::mechanisms_json().c_str());
      return 0;
    }
    if (!std::strcmp(argv[i], "--version")) {
      std::printf("numasim (commit %s) on %s\n", NUMASIM_COMMIT, SIMGRID_VERSION_STRING);
      return 0;
    }
    if (!std::strcmp(argv[i], "--cfg-help") || !std::strncmp(argv[i], "--help-", 7))
      simgrid_help = true;
    if (!std::strcmp(argv[i], "--out") || !std::strncmp(argv[i], "--out=", 6)) {
      const char* value = argv[i][5] == '=' ? argv[i] + 6 : (i + 1 < argc ? argv[++i] : nullptr);
      if (value == nullptr || !*value)
        return argument_error("argument --out: expected a file name (SUMMARY.json)");
      if (!out_file.empty())
        return argument_error("argument --out: given twice");
      out_file = value;
    } else if (!std::strcmp(argv[i], "--cfg") || !std::strcmp(argv[i], "--log"))
      return argument_error(std::string("argument ") + argv[i] + ": expected " + argv[i] +
                            (argv[i][2] == 'c' ? "=KEY:VALUE" : "=CATEGORY.thresh:LEVEL") +
                            " in one argument");
    else if (!std::strncmp(argv[i], "--", 2))
      sg_args.push_back(argv[i]);
    else if (run_file.empty() && *argv[i])
      run_file = argv[i];
    else if (!*argv[i])
      return argument_error("argument RUN.json: expected a file name, got an empty argument");
    else
      return argument_error(std::string("unexpected argument '") + argv[i] +
                            "' (one run description per call)");
  }
  if (simgrid_help) {
    int sg_argc = static_cast<int>(sg_args.size());
    simgrid::s4u::Engine engine(&sg_argc, sg_args.data()); // prints the page and exits
    return 0;
  }
  if (run_file.empty())
    return argument_error("missing argument RUN.json (the run description)");
  try {
    auto cfg = numasim::RunConfig::from_json(numasim::load_json_file(run_file), run_file);
    for (const char* a : sg_args)
      if (!std::strncmp(a, "--cfg=", 6))
        numasim::check_cfg_option(a);
    int sg_argc = static_cast<int>(sg_args.size());
    std::unique_ptr<simgrid::s4u::Engine> owned;
    try {
      owned = std::make_unique<simgrid::s4u::Engine>(&sg_argc, sg_args.data());
    } catch (const std::exception& e) { // an unknown --cfg key: SimGrid's first line, not its list of keys
      std::string what = e.what();
      throw numasim::InputError("--cfg", "", "a SimGrid option (" + what.substr(0, what.find('\n')) + ")");
    }
    // SimGrid takes the --cfg= and --log= arguments out of argv; what is left it does not know.
    if (sg_argc > 1)
      return argument_error(std::string("unrecognized argument '") + sg_args[1] +
                            "' (numasim's options: --out; SimGrid's: --cfg=KEY:VALUE, --log=...)");
    simgrid::s4u::Engine& engine = *owned;
    numasim::Simulation sim(engine, cfg);
    numasim::Summary s = sim.run();
    if (!cfg.trace.empty())
      sim.write_trace(cfg.trace);
    if (!cfg.transfers.empty())
      sim.write_transfers(cfg.transfers);
    if (!cfg.events.empty())
      sim.write_events(cfg.events);
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
