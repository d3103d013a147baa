// write_output (output.hpp): checked writes, temporary file renamed in, nothing half-written.
#include "error.hpp"
#include "output.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unistd.h>

using namespace numasim;
namespace fs = std::filesystem;

namespace {
fs::path fresh_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("numasim_output_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::string read(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<std::string> names(const fs::path& d) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(d))
    out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}
} // namespace

TEST(Output, WritesAndReplacesWithoutLeavingATemporaryFile) {
  fs::path d = fresh_dir("replace");
  std::string path = (d / "summary.json").string();
  write_output(path, "--out", [](std::ostream& o) { o << "first\n"; });
  write_output(path, "--out", [](std::ostream& o) {
    for (int i = 0; i < 100000; i++) // more than the 64 KiB buffer
      o << "line " << i << '\n';
  });
  EXPECT_EQ(read(path).substr(0, 7), "line 0\n");
  EXPECT_EQ(names(d), std::vector<std::string>{"summary.json"});
  fs::remove_all(d);
}

TEST(Output, FailureInsideLeavesThePreviousFile) {
  fs::path d = fresh_dir("fail");
  std::string path = (d / "trace.csv").string();
  write_output(path, "trace", [](std::ostream& o) { o << "previous\n"; });
  EXPECT_THROW(write_output(path, "trace",
                            [](std::ostream& o) {
                              o << "partial";
                              throw std::runtime_error("simulated failure");
                            }),
               std::runtime_error);
  EXPECT_EQ(read(path), "previous\n");
  EXPECT_EQ(names(d), std::vector<std::string>{"trace.csv"});
  fs::remove_all(d);
}

TEST(Output, DirectoryIsBadInputMissingFolderIsTheEnvironment) {
  fs::path d = fresh_dir("errors");
  try {
    write_output(d.string(), "--out", [](std::ostream& o) { o << "x"; });
    FAIL() << "a directory was accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), d.string() + ": --out: expected a file to write, found a directory");
  }
  std::string missing = (d / "no" / "summary.json").string();
  try {
    write_output(missing, "--out", [](std::ostream& o) { o << "x"; });
    FAIL() << "a missing folder was accepted";
  } catch (const OutputError& e) {
    EXPECT_EQ(std::string(e.what()), missing + ": No such file or directory");
  }
  EXPECT_TRUE(names(d).empty());
  fs::remove_all(d);
}
