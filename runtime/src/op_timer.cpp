#include "longctx/runtime/op_timer.h"

#include <chrono>
#include <memory>
#include <vector>

#include <ATen/record_function.h>

#include "longctx/runtime/memory_meter.h"

namespace longctx::runtime {
namespace {

using Clock = std::chrono::steady_clock;

// The operators open on the timed thread, innermost last: each one's start and the time of
// the operators it called so far, which its own self time excludes.
struct Frame {
  Clock::time_point start;
  double children_s = 0;
};
thread_local std::vector<Frame>* open_frames = nullptr;  // set on the timed thread only

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction&) {
  if (open_frames) open_frames->push_back({Clock::now(), 0});
  return nullptr;
}

void on_end(const at::RecordFunction& fn, at::ObserverContext*) {
  if (!open_frames || open_frames->empty()) return;
  const Frame f = open_frames->back();
  open_frames->pop_back();
  const double total = std::chrono::duration<double>(Clock::now() - f.start).count();
  if (!open_frames->empty()) open_frames->back().children_s += total;
  if (auto* meter = active_meter()) meter->on_op(fn.name(), total - f.children_s);
}

thread_local std::vector<Frame> frames;

}  // namespace

OpTimer::OpTimer() {
  frames.clear();
  open_frames = &frames;
  // Operators and autograd's backward nodes; not user scopes or TorchScript's.
  handle_ = at::addGlobalCallback(
      at::RecordFunctionCallback(&on_start, &on_end)
          .scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION}));
}

OpTimer::~OpTimer() {
  at::removeCallback(handle_);
  open_frames = nullptr;
}

}  // namespace longctx::runtime
