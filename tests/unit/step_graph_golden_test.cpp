// The step graph, held byte for byte: every tensor (name, bytes, category, place, producer,
// last reader, persistent) and every op (name, phase, layer, kind, launches, inputs, outputs,
// workspaces, flops, memory traffic, collective) in order, for a broad set of models and
// technique combinations. A refactor of the step builder must leave every graph identical.
//
// tests/unit/golden/step_graph.txt holds one line per configuration: its key, its tensor and
// op counts, and a 64-bit FNV-1a hash of the graph's serialization. When a change to the graph
// is deliberate, regenerate the file and review the lines that moved:
//   LONGCTX_REGENERATE_GOLDEN=1 ./planner_unit_tests --gtest_filter='StepGraphGolden.*'
// To see what changed, dump every serialization before and after the change and diff them:
//   LONGCTX_GOLDEN_DUMP_DIR=/tmp/graphs ./planner_unit_tests --gtest_filter='StepGraphGolden.*'
#include <gtest/gtest.h>

#include <cstdlib>
#include <fmt/format.h>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "planner/stacks/step_builder.h"
#include "tests/test_paths.h"

namespace longctx {
namespace {

std::string golden_path() { return testing::source_path("tests/unit/golden/step_graph.txt"); }

std::string ids(const Ids& v) {
  std::string s;
  for (int i : v) s += fmt::format("{},", i);
  return s;
}

// Every field of every tensor and op, one line each, in graph order. Doubles are written in
// their shortest exact form, so equal text means equal values.
std::string serialize(const StepGraph& g) {
  std::string out;
  out.reserve(g.tensors().size() * 64 + g.ops().size() * 128);
  for (const TensorSpec& t : g.tensors())
    out += fmt::format("T {} {} {} {} {} {} {}\n", format(t.name), t.bytes, to_string(t.category),
                       t.place == Place::Host ? "host" : "device", t.producer, t.last_reader, t.persistent);
  for (const OpSpec& o : g.ops())
    out += fmt::format("O {} {} {} {} {} in={} out={} ws={} hws={} flops={} mem={} comm={} {} {} async={} host={}\n",
                       format(o.name), to_string(o.phase), o.layer, static_cast<int>(o.kind), o.launches,
                       ids(o.inputs), ids(o.outputs), o.workspace_bytes, o.host_workspace_bytes, o.flops,
                       o.memory_bytes, static_cast<int>(o.comm), o.comm_bytes, o.comm_group, o.comm_async, o.host_compute);
  return out;
}

std::uint64_t fnv1a(const std::string& s) {
  std::uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return h;
}

struct Layout {
  std::int64_t world;
  int ulysses;
};

struct Case {
  std::string key;
  StepInputs inputs;
};

// The primary axes form a full product (model x layout x sharding x checkpointing x
// attention); the secondary ones (tiles, backend, dtypes, offloads, sequence, micro-batch,
// prefix) turn with a counter at coprime periods, so each primary combination meets a
// different mix of them. Configurations validate() rejects are left out.
std::vector<Case> cases() {
  struct ModelSeqs {
    const char* name;
    std::int64_t seqs[3];
  };
  // Sequences on both sides of the CPU flash kernel's block thresholds (192, 512, 768).
  const ModelSeqs models[] = {{"tiny-gqa", {64, 256, 1024}},
                              {"tiny-odd", {128, 512, 768}},
                              {"llama-3.1-8b", {512, 4096, 32768}},
                              {"qwen3-8b", {1024, 8192, 16384}}};
  const Layout layouts[] = {{1, 1}, {2, 1}, {2, 2}, {4, 4}, {8, 2}, {8, 8}};
  const Sharding shardings[] = {Sharding::None, Sharding::Zero1, Sharding::Zero2, Sharding::Zero3};
  struct Ckpt {
    CheckpointPolicy policy;
    bool offload;
    const char* key;
  };
  const Ckpt ckpts[] = {{CheckpointPolicy::none(), false, "none"},
                        {CheckpointPolicy::full(), false, "full"},
                        {CheckpointPolicy::full(), true, "full+offload"},
                        {CheckpointPolicy::every_k(2), false, "every:2"},
                        {CheckpointPolicy::every_k(2), true, "every:2+offload"}};
  const int tiles[][2] = {{1, 1}, {4, 4}, {4, 1}, {1, 4}};
  const DType dtypes[][2] = {{DType::BF16, DType::FP32}, {DType::FP32, DType::FP32}, {DType::BF16, DType::BF16},
                             {DType::FP32, DType::BF16}};

  std::vector<Case> out;
  int counter = 0;
  for (const ModelSeqs& ms : models) {
    const ModelConfig model = load_model(ms.name).value();
    for (const Layout& lay : layouts) {
      for (Sharding sharding : shardings) {
        for (const Ckpt& ck : ckpts) {
          const std::int64_t local_heads = model.heads / lay.ulysses;
          std::vector<int> chunks = {0, 1};
          if (local_heads > 1) chunks.push_back(static_cast<int>(local_heads));
          for (int chunk : chunks) {
            const int i = counter++;
            StepInputs in;
            in.model = model;
            in.cluster = {1, lay.world};
            const int backend = i % 3;  // CUDA, CPU with one thread, CPU with four
            in.backend = backend == 0 ? Backend::Cuda : Backend::Cpu;
            in.cpu_threads = backend == 2 ? 4 : 1;
            in.train.seq = ms.seqs[i % 7 % 3];
            in.train.micro_batch = i % 11 == 3 ? 2 : 1;
            in.train.dtype = dtypes[i % 5 % 4][0];
            in.train.grad_dtype = dtypes[i % 5 % 4][1];
            ParallelConfig& p = in.parallel;
            p.sharding = sharding;
            p.ulysses = lay.ulysses;
            p.head_chunk = chunk;
            p.checkpoint = ck.policy;
            p.offload_checkpoints = ck.offload;
            p.mlp_tiles = tiles[i % 4][0];
            p.loss_tiles = tiles[i % 4][1];
            const int offload = i % 13 % 4;  // none, optimizer, parameters, both
            p.offload_optimizer = offload == 1 || offload == 3;
            p.offload_params = sharding == Sharding::Zero3 && offload >= 2;
            in.prefix_only = i % 9 == 4;
            if (!validate(in.model, in.cluster, in.train, p)) continue;
            const std::string key = fmt::format(
                "{} w{} u{} {} ckpt={} hc={} mlp{} loss{} {}/{} {} S{} b{} opt{} par{}{}", ms.name, lay.world, lay.ulysses,
                to_string(sharding), ck.key, chunk, p.mlp_tiles, p.loss_tiles, to_string(in.train.dtype),
                to_string(in.train.grad_dtype), backend == 0 ? "cuda" : fmt::format("cpu:t{}", in.cpu_threads),
                in.train.seq, in.train.micro_batch, p.offload_optimizer ? "-host" : "-dev",
                p.offload_params ? "-host" : "-dev", in.prefix_only ? " prefix" : "");
            out.push_back({key, in});
          }
        }
      }
    }
  }
  return out;
}

std::map<std::string, std::string> read_golden() {
  std::map<std::string, std::string> lines;
  std::ifstream f(golden_path());
  std::string line;
  while (std::getline(f, line)) {
    if (line.empty() || line[0] == '#') continue;
    const auto bar = line.find(" | ");
    if (bar != std::string::npos) lines[line.substr(0, bar)] = line.substr(bar + 3);
  }
  return lines;
}

TEST(StepGraphGolden, EveryGraphMatchesTheRecordedOne) {
  const std::vector<Case> all = cases();
  // The set must stay broad: a change to the enumeration that drops most of it is a bug here.
  ASSERT_GT(all.size(), 1000u);
  const char* dump_dir = std::getenv("LONGCTX_GOLDEN_DUMP_DIR");
  std::map<std::string, std::string> computed;
  for (const Case& c : all) {
    const StepGraph g = build_step(c.inputs);
    ASSERT_TRUE(g.check()) << c.key;
    const std::string text = serialize(g);
    computed[c.key] = fmt::format("{} tensors {} ops {:016x}", g.tensors().size(), g.ops().size(), fnv1a(text));
    if (dump_dir) {
      std::string file = c.key;
      for (char& ch : file) if (ch == '/' || ch == ' ') ch = '_';
      std::ofstream(fmt::format("{}/{}.txt", dump_dir, file)) << text;
    }
  }
  ASSERT_EQ(computed.size(), all.size()) << "two configurations share a key";

  if (std::getenv("LONGCTX_REGENERATE_GOLDEN")) {
    std::ofstream f(golden_path());
    f << "# Step graphs of tests/unit/step_graph_golden_test.cpp: key | tensors, ops, FNV-1a of the serialization.\n"
         "# Regenerate only for a deliberate change to the graph (see the test's header).\n";
    for (const auto& [key, value] : computed) f << key << " | " << value << "\n";
    GTEST_SKIP() << "regenerated " << golden_path() << " with " << computed.size() << " graphs";
  }

  const std::map<std::string, std::string> golden = read_golden();
  ASSERT_EQ(golden.size(), computed.size()) << "the golden file has a different set of configurations";
  int mismatches = 0;
  for (const auto& [key, value] : computed) {
    const auto it = golden.find(key);
    if (it == golden.end()) {
      ADD_FAILURE() << "not in the golden file: " << key;
    } else if (it->second != value) {
      ADD_FAILURE() << key << ": " << value << ", recorded " << it->second;
    } else {
      continue;
    }
    if (++mismatches == 20) FAIL() << "stopping after 20 differing graphs";
  }
}

}  // namespace
}  // namespace longctx
