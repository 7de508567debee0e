#include "chat/dsml_parser.h"

#include "chat/markers.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <initializer_list>

namespace ds4::chat {
namespace {

enum class Lit { Yes, NeedMore, No };

// Does the available text start with `lit`? NeedMore while it is a strict prefix of it.
Lit match(std::string_view a, std::string_view lit) {
  if (a.size() >= lit.size()) return a.substr(0, lit.size()) == lit ? Lit::Yes : Lit::No;
  return lit.substr(0, a.size()) == a ? Lit::NeedMore : Lit::No;
}

// Length of the longest tail of `a` that could be the start of one of `stops`: those
// bytes must be held back until the next piece decides.
size_t holdback(std::string_view a, std::initializer_list<std::string_view> stops) {
  size_t best = 0;
  for (std::string_view s : stops) {
    for (size_t k = std::min(a.size(), s.size() - 1); k > best; --k) {
      if (a.substr(a.size() - k) == s.substr(0, k)) {
        best = k;
        break;
      }
    }
  }
  return best;
}

// Earliest occurrence of any stop: (position, index into stops) or npos.
std::pair<size_t, size_t> find_first(std::string_view a,
                                     std::initializer_list<std::string_view> stops) {
  size_t best = std::string_view::npos, which = 0, i = 0;
  for (std::string_view s : stops) {
    size_t p = a.find(s);
    if (p < best) {
      best = p;
      which = i;
    }
    ++i;
  }
  return {best, which};
}

std::string printable(std::string_view s) {
  std::string out;
  for (char c : s.substr(0, 40)) {
    if (c == '\n') out += "\\n";
    else out += c;
  }
  if (s.size() > 40) out += "…";
  return out;
}

}  // namespace

DsmlStreamParser::DsmlStreamParser(bool in_reasoning, DsmlParserLimits limits)
    : state_(in_reasoning ? State::Reasoning : State::Content), limits_(limits) {}

void DsmlStreamParser::consume(size_t n) {
  if (in_block_) raw_.append(buf_, pos_, n);
  pos_ += n;
}

void DsmlStreamParser::error(std::vector<DsmlEvent>& out, std::string msg) {
  state_ = State::Failed;
  buf_.clear();
  pos_ = 0;
  raw_.clear();
  out.push_back({DsmlEventKind::Error, std::move(msg), {}, false});
}

void DsmlStreamParser::feed(std::string_view piece, std::vector<DsmlEvent>& out) {
  if (state_ == State::Failed) return;
  buf_.append(piece);
  while (state_ != State::Failed && step(out)) {
  }
  if (state_ == State::Failed) return;
  // Drop consumed bytes once they dominate the buffer.
  if (pos_ > 4096 && pos_ * 2 > buf_.size()) {
    buf_.erase(0, pos_);
    pos_ = 0;
  }
  if (in_block_ && raw_.size() > limits_.max_block_bytes) {
    error(out, fmt::format("tool-call block longer than {} bytes", limits_.max_block_bytes));
  }
}

bool DsmlStreamParser::step(std::vector<DsmlEvent>& out) {
  std::string_view a = avail();
  switch (state_) {
    case State::Reasoning: {
      auto [p, which] = find_first(a, {mark::kThinkClose, mark::kToolCallsLead, mark::kEos});
      size_t emit = p != std::string_view::npos
                        ? p
                        : a.size() - holdback(a, {mark::kThinkClose, mark::kToolCallsLead,
                                                  mark::kEos});
      if (emit) {
        out.push_back({DsmlEventKind::Reasoning, std::string(a.substr(0, emit)), {}, false});
        consume(emit);
      }
      if (p == std::string_view::npos) return false;
      if (which != 0) {
        error(out, which == 1 ? "tool-call block inside reasoning (no </think> before it)"
                              : "end of sentence inside reasoning (no </think>)");
        return false;
      }
      consume(mark::kThinkClose.size());
      out.push_back({DsmlEventKind::ReasoningEnd, {}, {}, false});
      state_ = State::Content;
      return true;
    }
    case State::Content: {
      auto [p, which] = find_first(a, {mark::kToolCallsLead, mark::kEos});
      size_t emit = p != std::string_view::npos
                        ? p
                        : a.size() - holdback(a, {mark::kToolCallsLead, mark::kEos});
      if (emit) {
        out.push_back({DsmlEventKind::Text, std::string(a.substr(0, emit)), {}, false});
        consume(emit);
      }
      if (p == std::string_view::npos) return false;
      if (which == 1) {
        consume(mark::kEos.size());
        out.push_back({DsmlEventKind::Eos, {}, {}, false});
        state_ = State::Done;
        return true;
      }
      in_block_ = true;
      raw_.clear();
      calls_.clear();
      consume(mark::kToolCallsLead.size());
      out.push_back({DsmlEventKind::ToolCallsBegin, {}, {}, false});
      state_ = State::BlockOpen;
      return true;
    }
    case State::BlockOpen: {
      Lit m = match(a, ">\n");
      if (m == Lit::NeedMore) return false;
      if (m == Lit::No) {
        error(out, fmt::format("expected '>\\n' after <｜DSML｜tool_calls, got '{}'", printable(a)));
        return false;
      }
      consume(2);
      state_ = State::InvokeOrClose;
      return true;
    }
    case State::InvokeOrClose: {
      Lit inv = match(a, mark::kInvokeOpen);
      Lit end = calls_.empty() ? Lit::No : match(a, mark::kToolCallsClose);
      if (inv == Lit::Yes) {
        consume(mark::kInvokeOpen.size());
        call_ = DsmlCall{};
        state_ = State::InvokeHeader;
        return true;
      }
      if (end == Lit::Yes) {
        consume(mark::kToolCallsClose.size());
        in_block_ = false;
        out.push_back({DsmlEventKind::ToolCallsEnd, std::move(raw_), {}, false});
        raw_.clear();
        state_ = State::AfterBlock;
        return true;
      }
      if (inv == Lit::NeedMore || end == Lit::NeedMore) return false;
      error(out, fmt::format("expected {} in tool-call block, got '{}'",
                             calls_.empty() ? "<｜DSML｜invoke" : "<｜DSML｜invoke or </｜DSML｜tool_calls>",
                             printable(a)));
      return false;
    }
    case State::InvokeHeader: {
      // ` name="NAME">\n`
      constexpr std::string_view lead = " name=\"";
      Lit m = match(a, lead);
      if (m == Lit::NeedMore) return false;
      if (m == Lit::No) {
        error(out, fmt::format("expected ' name=\"' after <｜DSML｜invoke, got '{}'", printable(a)));
        return false;
      }
      size_t close = a.find("\">\n", lead.size());
      if (close == std::string_view::npos) {
        if (a.size() > lead.size() + limits_.max_name_bytes + 3) {
          error(out, fmt::format("tool name longer than {} bytes", limits_.max_name_bytes));
        }
        return false;
      }
      call_.name = std::string(a.substr(lead.size(), close - lead.size()));
      if (call_.name.empty()) {
        error(out, "empty tool name in <｜DSML｜invoke");
        return false;
      }
      if (call_.name.size() > limits_.max_name_bytes) {
        error(out, fmt::format("tool name longer than {} bytes", limits_.max_name_bytes));
        return false;
      }
      consume(close + 3);
      out.push_back({DsmlEventKind::ToolCallStart, {}, call_.name, false});
      state_ = State::AfterInvokeHeader;
      return true;
    }
    case State::AfterInvokeHeader: {
      // First parameter, or "\n</｜DSML｜invoke>" for a call without parameters.
      static const std::string kEmptyClose = "\n" + std::string(mark::kInvokeClose);
      Lit par = match(a, mark::kParamOpen);
      Lit end = match(a, kEmptyClose);
      if (par == Lit::Yes) {
        consume(mark::kParamOpen.size());
        state_ = State::ParamHeader;
        return true;
      }
      if (end == Lit::Yes) {
        consume(kEmptyClose.size());
        state_ = State::AfterInvoke;
        return true;
      }
      if (par == Lit::NeedMore || end == Lit::NeedMore) return false;
      error(out, fmt::format("expected <｜DSML｜parameter in invoke of '{}', got '{}'", call_.name,
                             printable(a)));
      return false;
    }
    case State::ParamHeader: {
      // ` name="K" string="true">` or `... string="false">`
      constexpr std::string_view lead = " name=\"";
      Lit m = match(a, lead);
      if (m == Lit::NeedMore) return false;
      if (m == Lit::No) {
        error(out, fmt::format("expected ' name=\"' after <｜DSML｜parameter in '{}', got '{}'",
                               call_.name, printable(a)));
        return false;
      }
      auto [p, which] = find_first(a.substr(lead.size()),
                                   {"\" string=\"true\">", "\" string=\"false\">"});
      if (p == std::string_view::npos) {
        if (a.size() > lead.size() + limits_.max_name_bytes + 17) {
          error(out, fmt::format("parameter header in '{}' malformed or name longer than {} bytes",
                                 call_.name, limits_.max_name_bytes));
        }
        return false;
      }
      param_ = DsmlParam{std::string(a.substr(lead.size(), p)), which == 0, {}};
      for (const DsmlParam& q : call_.params) {
        if (q.name == param_.name) {
          error(out, fmt::format("duplicate parameter '{}' in call of '{}'", param_.name, call_.name));
          return false;
        }
      }
      consume(lead.size() + p + (which == 0 ? 16 : 17));
      state_ = State::ParamValue;
      return true;
    }
    case State::ParamValue: {
      size_t p = a.find(mark::kParamClose);
      size_t take = p != std::string_view::npos ? p : a.size() - holdback(a, {mark::kParamClose});
      if (param_.value.size() + take > limits_.max_value_bytes) {
        error(out, fmt::format("value of parameter '{}' in '{}' longer than {} bytes", param_.name,
                               call_.name, limits_.max_value_bytes));
        return false;
      }
      param_.value.append(a.substr(0, take));
      consume(take);
      if (p == std::string_view::npos) return false;
      consume(mark::kParamClose.size());
      if (!param_.is_string &&
          nlohmann::json::parse(param_.value, nullptr, false).is_discarded()) {
        error(out, fmt::format("parameter '{}' of '{}' has string=\"false\" but its value is not JSON: '{}'",
                               param_.name, call_.name, printable(param_.value)));
        return false;
      }
      out.push_back({DsmlEventKind::Parameter, param_.value, param_.name, param_.is_string});
      call_.params.push_back(std::move(param_));
      param_ = DsmlParam{};
      state_ = State::AfterParam;
      return true;
    }
    case State::AfterParam: {
      static const std::string kNextParam = "\n" + std::string(mark::kParamOpen);
      static const std::string kClose = "\n" + std::string(mark::kInvokeClose);
      Lit par = match(a, kNextParam);
      Lit end = match(a, kClose);
      if (par == Lit::Yes) {
        consume(kNextParam.size());
        state_ = State::ParamHeader;
        return true;
      }
      if (end == Lit::Yes) {
        consume(kClose.size());
        state_ = State::AfterInvoke;
        return true;
      }
      if (par == Lit::NeedMore || end == Lit::NeedMore) return false;
      error(out, fmt::format("expected next parameter or </｜DSML｜invoke> in '{}', got '{}'",
                             call_.name, printable(a)));
      return false;
    }
    case State::AfterInvoke: {
      // The call is complete once the "\n" that must follow its close tag arrives.
      Lit m = match(a, "\n");
      if (m == Lit::NeedMore) return false;
      if (m == Lit::No) {
        error(out, fmt::format("expected '\\n' after </｜DSML｜invoke>, got '{}'", printable(a)));
        return false;
      }
      consume(1);
      out.push_back({DsmlEventKind::ToolCallEnd, dsml_arguments_json(call_), call_.name, false});
      calls_.push_back(std::move(call_));
      call_ = DsmlCall{};
      state_ = State::InvokeOrClose;
      return true;
    }
    case State::AfterBlock: {
      Lit m = match(a, mark::kEos);
      if (m == Lit::NeedMore) return false;
      if (m == Lit::No) {
        error(out, fmt::format("text after </｜DSML｜tool_calls>: '{}'", printable(a)));
        return false;
      }
      consume(mark::kEos.size());
      out.push_back({DsmlEventKind::Eos, {}, {}, false});
      state_ = State::Done;
      return true;
    }
    case State::Done:
      if (a.empty()) return false;
      error(out, fmt::format("text after end of sentence: '{}'", printable(a)));
      return false;
    case State::Failed:
      return false;
  }
  return false;
}

void DsmlStreamParser::finish(std::vector<DsmlEvent>& out) {
  if (state_ == State::Failed) return;
  std::string_view a = avail();
  switch (state_) {
    case State::Reasoning:
      if (!a.empty()) out.push_back({DsmlEventKind::Reasoning, std::string(a), {}, false});
      error(out, "output ended inside reasoning (no </think>)");
      return;
    case State::Content:
      if (!a.empty()) out.push_back({DsmlEventKind::Text, std::string(a), {}, false});
      break;
    case State::AfterBlock:
      if (!a.empty()) {
        error(out, fmt::format("text after </｜DSML｜tool_calls>: '{}'", printable(a)));
        return;
      }
      break;
    case State::Done:
      break;
    default: {
      std::string where = call_.name.empty() ? std::string("tool-call block")
                                             : fmt::format("call of '{}'", call_.name);
      error(out, fmt::format("output ended inside an unterminated {}", where));
      return;
    }
  }
  buf_.clear();
  pos_ = 0;
  state_ = State::Done;
}

}  // namespace ds4::chat
