// The step's frame every stack shares: the build's shapes and the cuBLAS workspaces.
#include "planner/stacks/step/step_build.h"

#include <algorithm>

#include "planner/footprint/zero.h"

namespace longctx::step {

StepBuild::StepBuild(const StepInputs& inputs)
    : in(inputs), parallel(inputs.parallel), shapes(footprint::step_shapes(inputs)) {}

Name StepBuild::group_name(int group, const char* base) const {
  if (group < shapes.layers) return Name{group, base, false};
  return Name{group == footprint::embed_group(shapes) ? Name::kEmbed : Name::kHead, base, false};
}

bool StepBuild::ends_at_prefix() {
  if (!prefix_asked_) {
    prefix_asked_ = true;
    prefix_ended_ = in.prefix_only || (in.end_at_prefix && (*in.end_at_prefix)(graph.with_last_readers()));
  }
  return prefix_ended_;
}

namespace {

// Tensors and ops a layer, at least, in the graphs built on this thread so far: a search
// builds thousands of graphs of one model, whose counts a layer vary with the stack and the
// tiles (about 40 and 30 untiled), and reserving what the last ones needed saves regrowing
// the op list (an op is a few hundred bytes) on every build.
thread_local std::size_t tensors_a_layer = 48, ops_a_layer = 36;

}  // namespace

CublasWorkspaces begin_step(StepBuild& sb) {
  // (A states-only build writes a few tensors a layer and no op: nothing to reserve.)
  const auto layers = static_cast<std::size_t>(sb.in.model.layers);
  if (!sb.in.states_only) sb.graph.reserve(layers * tensors_a_layer + 128, layers * ops_a_layer + 128);
  // cuBLAS workspaces [cublas_workspace] bytes each: one per (handle, stream), handles per
  // thread, and every stack's step multiplies on two threads, the forward's and autograd's
  // device thread that runs backward (torch/csrc/autograd/engine.cpp, Engine::thread_main
  // per device). Allocated at each thread's first matmul, just after its output, and kept:
  // held from the second step on, which is the one whose phases the planner predicts.
  CublasWorkspaces w;
  if (sb.shapes.cublas_workspace > 0) {
    w.forward = sb.graph.persistent(Name{Name::kNone, "cublas.workspace.forward"}, sb.shapes.cublas_workspace,
                                    Category::Workspace, Place::Device);
    w.backward = sb.graph.persistent(Name{Name::kNone, "cublas.workspace.backward"}, sb.shapes.cublas_workspace,
                                     Category::Workspace, Place::Device);
  }
  return w;
}

StepGraph finish_step(StepBuild& sb, CublasWorkspaces w) {
  // Where the first step allocates them: the first forward and the first backward matmul.
  if (w.forward >= 0 && !sb.in.prefix_only && !sb.in.states_only) {
    sb.graph.first_allocated_at(w.forward, sb.graph.first_cublas_op(Phase::Forward));
    sb.graph.first_allocated_at(w.backward, sb.graph.first_cublas_op(Phase::Backward));
  }
  StepGraph g = sb.graph.finish();
  if (const auto layers = static_cast<std::size_t>(sb.in.model.layers); layers > 0) {
    tensors_a_layer = std::max(tensors_a_layer, g.tensors().size() / layers + 1);
    ops_a_layer = std::max(ops_a_layer, g.ops().size() / layers + 1);
  }
  return g;
}

}  // namespace longctx::step
