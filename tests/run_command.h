// Running a command line from a test: its exit status and its stdout and stderr together.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace wren::testing_util {

struct CommandResult {
  int status;          // the exit status; -1 when it did not run or did not exit
  std::string output;  // stdout and stderr together
};

inline CommandResult run_command(const std::string& command) {
  const std::string cmd = command + " 2>&1";
  CommandResult r{-1, ""};
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  const int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

}  // namespace wren::testing_util
