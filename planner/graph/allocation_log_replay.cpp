#include "planner/graph/allocation_log_replay.h"

#include <cstdlib>
#include <map>
#include <sstream>

#include <fmt/format.h>

namespace longctx {
namespace {

struct Event {
  std::string phase, kind;  // kind: device, returned, segment, host
  char sign = '+';
  std::int64_t bytes = 0;
  std::string stream, addr;
};

// One line of the log, or false when it is not of its forms.
bool parse(const std::string& line, Event& e) {
  std::istringstream in(line);
  std::string amount;
  if (!(in >> e.phase >> e.kind >> amount) || amount.size() < 2 || (amount[0] != '+' && amount[0] != '-'))
    return false;
  e.sign = amount[0];
  char* end = nullptr;
  e.bytes = std::strtoll(amount.c_str() + 1, &end, 10);
  if (*end != '\0' || e.bytes < 0) return false;
  if (e.kind == "host") return true;
  if (e.kind != "device" && e.kind != "returned" && e.kind != "segment") return false;
  std::string word, total;
  if (e.kind != "returned" && !(in >> word >> total && word == "->")) return false;
  if (!(in >> word >> e.stream) || word != "stream") return false;
  return static_cast<bool>(in >> word >> e.addr) && word == "addr";
}

// The allocator model of each stream driven by the log's lines, beside the reserved bytes the
// log measured, line by line.
class Replayer {
 public:
  Replayer(const AllocatorSettings& settings, bool has_returns, const std::string& field)
      : settings_(settings), has_returns_(has_returns), field_(field) {}

  // Line `number`'s event applied to the models; BadInput for a block freed that no earlier
  // line handed out.
  Result<bool> apply(const Event& e, std::int64_t number) {
    if (e.kind == "host") return true;
    const bool request = e.kind == "device" && e.sign == '+';
    if (e.kind == "segment") {
      measured_ += e.sign == '+' ? e.bytes : -e.bytes;
    } else if (request) {
      auto [it, fresh] = pools_.try_emplace(e.stream, settings_);
      live_[e.addr] = {e.stream, it->second.allocate(std::max<std::int64_t>(e.bytes, 1))};
      ++r_.requests;
    } else if (e.kind == (has_returns_ ? "returned" : "device")) {
      auto it = live_.find(e.addr);
      if (it == live_.end())
        return Error::bad_input(field_, fmt::format("line {} frees the block at {}, which no earlier line handed out; "
                                                    "pass the whole log, from the run's first CUDA allocation",
                                                    number, e.addr));
      pools_.at(it->second.stream).free(it->second.handle);
      live_.erase(it);
    }
    record(e, number, request);
    return true;
  }

  AllocationLogReplay finish() {
    r_.streams = static_cast<int>(pools_.size());
    return std::move(r_);
  }

 private:
  struct Live {
    std::string stream;
    int handle = -1;
  };

  std::int64_t modelled() const {
    std::int64_t sum = 0;
    for (const auto& [stream, m] : pools_) sum += m.reserved();
    return sum;
  }

  // A row per stretch of lines under one phase name: a phase of the second step is its own row.
  ReservedByPhase& phase_of(const std::string& name) {
    if (r_.phases.empty() || r_.phases.back().phase != name) {
      std::int64_t largest = 0;
      for (const auto& [stream, m] : pools_) largest = std::max(largest, m.largest_free_block());
      r_.phases.push_back({name, measured_, modelled(), largest});
    }
    return r_.phases.back();
  }

  // The figures after the line: the first divergence at a request, and the peaks.
  void record(const Event& e, std::int64_t number, bool request) {
    // Reserved bytes change only at requests and segments; one sum per line serves every figure.
    const std::int64_t model = modelled();
    if (request) {
      const std::int64_t gap = std::llabs(model - measured_);
      if (gap > r_.largest_difference) r_.largest_difference = gap;
      if (gap != 0 && r_.first_divergent_line == 0) {
        r_.first_divergent_line = number;
        r_.first_divergent_phase = e.phase;
        r_.measured_at_divergence = measured_;
        r_.modelled_at_divergence = model;
      }
    }
    ReservedByPhase& p = phase_of(e.phase);
    p.measured_peak = std::max(p.measured_peak, measured_);
    p.modelled_peak = std::max(p.modelled_peak, model);
    r_.measured_peak_reserved = std::max(r_.measured_peak_reserved, measured_);
    r_.modelled_peak_reserved = std::max(r_.modelled_peak_reserved, model);
  }

  const AllocatorSettings& settings_;
  const bool has_returns_;
  const std::string& field_;
  std::map<std::string, CachingAllocatorModel> pools_;  // by stream
  std::map<std::string, Live> live_;                    // by address
  AllocationLogReplay r_;
  std::int64_t measured_ = 0;
};

}  // namespace

Result<AllocationLogReplay> replay_allocation_log(const std::string& text, const AllocatorSettings& settings,
                                                  const std::string& field) {
  // Logs written before `returned` lines existed free a block when its tensor frees it.
  Replayer replay(settings, text.find(" returned ") != std::string::npos, field);
  std::istringstream in(text);
  std::string line;
  std::int64_t number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line.empty()) continue;
    Event e;
    if (!parse(line, e))
      return Error::bad_input(field, fmt::format("line {} is not an allocation-log line: '{}'; pass a file written by "
                                                 "`longctx run --device cuda --allocation-log`",
                                                 number, line.substr(0, 120)));
    if (auto r = replay.apply(e, number); !r) return r.error();
  }
  return replay.finish();
}

}  // namespace longctx
