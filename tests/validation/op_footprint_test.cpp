// Each piece of a runtime layer run alone on the CPU virtual device, under a meter counting
// from zero, against the planner's footprint of the same op for the same shapes: the most it
// allocates while it runs (its outputs plus its workspace) and what it leaves allocated
// (what it saves or returns), equal to the byte.
//
// The planner's figure is read from the step graph (build_step) by op name, so it holds
// whichever function of the planner builds the op. The Ulysses all-to-alls are not here:
// the meter counts a process and two ranks in one process would share it; the randomized
// grid (random_grid_test.cpp) holds them across processes. Ring attention is, one rank of
// the ring at a time, its peers played by a loopback backend that hands each hop's tensors
// back (LoopbackRing): what a rank allocates depends on the shapes it exchanges, not their
// values.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fmt/format.h>

#include "planner/stacks/step_builder.h"
#include "longctx/runtime/adamw.h"
#include "longctx/runtime/attention.h"
#include "longctx/runtime/checkpoint_store.h"
#include "longctx/runtime/loss.h"
#include "longctx/runtime/memory_meter.h"
#include "longctx/runtime/mlp.h"
#include "longctx/runtime/norm_rope.h"
#include "longctx/runtime/projection.h"
#include "longctx/runtime/ring_attention.h"
#include "longctx/runtime/ulysses.h"

namespace longctx::validation {
namespace {

using runtime::MemoryMeter;
using runtime::Pool;
using torch::Tensor;

// What an op allocates beyond what was live when it started: at most while it runs, and
// still after it returns (negative where it frees more than it keeps).
struct Footprint {
  std::int64_t device_peak = 0, device_kept = 0, host_peak = 0, host_kept = 0;
};
std::ostream& operator<<(std::ostream& os, const Footprint& f) {
  return os << "device peak " << f.device_peak << " kept " << f.device_kept << ", host peak " << f.host_peak << " kept "
            << f.host_kept;
}

int op_index(const StepGraph& g, const std::string& name) {
  for (std::size_t i = 0; i < g.ops().size(); ++i)
    if (format(g.ops()[i].name) == name) return static_cast<int>(i);
  ADD_FAILURE() << "the planner's step has no op " << name;
  return -1;
}

// The planner's footprint of the ops `first` .. `last` (consecutive in its schedule), as its
// simulator accounts them: at op i the tensors the range produced up to i that are still
// read at or after i, plus op i's workspace; after the range, those read after it. With
// `inputs_die`, inputs from before the range whose last reader is in it are freed after
// that reader (the test hands them over instead of holding them).
Footprint planned(const StepGraph& g, const std::string& first, const std::string& last, bool inputs_die = false) {
  const int a = op_index(g, first), b = op_index(g, last.empty() ? first : last);
  Footprint f;
  if (a < 0 || b < a) return f;
  auto live = [&](int i, Place place) {  // allocated by the range and live while op i runs
    std::int64_t bytes = 0;
    for (const auto& t : g.tensors()) {
      if (t.place != place || t.persistent) continue;
      const bool made = t.producer >= a && t.producer <= std::min(i, b) && t.last_reader >= i;
      const bool died = inputs_die && t.producer >= 0 && t.producer < a && t.last_reader >= a && t.last_reader < i;
      bytes += made ? t.bytes : died ? -t.bytes : 0;
    }
    return bytes;
  };
  for (int i = a; i <= b; ++i) {
    f.device_peak = std::max(f.device_peak, live(i, Place::Device) + g.op(i).workspace_bytes);
    f.host_peak = std::max(f.host_peak, live(i, Place::Host) + g.op(i).host_workspace_bytes);
  }
  f.device_kept = live(b + 1, Place::Device);
  f.host_kept = live(b + 1, Place::Host);
  return f;
}

// Runs `prepare` and then `f` under a fresh meter counting from zero, and reports what `f`
// allocated beyond what was live when it started. Tensors made before (the inputs, made
// without a meter or under an earlier one) never count, their release neither: only what
// `prepare` makes can be freed by `f` in the figures.
template <class Prepare, class F>
Footprint measure(Prepare&& prepare, F&& f) {
  auto meter = std::make_shared<MemoryMeter>(0, 0, torch::Device(torch::kCPU));
  if (std::getenv("OPLOG")) meter->set_log(stderr);
  runtime::MeterScope scope(meter);
  prepare();
  const std::int64_t dev = meter->current(Pool::Device), host = meter->current(Pool::Host);
  meter->reset_peaks();
  f();
  return {meter->peak(Pool::Device) - dev, meter->current(Pool::Device) - dev, meter->peak(Pool::Host) - host,
          meter->current(Pool::Host) - host};
}
template <class F>
Footprint measure(F&& f) {
  return measure([] {}, std::forward<F>(f));
}

// LibTorch wraps a number operand of an arithmetic op (x.add_(1.0), x.div_(h)) in an 8-byte
// tensor and a 4-byte copy in x's dtype for the op's duration, and nll_loss keeps a 4-byte
// total weight beside the loss: bookkeeping no plan counts. Device figures may exceed the
// planner's by this much, never fall short; an [n, h] temporary is thousands of bytes.
constexpr std::int64_t kWrappedScalarBytes = 16;

void expect_equal(const Footprint& measured, const Footprint& predicted, const std::string& what) {
  auto within = [](std::int64_t m, std::int64_t p) { return m >= p && m - p <= kWrappedScalarBytes; };
  EXPECT_TRUE(within(measured.device_peak, predicted.device_peak))
      << what << " device peak; measured " << measured << "; planner " << predicted;
  EXPECT_TRUE(within(measured.device_kept, predicted.device_kept))
      << what << " device kept; measured " << measured << "; planner " << predicted;
  EXPECT_EQ(measured.host_peak, predicted.host_peak) << what << " host peak; measured " << measured << "; planner "
                                                     << predicted;
  EXPECT_EQ(measured.host_kept, predicted.host_kept) << what << " host kept; measured " << measured << "; planner "
                                                     << predicted;
}

// One layer of a model with GQA (3 query heads a kv head), head_dim apart from hidden/heads,
// odd sizes; two samples of 200 tokens (the CPU flash kernel's 64-row blocks).
struct Shapes {
  ModelConfig m;
  std::int64_t b = 2, S = 200;
  DType dtype = DType::FP32;
  ParallelConfig p;

