#include "chat/dsml.h"

#include "chat/json_limits.h"
#include "chat/markers.h"
#include "chat/py_json.h"
#include "core/error.h"

namespace ds4::chat {

DsmlCall dsml_call_from_tool_call(const ToolCall& call) {
  DsmlCall out;
  out.name = call.name;
  if (!call.arguments_valid) {
    out.params.push_back({"arguments", true, call.arguments_text});
    return out;
  }
  for (const auto& [key, value] : call.arguments.items()) {
    if (value.is_string()) {
      out.params.push_back({key, true, value.get<std::string>()});
    } else {
      out.params.push_back({key, false, py_json_dumps(value)});
    }
  }
  return out;
}

void render_invoke(const DsmlCall& call, MarkedText& out) {
  // Names and values are the client's (or the model's): plain text, never control tokens.
  out.templ(mark::kInvokeOpen);
  out.plain(" name=\"");
  out.plain(call.name);
  out.plain("\">\n");
  for (size_t i = 0; i < call.params.size(); ++i) {
    const DsmlParam& p = call.params[i];
    if (i) out.plain("\n");
    out.templ(mark::kParamOpen);
    out.plain(" name=\"");
    out.plain(p.name);
    out.plain(p.is_string ? "\" string=\"true\">" : "\" string=\"false\">");
    out.plain(p.value);
    out.templ(mark::kParamClose);
  }
  out.plain("\n");
  out.templ(mark::kInvokeClose);
}

void render_tool_calls_block(const std::vector<DsmlCall>& calls, MarkedText& out) {
  out.plain("\n\n");
  out.templ(mark::kToolCallsOpen);
  out.plain("\n");
  for (size_t i = 0; i < calls.size(); ++i) {
    if (i) out.plain("\n");
    render_invoke(calls[i], out);
  }
  out.plain("\n");
  out.templ(mark::kToolCallsClose);
}

void render_tool_calls_block(const std::vector<ToolCall>& calls, MarkedText& out) {
  std::vector<DsmlCall> dsml;
  dsml.reserve(calls.size());
  for (const auto& c : calls) dsml.push_back(dsml_call_from_tool_call(c));
  render_tool_calls_block(dsml, out);
}

std::string render_invoke(const DsmlCall& call) {
  MarkedText out;
  render_invoke(call, out);
  return std::move(out.text);
}

std::string render_tool_calls_block(const std::vector<DsmlCall>& calls) {
  MarkedText out;
  render_tool_calls_block(calls, out);
  return std::move(out.text);
}

std::string render_tool_calls_block(const std::vector<ToolCall>& calls) {
  MarkedText out;
  render_tool_calls_block(calls, out);
  return std::move(out.text);
}

std::string dsml_arguments_json(const DsmlCall& call) {
  std::string out = "{";
  for (size_t i = 0; i < call.params.size(); ++i) {
    const DsmlParam& p = call.params[i];
    if (i) out += ", ";
    py_json_quote(p.name, out);
    out += ": ";
    if (p.is_string) {
      py_json_quote(p.value, out);
    } else {
      out += p.value;
    }
  }
  out += '}';
  return out;
}

ToolCall tool_call_from_dsml(const DsmlCall& call, std::string id) {
  ToolCall tc;
  tc.id = std::move(id);
  tc.name = call.name;
  tc.arguments_text = dsml_arguments_json(call);
  if (auto e = json_limit_error(tc.arguments_text)) {
    fail("tool call '{}': a string=\"false\" parameter value: {}", call.name, *e);
  }
  tc.arguments = Json::parse(tc.arguments_text, nullptr, /*allow_exceptions=*/false);
  if (tc.arguments.is_discarded()) {
    fail("tool call '{}': a string=\"false\" parameter value is not JSON", call.name);
  }
  return tc;
}

}  // namespace ds4::chat
