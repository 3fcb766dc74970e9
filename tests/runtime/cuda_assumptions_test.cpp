// What the CUDA path assumes, held on the CPU (docs/runtime.md, "CUDA assumptions"): the
// checks that make a GPU run fail loudly run on every build, and the combinations that
// only a GPU run would break are run here on the virtual device.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "cli_fixture.h"
#include "longctx/runtime/attention.h"
#include "longctx/runtime/ring_attention.h"
#include "longctx/runtime/communicator.h"
#include "longctx/runtime/norm_rope.h"
#include "longctx/runtime/process_group.h"
#include "longctx/runtime/ulysses.h"
#include "reference_llama.h"

namespace longctx::runtime {
namespace {

// ---- collectives take contiguous tensors on the communicator's device ------------------

TEST(CollectivePlacement, ATensorOffTheCommunicatorsDeviceIsRefusedByName) {
  auto comm = Communicator::single();  // CPU, like a Gloo rank
  // A tensor on another device (meta stands in for the host tensor an NCCL rank must not pass).
  torch::Tensor elsewhere = torch::empty({4}, torch::TensorOptions().device(torch::kMeta));
  try {
    comm->all_reduce_sum(elsewhere);
    FAIL() << "a tensor on another device reached the collective";
  } catch (const CollectivePlacementError& e) {
    EXPECT_NE(std::string(e.what()).find("gradient all-reduce"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("meta"), std::string::npos) << e.what();
  }
  torch::Tensor here = torch::zeros({4});
  EXPECT_THROW(comm->all_gather(here, elsewhere), CollectivePlacementError);
  EXPECT_THROW(comm->reduce_scatter_sum(here, elsewhere), CollectivePlacementError);
  EXPECT_THROW(comm->all_to_all(elsewhere.view({1, 4})), CollectivePlacementError);
  EXPECT_NO_THROW(comm->all_reduce_sum(here));
}

TEST(CollectivePlacement, AStridedTensorIsRefusedByName) {
  auto comm = Communicator::single();
  torch::Tensor t = torch::zeros({4, 4}).t();  // [4,4] with strides [1,4]
  ASSERT_FALSE(t.is_contiguous());
  try {
    comm->all_reduce_sum(t);
    FAIL() << "a strided tensor reached the collective";
  } catch (const CollectivePlacementError& e) {
    EXPECT_NE(std::string(e.what()).find("not contiguous"), std::string::npos) << e.what();
  }
  torch::Tensor full = torch::zeros({8});
  EXPECT_THROW(comm->all_gather(full, torch::zeros({8}).narrow(0, 0, 8).view({2, 4}).t()), CollectivePlacementError);
}

TEST(CollectivePlacement, TheLossIsReducedAsAScalarOnTheCommunicatorsDevice) {
  // One rank: the identity; across ranks the sum goes through a tensor made on device()
  // (distributed tests and the two-rank run below go through it on Gloo).
  auto comm = Communicator::single();
  EXPECT_EQ(comm->all_reduce_sum(2.5), 2.5);
  EXPECT_EQ(comm->device(), c10::Device(c10::kCPU));
  EXPECT_EQ(Communicator::single(c10::Device(c10::kCUDA, 1))->device(), c10::Device(c10::kCUDA, 1));
}

// ---- the rank's GPU ---------------------------------------------------------------------

TEST(RankDevice, EachLocalRankGetsItsOwnVisibleGpu) {
  for (int local = 0; local < 4; ++local) {
    auto d = rank_device("cuda", local, 4);
    ASSERT_TRUE(d.ok()) << d.error().what();
    EXPECT_EQ(*d, c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(local)));
  }
  auto cpu = rank_device("cpu", 3, 0);
  ASSERT_TRUE(cpu.ok());
  EXPECT_TRUE(cpu->is_cpu());
}

TEST(RankDevice, MoreRanksThanVisibleGpusIsACleanErrorNamingLocalRank) {
  auto d = rank_device("cuda", 2, 2);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.error().kind, ErrorKind::BadInput);
  EXPECT_EQ(d.error().field, "LOCAL_RANK");
  EXPECT_NE(d.error().message.find("2 GPUs"), std::string::npos) << d.error().message;
  EXPECT_NE(d.error().message.find("--nproc 2"), std::string::npos) << d.error().message;
  auto none = rank_device("cuda", 0, 0);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.error().field, "--device");
}

// ---- the flash backward reads its saved tensors as the CUDA kernel does ----------------