  std::int64_t n() const { return b * S; }
  torch::ScalarType st() const { return dtype == DType::BF16 ? torch::kBFloat16 : torch::kFloat; }
  Tensor randn(std::vector<std::int64_t> sizes, bool grad = true) const {
    return torch::randn(sizes, torch::TensorOptions().dtype(st())).requires_grad_(grad);
  }
  Tensor norm_weight(std::int64_t width) const { return (1 + 0.1 * torch::randn({width})).to(st()).requires_grad_(true); }
  StepGraph graph() const {
    StepInputs in;
    in.model = m;
    in.cluster = {1, sequence_ranks(p)};
    in.backend = Backend::Cpu;
    in.train.seq = S;
    in.train.micro_batch = b;
    in.train.dtype = dtype;
    in.train.grad_dtype = dtype;
    in.parallel = p;
    in.cpu_threads = 1;
    return build_step(in);
  }
};

Shapes shapes(DType dtype, bool qk_norm = false) {
  Shapes s;
  s.m.name = "footprint";
  s.m.model_type = qk_norm ? "qwen3" : "llama";
  s.m.hidden = 44;
  s.m.intermediate = 118;
  s.m.layers = 1;
  s.m.heads = 6;
  s.m.kv_heads = 2;
  s.m.head_dim = 10;
  s.m.vocab = 131;
  s.m.qk_norm = qk_norm;
  s.m.rms_norm_eps = 1e-6;
  s.dtype = dtype;
  return s;
}

// The same shapes with the plan's techniques set by `set`.
template <class F>
Shapes shapes_with(DType dtype, F&& set) {
  Shapes s = shapes(dtype);
  set(s.p);
  return s;
}

class OpFootprint : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    torch::set_num_threads(1);  // the planner's cpu_threads: the flash kernel's buffers are per thread
    torch::manual_seed(0);
    at::globalContext().setUserEnabledMkldnn(false);  // as run_plan sets it on the CPU virtual device
  }
  std::string name() const { return to_string(GetParam()); }
};

