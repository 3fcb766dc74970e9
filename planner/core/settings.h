#pragma once
// The settings table: every choice of a plan that the user makes and the search never turns
// (the dtypes, the training stack and the stack's options), one row each. Everything that
// lists them is derived from it: the request's fields (request.h, ClusterRequest), the CLI's
// flags and their --help (cli/cluster_options.cpp), the plan file's keys (plan_io.cpp), the
// Python keywords (python/src/core.cpp, longctx/_api.py), and their rules in validate()
// (values that run on CUDA GPUs only, options of a stack given for another).
//
// Which stacks take an option, and its default there, is each stack's profile
// (planner/stacks/profile.h: StackProfile::options, ::defaults). Adding a setting costs one row
// below and its member of TrainConfig or StackSpec; adding an option to a stack, its id in
// that stack's profile.
#include <string>
#include <vector>

#include "planner/core/parallel_config.h"
#include "planner/core/value_codec.h"
#include "common/result.h"

namespace longctx {

struct SettingRule {
  const char* key;   // its key under the plan file's "train": "dtype", "stack.attention"
  const char* help;  // the --help text of its flag
  // A stack's option: what it is, completing "--attention <option>; it needs --stack hf or
  // --stack arctic". Taken by the stacks whose profile lists it; the others keep its default.
  const char* option = nullptr;
  std::vector<KnobValue> cuda_only = {};  // values that run on CUDA GPUs only
  const char* cuda_fix = nullptr;         // what to give instead on the CPU virtual device
  // A switch whose flag (and request field) turns the plan's value off: --hf-no-attention-mask
  // is train.stack.attention_mask false. Its Python keyword (`python`) speaks of the value.
  bool negated = false;
  const char* python = nullptr;  // its Python keyword where that is not `field`
  // Absent from plan files written before it: read as the stack's default (a stack option) or
  // TrainConfig's (a train setting, which is then written only when it is not that default).
  bool optional_in_file = false;
};

template <class E>
constexpr KnobValue value_of(E e) {
  return static_cast<KnobValue>(e);
}

// clang-format off
// ROW(field, C++ type, member, rule). `field` names the request's member
// (ClusterRequest::field, text as given), the flag --field (underscores as dashes) and,
// unless the rule says another, the Python keyword; `member` is where the plan holds the
// value (TrainConfig::member).
#define LONGCTX_SETTING_TABLE(ROW)                                                                                   \
  ROW(dtype, DType, dtype, (SettingRule{.key = "dtype",                                                           \
      .help = "Parameters and activations: bf16 or fp32 (default: bf16 on GPUs, fp32 on --gpu cpu)"}))            \
  ROW(grad_dtype, DType, grad_dtype, (SettingRule{.key = "grad_dtype",                                            \
      .help = "Gradients: fp32 or bf16 (default: the --dtype, as autograd and longctx's runtime keep them, or what " \
              "the stack keeps; fp32 plans fp32 gradient buffers, which `longctx run` refuses)"}))                  \
  ROW(stack, StackKind, stack.kind, (SettingRule{.key = "stack.name", .help = "The code the step runs on"}))      \
  ROW(attention, HfAttention, stack.attention, (SettingRule{.key = "stack.attention",                             \
      .help = "transformers' attn_implementation: --stack hf sdpa (default), eager or flash_attention_2 (GPUs); "  \
              "--stack arctic flash_attention_2 (default) or flash_attention_3",                                  \
      .option = "is transformers' attn_implementation",                                                           \
      .cuda_only = {value_of(HfAttention::FlashAttention2), value_of(HfAttention::FlashAttention3)},              \
      .cuda_fix = "give sdpa or eager with --gpu cpu"}))                                                          \
  ROW(arctic_model, ArcticModel, stack.arctic_model, (SettingRule{.key = "stack.arctic_model",                    \
      .help = "--stack arctic: ArcticTraining's model.type, liger (default: Liger's RMSNorm, RoPE, SwiGLU and "    \
              "fused linear cross-entropy) or huggingface",                                                       \
      .option = "is ArcticTraining's model.type"}))                                                                \
  ROW(hf_checkpointing, HfCheckpointing, stack.checkpointing, (SettingRule{.key = "stack.checkpointing",           \
      .help = "--stack hf: who checkpoints each layer: the Trainer, with torch.utils.checkpoint's use_reentrant "  \
              "non-reentrant (default) or reentrant; or accelerate (its fsdp_activation_checkpointing under FSDP2 "  \
              "across GPUs: non-reentrant, no RNG state, inside each layer's FSDP hooks)",                          \
      .option = "describes how transformers runs the step"}))                                                      \
  ROW(hf_optimizer, HfOptimizer, stack.optimizer, (SettingRule{.key = "stack.optimizer",                          \
      .help = "--stack hf: the Trainer's optim, adamw_torch_fused (its default) or adamw_torch",                  \
      .option = "describes how transformers runs the step"}))                                                      \
  ROW(hf_loss, HfLoss, stack.loss, (SettingRule{.key = "stack.loss",                                              \
      .help = "--stack hf: who computes the loss, transformers (default: the model's ForCausalLMLoss over the "   \
              "full logits) or trl-chunked-nll (TRL's SFTTrainer loss_type chunked_nll: 256 tokens at a time)",   \
      .option = "describes how transformers runs the step", .optional_in_file = true}))                           \
  ROW(hf_no_attention_mask, bool, stack.attention_mask, (SettingRule{.key = "stack.attention_mask",               \
      .help = "--stack hf: the batch carries no attention_mask (model(input_ids, labels) alone)",                 \
      .option = "describes how transformers runs the step", .negated = true, .python = "hf_attention_mask"}))      \
  ROW(hf_no_use_cache, bool, stack.use_cache, (SettingRule{.key = "stack.use_cache",                            \
      .help = "--stack hf: the model runs with use_cache=False (model.config.use_cache = False), as training "     \
              "scripts often set it; by default the config's use_cache (true) keeps a k/v cache unless checkpointing " \
              "or TRL's loss turns it off",                                                                         \
      .option = "describes how transformers runs the step", .negated = true, .python = "hf_use_cache",            \
      .optional_in_file = true}))                                                                                   \
  ROW(max_positions, MaxPositions, max_positions, (SettingRule{.key = "max_positions",                            \
      .help = "Positions past the model's max_position_embeddings: extend (default: planned, as long-context "    \
              "training extends RoPE, with its scaling set in the model config) or model (--seq and max-context " \
              "stay within the model's limit)",                                                                   \
      .optional_in_file = true}))
// clang-format on

enum class SettingId {
#define LONGCTX_SETTING_ID(field, Type, member, rule) field,
  LONGCTX_SETTING_TABLE(LONGCTX_SETTING_ID)
#undef LONGCTX_SETTING_ID
};

// One row as the rest of longctx reads it.
struct Setting {
  SettingId id;
  const char* field;   // "hf_checkpointing": the request's member
  std::string flag;    // "--hf-checkpointing"
  std::string key;     // "train.stack.checkpointing": the plan file's field
  std::string python;  // its Python keyword
  KnobKind kind;       // Text (a word) or Switch
  SettingRule rule;
};

// Every row, in table order.
const std::vector<Setting>& setting_table();
const Setting& setting(SettingId id);

KnobValue setting_value(const TrainConfig& t, SettingId id);
void set_setting(TrainConfig& t, SettingId id, KnobValue v);
// Whether t holds a value the row can write and read back (an enumerator it names).
bool holds_setting_value(const TrainConfig& t, SettingId id);
// A value as the plan file writes it ("bf16", "flash_attention_2", "true"), and back; errors
// name `field`.
std::string format_setting(SettingId id, KnobValue v);
Result<KnobValue> parse_setting(SettingId id, const std::string& text, const std::string& field);

// The plan-file field a CLI flag's input lands in ("--sharding" -> "parallel.sharding",
// "--attention" -> "train.stack.attention", "--seq" -> "train.seq"), or the flag itself when
// no plan field holds it: how an error about a plan file names what to edit.
std::string plan_key_of_flag(const std::string& flag);

}  // namespace longctx
