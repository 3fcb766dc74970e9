#include "cli/longctx/local_launcher.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <thread>

namespace longctx::cli {
namespace {

int free_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 29500;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  int port = 29500;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0)
    port = ntohs(addr.sin_port);
  ::close(fd);
  return port;
}

struct Child {
  pid_t pid = -1;
  int out_fd = -1;
  bool done = false;
  std::chrono::steady_clock::time_point stopped_since{};  // when it was first seen stopped; {} while it runs
};

// Whether a process is stopped (state T) or stopped under a tracer (t): /proc/PID/stat's
// third field, after the command name in parentheses (which may itself hold spaces).
bool is_stopped(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return false;
  const auto close = line.rfind(')');
  if (close == std::string::npos || close + 2 >= line.size()) return false;
  const char state = line[close + 2];
  return state == 'T' || state == 't';
}

// The first of SIGINT, SIGTERM and SIGHUP the launcher got while its ranks run, or 0.
volatile sig_atomic_t g_interrupt = 0;

void note_interrupt(int sig) {
  if (g_interrupt == 0) g_interrupt = sig;
}

constexpr int kInterrupts[] = {SIGINT, SIGTERM, SIGHUP};
// Each interrupt's disposition before the launch: what a rank starts with (a caught one is the
// default after exec anyway), and what the launcher restores.
struct sigaction g_before[std::size(kInterrupts)];

// While the ranks run, the launcher's SIGINT, SIGTERM and SIGHUP are noted for the loop to pass
// on (without SA_RESTART, so the loop's poll returns at once), except one the launcher was
// started ignoring (nohup's SIGHUP, a background job's SIGINT), which its ranks ignore too; the
// dispositions before are restored after.
class InterruptsNoted {
 public:
  InterruptsNoted() {
    g_interrupt = 0;
    struct sigaction a {};
    a.sa_handler = note_interrupt;
    sigemptyset(&a.sa_mask);
    for (std::size_t i = 0; i < std::size(kInterrupts); ++i) {
      ::sigaction(kInterrupts[i], nullptr, &g_before[i]);
      if (g_before[i].sa_handler != SIG_IGN) ::sigaction(kInterrupts[i], &a, nullptr);
    }
  }
  ~InterruptsNoted() {
    for (std::size_t i = 0; i < std::size(kInterrupts); ++i) ::sigaction(kInterrupts[i], &g_before[i], nullptr);
  }
  InterruptsNoted(const InterruptsNoted&) = delete;
  InterruptsNoted& operator=(const InterruptsNoted&) = delete;
};

// The interrupts held back, for a fork: a signal meant for a rank that arrives before it
// execs would otherwise reach only the launcher's handler, copied into it, and be lost.
sigset_t interrupt_set() {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : kInterrupts) sigaddset(&set, sig);
  return set;
}

// In the child, after fork: the torchrun environment, stdout into the pipe, then exec.
// Never returns.
[[noreturn]] void exec_rank(const std::string& program, const std::vector<std::string>& args, int rank, int world, int port,
                            pid_t launcher, int fds[2]) {
  ::setpgid(0, 0);  // its own process group: stopping a rank stops what it started too
  // The interrupts as before the launch, then let through (one held back since the fork acts now).
  for (std::size_t i = 0; i < std::size(kInterrupts); ++i) ::sigaction(kInterrupts[i], &g_before[i], nullptr);
  const sigset_t held = interrupt_set();
  ::sigprocmask(SIG_UNBLOCK, &held, nullptr);
  // A launcher killed outright (SIGKILL) cannot stop its ranks: the kernel does.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != launcher) ::_exit(1);
  ::dup2(fds[1], STDOUT_FILENO);
  ::close(fds[0]);
  ::close(fds[1]);
  const std::string r = std::to_string(rank), w = std::to_string(world), p = std::to_string(port);
  ::setenv("RANK", r.c_str(), 1);
  ::setenv("LOCAL_RANK", r.c_str(), 1);
  ::setenv("WORLD_SIZE", w.c_str(), 1);
  ::setenv("LOCAL_WORLD_SIZE", w.c_str(), 1);
  ::setenv("MASTER_ADDR", "127.0.0.1", 1);
  ::setenv("MASTER_PORT", p.c_str(), 1);
  std::vector<std::string> owned = {program};
  owned.insert(owned.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : owned) argv.push_back(a.data());
  argv.push_back(nullptr);
  ::execv(program.c_str(), argv.data());
  std::fprintf(stderr, "rank %d: cannot start %s: %s\n", rank, program.c_str(), std::strerror(errno));
  ::_exit(127);
}