// Backpropagates `grads` from `outputs` into `inputs` (autograd::grad: nothing accumulated
// into .grad), keeping the input gradients alive until the meter has read them.
Footprint measure_backward(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grads,
                           const std::vector<Tensor>& inputs) {
  std::vector<Tensor> kept;
  return measure([&] { kept = torch::autograd::grad(outputs, inputs, grads, false, false, true); });
}

TEST_P(OpFootprint, RmsNormForwardAndBackward) {
  const auto s = shapes(GetParam());
  const auto g = s.graph();
  Tensor x = s.randn({s.b, s.S, s.m.hidden}), w = s.norm_weight(s.m.hidden);
  Tensor y;
  expect_equal(measure([&] { y = runtime::rms_norm(x, w, 1e-6); }), planned(g, "layer.0.attn_norm", ""),
               "rms_norm " + name());
  Tensor dy = s.randn({s.b, s.S, s.m.hidden}, false);
  // The planner's backward also sums the residual's gradient into the input's: not part of
  // the norm's own function (autograd adds it in place).
  expect_equal(measure_backward({y}, {dy}, {x, w}), planned(g, "layer.0.attn_norm.bwd", ""),
               "rms_norm backward " + name());
}

TEST_P(OpFootprint, QkvProjectionRopeAndQkNorm) {
  for (bool qk_norm : {false, true}) {
    const auto s = shapes(GetParam(), qk_norm);
    const auto g = s.graph();
    const auto H = s.m.heads, K = s.m.kv_heads, d = s.m.head_dim;
    Tensor xn = s.randn({s.b, s.S, s.m.hidden}), wq = s.randn({H * d, s.m.hidden}), wk = s.randn({K * d, s.m.hidden}),
           wv = s.randn({K * d, s.m.hidden});
    std::vector<Tensor> qkv;
    const std::string tag = fmt::format("{}{}", name(), qk_norm ? " qk-norm" : "");
    expect_equal(measure([&] { qkv = runtime::project(xn, {wq, wk, wv}); }), planned(g, "layer.0.attn.qkv", ""),
                 "q/k/v projection " + tag);
    Tensor q = qkv[0].view({s.b, s.S, H, d}), k = qkv[1].view({s.b, s.S, K, d});
    if (qk_norm) {
      Tensor qn_w = s.norm_weight(d), kn_w = s.norm_weight(d), qn, kn;
      expect_equal(measure([&] {
                     qn = runtime::rms_norm(q, qn_w, 1e-6);
                     kn = runtime::rms_norm(k, kn_w, 1e-6);
                   }),
                   planned(g, "layer.0.attn.q_norm", "layer.0.attn.k_norm"), "q/k norm " + tag);
      expect_equal(measure_backward({qn, kn}, {s.randn({s.b, s.S, H, d}, false), s.randn({s.b, s.S, K, d}, false)},
                                    {q, k, qn_w, kn_w}),
                   planned(g, "layer.0.attn.k_norm.bwd", "layer.0.attn.q_norm.bwd"), "q/k norm backward " + tag);
      q = qn.detach().requires_grad_(true);
      k = kn.detach().requires_grad_(true);
    }
    const auto tables = runtime::RopeTables::make(s.S, d, 10000.0, s.st(), torch::kCPU);
    Tensor qr, kr;
    expect_equal(measure([&] {
                   qr = runtime::rope(q, tables);
                   kr = runtime::rope(k, tables);
                 }),
                 planned(g, "layer.0.attn.rope.q", "layer.0.attn.rope.k"), "rope " + tag);
    expect_equal(measure_backward({qr, kr}, {s.randn({s.b, s.S, H, d}, false), s.randn({s.b, s.S, K, d}, false)},
                                  {q, k}),
                 planned(g, "layer.0.attn.rope.bwd", ""), "rope backward " + tag);
    std::vector<Tensor> dqkv = {s.randn(qkv[0].sizes().vec(), false), s.randn(qkv[1].sizes().vec(), false),
                                s.randn(qkv[2].sizes().vec(), false)};
    expect_equal(measure_backward(qkv, dqkv, {xn, wq, wk, wv}), planned(g, "layer.0.attn.qkv.bwd", ""),
                 "q/k/v projection backward " + tag);
  }
}

