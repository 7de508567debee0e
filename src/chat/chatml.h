#pragma once
// Qwen3.5/3.6 ChatML prompts: what the chat template carried by the qwen35moe GGUFs
// (`tokenizer.chat_template`) renders with add_generation_prompt=true, byte for byte, for
// both revisions: Qwen3.5's (llama.cpp's models/templates/Qwen3.5-4B.jinja) and Qwen3.6's
// (tests/fixtures/chat/templates/Qwen3.6-35B-A3B.jinja):
//   [<|im_start|>system\n(# Tools ... <tools>{"type": "function", "function": ...}</tools> ...)
//    system text<|im_end|>\n]
//   <|im_start|>user\n TEXT<|im_end|>\n
//   <|im_start|>assistant\n[<think>\nREASONING\n</think>\n\n]CONTENT[<tool_call>...]<|im_end|>\n
//   <|im_start|>user\n<tool_response>\nRESULT\n</tool_response>...<|im_end|>\n
//   <|im_start|>assistant\n<think>\n        (or <think>\n\n</think>\n\n without thinking)
// Reasoning is written only for assistant turns after the last real user query (as the
// template does), or for every turn with Qwen3.6's preserve_thinking. Tool calls use the XML
// form:
//   <tool_call>\n<function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>\n</function>\n</tool_call>
// (strings as they are, objects and arrays as json.dumps, other values as Python's str() in
// Qwen3.5 and as json.dumps in Qwen3.6). Tool schemas, attached to system or developer
// messages by the request parser, are listed once, in order.
#include <string_view>

#include "chat/conversation.h"
#include "chat/marked_text.h"

namespace ds4::chat {

namespace chatml {
inline constexpr std::string_view kImStart = "<|im_start|>";
inline constexpr std::string_view kImEnd = "<|im_end|>";
inline constexpr std::string_view kThinkOpen = "<think>";
inline constexpr std::string_view kThinkClose = "</think>";
inline constexpr std::string_view kToolCallOpen = "<tool_call>";
inline constexpr std::string_view kToolCallClose = "</tool_call>";
inline constexpr std::string_view kToolResponseOpen = "<tool_response>";
inline constexpr std::string_view kToolResponseClose = "</tool_response>";
}  // namespace chatml

// The chat format of a GGUF general.architecture: ChatML for qwen35moe, else DeepSeek V4.
ChatFormat chat_format_for_architecture(std::string_view architecture);

// The template revision of a GGUF's `tokenizer.chat_template` text: Qwen35 when it writes
// non-string arguments with `| string` (Qwen3.5's argument line), else Qwen36 (also for an
// absent template: the family's current published one).
ChatmlTemplate chatml_template_for(std::string_view chat_template);

// Throws ds4::Error for conversations the template rejects (no user query, a system message
// after the first, an unsupported role), naming the message index.
MarkedText render_chatml_marked(const Conversation& conv, const RenderOptions& opts);
std::string render_chatml(const Conversation& conv, const RenderOptions& opts);

}  // namespace ds4::chat
