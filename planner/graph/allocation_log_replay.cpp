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

}  // namespace

Result<AllocationLogReplay> replay_allocation_log(const std::string& text, const AllocatorSettings& settings,
                                                  const std::string& field) {
  // Logs written before `returned` lines existed free a block when its tensor frees it.
  const bool has_returns = text.find(" returned ") != std::string::npos;
  std::map<std::string, CachingAllocatorModel> pools;  // by stream
  struct Live {
    std::string stream;
    int handle = -1;
  };
  std::map<std::string, Live> live;  // by address
  AllocationLogReplay r;
  std::int64_t measured = 0;
  auto modelled = [&] {
    std::int64_t sum = 0;
    for (const auto& [stream, m] : pools) sum += m.reserved();
    return sum;
  };
  // A row per stretch of lines under one phase name: a phase of the second step is its own row.
  auto phase_of = [&](const std::string& name) -> ReservedByPhase& {
    if (r.phases.empty() || r.phases.back().phase != name) {
      std::int64_t largest = 0;
      for (const auto& [stream, m] : pools) largest = std::max(largest, m.largest_free_block());
      r.phases.push_back({name, measured, modelled(), largest});
    }
    return r.phases.back();
  };
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
    if (e.kind == "host") continue;
    const bool request = e.kind == "device" && e.sign == '+';
    if (e.kind == "segment") {
      measured += e.sign == '+' ? e.bytes : -e.bytes;
    } else if (request) {
      auto [it, fresh] = pools.try_emplace(e.stream, settings);
      live[e.addr] = {e.stream, it->second.allocate(std::max<std::int64_t>(e.bytes, 1))};
      ++r.requests;
    } else if (e.kind == (has_returns ? "returned" : "device")) {
      auto it = live.find(e.addr);
      if (it == live.end())
        return Error::bad_input(field, fmt::format("line {} frees the block at {}, which no earlier line handed out; "
                                                   "pass the whole log, from the run's first CUDA allocation",
                                                   number, e.addr));
      pools.at(it->second.stream).free(it->second.handle);
      live.erase(it);
    }
    // Reserved bytes change only at requests and segments; one sum per line serves every figure.
    const std::int64_t model = modelled();
    if (request) {
      const std::int64_t gap = std::llabs(model - measured);
      if (gap > r.largest_difference) r.largest_difference = gap;
      if (gap != 0 && r.first_divergent_line == 0) {
        r.first_divergent_line = number;
        r.first_divergent_phase = e.phase;
        r.measured_at_divergence = measured;
        r.modelled_at_divergence = model;
      }
    }
    ReservedByPhase& p = phase_of(e.phase);
    p.measured_peak = std::max(p.measured_peak, measured);
    p.modelled_peak = std::max(p.modelled_peak, model);
    r.measured_peak_reserved = std::max(r.measured_peak_reserved, measured);
    r.modelled_peak_reserved = std::max(r.modelled_peak_reserved, model);
  }
  r.streams = static_cast<int>(pools.size());
  return r;
}

}  // namespace longctx