TEST_P(OpFootprint, AttentionWithAllHeads) {
  const auto s = shapes(GetParam());
  const auto g = s.graph();
  const auto H = s.m.heads, K = s.m.kv_heads, d = s.m.head_dim;
  Tensor q = s.randn({s.b, s.S, H, d}), k = s.randn({s.b, s.S, K, d}), v = s.randn({s.b, s.S, K, d});
  Tensor o;
  expect_equal(measure([&] { o = runtime::attention(q, k, v); }), planned(g, "layer.0.attn.flash", ""),
               "attention " + name());
  expect_equal(measure_backward({o}, {s.randn({s.b, s.S, H, d}, false)}, {q, k, v}),
               planned(g, "layer.0.attn.flash.bwd", ""), "attention backward " + name());
}

// The ring's peers, played by one process: a rank's send is received back by itself, as a
// copy into the buffer its receive allocated (the bytes a peer would send). Every hop
// completes at once. Values are the rank's own, so only memory is meaningful.
class LoopbackRing : public c10d::Backend {
 public:
  LoopbackRing(int rank, int size) : c10d::Backend(rank, size) {}
  const std::string getBackendName() const override { return "loopback-ring"; }
  c10::intrusive_ptr<c10d::Work> send(std::vector<Tensor>& tensors, int, int tag) override {
    in_flight_[tag] = tensors[0];
    return c10::make_intrusive<Done>();
  }
  c10::intrusive_ptr<c10d::Work> recv(std::vector<Tensor>& tensors, int, int tag) override {
    tensors[0].copy_(in_flight_.at(tag));
    in_flight_.erase(tag);
    return c10::make_intrusive<Done>();
  }
  // The all-gather exchange's gather and reduce-scatter (in-place sums on the CPU): the peers'
  // slots keep what they hold, which changes no allocation. The work holds the tensors until it
  // is destroyed, as Gloo's does (ProcessGroupGloo.cpp, AsyncAllreduceWork::inputs) and NCCL's
  // its outputs: a caller that keeps a finished work keeps its buffer.
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<Tensor>& tensors, const c10d::AllreduceOptions&) override {
    auto done = c10::make_intrusive<Done>();
    done->held = tensors;
    return done;
  }

 private:
  struct Done : c10d::Work {
    bool isCompleted() override { return true; }
    bool wait(std::chrono::milliseconds) override { return true; }
    std::vector<Tensor> held;
  };
  std::map<int, Tensor> in_flight_;
};

TEST_P(OpFootprint, RingAttentionEachRankOfTheRing) {
  struct Case { int ring; std::int64_t seq, b; bool qk_norm; std::int64_t kv_heads = 0; /* 0: the shapes' */ };
  // Blocks of 50, 34 (padded 204), 25 and 100 rows: the CPU kernel's 32- and 64-row blocks;
  // one sample (a query half's output gradient is contiguous) and two (it is not).
  // Ring 2 at 308 tokens of two samples with as many kv heads as query heads: the blocks'
  // kernels are small beside the fp32 dk/dv accumulators, so the all-gather's reduce-scatter
  // is the backward's peak.
  for (const Case c : {Case{2, 200, 2, false}, Case{3, 200, 2, true}, Case{4, 200, 1, false}, Case{2, 400, 1, false},
                       Case{3, 401, 2, false}, Case{2, 308, 2, false, 6}})
   for (const RingExchange exchange : {RingExchange::P2p, RingExchange::AllGather}) {
    auto s = shapes(GetParam(), c.qk_norm);
    s.S = c.seq;
    s.b = c.b;
    s.p.ring = c.ring;
    s.p.ring_exchange = exchange;
    if (c.kv_heads) s.m.kv_heads = c.kv_heads;
    const auto g = s.graph();
    const auto H = s.m.heads, K = s.m.kv_heads, d = s.m.head_dim, Sr = padded_seq(s.S, s.p) / c.ring;
    for (int rank = 0; rank < c.ring; ++rank) {
      const std::string what =
          fmt::format("ring {} {} rank {} seq {} {}", c.ring, to_string(exchange), rank, c.seq, name());
      runtime::RingGroup ring{c10::make_intrusive<LoopbackRing>(rank, c.ring), rank, c.ring, {}, exchange};
      Tensor q = s.randn({s.b, Sr, H, d}), k = s.randn({s.b, Sr, K, d}), v = s.randn({s.b, Sr, K, d});
      Tensor o;
      expect_equal(measure([&] { o = runtime::ring_attention(q, k, v, ring); }), planned(g, "layer.0.attn.ring", ""),
                   "ring attention " + what);
      expect_equal(measure_backward({o}, {s.randn({s.b, Sr, H, d}, false)}, {q, k, v}),
                   planned(g, "layer.0.attn.ring.bwd", ""), "ring attention backward " + what);
    }
  }
}

