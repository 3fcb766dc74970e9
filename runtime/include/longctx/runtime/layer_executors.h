#pragma once
// The layer executors (layer_executor.h): one factory per kind. The step composes them once
// per layer: the parameters' executor (plain, streamed or gathered: where the layer's
// parameters live decides it), wrapped in a checkpointed one where the policy names the
// layer.
#include <cstdint>
#include <functional>
#include <memory>

#include "planner/core/model_config.h"
#include "longctx/runtime/checkpoint_store.h"
#include "longctx/runtime/layer_executor.h"
#include "longctx/runtime/param_home.h"
#include "longctx/runtime/sharded_params.h"

namespace longctx::runtime {

// The parameters stay where they are, on the device. REQUIRES: w outlives the executor.
std::unique_ptr<LayerExecutor> plain_layer(LayerBody body, const LayerWeights& w);

// The parameters live in the host pool (host's tensors: leaves that require grad); each use
// fetches device copies through home, which die with a use that keeps no graph. A training
// forward parks them after the layer (autograd's saved copies stay, empty) and refills them
// from the host when the layer's backward begins, as FSDP does.
// REQUIRES: host outlives the executor.
std::unique_ptr<LayerExecutor> streamed_layer(LayerBody body, const LayerWeights& host, const ParamHome& home);

// zero3: group `layer` of shards, all-gathered for each use (ShardedParams::gather). A
// training forward releases the gathered buffer after the layer and gathers into it again
// when the layer's backward begins, starting the layer below's gather beside that backward.
// REQUIRES: shards gather (zero3) and outlive the executor; m is the model shards hold.
std::unique_ptr<LayerExecutor> gathered_layer(LayerBody body, ShardedParams& shards, std::int64_t layer,
                                              const ModelConfig& m);

// `inner`, checkpointed: forward keeps only the layer's input in store (under `layer`) and
// runs inner without a graph; the backward takes the input back, starts the layer below
// coming back (its kept input and, through prefetch_below, its parameters), runs inner again
// with a graph and backpropagates through it.
// REQUIRES: store outlives the executor.
std::unique_ptr<LayerExecutor> checkpointed_layer(std::unique_ptr<LayerExecutor> inner, CheckpointStore& store,
                                                  std::int64_t layer, std::function<void()> prefetch_below);

}  // namespace longctx::runtime
