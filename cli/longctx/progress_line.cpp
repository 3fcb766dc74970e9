#include "cli/longctx/progress_line.h"

#include <algorithm>
#include <cstdio>

#include <fmt/format.h>
#include <unistd.h>

#include "planner/search/progress.h"

namespace longctx::cli {

namespace {
constexpr auto kQuietFor = std::chrono::seconds(2);      // a command done sooner draws nothing
constexpr auto kRedraw = std::chrono::milliseconds(500);
}  // namespace

ProgressLine::ProgressLine(std::string what) : what_(std::move(what)) {
  if (::isatty(STDERR_FILENO)) drawer_ = std::thread([this] { draw_until_stopped(); });
}

ProgressLine::~ProgressLine() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (drawer_.joinable()) drawer_.join();
}

void ProgressLine::stage(int done, int total, std::string now) {
  std::lock_guard lock(mutex_);
  if (done > done_) stages_took_ = std::chrono::steady_clock::now() - start_;
  done_ = done;
  total_ = total;
  now_ = std::move(now);
}

std::string ProgressLine::line(std::chrono::steady_clock::duration elapsed) const {
  const double spent = std::chrono::duration<double>(elapsed).count();
  std::string s = fmt::format("{}{} ... {:.0f} s", what_, now_.empty() ? "" : fmt::format(" ({})", now_), spent);
  // The command's own stages, else the planner's (planner/search/progress.h).
  const bool own = total_ > 0;
  const int done = own ? done_ : search_progress().done(), total = own ? total_ : search_progress().total();
  const double took = own ? std::chrono::duration<double>(stages_took_).count() : spent;
  if (total > 0) s += fmt::format(", stage {} of {}", std::min(done + 1, total), total);
  if (done > 0 && done < total) {
    // The stages left taking as long as the finished ones did on average.
    const double left = std::max(0.0, took / done * total - spent);
    s += fmt::format(", about {:.0f} s left", left);
  }
  return s;
}

void ProgressLine::draw_until_stopped() {
  std::unique_lock lock(mutex_);
  if (wake_.wait_for(lock, kQuietFor, [this] { return stop_; })) return;
  while (!stop_) {
    // \r and "erase to the end of the line" (ECMA-48 EL): one line, redrawn in place.
    std::fputs(fmt::format("\r\033[K{}", line(std::chrono::steady_clock::now() - start_)).c_str(), stderr);
    std::fflush(stderr);
    drawn_ = true;
    wake_.wait_for(lock, kRedraw, [this] { return stop_; });
  }
  if (drawn_) {
    std::fputs("\r\033[K", stderr);
    std::fflush(stderr);
  }
}

}  // namespace longctx::cli