// The ranks of one launch: started, their output collected, reaped, and stopped together.
class Ranks {
 public:
  Ranks(int n, LaunchResult& r) : children_(static_cast<std::size_t>(n)), r_(r) { r_.ranks.resize(static_cast<std::size_t>(n)); }

  // Starts rank i; false (with r.error set) when the launch itself fails.
  bool start(const std::string& program, const std::vector<std::string>& args, int i, int port) {
    r_.ranks[idx(i)].rank = i;
    int fds[2];
    if (::pipe(fds) != 0) {
      r_.error = std::string("pipe: ") + std::strerror(errno);
      return false;
    }
    const pid_t launcher = ::getpid();
    const sigset_t held = interrupt_set();
    sigset_t was;
    ::sigprocmask(SIG_BLOCK, &held, &was);
    const pid_t pid = ::fork();
    if (pid < 0) {
      ::sigprocmask(SIG_SETMASK, &was, nullptr);
      r_.error = std::string("fork: ") + std::strerror(errno);
      ::close(fds[0]);
      ::close(fds[1]);
      return false;
    }
    if (pid == 0) exec_rank(program, args, i, size(), port, launcher, fds);
    ::setpgid(pid, pid);  // also here, so a signal sent before the child ran setpgid finds the group
    ::sigprocmask(SIG_SETMASK, &was, nullptr);
    ::close(fds[1]);
    ::fcntl(fds[0], F_SETFL, ::fcntl(fds[0], F_GETFL) | O_NONBLOCK);
    children_[idx(i)] = {pid, fds[0], false};
    return true;
  }

  // Reads what rank i has written so far; closes its pipe at end of file.
  void drain(int i) {
    auto& c = children_[idx(i)];
    if (c.out_fd < 0) return;
    char buf[65536];
    for (;;) {
      const ssize_t got = ::read(c.out_fd, buf, sizeof buf);
      if (got > 0) {
        r_.ranks[idx(i)].output.append(buf, static_cast<std::size_t>(got));
        continue;
      }
      if (got == 0) {
        ::close(c.out_fd);
        c.out_fd = -1;
      }
      return;
    }
  }

  void stop_all(int sig) {
    for (auto& c : children_)
      if (c.pid > 0) ::kill(-c.pid, sig);  // the rank's whole group, even once the rank itself is gone
  }

  int started() const {
    int n = 0;
    for (const auto& c : children_) n += c.pid > 0;
    return n;
  }

  // Waits up to 50 ms for output and drains what came.
  void wait_for_output() {
    std::vector<pollfd> fds;
    std::vector<int> which;
    for (int i = 0; i < size(); ++i)
      if (children_[idx(i)].out_fd >= 0) {
        fds.push_back({children_[idx(i)].out_fd, POLLIN, 0});
        which.push_back(i);
      }
    if (!fds.empty()) ::poll(fds.data(), fds.size(), 50);
    else std::this_thread::sleep_for(std::chrono::milliseconds(50));
    for (std::size_t k = 0; k < fds.size(); ++k)
      if (fds[k].revents) drain(which[k]);
  }

  // Reaps rank i if it has ended: its outcome, or nullptr while it runs.
  RankOutcome* reap(int i) {
    auto& c = children_[idx(i)];
    if (c.pid <= 0 || c.done) return nullptr;
    int status = 0;
    if (::waitpid(c.pid, &status, WNOHANG) != c.pid) return nullptr;
    c.done = true;
    drain(i);
    auto& out = r_.ranks[idx(i)];
    out.exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return &out;
  }

