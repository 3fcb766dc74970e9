#pragma once
// Tests of the `longctx` binary: each test gets its own temporary folder and runs the binary
// as a child process.
#include <gtest/gtest.h>

#include <dirent.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "planner/core/plan.h"
#include "tests/test_paths.h"

namespace longctx::runtime::testing {

struct CliOutput {
  int status = -1;  // the exit status; -1 when killed by a signal
  std::string out, err;
};

inline std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class CliTest : public ::testing::Test {
 protected:
  // Not std::filesystem: libtorch.so exports its own copy of some of it, built for another ABI.
  std::string dir_;
  void SetUp() override {
    char tmpl[] = "/tmp/longctx_cli_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::system(("rm -rf " + dir_).c_str()); }
  std::string path(const std::string& name) const { return dir_ + "/" + name; }
  std::string write(const Plan& p, const std::string& name) {
    EXPECT_TRUE(write_plan_file(p, path(name)).ok());
    return path(name);
  }
  // `longctx ARGS` (the planner binary, which hands `run` over to longctx-runtime).
  CliOutput run_cli(const std::string& args) { return run_under("", args); }
  // `PREFIX; longctx ARGS` in a shell: PREFIX sets up the child (a ulimit, say).
  CliOutput run_under(const std::string& prefix, const std::string& args) {
    const std::string err = path("stderr.txt");
    const std::string line = longctx::testing::longctx_cli() + " " + args + " 2>" + err;
    const std::string cmd = prefix.empty() ? line : "sh -c '" + prefix + "; exec " + line + "'";
    CliOutput o;
    std::FILE* p = ::popen(cmd.c_str(), "r");
    char buf[4096];
    while (std::size_t n = std::fread(buf, 1, sizeof buf, p)) o.out.append(buf, n);
    const int rc = ::pclose(p);
    o.status = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
    o.err = slurp(err);
    return o;
  }
};

// Starts `longctx ARGS` as its own process, its stdout and stderr into the files `out` and
// `err`, with `env` ("NAME=value") added to its environment; returns its pid (-1 if fork
// failed). Everything the child needs is made before fork: it only redirects and execs.
inline pid_t spawn_cli(const std::vector<std::string>& args, const std::string& out, const std::string& err,
                       const std::vector<std::string>& env = {}) {
  std::vector<std::string> owned = {longctx::testing::longctx_cli()};
  owned.insert(owned.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : owned) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> vars = env;
  const int out_fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  const int err_fd = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  const pid_t pid = ::fork();
  if (pid == 0) {
    for (auto& v : vars) ::putenv(v.data());
    ::dup2(out_fd, 1);
    ::dup2(err_fd, 2);
    ::execv(longctx::testing::longctx_cli().c_str(), argv.data());
    ::_exit(127);
  }
  ::close(out_fd);
  ::close(err_fd);
  return pid;
}

// Every name in dir, hidden ones too (a temporary left behind would be one), sorted.
inline std::vector<std::string> all_names(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (const dirent* e = ::readdir(d))
      if (std::string(e->d_name) != "." && std::string(e->d_name) != "..") names.emplace_back(e->d_name);
    ::closedir(d);
  }
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace longctx::runtime::testing
