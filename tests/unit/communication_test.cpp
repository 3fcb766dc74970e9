// NCCL's buffers per communicator (planner/footprint/communication.h) against NCCL 2.28.9's
// own arithmetic written out here, and the communicators each stack's source makes (each
// stack's profile names them: planner/stacks/profile.h).
#include <gtest/gtest.h>

#include <string>

#include "planner/footprint/communication.h"
#include "planner/search/memory_model.h"
#include "test_plans.h"

namespace longctx {
namespace {

namespace nccl = footprint::nccl;
constexpr std::int64_t MiB = std::int64_t{1} << 20;

Plan plan_on(StackKind stack, std::int64_t nodes, std::int64_t per_node) {
  Plan p = testing::gpu_plan("llama-3.1-8b", "h100-80gb", per_node, 64 * 1024);
  p.cluster.shape = {nodes, per_node};
  p.train.stack.kind = stack;
  p.parallel.sharding = Sharding::Zero3;
  return p;
}

const nccl::Communicator* find(const std::vector<nccl::Communicator>& cs, const std::string& name) {
  for (const nccl::Communicator& c : cs)
    if (name == c.name) return &c;
  return nullptr;
}

// p2p.cc p2pRecvSetup: ncclRecvMem + LL (512 KiB) + LL128 (4,915,200 B) + SIMPLE (4 MiB) =
// 9.19 MiB, rounded up to CUDA_IPC_MIN (2 MiB); p2pSendSetup: the ncclSendMem header alone.
TEST(NcclBuffers, PointToPointChannelIsTenMiBReceivedAndTwoSent) {
  EXPECT_EQ(nccl::p2p_recv_bytes_per_channel(), 10 * MiB);
  EXPECT_EQ(nccl::p2p_send_bytes_per_channel(), 2 * MiB);
}

// The H100 preset's per-peer figure is 32 channels (NCCL issue #1685's 8 x H100 log) of a
// receive and a send connection each; the network pools are 2 x 32 x 16 steps x 128 KiB.
TEST(NcclBuffers, PresetPeerIsThirtyTwoChannelsAndTheNetworkPoolsFollow) {
  const Hardware h = load_hardware("h100-80gb").value();
  EXPECT_EQ(h.nccl_bytes_per_peer, 32 * 12 * MiB);
  EXPECT_EQ(nccl::p2p_channels(h), 32);
  EXPECT_EQ(nccl::net_p2p_shared_bytes(h), 128 * MiB);
  EXPECT_EQ(nccl::net_p2p_shared_bytes(load_hardware("cpu").value()), 0) << "no NCCL on the CPU virtual device";
}

TEST(NcclGroups, AllToAllSendsToEveryOtherMemberOverNvlinkOrTheNetwork) {
  const nccl::Communicator in_node = nccl::all_to_all_group("sp", 8, 1, 8, false);
  EXPECT_EQ(in_node.nvlink_peers, 7);
  EXPECT_EQ(in_node.net_peers, 0);
  const nccl::Communicator two_nodes = nccl::all_to_all_group("sp", 16, 1, 8, false);
  EXPECT_EQ(two_nodes.nvlink_peers, 7);
  EXPECT_EQ(two_nodes.net_peers, 8);
  const nccl::Communicator strided = nccl::all_to_all_group("sp", 4, 4, 8, false);  // 2 members a node
  EXPECT_EQ(strided.nvlink_peers, 1);
  EXPECT_EQ(strided.net_peers, 2);
}

TEST(NcclGroups, RotationCostsOnePeerAndTheNetworkOnceItLeavesTheNode) {
  const nccl::Communicator in_node = nccl::rotation_group("ring", 4, 1, 8, false);
  EXPECT_EQ(in_node.nvlink_peers, 1);
  EXPECT_EQ(in_node.net_peers, 0);
  const nccl::Communicator across = nccl::rotation_group("ring", 4, 4, 8, false);  // 16 ranks, 2 nodes
  EXPECT_EQ(across.nvlink_peers, 1);
  EXPECT_EQ(across.net_peers, 1);
  const nccl::Communicator node_apart = nccl::rotation_group("ring", 4, 8, 8, false);
  EXPECT_EQ(node_apart.nvlink_peers, 0);
  EXPECT_EQ(node_apart.net_peers, 1);
}

TEST(NcclGroups, CollectivesCostTheRingChannelsOnceWhateverTheSize) {
  const Hardware h = load_hardware("h100-80gb").value();
  for (std::int64_t ranks : {2, 8, 64})
    EXPECT_EQ(nccl::communicator_bytes(h, {.name = "world", .ranks = ranks, .collectives = true}), h.nccl_base_bytes);
  EXPECT_EQ(nccl::communicator_bytes(h, {.name = "one", .ranks = 1, .collectives = true}), 0);
}

// longctx's runtime (communicator.cpp): ZeRO alone runs on the world group, no send/recv; a
// Ulysses group as large as the world is the world group, with its all-to-all peers.
TEST(NcclStacks, LongctxWorldGroupCarriesUlyssesWhenItSpansTheWorld) {
  Plan p = plan_on(StackKind::Longctx, 1, 8);
  EXPECT_EQ(nccl::nccl_bytes(p.cluster.hardware, plan_communicators(p)), p.cluster.hardware.nccl_base_bytes);
  p.parallel.ulysses = 8;
  ASSERT_EQ(plan_communicators(p).size(), 1u);
  EXPECT_EQ(nccl::nccl_bytes(p.cluster.hardware, plan_communicators(p)),
            p.cluster.hardware.nccl_base_bytes + 7 * p.cluster.hardware.nccl_bytes_per_peer);
  p.parallel.ulysses = 4;
  const auto cs = plan_communicators(p);
  ASSERT_NE(find(cs, "ulysses"), nullptr);
  EXPECT_FALSE(find(cs, "ulysses")->collectives);
  EXPECT_EQ(find(cs, "ulysses")->nvlink_peers, 3);
}

// DeepSpeed's sequence parallel (parallel_state_sp.py): ZeRO on a new group of every rank, the
// sequence-parallel group its own communicator that also all-gathers.
TEST(NcclStacks, ArcticMakesSequenceDataParallelAndSequenceParallelGroups) {
  Plan p = plan_on(StackKind::Arctic, 1, 8);
  p.parallel.ulysses = 8;
  const auto cs = plan_communicators(p);
  ASSERT_EQ(cs.size(), 2u);
  ASSERT_NE(find(cs, "sequence_data_parallel"), nullptr);
  ASSERT_NE(find(cs, "sequence_parallel"), nullptr);
  EXPECT_TRUE(find(cs, "sequence_parallel")->collectives);
  EXPECT_EQ(nccl::nccl_bytes(p.cluster.hardware, plan_communicators(p)),
            2 * p.cluster.hardware.nccl_base_bytes + 7 * p.cluster.hardware.nccl_bytes_per_peer);
}

TEST(NcclStacks, TorchtitanContextParallelRotatesOverItsOwnGroup) {
  Plan p = plan_on(StackKind::Torchtitan, 1, 8);
  EXPECT_EQ(plan_communicators(p).size(), 1u);
  p.parallel.ring = 8;
  const auto cs = plan_communicators(p);
  ASSERT_NE(find(cs, "cp"), nullptr);
  EXPECT_EQ(find(cs, "cp")->nvlink_peers, 1);
  EXPECT_TRUE(find(cs, "cp")->collectives);
}

// What grows with the node count: a Ulysses group of 16 over two nodes reaches 8 ranks over
// the network (the shared pools, once) beside its 7 NVLink peers.
TEST(NcclStacks, UlyssesAcrossNodesAddsTheNetworkPools) {
  Plan one = plan_on(StackKind::Arctic, 1, 8), two = plan_on(StackKind::Arctic, 2, 8);
  one.parallel.ulysses = 8;
  two.parallel.ulysses = 16;
  const Hardware& h = two.cluster.hardware;
  EXPECT_EQ(nccl::nccl_bytes(h, plan_communicators(two)) - nccl::nccl_bytes(h, plan_communicators(one)),
            nccl::net_p2p_shared_bytes(h));
}

// The prediction names each communicator's share; with the CUDA context's they add up to
// what the context adds to the reserved figure.
TEST(NcclStacks, PredictionBreakdownNamesEachCommunicator) {
  Plan p = plan_on(StackKind::Longctx, 1, 8);
  p.parallel.ulysses = 4;
  const Prediction pr = predict(p);
  EXPECT_EQ(pr.breakdown.at("context.nccl.world"), p.cluster.hardware.nccl_base_bytes);
  EXPECT_EQ(pr.breakdown.at("context.nccl.ulysses"), 3 * p.cluster.hardware.nccl_bytes_per_peer);
  EXPECT_EQ(pr.breakdown.at("context"), p.cluster.hardware.context_bytes);
  EXPECT_EQ(pr.peak_nvidia_smi_bytes - pr.peak_reserved_bytes, plan_context_bytes(p));
}

}  // namespace
}  // namespace longctx
