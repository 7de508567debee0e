#include "chat/chatml_parser.h"

#include <fmt/format.h>

#include "chat/chatml.h"
#include "chat/py_json.h"

namespace ds4::chat {

namespace {

constexpr std::string_view kFunctionOpen = "\n<function=";
constexpr std::string_view kParamOpen = "<parameter=";
constexpr std::string_view kParamClose = "\n</parameter>\n";
constexpr std::string_view kCallClose = "</function>\n</tool_call>";
constexpr std::string_view kNextCall = "\n<tool_call>";

// Length of the longest suffix of s that is a proper prefix of tag.
size_t partial_suffix(std::string_view s, std::string_view tag) {
  for (size_t n = std::min(s.size(), tag.size() - 1); n > 0; --n)
    if (s.substr(s.size() - n) == tag.substr(0, n)) return n;
  return 0;
}
bool is_prefix(std::string_view s, std::string_view of) { return s.size() <= of.size() && of.substr(0, s.size()) == s; }

}  // namespace

ChatmlStreamParser::ChatmlStreamParser(bool in_reasoning, const std::vector<Json>& tools, DsmlParserLimits limits)
    : state_(in_reasoning ? State::Reasoning : State::Content), limits_(limits) {
  for (const auto& fn : tools) {
    if (!fn.is_object() || !fn.contains("name") || !fn["name"].is_string()) continue;
    auto& m = string_params_[fn["name"].get<std::string>()];
    const auto p = fn.find("parameters");
    if (p == fn.end() || !p->is_object()) continue;
    const auto props = p->find("properties");
    if (props == p->end() || !props->is_object()) continue;
    for (auto it = props->begin(); it != props->end(); ++it) {
      const auto t = it.value().find("type");
      if (t != it.value().end() && t->is_string()) m[it.key()] = t->get<std::string>() == "string";
    }
  }
}

bool ChatmlStreamParser::is_string_param(const std::string& fn, const std::string& key, const std::string& raw) const {
  if (auto f = string_params_.find(fn); f != string_params_.end())
    if (auto k = f->second.find(key); k != f->second.end()) {
      if (k->second) return true;
      return !Json::accept(raw);  // typed non-string but not JSON: keep it as a string
    }
  // No schema: JSON values (numbers, booleans, objects, arrays, null) stay JSON; a quoted
  // JSON string is text like any other.
  if (!raw.empty() && raw.front() == '"') return true;
  return !Json::accept(raw);
}

void ChatmlStreamParser::error(std::vector<DsmlEvent>& out, std::string msg) {
  out.push_back({DsmlEventKind::Error, std::move(msg), {}, false});
  state_ = State::Failed;
  buf_.clear();
}

void ChatmlStreamParser::feed(std::string_view piece, std::vector<DsmlEvent>& out) {
  if (state_ == State::Failed || state_ == State::Done) return;
  buf_.append(piece);
  if (in_block_ && block_.size() + buf_.size() > limits_.max_block_bytes)
    return error(out, fmt::format("tool-call block exceeds {} bytes", limits_.max_block_bytes));
  while (step(out, false)) {
  }
}

void ChatmlStreamParser::finish(std::vector<DsmlEvent>& out) {
  if (state_ == State::Failed || state_ == State::Done) return;
  while (step(out, true)) {
  }
  switch (state_) {
    case State::Reasoning:
      if (!buf_.empty()) out.push_back({DsmlEventKind::Reasoning, buf_, {}, false});
      break;
    case State::AfterThink:
    case State::Content:
      if (!buf_.empty()) out.push_back({DsmlEventKind::Text, buf_, {}, false});
      break;
    case State::AfterCall:
      out.push_back({DsmlEventKind::ToolCallsEnd, block_, {}, false});
      break;
    case State::CallHeader:
    case State::Params:
    case State::ParamValue:
      return error(out, fmt::format("tool call '{}' left open at the end of generation", name_));
    case State::Done:
    case State::Failed:
      break;
  }
  buf_.clear();
  state_ = State::Done;
}

bool ChatmlStreamParser::step(std::vector<DsmlEvent>& out, bool at_end) {
  auto take = [&](size_t n) {
    if (in_block_) block_.append(buf_, 0, n);
    buf_.erase(0, n);
  };
  switch (state_) {
    case State::Reasoning: {
      const size_t i = buf_.find(chatml::kThinkClose);
      if (i == std::string::npos) {
        const size_t keep = at_end ? 0 : partial_suffix(buf_, chatml::kThinkClose);
        if (buf_.size() > keep) out.push_back({DsmlEventKind::Reasoning, buf_.substr(0, buf_.size() - keep), {}, false});
        buf_.erase(0, buf_.size() - keep);
        return false;
      }
      if (i > 0) out.push_back({DsmlEventKind::Reasoning, buf_.substr(0, i), {}, false});
      out.push_back({DsmlEventKind::ReasoningEnd, {}, {}, false});
      buf_.erase(0, i + chatml::kThinkClose.size());
      state_ = State::AfterThink;
      return true;
    }
    case State::AfterThink: {
      size_t n = 0;
      while (n < buf_.size() && buf_[n] == '\n') ++n;
      buf_.erase(0, n);
      if (buf_.empty()) return false;
      state_ = State::Content;
      return true;
    }
    case State::Content: {
      const size_t i = buf_.find(chatml::kToolCallOpen);
      if (i == std::string::npos) {
        // Hold back trailing newlines (maybe the separator before a call) and a partial tag.
        size_t keep = at_end ? 0 : partial_suffix(buf_, chatml::kToolCallOpen);
        if (!at_end)
          while (keep < buf_.size() && buf_[buf_.size() - keep - 1] == '\n') ++keep;
        if (buf_.size() > keep) out.push_back({DsmlEventKind::Text, buf_.substr(0, buf_.size() - keep), {}, false});
        buf_.erase(0, buf_.size() - keep);
        return false;
      }
      size_t text_end = i;
      while (text_end > 0 && buf_[text_end - 1] == '\n') --text_end;
      if (text_end > 0) out.push_back({DsmlEventKind::Text, buf_.substr(0, text_end), {}, false});
      out.push_back({DsmlEventKind::ToolCallsBegin, {}, {}, false});
      buf_.erase(0, text_end);
      in_block_ = true;
      block_.clear();
      take(i - text_end + chatml::kToolCallOpen.size());
      state_ = State::CallHeader;
      return true;
    }
    case State::CallHeader: {
      if (buf_.size() < kFunctionOpen.size()) {
        if (!is_prefix(buf_, kFunctionOpen)) return error(out, "expected \"<function=\" after <tool_call>"), false;
        return false;
      }
      if (buf_.compare(0, kFunctionOpen.size(), kFunctionOpen) != 0)
        return error(out, "expected \"<function=\" after <tool_call>"), false;
      const size_t e = buf_.find(">\n", kFunctionOpen.size());
      if (e == std::string::npos) {
        if (buf_.size() - kFunctionOpen.size() > limits_.max_name_bytes)
          return error(out, fmt::format("tool name longer than {} bytes", limits_.max_name_bytes)), false;
        return false;
      }
      name_ = buf_.substr(kFunctionOpen.size(), e - kFunctionOpen.size());
      if (name_.empty() || name_.find_first_of("<>\n") != std::string::npos)
        return error(out, fmt::format("bad tool name '{}'", name_)), false;
      take(e + 2);
      args_.clear();
      out.push_back({DsmlEventKind::ToolCallStart, {}, name_, false});
      state_ = State::Params;
      return true;
    }
    case State::Params: {
      if (buf_.compare(0, kCallClose.size(), kCallClose) == 0 && buf_.size() >= kCallClose.size()) {
        take(kCallClose.size());
        const std::string args = args_.empty() ? "{}" : args_ + "}";
        out.push_back({DsmlEventKind::ToolCallEnd, args, name_, false});
        state_ = State::AfterCall;
        return true;
      }
      if (buf_.size() >= kParamOpen.size() && buf_.compare(0, kParamOpen.size(), kParamOpen) == 0) {
        const size_t e = buf_.find(">\n", kParamOpen.size());
        if (e == std::string::npos) {
          if (buf_.size() - kParamOpen.size() > limits_.max_name_bytes)
            return error(out, fmt::format("parameter name longer than {} bytes", limits_.max_name_bytes)), false;
          return false;
        }
        key_ = buf_.substr(kParamOpen.size(), e - kParamOpen.size());
        if (key_.empty() || key_.find_first_of("<>\n") != std::string::npos)
          return error(out, fmt::format("bad parameter name '{}' in tool call '{}'", key_, name_)), false;
        take(e + 2);
        state_ = State::ParamValue;
        return true;
      }
      if (is_prefix(buf_, kCallClose) || is_prefix(buf_, kParamOpen)) return false;
      return error(out, fmt::format("unexpected text in tool call '{}' (expected <parameter=...> or </function>)", name_)),
             false;
    }
    case State::ParamValue: {
      const size_t i = buf_.find(kParamClose);
      if (i == std::string::npos) {
        if (buf_.size() > limits_.max_value_bytes)
          return error(out, fmt::format("parameter '{}' value exceeds {} bytes", key_, limits_.max_value_bytes)), false;
        return false;
      }
      const std::string raw = buf_.substr(0, i);
      const bool str = is_string_param(name_, key_, raw);
      args_ += args_.empty() ? "{" : ", ";
      py_json_quote(key_, args_);
      args_ += ": ";
      if (str) py_json_quote(raw, args_);
      else args_ += raw;
      out.push_back({DsmlEventKind::Parameter, raw, key_, str});
      take(i + kParamClose.size());
      state_ = State::Params;
      return true;
    }
    case State::AfterCall: {
      if (buf_.size() >= kNextCall.size() && buf_.compare(0, kNextCall.size(), kNextCall) == 0) {
        take(kNextCall.size());
        state_ = State::CallHeader;
        return true;
      }
      if (!at_end && is_prefix(buf_, kNextCall)) return false;
      if (buf_.empty()) return false;
      // Anything else after the calls ends the block (the template allows no suffix).
      out.push_back({DsmlEventKind::ToolCallsEnd, block_, {}, false});
      in_block_ = false;
      buf_.clear();
      state_ = State::Done;
      return false;
    }
    case State::Done:
    case State::Failed:
      return false;
  }
  return false;
}

}  // namespace ds4::chat
