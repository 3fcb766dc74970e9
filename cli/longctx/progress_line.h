#pragma once
// A line on stderr saying what a long command is doing while it runs (`plan`, `max-context`):
// only when stderr is a terminal, so scripts, pipes and the recorded answers see nothing;
// drawn from two seconds on and redrawn twice a second with the time spent, the stage running
// (the command's own stages, else the planner's: planner/search/progress.h) and, once one has
// finished, an estimate of the time left (the rest taking as long as those did on average);
// erased when the command is done.
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

namespace longctx::cli {

class ProgressLine {
 public:
  // `what`: "searching llama-3.1-8b on 8 x h100-80gb". Draws nothing when stderr is no terminal.
  explicit ProgressLine(std::string what);
  ~ProgressLine();  // stops drawing and erases the line
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;

  // `done` of `total` stages finished; `now` names the one running ("stack hf").
  // REQUIRES: 0 <= done <= total.
  void stage(int done, int total, std::string now);

 private:
  void draw_until_stopped();
  std::string line(std::chrono::steady_clock::duration elapsed) const;  // REQUIRES: mutex_ held

  std::string what_, now_;
  int done_ = 0, total_ = 0;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::duration stages_took_{};  // the finished stages' time, for the estimate
  bool stop_ = false, drawn_ = false;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::thread drawer_;
};

}  // namespace longctx::cli
