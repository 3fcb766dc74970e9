// Fuzzes the export writers with hostile strings: the fuzzer's bytes become the model's name
// (as an edited plan's model.name or a --model folder's name would), split at the first 0xFF
// byte into the name and the hardware's name, in a plan every stack can export; each stack's
// files are then compared with the same export of a plainly named plan.
// Contract checked: no crash or exception; every file is valid UTF-8; JSON files parse and
// hold the same keys; YAML and TOML files have the same number of lines, each line the same
// up to its first '"' (the key or table it writes; comment lines stay comment lines): no
// byte of a name ends its string or its comment and starts a key, a table or a document.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "contract.h"

#include "planner/core/plan.h"
#include "planner/io/export.h"
#include "planner/stacks/profile.h"

using longctx::fuzz::fail;

namespace {

const longctx::Plan& base_plan() {
  static const longctx::Plan p = [] {
    longctx::Plan q;
    q.model = longctx::load_model("tiny-gqa").value();
    q.cluster.hardware = longctx::load_hardware("h100-80gb").value();
    q.cluster.shape = {1, 8};
    q.cluster.device_budget_bytes = q.cluster.hardware.device_memory_bytes;
    q.cluster.host_budget_bytes_per_node = q.cluster.hardware.host_memory_bytes_per_node;
    q.train.seq = 4096;
    q.parallel.sharding = longctx::Sharding::Zero3;
    return q;
  }();
  return p;
}

bool valid_utf8(const std::string& s) {
  std::size_t i = 0;
  while (i < s.size()) {
    const auto b = static_cast<unsigned char>(s[i]);
    const int extra = b < 0x80 ? 0 : (b & 0xE0) == 0xC0 ? 1 : (b & 0xF0) == 0xE0 ? 2 : (b & 0xF8) == 0xF0 ? 3 : -1;
    if (extra < 0 || (extra > 0 && i + static_cast<std::size_t>(extra) >= s.size())) return false;
    for (int k = 1; k <= extra; ++k)
      if ((static_cast<unsigned char>(s[i + static_cast<std::size_t>(k)]) & 0xC0) != 0x80) return false;
    i += static_cast<std::size_t>(extra) + 1;
  }
  return true;
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out(1);
  for (char c : text) {
    if (c == '\n') out.emplace_back();
    else out.back() += c;
  }
  return out;
}

// A line's text up to its first quote, double or single: where a name may stand (a YAML or
// shell "value", launch.sh's MODEL_OF_PLAN='name'), what comes before it must not change.
std::string before_quote(const std::string& line) { return line.substr(0, line.find_first_of("\"'")); }

void same_keys(const nlohmann::json& a, const nlohmann::json& b, const std::string& file) {
  if (a.type() != b.type()) fail("a JSON value changed type:", file);
  if (a.is_object()) {
    if (a.size() != b.size()) fail("a JSON object gained or lost keys:", file);
    for (const auto& [k, v] : a.items()) {
      if (!b.contains(k)) fail("a JSON key changed:", file + " " + k);
      same_keys(v, b[k], file);
    }
  }
}

void compare(const std::string& name, const std::string& got, const std::string& plain) {
  if (!valid_utf8(got)) fail("an exported file is not UTF-8:", name);
  if (name.ends_with(".json")) {
    const auto j = nlohmann::json::parse(got, nullptr, false);
    if (j.is_discarded()) fail("an exported JSON file does not parse:", name);
    same_keys(nlohmann::json::parse(plain), j, name);
    return;
  }
  const auto a = lines(plain), b = lines(got);
  if (a.size() != b.size()) fail("a name added or removed lines in", name);
  for (std::size_t i = 0; i < a.size(); ++i)
    if (before_quote(a[i]) != before_quote(b[i]) && !(a[i].starts_with("#") && b[i].starts_with("#")))
      fail("a name changed what a line writes in", name + ": " + b[i]);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  const auto split = bytes.find('\xff');
  longctx::Plan p = base_plan();
  p.model.name = bytes.substr(0, split);
  if (split != std::string::npos) p.cluster.hardware.name = bytes.substr(split + 1);
  for (const longctx::StackProfile* stack : longctx::stack_profiles()) {
    const longctx::StackExporter& to = *stack->exporter;
    const auto plain = longctx::export_plan(base_plan(), to);
    if (!plain) continue;  // a plan this stack does not export; not the writer's concern here
    const auto got = longctx::export_plan(p, to);
    if (!got) fail("a name made an exportable plan unexportable:", got.error().what());
    for (const auto& [name, text] : got->files) compare(name, text, plain->files.at(name));
  }
  return 0;
}
