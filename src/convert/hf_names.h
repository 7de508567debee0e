#pragma once
// Hugging Face DeepSeek V4 tensor name -> GGUF tensor name (spec §3).
// Accepted spellings, each optionally under a leading "model.":
// * official checkpoint names: layers.N.attn.wq_a.weight, layers.N.ffn.experts.E.w1.weight,
//   embed.weight, head.weight, hc_head_fn, ... (transformers 5.17 save_pretrained writes these
//   under "model." except model.embed_tokens.weight, model.hc_head.hc_*, model.norm.weight and
//   head.weight, and it spells the kv norms "attn.norm" / "compressor.norm");
// * transformers module names: model.layers.N.self_attn.q_a_proj.weight,
//   model.layers.N.mlp.experts.gate_up_proj (stacked [E, 2I, H]), lm_head.weight, ...
#include <optional>
#include <string>
#include <string_view>

namespace ds4::convert {

struct MappedName {
  enum class Kind {
    Whole,        // the HF tensor is the whole GGUF tensor (dims reversed, same bytes order)
    Expert,       // one expert's [rows, cols] matrix: slab `expert` of a 3-D GGUF tensor
    GateUpStack,  // transformers' [E, 2I, H]: first I rows of each expert -> gate, next I -> up
    DownStack,    // transformers' [E, H, I] -> ffn_down_exps
    Ignored,      // MTP block (lives in a separate GGUF)
    Scale,        // "<weight>.scale" / ".weight_scale_inv": FP8/FP4 block scales of a Whole tensor
    ExpertScale,  // the same for one expert's matrix
  };
  Kind kind = Kind::Whole;
  std::string gguf;  // for GateUpStack: the gate tensor's name (up is the same with "up")
  int layer = -1;
  int expert = -1;
};

// Throws ds4::Error for names that are not part of a DeepSeek V4 checkpoint. A ".scale" (or
// ".weight_scale_inv") companion of a known weight maps to that weight's GGUF name with kind
// Scale / ExpertScale (the official release's FP8/FP4 block scales).
MappedName map_hf_name(std::string_view hf_name);

}  // namespace ds4::convert