  // The first rank stopped for longer than `limit`, or -1.
  int stalled(std::chrono::milliseconds limit) {
    const auto now = std::chrono::steady_clock::now();
    for (int i = 0; i < size(); ++i) {
      auto& c = children_[idx(i)];
      if (c.pid <= 0 || c.done) continue;
      if (!is_stopped(c.pid)) {
        c.stopped_since = {};
        continue;
      }
      if (c.stopped_since == std::chrono::steady_clock::time_point{}) c.stopped_since = now;
      if (now - c.stopped_since >= limit) return i;
    }
    return -1;
  }

  int size() const { return static_cast<int>(children_.size()); }

 private:
  static std::size_t idx(int i) { return static_cast<std::size_t>(i); }
  std::vector<Child> children_;
  LaunchResult& r_;
};

}  // namespace

std::chrono::milliseconds stall_timeout_from_environment() {
  if (const char* v = std::getenv("LONGCTX_STALL_TIMEOUT_S"); v && *v) {
    char* end = nullptr;
    const long s = std::strtol(v, &end, 10);
    if (*end == '\0' && s >= 1 && s <= 3600) return std::chrono::seconds(s);
    std::fprintf(stderr, "longctx: LONGCTX_STALL_TIMEOUT_S='%s' is not 1 to 3600 seconds; using 10\n", v);
  }
  return std::chrono::seconds(10);
}

LaunchResult launch_local_ranks(const std::string& program, const std::vector<std::string>& args, const LaunchOptions& o) {
  LaunchResult r;
  const int port = o.master_port > 0 ? o.master_port : free_loopback_port();
  const InterruptsNoted interrupts;
  Ranks ranks(o.ranks, r);
  for (int i = 0; i < o.ranks; ++i)
    if (!ranks.start(program, args, i, port)) break;

  int running = ranks.started();
  if (!r.error.empty()) ranks.stop_all(SIGKILL);
  // When one rank fails the others get SIGTERM, then SIGKILL once the grace period is over.
  std::chrono::steady_clock::time_point kill_at{};
  bool stopping = !r.error.empty();
  int stalled = -1;
  while (running > 0) {
    ranks.wait_for_output();
    // Interrupted: every rank gets the same signal and the grace period to clean up in.
    if (g_interrupt != 0 && r.interrupted == 0) {
      r.interrupted = g_interrupt;
      ranks.stop_all(r.interrupted);
      if (!stopping) kill_at = std::chrono::steady_clock::now() + o.grace;
      stopping = true;
    }
    // A stopped rank never fails by itself: its peers would wait for it in a collective
    // until their own timeout and be reported instead. SIGKILL: a stopped process only
    // acts on SIGTERM once continued.
    if (!stopping && (stalled = ranks.stalled(o.stall_timeout)) >= 0) {
      r.first_failed = stalled;
      stopping = true;
      ranks.stop_all(SIGKILL);
    }
    for (int i = 0; i < o.ranks; ++i) {
      RankOutcome* out = ranks.reap(i);
      if (!out) continue;
      --running;
      if (i == stalled) out->stalled = true;
      else if (stopping) out->stopped = true;
      if (out->exit_status != 0 && !stopping) {
        r.first_failed = i;
        stopping = true;
        ranks.stop_all(SIGTERM);
        kill_at = std::chrono::steady_clock::now() + o.grace;
      }
    }
    if (stopping && running > 0 && kill_at != std::chrono::steady_clock::time_point{} &&
        std::chrono::steady_clock::now() >= kill_at) {
      ranks.stop_all(SIGKILL);
      kill_at = {};
    }
  }
  if (stopping) ranks.stop_all(SIGKILL);  // whatever the stopped ranks started
  for (int i = 0; i < o.ranks; ++i) ranks.drain(i);
  return r;
}

}  // namespace longctx::cli