TEST_P(OpFootprint, HeadChunkedAttention) {
  // Without a ring, and as ring 2's rank 1 and ring 3's rank 0 (the peers played by
  // LoopbackRing): each stage's attention a ring's.
  for (int r : {1, 2, 3}) {
   for (const RingExchange exchange : {RingExchange::P2p, RingExchange::AllGather}) {
    if (r == 1 && exchange != RingExchange::P2p) continue;
    for (bool qk_norm : {false, true}) {
      for (int chunk : {1, 3, 6}) {  // within a kv group, one whole group, every head
        auto s = shapes(GetParam(), qk_norm);
        s.p.head_chunk = chunk;
        s.p.ring = r;
        s.p.ring_exchange = exchange;
        const auto g = s.graph();
        const auto H = s.m.heads, K = s.m.kv_heads, d = s.m.head_dim, h = s.m.hidden;
        const std::int64_t n = padded_seq(s.S, s.p) / r;  // this rank's tokens of each sample
        const auto tables = runtime::RopeTables::make(n, d, 10000.0, s.st(), torch::kCPU);
        const auto layout = runtime::UlyssesLayout::make(s.m, nullptr);
        const runtime::AttentionShape shape{H, K, d, 1e-6};
        runtime::RingGroup ring;
        if (r > 1) ring = {c10::make_intrusive<LoopbackRing>(r - 2, r), r - 2, r, {}, exchange};
        runtime::AttentionWeights w{s.randn({H * d, h}), s.randn({K * d, h}), s.randn({K * d, h}),
                                    qk_norm ? s.norm_weight(d) : Tensor(), qk_norm ? s.norm_weight(d) : Tensor()};
        Tensor x = s.randn({s.b, n, h});
        const std::string tag =
            fmt::format("{} ring {} {} chunk {}{}", name(), r, to_string(exchange), chunk, qk_norm ? " qk-norm" : "");
        Tensor o;
        expect_equal(measure([&] { o = runtime::head_chunked_attention(x, w, shape, tables, layout, chunk, ring); }),
                     planned(g, "layer.0.attn.untied", ""), "head-chunked attention " + tag);
        std::vector<Tensor> inputs = {x, w.wq, w.wk, w.wv};
        if (qk_norm) inputs.insert(inputs.end(), {w.q_norm, w.k_norm});
        expect_equal(measure_backward({o}, {s.randn({s.b, n, H * d}, false)}, inputs),
                     planned(g, "layer.0.attn.untied.bwd", ""), "head-chunked attention backward " + tag);
      }
    }
   }
  }
}

