// A test's work in a forked child process, its text read back through a pipe: SimGrid allows one
// engine per process, so a test that needs two runs makes one of them in a child.
#pragma once
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <exception>
#include <sstream>
#include <string>
#include <vector>

struct ChildOutput {
  std::string text; // what `body` returned
  bool ok = false;  // the child returned normally and its whole text arrived
};

// Forks, runs `body` (returning a std::string) in the child and returns its text; call it before
// any engine exists in this process.
template <class Body> ChildOutput run_in_child(Body body) {
  ChildOutput r;
  int fd[2];
  if (pipe(fd) != 0)
    return r;
  pid_t pid = fork();
  if (pid < 0)
    return r;
  if (pid == 0) {
    close(fd[0]);
    int rc = 0;
    std::string out;
    try {
      out = body();
    } catch (const std::exception& ex) {
      std::fprintf(stderr, "child: %s\n", ex.what());
      rc = 3;
    }
    if (write(fd[1], out.data(), out.size()) != static_cast<ssize_t>(out.size()))
      rc = 4;
    _exit(rc);
  }
  close(fd[1]);
  char buf[4096];
  for (ssize_t n; (n = read(fd[0], buf, sizeof buf)) > 0;)
    r.text.append(buf, static_cast<size_t>(n));
  close(fd[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  r.ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  return r;
}

// The numbers of a child's text (one per line or space-separated), in order.
inline std::vector<double> numbers_of(const std::string& text) {
  std::vector<double> v;
  std::istringstream in(text);
  for (double d; in >> d;)
    v.push_back(d);
  return v;
}
