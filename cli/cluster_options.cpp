#include "cluster_options.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "planner/core/knobs.h"

namespace longctx::cli {

void add_cluster_options(CLI::App& app, ClusterOptions& o) {
  app.add_option("--model", o.model, "Preset name (see `longctx models`) or path of a Hugging Face config.json")
      ->capture_default_str();
  app.add_option("--gpus", o.gpus, "Total GPUs (ranks)")->capture_default_str();
  app.add_option("--gpus-per-node", o.gpus_per_node, "GPUs per node (default: the preset's, at most --gpus)");
  app.add_option("--gpu", o.gpu, "Hardware preset: h100-80gb, h200-141gb, a100-80gb, or cpu (the runtime's virtual device)")
      ->capture_default_str();
  app.add_option("--budget", o.budget, "Device memory budget per GPU, e.g. 80GiB (default: the preset's memory)");
  app.add_option("--host-mem", o.host_mem, "Host memory per node, e.g. 2TiB (default: the preset's)");
  app.add_flag("--expandable-segments", o.expandable_segments,
               "Predict the CUDA caching allocator with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (less "
               "fragmentation)");
  app.add_option("--techniques", o.techniques,
                 fmt::format("Comma list the search may use: {}; 'all' (default) or 'none'",
                             fmt::join(technique_names(all_techniques()), ",")))
      ->capture_default_str();
  app.add_option("--dtype", o.dtype, "Parameters and activations: bf16 or fp32 (default: bf16 on GPUs, fp32 on --gpu cpu)");
  app.add_option("--grad-dtype", o.grad_dtype,
                 "Gradients: fp32 or bf16 (default: the --dtype, as autograd and longctx's runtime keep them; fp32 plans "
                 "fp32 gradient buffers, which `longctx run` refuses)");
  app.add_option("--stack", o.stack,
                 "The code the step runs on: longctx (its own runtime), hf (transformers' modeling code with "
                 "torch AdamW, one GPU), arctic (ArcticTraining: transformers under DeepSpeed ZeRO-3, Ulysses, "
                 "TiledMLP, Liger kernels) or torchtitan (its llama3 and qwen3 models, FSDP2, activation checkpointing)")
      ->capture_default_str();
  app.add_option("--attention", o.attention,
                 "transformers' attn_implementation: --stack hf sdpa (default), eager or flash_attention_2 (GPUs); "
                 "--stack arctic flash_attention_2 (default) or flash_attention_3");
  app.add_option("--arctic-model", o.arctic_model,
                 "--stack arctic: ArcticTraining's model.type, liger (default: Liger's RMSNorm, RoPE, SwiGLU and fused "
                 "linear cross-entropy) or huggingface");
  app.add_option("--hf-checkpointing", o.hf_checkpointing,
                 "--stack hf: torch.utils.checkpoint's use_reentrant, non-reentrant (default) or reentrant");
  app.add_option("--hf-optimizer", o.hf_optimizer,
                 "--stack hf: the Trainer's optim, adamw_torch_fused (its default) or adamw_torch");
  app.add_option("--hf-loss", o.hf_loss,
                 "--stack hf: who computes the loss, transformers (default: the model's ForCausalLMLoss over the full "
                 "logits) or trl-chunked-nll (TRL's SFTTrainer loss_type chunked_nll: 256 tokens at a time)");
  app.add_flag("--hf-no-attention-mask", o.hf_no_attention_mask,
               "--stack hf: the batch carries no attention_mask (model(input_ids, labels) alone)");
  app.add_flag("--json", o.json, "Print JSON for scripts instead of tables");
}

int report(const Error& e) {
  fmt::print(stderr, "longctx: error: {}\n", e.what());
  return exit_status(e.kind);
}

}  // namespace longctx::cli
