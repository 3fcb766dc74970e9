#include "planner/footprint/communication.h"

#include <algorithm>

namespace longctx::footprint::nccl {
namespace {

// ncclSendMem and ncclRecvMem (src/include/device.h): a few KiB of head/tail pointers and
// FIFO offsets, far below CUDA_IPC_MIN, so the rounding hides their exact size.
constexpr std::int64_t kConnHeaderBytes = 4096;

std::int64_t round_up(std::int64_t v, std::int64_t to) { return (v + to - 1) / to * to; }

}  // namespace

// The communicators of longctx's own runtime (runtime/src/communicator.cpp,
// Communicator::connect): the world group (ZeRO's gathers and reduce-scatters, or the
// gradients' all-reduce), the Ulysses groups of u consecutive ranks (their all-to-all), and
// the rings of r ranks u apart (the k/v passed to the next rank, or all-gathered); a group as
// large as the world is the world group itself.
std::vector<Communicator> runtime_communicators(const Plan& p) {
  const std::int64_t world = p.cluster.shape.world(), per_node = p.cluster.shape.gpus_per_node;
  const std::int64_t u = p.parallel.ulysses, r = p.parallel.ring;
  std::vector<Communicator> out = {{.name = "world", .ranks = world, .collectives = true}};
  auto add = [&](Communicator c) {
    if (c.ranks < 2) return;
    if (c.ranks != world) return out.push_back(c);
    out.front().nvlink_peers = std::max(out.front().nvlink_peers, c.nvlink_peers);
    out.front().net_peers = std::max(out.front().net_peers, c.net_peers);
  };
  add(all_to_all_group("ulysses", u, 1, per_node, false));
  if (p.parallel.ring_exchange == RingExchange::AllGather) add({.name = "ring", .ranks = r, .collectives = true});
  else add(rotation_group("ring", r, u, per_node, false));
  return out;
}

// DeepSpeed ZeRO-3 with Ulysses as ArcticTraining runs it: ZeRO on the world group without
// sequence parallelism, else on the sequence-data-parallel group, a new group of every rank;
// the sequence-parallel groups of u consecutive ranks run the all-to-all and the
// all_gather of each batch's position_ids and lengths
// (deepspeed/runtime/sequence_parallel/parallel_state_sp.py initialize_sequence_parallel,
// ulysses_sp.py UlyssesSPAttentionHF.forward and UlyssesSPDataLoaderAdapter.refill).
std::vector<Communicator> deepspeed_ulysses_communicators(const Plan& p) {
  const std::int64_t world = p.cluster.shape.world(), u = p.parallel.ulysses;
  std::vector<Communicator> out = {{.name = u > 1 ? "sequence_data_parallel" : "world", .ranks = world, .collectives = true}};
  if (u > 1) out.push_back(all_to_all_group("sequence_parallel", u, 1, p.cluster.shape.gpus_per_node, true));
  return out;
}

// torchtitan's FSDP2 and context parallel (distributed/parallel_dims.py: the mesh
// [dp_shard, cp], cp innermost, FSDP2 on the flattened dp_shard_cp group): the FSDP group over
// every rank, and the cp group of r consecutive ranks, which all-gathers k/v in the forward and
// passes dk/dv to the next rank in the backward (torch's ring attention: _AllGatherRotater,
// then the all-to-all rotater's permute_tensor, one non-empty split).
std::vector<Communicator> fsdp2_context_parallel_communicators(const Plan& p) {
  const std::int64_t world = p.cluster.shape.world(), r = p.parallel.ring;
  std::vector<Communicator> out = {{.name = "dp_shard_cp", .ranks = world, .collectives = true}};
  if (r > 1) out.push_back(rotation_group("cp", r, 1, p.cluster.shape.gpus_per_node, true));
  return out;
}

std::int64_t p2p_recv_bytes_per_channel() {
  return round_up(kConnHeaderBytes + kLlBuffBytes + kLl128BuffBytes + kSimpleBuffBytes, kCudaIpcMin);
}

std::int64_t p2p_send_bytes_per_channel() { return round_up(kConnHeaderBytes, kCudaIpcMin); }

std::int64_t p2p_channels(const Hardware& h) {
  return std::max<std::int64_t>(1, h.nccl_bytes_per_peer / (p2p_recv_bytes_per_channel() + p2p_send_bytes_per_channel()));
}

std::int64_t net_p2p_shared_bytes(const Hardware& h) {
  if (h.nccl_bytes_per_peer == 0) return 0;  // a device without NCCL (the CPU virtual device)
  return 2 * p2p_channels(h) * kSharedSteps * kNetP2pChunkBytes;
}

Communicator all_to_all_group(const char* name, std::int64_t size, std::int64_t stride, std::int64_t per_node,
                              bool collectives) {
  // Members on one node: stride apart in a node of per_node ranks.
  const std::int64_t on_node = std::min(size, std::max<std::int64_t>(1, per_node / stride));
  return {.name = name, .ranks = size, .collectives = collectives, .nvlink_peers = on_node - 1, .net_peers = size - on_node};
}

Communicator rotation_group(const char* name, std::int64_t size, std::int64_t stride, std::int64_t per_node,
                            bool collectives) {
  Communicator c{.name = name, .ranks = size, .collectives = collectives};
  if (size < 2) return c;
  // The rank's send to the next and receive from the previous make one peer's pair; the rank at
  // a node's edge has one of them over the network (counted on both sides: a bound).
  const bool leaves_node = size * stride > per_node;
  c.nvlink_peers = stride < per_node ? 1 : 0;
  c.net_peers = leaves_node ? 1 : 0;
  return c;
}

std::int64_t communicator_bytes(const Hardware& h, const Communicator& c) {
  if (c.ranks < 2) return 0;
  std::int64_t bytes = c.collectives ? h.nccl_base_bytes : 0;
  bytes += c.nvlink_peers * h.nccl_bytes_per_peer;
  if (c.net_peers > 0) bytes += net_p2p_shared_bytes(h);
  return bytes;
}

std::int64_t nccl_bytes(const Hardware& h, const std::vector<Communicator>& groups) {
  std::int64_t sum = 0;
  for (const Communicator& c : groups) sum += communicator_bytes(h, c);
  return sum;
}

}  // namespace longctx::footprint::nccl
