#pragma once
// In-memory model of a chat request, close to the OpenAI wire shape, from which the
// DeepSeek V4 prompt text is rendered (renderer.h). JSON values that end up in the prompt
// (tool schemas, tool-call arguments, response formats) are kept as ordered_json: the
// official encoder is Python, whose dicts keep the key order the client sent, and the
// prompt bytes depend on that order.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ds4::chat {

using Json = nlohmann::ordered_json;

enum class Role { System, Developer, User, Assistant, Tool, LatestReminder };

// Internal classification tasks of the official encoder (`task` on a user message).
enum class Task { None, Action, Query, Authority, Domain, Title, ReadUrl };

struct ToolCall {
  std::string id;
  std::string name;
  // Arguments as the client sent them. When `arguments_valid` is false the text was not a
  // JSON object and, like the official encoder, it renders as one string parameter
  // named "arguments" holding `arguments_text`.
  Json arguments = Json::object();
  bool arguments_valid = true;
  std::string arguments_text;
};

// A piece of a tool message's content. The official encoder renders text parts only and
// writes "[Unsupported <type>]" for anything else.
struct ContentPart {
  std::string type;  // "text" or anything else
  std::string text;
};

struct Message {
  Role role = Role::User;
  std::optional<std::string> content;  // nullopt = JSON null / absent
  // Tool messages may carry a list of parts instead of a string.
  std::optional<std::vector<ContentPart>> content_parts;
  std::optional<std::string> reasoning_content;
  std::vector<ToolCall> tool_calls;
  std::string tool_call_id;  // tool messages
  // Tool schemas (OpenAI `function` objects) and response format attached to a system or
  // developer message; they render inside that message.
  std::vector<Json> tools;
  std::optional<Json> response_format;
  Task task = Task::None;
  // Assistant only: end the turn without EOS (a partial turn the model will continue).
  bool no_eos = false;
  // Assistant only: the exact DSML block the model sampled for these tool calls
  // ("\n\n<｜DSML｜tool_calls>…</｜DSML｜tool_calls>"). When set it is written instead of
  // the canonical rendering, so replayed history matches the tokens in the KV cache.
  std::optional<std::string> raw_tool_block;
};

enum class ThinkingMode { None, High, Max };

// The prompt format of the model family (picked from the GGUF's general.architecture):
// DeepSeek V4 (renderer.h) or Qwen3.5/3.6 ChatML (chatml.h).
enum class ChatFormat { DeepSeekV4, ChatML };

// The revision of Qwen's ChatML template a model carries (chatml.h, chatml_template_for):
// Qwen3.5 writes tool-call arguments that are not strings, objects or arrays with Python's
// str() (True, None), Qwen3.6 with json.dumps (true, null); only Qwen3.6 reads the
// preserve_thinking switch.
enum class ChatmlTemplate { Qwen35, Qwen36 };

// DeepSeek recommends Think-Max only with at least 384K of context; below it the max
// prefix is not written and the request behaves as "high" (as ds4 does).
inline constexpr std::uint64_t kThinkMaxMinContext = 393216;

struct RenderOptions {
  ThinkingMode thinking = ThinkingMode::High;
  std::uint64_t context_size = 0;  // tokens the session can hold
  // Official `drop_thinking`: drop reasoning of turns before the last user message. The
  // encoder switches it off by itself whenever any message carries tools.
  bool drop_thinking = true;
  bool add_bos = true;
  ChatFormat format = ChatFormat::DeepSeekV4;
  // ChatML only: the template revision, and Qwen3.6's preserve_thinking (the reasoning of
  // every assistant turn stays in the prompt, not only of those after the last user query).
  ChatmlTemplate chatml_template = ChatmlTemplate::Qwen36;
  bool preserve_thinking = false;
};

struct Conversation {
  std::vector<Message> messages;
};

}  // namespace ds4::chat
