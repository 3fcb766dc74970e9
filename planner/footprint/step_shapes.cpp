#include "planner/footprint/step_shapes.h"

#include "planner/footprint/zero.h"

namespace longctx::footprint {

StepShapes step_shapes(const StepInputs& in) {
  const ModelConfig& m = in.model;
  StepShapes s;
  s.b = in.train.micro_batch;
  s.u = in.parallel.ulysses;
  s.r = in.parallel.ring;
  s.ring_gather = s.r > 1 && in.parallel.ring_exchange == RingExchange::AllGather;
  s.S = padded_seq(in.train.seq, in.parallel);
  s.n = s.b * s.S / (s.u * s.r);
  s.world = in.cluster.world();
  s.h = m.hidden;
  s.I = m.intermediate;
  s.V = m.vocab;
  s.H = m.heads;
  s.K = m.kv_heads;
  s.d = m.head_dim;
  s.hl = s.H / s.u;
  s.kvr = kv_heads_per_rank(m, in.parallel.ulysses);
  s.e = bytes_of(in.train.dtype);
  s.g = bytes_of(in.train.grad_dtype);
  s.layers = m.layers;
  s.qk_norm = m.qk_norm;
  s.tied = m.tie_embeddings;
  s.qkv_bias = m.qkv_bias;
  s.o_bias = m.o_bias;
  s.mlp_bias = m.mlp_bias;
  s.master = in.train.dtype != DType::FP32;
  s.cpu = in.backend == Backend::Cpu;
  s.cpu_threads = in.cpu_threads;
  s.multiprocessors = in.multiprocessors;
  s.cublas_workspace = s.cpu ? 0 : in.cublas_workspace_bytes;
  s.layer_params = sum_of_param_sizes(s, 0);
  s.embed_params = sum_of_param_sizes(s, embed_group(s));
  s.head_params = sum_of_param_sizes(s, head_group(s));
  return s;
}

}  // namespace longctx::footprint
