#pragma once
// The agent loop: render the conversation in the DeepSeek V4 chat format (tools described in
// the system prompt), bring the model's history up to it (only what is new is evaluated),
// generate with streaming, parse DSML tool calls as they stream, run the tools, append their
// results and continue until the model answers without a tool call or the turn limit is hit.
//
// The assistant messages keep the exact bytes the model produced (reasoning, content and the
// sampled DSML block as raw_tool_block), so rendering the conversation again reproduces the
// history byte for byte and the next turn appends to it. resyncs() counts the times that did
// not hold and the history had to be re-tokenized (a thinking-mode switch can cause it).
#include <atomic>
#include <string>

#include "agent/events.h"
#include "agent/model_side.h"
#include "agent/tools.h"
#include "chat/conversation.h"

namespace ds4::agent {

struct AgentOptions {
  chat::ThinkingMode thinking = chat::ThinkingMode::High;
  int max_turns = 50;        // model turns per run()
  int64_t max_tokens = -1;   // per model turn; < 0: until the model stops or the context is full
  // The model family's prompt and tool-call format (chat::chat_format_for_architecture).
  chat::ChatFormat format = chat::ChatFormat::DeepSeekV4;
  // ChatML: the template revision (chat::chatml_template_for the GGUF's chat template).
  chat::ChatmlTemplate chatml_template = chat::ChatmlTemplate::Qwen36;
};

// The system prompt: what the agent is, where it works; the tool schemas come with it.
std::string default_system_prompt(const std::string& workdir);

class Agent {
 public:
  Agent(ModelSide& model, Tools& tools, EventSink& sink, ToolHost& host, AgentOptions opts);

  // A fresh conversation: one system message carrying the tools.
  void reset(const std::string& system_prompt);
  // A restored conversation whose rendering is (or, stripped of its payload, will be) the
  // model's history.
  void restore(chat::Conversation conv);

  // One user request, until the model answers, the turn limit, Ctrl+C (`cancel`) or an error.
  RunReport run(const std::string& user_text, const std::atomic<bool>* cancel);

  // Brings the model's history up to the rendered conversation.
  PrefillStats sync(const std::atomic<bool>* cancel);

  const chat::Conversation& conversation() const { return conv_; }
  void set_thinking(chat::ThinkingMode m) { opts_.thinking = m; }
  chat::ThinkingMode thinking() const { return opts_.thinking; }
  int64_t resyncs() const { return resyncs_; }
  std::string render() const;
  std::string title() const;  // the first user message, shortened

 private:
  std::string render(const chat::Conversation& c) const;
  chat::MarkedText render_marked(const chat::Conversation& c) const;
  int next_call_number() const;

  ModelSide& model_;
  Tools& tools_;
  EventSink& sink_;
  ToolHost& host_;
  AgentOptions opts_;
  chat::Conversation conv_;
  size_t synced_msgs_ = 0;  // messages whose rendering the last generation completed
  int64_t resyncs_ = 0;
};

}  // namespace ds4::agent
