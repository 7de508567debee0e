#pragma once
// Renders a Conversation to the exact prompt text of DeepSeek's official V4 encoder
// (encoding_dsv4.py `encode_messages`), including its preprocessing: tool messages merge
// into user turns, tool results are reordered to the preceding assistant's call order,
// and earlier reasoning is dropped in thinking mode unless any message carries tools.
#include "chat/conversation.h"

#include <string>

namespace ds4::chat {

// Throws ds4::Error for conversations the official encoder rejects (e.g. an empty
// developer message), naming the message index.
std::string render_prompt(const Conversation& conv, const RenderOptions& opts);

// True when `opts` asks for Think-Max and the context is large enough to honor it.
bool think_max_active(const RenderOptions& opts);

}  // namespace ds4::chat