TEST_P(OpFootprint, SwiGluMlp) {
  const auto s = shapes(GetParam());
  const auto g = s.graph();
  const auto h = s.m.hidden, I = s.m.intermediate;
  Tensor xn = s.randn({s.b, s.S, h}), wg = s.randn({I, h}), wu = s.randn({I, h}), wd = s.randn({h, I});
  std::vector<Tensor> gate_up;
  Tensor act, down;
  expect_equal(measure([&] { gate_up = runtime::project(xn, {wg, wu}); }), planned(g, "layer.0.mlp.gate_up", ""),
               "gate/up projection " + name());
  expect_equal(measure([&] { act = runtime::swiglu(gate_up[0], gate_up[1]); }),
               planned(g, "layer.0.mlp.swiglu", ""), "swiglu " + name());
  Tensor act_leaf = act.detach().requires_grad_(true);
  expect_equal(measure([&] { down = at::linear(act_leaf, wd); }), planned(g, "layer.0.mlp.down", ""),
               "down projection " + name());
  expect_equal(measure_backward({down}, {s.randn({s.b, s.S, h}, false)}, {act_leaf, wd}),
               planned(g, "layer.0.mlp.down.bwd", ""), "down projection backward " + name());
  expect_equal(measure_backward({act}, {s.randn({s.b, s.S, I}, false)}, {gate_up[0], gate_up[1]}),
               planned(g, "layer.0.mlp.swiglu.bwd", ""), "swiglu backward " + name());
  Tensor dg = s.randn({s.b, s.S, I}, false), du = s.randn({s.b, s.S, I}, false);
  expect_equal(measure_backward(gate_up, {dg, du}, {xn, wg, wu}), planned(g, "layer.0.mlp.gate_up.bwd", ""),
               "gate/up projection backward " + name());
}

TEST_P(OpFootprint, TiledMlp) {
  for (int tiles : {2, 3, 5, 7, 8}) {  // 3 and 7 leave the last of the 400 rows' tiles shorter
    const auto s = shapes_with(GetParam(), [&](ParallelConfig& p) { p.mlp_tiles = tiles; });
    const auto g = s.graph();
    const auto h = s.m.hidden, I = s.m.intermediate;
    Tensor xn = s.randn({s.b, s.S, h}), wg = s.randn({I, h}), wu = s.randn({I, h}), wd = s.randn({h, I});
    const std::string tag = fmt::format("{} {} tiles", name(), tiles);
    Tensor down;
    expect_equal(measure([&] { down = runtime::tiled_mlp(xn, wg, wu, wd, tiles); }),
                 planned(g, "layer.0.mlp.tiled", ""), "tiled MLP " + tag);
    expect_equal(measure_backward({down}, {s.randn({s.b, s.S, h}, false)}, {xn, wg, wu, wd}),
                 planned(g, "layer.0.mlp.tiled.bwd", ""), "tiled MLP backward " + tag);
  }
}

// The loss's value is a 0-dim tensor the planner does not count: its bytes are taken off
// what the forward keeps (nll_loss's total weight beside it is within kWrappedScalarBytes).
TEST_P(OpFootprint, LossPlainAndTiled) {
  for (int tiles : {1, 3, 4, 5, 7}) {  // 3 and 7: uneven tiles
    const auto s = shapes_with(GetParam(), [&](ParallelConfig& p) { p.loss_tiles = tiles; });
    const auto g = s.graph();
    const auto h = s.m.hidden, V = s.m.vocab;
    Tensor xf = s.randn({s.b, s.S, h}), w = s.randn({V, h});
    Tensor targets = torch::randint(0, V, {s.b, s.S}, torch::kLong);
    targets.narrow(1, s.S - 5, 5).fill_(runtime::kIgnoreIndex);  // a padded tail: masked out, same bytes
    const std::string tag = fmt::format("{} {} tiles", name(), tiles);
    Tensor loss;
    auto measured = measure([&] {
      loss = tiles > 1 ? runtime::tiled_cross_entropy(xf, w, targets, tiles) : runtime::cross_entropy_loss(xf, w, targets);
    });
    const auto scalar = static_cast<std::int64_t>(loss.nbytes());
    measured.device_kept -= scalar;
    expect_equal(measured, tiles > 1 ? planned(g, "loss.tiled", "") : planned(g, "loss.logits", "loss.nll"),
                 "loss " + tag);
    auto back = measure_backward({loss}, {torch::ones({}, torch::kFloat)}, {xf, w});
    // The planner allocates the head group's gradient whole here, the final norm's [h]
    // included, which the runtime makes at the final norm's backward: that piece is added.
    const auto norm_piece = static_cast<std::int64_t>(h * xf.element_size());
    auto predicted = tiles > 1 ? planned(g, "loss.tiled.bwd", "") : planned(g, "loss.nll.bwd", "loss.logits.bwd");
    back.device_kept += norm_piece;
    if (back.device_peak + norm_piece <= predicted.device_peak) back.device_peak += norm_piece;  // the gradient at the peak
    expect_equal(back, predicted, "loss backward " + tag);
  }
}

