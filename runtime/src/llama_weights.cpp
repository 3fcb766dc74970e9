// The weights, enumerated through the parameter table (planner/core/param_layout.h).
#include "longctx/runtime/llama_weights.h"

#include "longctx/runtime/param_home.h"

namespace longctx::runtime {

using torch::Tensor;

namespace {
Tensor LayerWeights::*member_of(ParamRole role) {
  switch (role) {
    case ParamRole::AttnNorm: return &LayerWeights::attn_norm;
    case ParamRole::Wq: return &LayerWeights::wq;
    case ParamRole::Wk: return &LayerWeights::wk;
    case ParamRole::Wv: return &LayerWeights::wv;
    case ParamRole::Wo: return &LayerWeights::wo;
    case ParamRole::QNorm: return &LayerWeights::q_norm;
    case ParamRole::KNorm: return &LayerWeights::k_norm;
    case ParamRole::MlpNorm: return &LayerWeights::mlp_norm;
    case ParamRole::Gate: return &LayerWeights::w_gate;
    case ParamRole::Up: return &LayerWeights::w_up;
    case ParamRole::Down: return &LayerWeights::w_down;
    case ParamRole::Bq: return &LayerWeights::bq;
    case ParamRole::Bk: return &LayerWeights::bk;
    case ParamRole::Bv: return &LayerWeights::bv;
    case ParamRole::Bo: return &LayerWeights::bo;
    case ParamRole::BGate: return &LayerWeights::b_gate;
    case ParamRole::BUp: return &LayerWeights::b_up;
    case ParamRole::BDown: return &LayerWeights::b_down;
    default: break;
  }
  TORCH_CHECK(false, "not a layer parameter");
}

// The table's rows of one group kind, whether or not a model has them (the members that
// stay undefined are skipped where tensors are listed).
std::vector<ParamSpec> rows_of(ParamGroupKind kind) {
  std::vector<ParamSpec> v;
  for (const ParamSpec& p : kParamTable)
    if (p.group == kind) v.push_back(p);
  return v;
}

// The member holding `role` (layer `layer`'s, for a layer parameter); const or not as w is.
template <class Weights>
auto& slot_of(Weights& w, std::size_t layer, ParamRole role) {
  switch (role) {
    case ParamRole::Embed: return w.embed;
    case ParamRole::FinalNorm: return w.final_norm;
    case ParamRole::Output: return w.output;
    default: return w.layers[layer][role];
  }
}

// Group g's defined members, in the table's order.
template <class Weights>
auto group_slots(Weights& w, std::int64_t g) {
  const auto L = static_cast<std::int64_t>(w.layers.size());
  const ParamGroupKind kind = g < L ? ParamGroupKind::Layer : g == L ? ParamGroupKind::Embedding : ParamGroupKind::Head;
  std::vector<decltype(&w.embed)> v;
  for (const ParamSpec& p : rows_of(kind))
    if (auto& t = slot_of(w, static_cast<std::size_t>(g), p.role); t.defined()) v.push_back(&t);
  return v;
}
}  // namespace

Tensor& LayerWeights::operator[](ParamRole role) { return this->*member_of(role); }
const Tensor& LayerWeights::operator[](ParamRole role) const { return this->*member_of(role); }

std::vector<Tensor> LayerWeights::all() const {
  std::vector<Tensor> v;
  for (const ParamSpec& p : rows_of(ParamGroupKind::Layer))
    if (const Tensor& t = (*this)[p.role]; t.defined()) v.push_back(t);
  return v;
}

std::vector<Tensor*> LlamaWeights::group(std::int64_t g) { return group_slots(*this, g); }

std::vector<Tensor> LlamaWeights::all() const {
  std::vector<Tensor> v;
  for (std::int64_t g = 0; g < static_cast<std::int64_t>(layers.size()) + 2; ++g)
    for (const Tensor* t : group_slots(*this, g)) v.push_back(*t);
  return v;
}

LlamaWeights init_weights(const ModelConfig& m, std::uint64_t seed, const WeightPlacement& where) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const auto f32 = torch::TensorOptions().dtype(torch::kFloat);
  // One parameter: drawn on the CPU (a norm's weight near 1, a matrix's and a bias's near 0),
  // then put where it lives.
  const ParamHome host_pool(/*offload=*/true, where.device, where.pinned);
  auto draw = [&](const ParamSpec& p, bool in_host_pool) {
    const auto shape = param_shape(p, m);
    Tensor cpu = is_bias(p.role)      ? at::normal(0.0, 0.1, shape, gen, f32)
                 : shape.size() == 1 ? at::normal(1.0, 0.1, shape, gen, f32)
                                     : at::normal(0.0, 0.02, shape, gen, f32);
    Tensor t;
    if (in_host_pool) {
      t = host_pool.allocate(cpu.sizes(), where.dtype);
      t.copy_(cpu);
    } else {
      t = cpu.to(where.device, where.dtype);
    }
    return t.detach().requires_grad_(true);
  };
  LlamaWeights w;
  w.layers.resize(static_cast<std::size_t>(m.layers));
  // Drawn in the order embedding, layers, head: a seed gives the values it always gave.
  for (const ParamSpec& p : group_params(ParamGroupKind::Embedding, m)) slot_of(w, 0, p.role) = draw(p, false);
  for (std::size_t l = 0; l < w.layers.size(); ++l)
    for (const ParamSpec& p : group_params(ParamGroupKind::Layer, m))
      w.layers[l][p.role] = draw(p, where.layers_in_host_pool);
  for (const ParamSpec& p : group_params(ParamGroupKind::Head, m)) slot_of(w, 0, p.role) = draw(p, false);
  return w;
}

LlamaWeights clone_weights(const LlamaWeights& w) {
  LlamaWeights o = w;  // the same layout; every defined member is then replaced by its copy
  const auto L = static_cast<std::int64_t>(o.layers.size());
  auto copy_group = [&](std::int64_t g) {
    for (Tensor* t : o.group(g)) *t = t->detach().clone().requires_grad_(true);
  };
  copy_group(L);  // in init_weights' order: embedding, layers, head
  for (std::int64_t g = 0; g < L; ++g) copy_group(g);
  copy_group(L + 1);
  return o;
}

}  // namespace longctx::runtime
