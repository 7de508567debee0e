#include "chat/dsml.h"

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

std::string render_invoke(const DsmlCall& call) {
  std::string out;
  out += mark::kInvokeOpen;
  out += " name=\"";
  out += call.name;
  out += "\">\n";
  for (size_t i = 0; i < call.params.size(); ++i) {
    const DsmlParam& p = call.params[i];
    if (i) out += '\n';
    out += mark::kParamOpen;
    out += " name=\"";
    out += p.name;
    out += p.is_string ? "\" string=\"true\">" : "\" string=\"false\">";
    out += p.value;
    out += mark::kParamClose;
  }
  out += '\n';
  out += mark::kInvokeClose;
  return out;
}

std::string render_tool_calls_block(const std::vector<DsmlCall>& calls) {
  std::string out = "\n\n";
  out += mark::kToolCallsOpen;
  out += '\n';
  for (size_t i = 0; i < calls.size(); ++i) {
    if (i) out += '\n';
    out += render_invoke(calls[i]);
  }
  out += '\n';
  out += mark::kToolCallsClose;
  return out;
}

std::string render_tool_calls_block(const std::vector<ToolCall>& calls) {
  std::vector<DsmlCall> dsml;
  dsml.reserve(calls.size());
  for (const auto& c : calls) dsml.push_back(dsml_call_from_tool_call(c));
  return render_tool_calls_block(dsml);
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
  tc.arguments = Json::parse(tc.arguments_text, nullptr, /*allow_exceptions=*/false);
  if (tc.arguments.is_discarded()) {
    fail("tool call '{}': a string=\"false\" parameter value is not JSON", call.name);
  }
  return tc;
}

}  // namespace ds4::chat