// One layer's AdamW step: the gradients are made under the meter and handed to the
// parameters, so the step's releases count as the planner's (its gradients die at the step).
TEST_P(OpFootprint, AdamWStepOfALayer) {
  for (bool offload : {false, true}) {
    for (bool qk_norm : {false, true}) {
      auto s = shapes(GetParam(), qk_norm);
      s.p.offload_optimizer = offload;
      const auto g = s.graph();
      const auto h = s.m.hidden, I = s.m.intermediate, q = s.m.q_dim(), kv = s.m.kv_dim(), d = s.m.head_dim;
      std::vector<Tensor> params = {s.norm_weight(h), s.randn({q, h}), s.randn({kv, h}), s.randn({kv, h}),
                                    s.randn({h, q})};
      if (qk_norm) params.insert(params.end(), {s.norm_weight(d), s.norm_weight(d)});
      for (auto t : {s.norm_weight(h), s.randn({I, h}), s.randn({I, h}), s.randn({h, I})}) params.push_back(t);
      const std::string tag = fmt::format("{}{}{}", name(), offload ? " offloaded" : "", qk_norm ? " qk-norm" : "");
        std::unique_ptr<runtime::AdamW> adamw;
      Footprint measured = measure(
          [&] {
            adamw = std::make_unique<runtime::AdamW>(params, runtime::AdamWOptions{}, offload, false);
            for (auto& p : params) p.mutable_grad() = torch::randn(p.sizes(), p.options().requires_grad(false));
          },
          [&] { adamw->step(); });
      // Offloaded, the gradients go to the host first: the planner's grad.to_host, then the step.
      const auto predicted = offload ? planned(g, "layer.0.grad.to_host", "layer.0.grad.to_host", true)
                                     : planned(g, "layer.0.optim.step", "", true);
      if (!offload) {
        expect_equal(measured, predicted, "AdamW " + tag);
        continue;
      }
      const auto step = planned(g, "layer.0.optim.step", "", true);
      // Host: the gradients' fp32 copies, then the step's temporaries beside them, each copy
      // released once its parameter is updated.
      EXPECT_EQ(measured.device_kept, predicted.device_kept) << "AdamW " << tag;
      EXPECT_EQ(measured.device_peak, 0) << "AdamW " << tag;
      EXPECT_EQ(measured.host_peak, predicted.host_kept + step.host_peak) << "AdamW " << tag;
      EXPECT_EQ(measured.host_kept, predicted.host_kept + step.host_kept) << "AdamW " << tag;
    }
  }
}

TEST_P(OpFootprint, CheckpointOffloadAndPrefetch) {
  auto s = shapes(GetParam());
  s.p.checkpoint = CheckpointPolicy::full();
  s.p.offload_checkpoints = true;
  const auto g = s.graph();
  Tensor x = s.randn({s.b, s.S, s.m.hidden}, false);
  runtime::CheckpointStore store(true);
  expect_equal(measure([&] { store.keep(0, x); }), planned(g, "layer.0.checkpoint.offload", ""),
               "checkpoint offload " + name());
  // The host copy is made under the prefetch's meter, so that its release counts.
  store.clear();
  Tensor back;
  expect_equal(measure([&] { store.keep(0, x); },
                       [&] {
                         store.prefetch(0);
                         back = store.take(0);
                       }),
               planned(g, "layer.0.checkpoint.prefetch", "", true), "checkpoint prefetch " + name());
  EXPECT_TRUE(torch::equal(back, x));
}

INSTANTIATE_TEST_SUITE_P(Dtypes, OpFootprint, ::testing::Values(DType::FP32, DType::BF16),
                         [](const auto& info) { return to_string(info.param); });

}  // namespace
}  // namespace longctx::validation
