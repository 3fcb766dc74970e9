#pragma once
// NCCL's device buffers: memory outside PyTorch's caching allocator (nvidia-smi counts it,
// torch.cuda.memory_reserved() does not), held per communicator (one per torch ProcessGroup
// that runs a collective or a send) and, inside one, per connection NCCL opens lazily at the
// first operation that needs it (NCCL_RUNTIME_CONNECT, src/init.cc). Read in NCCL 2.28.9, the
// version torch 2.11 pins (nvidia-nccl-cu13==2.28.9), tag v2.28.9-1.
//
// What grows with the ranks and the nodes: the peers an all-to-all sends to directly (every
// other rank of its group: a send and a receive connection on every point-to-point channel
// each), the communicators a stack makes, and the network's shared send/recv buffers once a
// group's peer sits on another node. Ring collectives (all-gather, reduce-scatter) hold one
// receive and one send connection per channel whatever the group's size (NCCL issue #986:
// "beyond 2 nodes it should no longer increase"): the preset's nccl_base_bytes per communicator.
#include <cstdint>
#include <vector>

#include "planner/core/plan.h"

namespace longctx::footprint::nccl {

// src/include/device.h, src/init.cc computeBuffSizes: the protocols' buffers of a connection.
inline constexpr std::int64_t kSimpleBuffBytes = std::int64_t{1} << 22;  // DEFAULT_BUFFSIZE, 4 MiB
inline constexpr std::int64_t kLlBuffBytes = 8 * 512 * 8 * 16;  // LL lines/thread x threads x NCCL_STEPS x 16 B
inline constexpr std::int64_t kLl128BuffBytes = 120 * 640 * 8 * 8;  // LL128 elems/thread x threads x steps x 8 B
// src/transport/p2p.cc: every P2P (NVLink) buffer is rounded up to CUDA_IPC_MIN, 2 MiB.
inline constexpr std::int64_t kCudaIpcMin = std::int64_t{1} << 21;
// src/transport/net.cc: send/recv over the network shares NCCL_SHARED_STEPS chunks per channel
// (sharedBuffersInit), each of p2pChunkSize, NCCL_P2P_NET_CHUNKSIZE's 128 KiB across nodes
// (computeBuffSizes).
inline constexpr std::int64_t kSharedSteps = 16;
inline constexpr std::int64_t kNetP2pChunkBytes = std::int64_t{1} << 17;

// One P2P channel's receive side (p2p.cc p2pRecvSetup, write mode: LL + LL128 + SIMPLE beside
// the ncclRecvMem header, rounded to CUDA_IPC_MIN) and send side (p2pSendSetup: the
// ncclSendMem header alone, rounded): 10 MiB and 2 MiB.
std::int64_t p2p_recv_bytes_per_channel();
std::int64_t p2p_send_bytes_per_channel();

// The point-to-point channels per NVLink peer the preset's per-peer figure stands for: a peer
// costs a receive and a send connection on each (ncclTopoComputeP2pChannels, p2pnChannelsPerPeer;
// 32 on 8 x H100 SXM, NCCL issue #1685's log). At least 1.
std::int64_t p2p_channels(const Hardware& h);

// Send/recv over the network (net.cc sharedBuffersInit): a send and a receive pool per local
// rank, channels x NCCL_SHARED_STEPS x 128 KiB each, shared by every remote peer.
std::int64_t net_p2p_shared_bytes(const Hardware& h);

// A communicator as the planned rank sees it.
struct Communicator {
  const char* name = "";
  std::int64_t ranks = 1;         // its size
  bool collectives = false;       // runs all-gather, reduce-scatter or all-reduce
  std::int64_t nvlink_peers = 0;  // send/recv peers on the rank's node
  std::int64_t net_peers = 0;     // send/recv peers on other nodes
};

// A group of `size` ranks `stride` apart (ranks k * stride + offset), nodes of `per_node`
// consecutive ranks, aligned as the stacks lay their meshes out (REQUIRES: size, stride,
// per_node >= 1). An all-to-all sends to every other member; a rotation (send to the next,
// receive from the previous) costs one peer's pair of connections, the worst rank's over the
// network too once the group leaves the node.
Communicator all_to_all_group(const char* name, std::int64_t size, std::int64_t stride, std::int64_t per_node,
                              bool collectives);
Communicator rotation_group(const char* name, std::int64_t size, std::int64_t stride, std::int64_t per_node,
                            bool collectives);

// The communicators each kind of stack makes in its step (each stack's profile names its own,
// planner/stacks/profile.h `communicators`; communication.cpp cites the sources). REQUIRES:
// p's world of 2 ranks or more.
// longctx's runtime: the world group, its Ulysses groups and rings.
std::vector<Communicator> runtime_communicators(const Plan& p);
// DeepSpeed ZeRO-3 with its Ulysses (ArcticTraining): the sequence-data-parallel group and the
// sequence-parallel groups.
std::vector<Communicator> deepspeed_ulysses_communicators(const Plan& p);
// FSDP2 over the flattened dp_shard x cp mesh and torch's context parallel over cp
// (torchtitan, and accelerate under the Trainer).
std::vector<Communicator> fsdp2_context_parallel_communicators(const Plan& p);

// One communicator's buffers: the preset's ring/tree channels when it runs collectives over 2
// ranks or more, a receive and a send connection per P2P channel for each NVLink peer, and the
// network's shared pools once when any peer is remote.
std::int64_t communicator_bytes(const Hardware& h, const Communicator& c);

// Every communicator's buffers, summed: what NCCL holds on the planned rank's device.
std::int64_t nccl_bytes(const Hardware& h, const std::vector<Communicator>& groups);

}  // namespace longctx::footprint::nccl
