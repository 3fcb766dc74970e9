// The temporaries open now, and the handler that removes them (interrupted_writes.h). The
// handler may run between any two instructions of the writer: it reads only fixed arrays and
// calls only async-signal-safe functions (unlink, signal, raise).
#include "common/interrupted_writes.h"

#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstring>

namespace longctx {
namespace {

constexpr int kSlots = 64;
constexpr std::size_t kPathBytes = 4096;  // PATH_MAX: a longer path goes unnoted

char g_paths[kSlots][kPathBytes];
std::atomic<bool> g_taken[kSlots];  // a slot being written or holding a path
std::atomic<bool> g_noted[kSlots];  // g_paths[i] is a temporary to remove

extern "C" void remove_temporaries_and_end(int signal) {
  for (int i = 0; i < kSlots; ++i)
    if (g_noted[i].load(std::memory_order_acquire)) ::unlink(g_paths[i]);
  std::signal(signal, SIG_DFL);
  std::raise(signal);
}

}  // namespace

void note_temporary(const std::string& path) {
  if (path.size() >= kPathBytes) return;
  for (int i = 0; i < kSlots; ++i) {
    bool free = false;
    if (!g_taken[i].compare_exchange_strong(free, true, std::memory_order_acq_rel)) continue;
    std::memcpy(g_paths[i], path.c_str(), path.size() + 1);
    g_noted[i].store(true, std::memory_order_release);
    return;
  }
}

void forget_temporary(const std::string& path) {
  for (int i = 0; i < kSlots; ++i)
    if (g_noted[i].load(std::memory_order_acquire) && path == g_paths[i]) {
      g_noted[i].store(false, std::memory_order_release);
      g_taken[i].store(false, std::memory_order_release);
      return;
    }
}

void remove_temporaries_when_interrupted() {
  static const bool installed = [] {
    for (const int s : {SIGINT, SIGTERM, SIGHUP}) {
      struct sigaction now {};
      if (::sigaction(s, nullptr, &now) != 0 || now.sa_handler != SIG_DFL) continue;
      struct sigaction mine {};
      mine.sa_handler = &remove_temporaries_and_end;
      sigemptyset(&mine.sa_mask);
      ::sigaction(s, &mine, nullptr);
    }
    return true;
  }();
  (void)installed;
}

}  // namespace longctx
