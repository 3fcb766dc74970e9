#pragma once
// How far the planner's current long call (max_context) has come, for a progress line that
// another thread draws: the stages it expects and how many are done. One such call at a time
// in a process (the CLI's); relaxed atomics, since the figures are only displayed.
#include <atomic>

namespace longctx {

class SearchProgress {
 public:
  void expect(int stages) {  // a new call: none done of `stages`
    done_.store(0, std::memory_order_relaxed);
    total_.store(stages, std::memory_order_relaxed);
  }
  void finish_stage() { done_.fetch_add(1, std::memory_order_relaxed); }
  int done() const { return done_.load(std::memory_order_relaxed); }
  int total() const { return total_.load(std::memory_order_relaxed); }

 private:
  std::atomic<int> done_{0}, total_{0};
};

// The process's one instance.
inline SearchProgress& search_progress() {
  static SearchProgress progress;
  return progress;
}

}  // namespace longctx
