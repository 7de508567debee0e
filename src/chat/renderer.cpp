#include "chat/renderer.h"

#include "chat/chatml.h"

#include "chat/dsml.h"
#include "chat/markers.h"
#include "chat/py_json.h"
#include "core/error.h"

#include <algorithm>
#include <unordered_map>

namespace ds4::chat {
namespace {

// A user turn after the official merge step is a list of blocks joined by "\n\n".
struct Block {
  bool is_tool_result = false;
  std::string text;
  std::string tool_call_id;
};

// One message of the preprocessed list the official encoder renders.
struct Turn {
  Role role;
  const Message* src = nullptr;  // system / developer / assistant / latest_reminder
  std::vector<Block> blocks;     // user
  Task task = Task::None;        // user
  size_t source_index = 0;       // for error messages
};

std::string tool_result_text(const Message& m) {
  if (!m.content_parts) return m.content.value_or("");
  // A list of parts: text kept, anything else flagged, parts joined by a blank line.
  std::string out;
  for (size_t i = 0; i < m.content_parts->size(); ++i) {
    const ContentPart& p = (*m.content_parts)[i];
    if (i) out += "\n\n";
    if (p.type == "text") {
      out += p.text;
    } else {
      out += "[Unsupported " + p.type + "]";
    }
  }
  return out;
}

// merge_tool_messages: every user or tool message joins a directly preceding user turn
// (users only when that turn has no task); otherwise it starts a new one.
std::vector<Turn> merge_turns(const Conversation& conv) {
  std::vector<Turn> turns;
  for (size_t i = 0; i < conv.messages.size(); ++i) {
    const Message& m = conv.messages[i];
    if (m.role == Role::Tool) {
      Block b{true, tool_result_text(m), m.tool_call_id};
      if (!turns.empty() && turns.back().role == Role::User) {
        turns.back().blocks.push_back(std::move(b));
      } else {
        Turn t{Role::User, nullptr, {}, Task::None, i};
        t.blocks.push_back(std::move(b));
        turns.push_back(std::move(t));
      }
    } else if (m.role == Role::User) {
      Block b{false, m.content.value_or(""), {}};
      if (!turns.empty() && turns.back().role == Role::User && turns.back().task == Task::None) {
        turns.back().blocks.push_back(std::move(b));
      } else {
        Turn t{Role::User, nullptr, {}, m.task, i};
        t.blocks.push_back(std::move(b));
        turns.push_back(std::move(t));
      }
    } else {
      turns.push_back(Turn{m.role, &m, {}, Task::None, i});
    }
  }
  return turns;
}

// sort_tool_results_by_call_order: tool results inside a user turn take the order of the
// most recent assistant tool_calls (unknown ids rank as 0; the sort is stable).
void sort_tool_results(std::vector<Turn>& turns) {
  std::unordered_map<std::string, size_t> order;
  for (Turn& t : turns) {
    if (t.role == Role::Assistant && !t.src->tool_calls.empty()) {
      order.clear();
      for (size_t k = 0; k < t.src->tool_calls.size(); ++k) {
        const std::string& id = t.src->tool_calls[k].id;
        if (!id.empty()) order[id] = k;
      }
    } else if (t.role == Role::User) {
      std::vector<Block*> slots;
      for (Block& b : t.blocks) {
        if (b.is_tool_result) slots.push_back(&b);
      }
      if (slots.size() <= 1 || order.empty()) continue;
      std::vector<Block> sorted;
      for (Block* b : slots) sorted.push_back(*b);
      auto rank = [&](const Block& b) {
        auto it = order.find(b.tool_call_id);
        return it == order.end() ? size_t{0} : it->second;
      };
      std::stable_sort(sorted.begin(), sorted.end(),
                       [&](const Block& a, const Block& b) { return rank(a) < rank(b); });
      for (size_t k = 0; k < slots.size(); ++k) *slots[k] = std::move(sorted[k]);
    }
  }
}

bool is_user_like(Role r) { return r == Role::User || r == Role::Developer; }

long last_user_index(const std::vector<Turn>& turns) {
  for (size_t i = turns.size(); i-- > 0;) {
    if (is_user_like(turns[i].role)) return static_cast<long>(i);
  }
  return -1;
}

// _drop_thinking_messages: before the last user turn, developer turns disappear (their
// reasoning is never rendered for assistants there anyway).
std::vector<Turn> drop_early_developer_turns(std::vector<Turn> turns) {
  long last = last_user_index(turns);
  std::vector<Turn> out;
  for (size_t i = 0; i < turns.size(); ++i) {
    if (turns[i].role == Role::Developer && static_cast<long>(i) < last) continue;
    out.push_back(std::move(turns[i]));
  }
  return out;
}

std::string_view task_token(Task t) {
  switch (t) {
    case Task::Action: return mark::kTaskAction;
    case Task::Query: return mark::kTaskQuery;
    case Task::Authority: return mark::kTaskAuthority;
    case Task::Domain: return mark::kTaskDomain;
    case Task::Title: return mark::kTaskTitle;
    case Task::ReadUrl: return mark::kTaskReadUrl;
    case Task::None: break;
  }
  return "";
}

// The encoder tests `if response_format:`, so Python's falsy values add nothing.
bool py_truthy(const Json& j) {
  switch (j.type()) {
    case Json::value_t::null: return false;
    case Json::value_t::boolean: return j.get<bool>();
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
    case Json::value_t::number_float: return j.get<double>() != 0.0;
    case Json::value_t::string: return !j.get_ref<const std::string&>().empty();
    default: return !j.empty();
  }
}

// Tool schemas and the response format are the client's JSON: plain text.
void append_tools_and_format(const Message& m, MarkedText& out) {
  if (!m.tools.empty()) {
    out.plain("\n\n");
    out.templ(mark::kToolsHead);
    for (size_t i = 0; i < m.tools.size(); ++i) {
      if (i) out.plain("\n");
      py_json_dump_to(m.tools[i], out.text);
    }
    out.templ(mark::kToolsTail);
  }
  if (m.response_format && py_truthy(*m.response_format)) {
    out.plain("\n\n");
    out.templ(mark::kResponseFormatLead);
    py_json_dump_to(*m.response_format, out.text);
  }
}

struct Ctx {
  bool thinking;
  bool drop;
  bool think_max;
  long last_user;
};

// Client strings go in with plain(); control tokens only with control() or templ().
void render_turn(const std::vector<Turn>& turns, size_t i, const Ctx& c, MarkedText& out) {
  const Turn& t = turns[i];
  if (i == 0 && c.thinking && c.think_max) out.templ(mark::kThinkMaxPrefix);

  switch (t.role) {
    case Role::System:
      out.plain(t.src->content.value_or(""));
      append_tools_and_format(*t.src, out);
      break;
    case Role::Developer:
      if (t.src->content.value_or("").empty()) {
        fail("messages[{}]: developer message needs non-empty content", t.source_index);
      }
      out.control(mark::kUser);
      out.plain(*t.src->content);
      append_tools_and_format(*t.src, out);
      break;
    case Role::User:
      out.control(mark::kUser);
      for (size_t k = 0; k < t.blocks.size(); ++k) {
        if (k) out.plain("\n\n");
        const Block& b = t.blocks[k];
        if (b.is_tool_result) {
          out.templ(mark::kToolResultOpen);
          out.plain(b.text);
          out.templ(mark::kToolResultClose);
        } else {
          out.plain(b.text);
        }
      }
      break;
    case Role::LatestReminder:
      out.control(mark::kLatestReminder);
      out.plain(t.src->content.value_or(""));
      break;
    case Role::Assistant: {
      const Message& m = *t.src;
      bool prev_has_task = i > 0 && turns[i - 1].task != Task::None;
      if (c.thinking && !prev_has_task &&
          (!c.drop || static_cast<long>(i) > c.last_user)) {
        out.plain(m.reasoning_content.value_or(""));
        out.control(mark::kThinkClose);
      }
      out.plain(m.content.value_or(""));
      if (m.raw_tool_block) {
        out.sampled_dsml(*m.raw_tool_block);
      } else if (!m.tool_calls.empty()) {
        render_tool_calls_block(m.tool_calls, out);
      }
      if (!m.no_eos) out.control(mark::kEos);
      break;
    }
    case Role::Tool:
      break;  // merged away above
  }

  // Transition: only when the next turn is the assistant's (or a reminder), or at the end.
  if (i + 1 < turns.size() && turns[i + 1].role != Role::Assistant &&
      turns[i + 1].role != Role::LatestReminder) {
    return;
  }
  if (t.task != Task::None) {
    if (t.task != Task::Action) {
      out.control(task_token(t.task));
    } else {
      out.control(mark::kAssistant);
      out.control(c.thinking ? mark::kThinkOpen : mark::kThinkClose);
      out.control(task_token(t.task));
    }
  } else if (is_user_like(t.role)) {
    out.control(mark::kAssistant);
    bool open = c.thinking && (!c.drop || static_cast<long>(i) >= c.last_user);
    out.control(open ? mark::kThinkOpen : mark::kThinkClose);
  }
}

}  // namespace

bool think_max_active(const RenderOptions& opts) {
  return opts.thinking == ThinkingMode::Max && opts.context_size >= kThinkMaxMinContext;
}

MarkedText render_prompt_marked(const Conversation& conv, const RenderOptions& opts) {
  if (opts.format == ChatFormat::ChatML) return render_chatml_marked(conv, opts);
  std::vector<Turn> turns = merge_turns(conv);
  sort_tool_results(turns);

  Ctx c{};
  c.thinking = opts.thinking != ThinkingMode::None;
  c.think_max = think_max_active(opts);
  bool any_tools = std::any_of(conv.messages.begin(), conv.messages.end(),
                               [](const Message& m) { return !m.tools.empty(); });
  c.drop = opts.drop_thinking && !any_tools;
  if (c.thinking && c.drop) turns = drop_early_developer_turns(std::move(turns));
  c.last_user = last_user_index(turns);

  MarkedText out;
  if (opts.add_bos) out.control(mark::kBos);
  for (size_t i = 0; i < turns.size(); ++i) render_turn(turns, i, c, out);
  return out;
}

std::string render_prompt(const Conversation& conv, const RenderOptions& opts) {
  return std::move(render_prompt_marked(conv, opts).text);
}

}  // namespace ds4::chat
