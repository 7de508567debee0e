#pragma once
// Renders a Conversation to the exact prompt text of DeepSeek's official V4 encoder
// (encoding_dsv4.py `encode_messages`), including its preprocessing: tool messages merge
// into user turns, tool results are reordered to the preceding assistant's call order,
// and earlier reasoning is dropped in thinking mode unless any message carries tools.
#include "chat/conversation.h"
#include "chat/marked_text.h"

#include <string>

namespace ds4::chat {

// opts.format == ChatFormat::ChatML renders Qwen's ChatML instead (chatml.h).
// Throws ds4::Error for conversations the official encoder rejects (e.g. an empty
// developer message), naming the message index.
std::string render_prompt(const Conversation& conv, const RenderOptions& opts);
// The same text with the ranges of the control tokens the renderer placed (marked_text.h):
// what a server tokenizes, so that no client string becomes a control token.
MarkedText render_prompt_marked(const Conversation& conv, const RenderOptions& opts);

// True when `opts` asks for Think-Max and the context is large enough to honor it.
bool think_max_active(const RenderOptions& opts);

}  // namespace ds4::chat