TEST(FlashLayout, ANonContiguousLogSumExpIsRefusedByTheLayoutCheck) {
  const std::int64_t b = 2, H = 4, S = 16, d = 8;
  auto q = torch::randn({b, H, S, d}), k = torch::randn({b, H, S, d}), v = torch::randn({b, H, S, d});
  auto f = flash_forward(q, k, v);
  torch::Tensor dout = torch::randn_like(f.out);
  // lse [b,H,S]; two of its heads, as a head-chunked stage sliced them before: with b > 1
  // the slice skips the other heads of each sample, so it is not dense.
  torch::Tensor slice = f.lse.narrow(1, 0, 2);
  ASSERT_FALSE(slice.is_contiguous());
  auto half = [](const torch::Tensor& t) { return t.narrow(1, 0, 2); };
  EXPECT_THROW(check_flash_backward_inputs(half(dout), half(q), half(k), half(v), half(f.out), slice),
               FlashLayoutError);
  EXPECT_NO_THROW(check_flash_backward_inputs(half(dout), half(q), half(k), half(v), half(f.out), slice.contiguous()));
  // A head dimension that is not dense is refused too.
  auto strided = torch::randn({b, H, S, 2 * d}).narrow(-1, 0, d).transpose(-1, -2).contiguous().transpose(-1, -2);
  EXPECT_THROW(check_flash_backward_inputs(dout, strided, k, v, f.out, f.lse.contiguous()), FlashLayoutError);
}

TEST(FlashLayout, HeadChunkedStagesWithTwoSamplesMatchWholeAttention) {
  // Micro-batch 2, chunk 1 < 4 heads: every stage's backward goes through the layout check
  // (flash_backward) and the gradients equal attention over all heads at once.
  const ModelConfig m = load_model("tiny-gqa").value();
  const std::int64_t b = 2, S = 16, h = m.hidden, H = m.heads, K = m.kv_heads, d = m.head_dim;
  ASSERT_GT(H, 1);
  torch::manual_seed(3);
  auto x = torch::randn({b, S, h}, torch::requires_grad());
  auto wq = (torch::randn({H * d, h}) * 0.1).requires_grad_();
  auto wk = (torch::randn({K * d, h}) * 0.1).requires_grad_();
  auto wv = (torch::randn({K * d, h}) * 0.1).requires_grad_();
  const AttentionShape shape{H, K, d, 1e-6};
  const RopeTables rope_tables = RopeTables::make(S, d, 10000.0, torch::kFloat, torch::kCPU);
  const UlyssesLayout layout = UlyssesLayout::make(m, nullptr);
  const RingGroup no_ring;  // outlives the backward, as head_chunked_attention requires

  auto chunked = head_chunked_attention(x, {wq, wk, wv, {}, {}}, shape, rope_tables, layout, /*chunk=*/1, no_ring);
  auto g = torch::randn_like(chunked);
  auto grads = torch::autograd::grad({chunked}, {x, wq, wk, wv}, {g});

  auto q = rope(at::linear(x, wq).view({b, S, H, d}), rope_tables);
  auto k = rope(at::linear(x, wk).view({b, S, K, d}), rope_tables);
  auto v = at::linear(x, wv).view({b, S, K, d});
  auto whole = attention(q, k, v).reshape({b, S, H * d});
  auto ref = torch::autograd::grad({whole}, {x, wq, wk, wv}, {g});
  EXPECT_TRUE(torch::allclose(chunked, whole, 1e-5, 1e-5));
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double scale = ref[i].abs().max().item<double>();
    EXPECT_LE((grads[i] - ref[i]).abs().max().item<double>(), 2e-4 * scale) << "gradient " << i;
  }
}

// ---- ZeRO-3 with parameters offloaded, optimizer not ----------------------------------

class OffloadedShards : public testing::CliTest {};

// The host shards' gradients come from the reduce-scatter on the device and the optimizer
// state lives there (AdamW's state_device): two ranks train as one over three steps.
TEST_F(OffloadedShards, TwoRanksWithParameterButNotOptimizerOffloadTrainAsOne) {
  std::vector<std::vector<double>> losses;
  for (int ranks : {1, 2}) {
    ParallelConfig p;
    p.ulysses = ranks;
    p.sharding = Sharding::Zero3;
    p.offload_params = true;
    p.offload_optimizer = false;
    auto plan = testing::tiny_plan("tiny-gqa", 128, 1, p);
    plan.cluster.shape = {1, ranks};
    const auto file = write(plan, "r" + std::to_string(ranks) + ".json");
    auto o = run_cli("run --plan " + file + " --nproc " + std::to_string(ranks) + " --steps 3 --json --threads 1");
    ASSERT_EQ(o.status, 0) << o.out << o.err;
    auto j = nlohmann::json::parse(o.out);
    std::vector<double> l;
    for (const auto& s : j["steps"]) l.push_back(s["loss"].get<double>());
    ASSERT_EQ(l.size(), 3u);
    losses.push_back(l);
  }
  for (std::size_t i = 0; i < 3; ++i) EXPECT_NEAR(losses[1][i], losses[0][i], 1e-5 * losses[0][i]) << "step " << i + 1;
  EXPECT_NE(losses[0][0], losses[0][2]);  // the optimizer did update the host shards
}

}  // namespace
}  // namespace longctx::runtime
