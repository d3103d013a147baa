// numasim::sleep_for against SimGrid's own sleep (src/sleep.hpp): the same actors, once with
// each, must wake at the same dates in the same order, to the last bit. SimGrid allows one engine
// per process: SimGrid's run is made in a child process (forked before any engine exists) and its
// trace read back through a pipe.
#include "child_output.hpp"
#include "sleep.hpp"

#include <simgrid/s4u.hpp>

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

namespace sg4 = simgrid::s4u;

static const std::string kData = std::string(NUMASIM_SOURCE_ROOT) + "/simulator/tests/data/";

// "actor what date" lines (%.17g) in the order the actors logged them, then the final date.
static std::string sleep_scenario(bool simgrid_sleep) {
  int argc = 2;
  char arg0[] = "numasim_tests";
  char quiet[] = "--log=root.thresh:warning"; // SimGrid's note on a sleep below its precision
  char* argv[] = {arg0, quiet, nullptr};
  sg4::Engine e(&argc, argv);
  e.load_platform(kData + "tiny2.xml");
  auto sleep = [simgrid_sleep](double s) {
    if (simgrid_sleep)
      sg4::this_actor::sleep_for(s);
    else
      numasim::sleep_for(s);
  };
  std::string trace;
  auto log = [&trace](const char* what) {
    char line[160];
    std::snprintf(line, sizeof line, "%s %s %.17g\n", sg4::this_actor::get_cname(), what,
                  sg4::Engine::get_clock());
    trace += line;
  };
  sg4::Host* cpu0 = e.host_by_name("n1.cpu0");
  sg4::Host* cpu1 = e.host_by_name("n1.cpu1");
  sg4::Host* ram0 = e.host_by_name("n1.ram0");
  sg4::Host* gpu0 = e.host_by_name("n1.gpu0");
  // Equal dates begun in one round: they wake in the reverse order of their start.
  for (int i = 0; i < 4; i++)
    sg4::Actor::create("tie" + std::to_string(i), i % 2 ? cpu1 : cpu0, [&] {
      sleep(0.25);
      log("a");
      sleep(0.5);
      log("b");
    });
  // Dates within surf/precision (1e-9 s) of each other end in one round; 2e-9 apart, in two.
  sg4::Actor::create("near_a", cpu0, [&] {
    sleep(1.0 + 4e-10);
    log("a");
  });
  sg4::Actor::create("near_b", cpu1, [&] {
    sleep(1.0 - 3e-10);
    log("a");
  });
  sg4::Actor::create("near_c", cpu0, [&] {
    sleep(1.0 + 2e-9);
    log("a");
  });
  // Below the precision: raised to it. Zero and negative: no wait.
  sg4::Actor::create("tiny", cpu1, [&] {
    sleep(0);
    sleep(-1);
    log("a");
    sleep(1e-12);
    log("b");
  });
  // A sleep and a copy of the same length begun together: the sleeper wakes first (SimGrid's CPU
  // model is handled before its network model).
  double length = 0;
  sg4::ActorPtr sleeper = sg4::Actor::create("sleeper", cpu0, [&] {
    sg4::Comm::sendto(ram0, gpu0, 1 << 20); // alone on its route: the copy's length
    length = sg4::Engine::get_clock();
    sg4::this_actor::suspend();
    sleep(length);
    log("a");
  });
  sg4::Actor::create("copier", ram0, [&] {
    sleep(2.0);
    sleeper->resume();
    sg4::Comm::sendto(ram0, gpu0, 1 << 20);
    log("a");
  });
  // A daemon asleep when the others end is killed: the run ends then, not at its date.
  sg4::Actor::create("daemon", cpu1, [&] {
    for (;;) {
      sleep(100);
      log("a");
    }
  })->daemonize();
  e.run();
  char end[64];
  std::snprintf(end, sizeof end, "end %.17g\n", sg4::Engine::get_clock());
  return trace + end;
}

TEST(Sleep, WakesAsSimGridsSleep) {
  ChildOutput child = run_in_child([] { return sleep_scenario(true); });
  ASSERT_TRUE(child.ok) << "SimGrid's run failed";
  const std::string& simgrid = child.text;
  std::string ours = sleep_scenario(false);
  EXPECT_EQ(ours, simgrid);
  // The scenario exercises what it claims (on SimGrid's trace: these are its semantics).
  auto at = [&simgrid](const std::string& line) { return simgrid.find(line); };
  EXPECT_LT(at("tie3 a 0.25"), at("tie2 a 0.25"));
  EXPECT_LT(at("tie1 a 0.25"), at("tie0 a 0.25"));
  EXPECT_NE(at("near_a a 0.99999999969999998"), std::string::npos);
  EXPECT_NE(at("near_b a 0.99999999969999998"), std::string::npos);
  EXPECT_EQ(at("near_c a 0.99999999969999998"), std::string::npos);
  EXPECT_NE(at("tiny b 1.0000000000000001e-09"), std::string::npos);
  EXPECT_LT(at("sleeper a"), at("copier a"));
  EXPECT_NE(at("end 2.00"), std::string::npos);
}
