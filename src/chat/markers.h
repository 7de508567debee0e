#pragma once
// Literal strings of the DeepSeek V4 prompt format (spec §9.2). `｜` is U+FF5C and `▁`
// is U+2581. These are facts of the format, written here once.
#include <string_view>

namespace ds4::chat::mark {

inline constexpr std::string_view kBos = "<｜begin▁of▁sentence｜>";
inline constexpr std::string_view kEos = "<｜end▁of▁sentence｜>";
inline constexpr std::string_view kUser = "<｜User｜>";
inline constexpr std::string_view kAssistant = "<｜Assistant｜>";
inline constexpr std::string_view kLatestReminder = "<｜latest_reminder｜>";
inline constexpr std::string_view kThinkOpen = "<think>";
inline constexpr std::string_view kThinkClose = "</think>";
inline constexpr std::string_view kDsml = "｜DSML｜";

// DSML tags as they appear in text (each `｜DSML｜` is one token, the rest plain text).
inline constexpr std::string_view kToolCallsOpen = "<｜DSML｜tool_calls>";
inline constexpr std::string_view kToolCallsClose = "</｜DSML｜tool_calls>";
// What separates assistant content from its tool-call block; the parser's trigger.
inline constexpr std::string_view kToolCallsLead = "\n\n<｜DSML｜tool_calls";
inline constexpr std::string_view kInvokeOpen = "<｜DSML｜invoke";
inline constexpr std::string_view kInvokeClose = "</｜DSML｜invoke>";
inline constexpr std::string_view kParamOpen = "<｜DSML｜parameter";
inline constexpr std::string_view kParamClose = "</｜DSML｜parameter>";

// Task tokens of user turns (official encoder's `task`).
inline constexpr std::string_view kTaskAction = "<｜action｜>";
inline constexpr std::string_view kTaskQuery = "<｜query｜>";
inline constexpr std::string_view kTaskAuthority = "<｜authority｜>";
inline constexpr std::string_view kTaskDomain = "<｜domain｜>";
inline constexpr std::string_view kTaskTitle = "<｜title｜>";
inline constexpr std::string_view kTaskReadUrl = "<｜read_url｜>";

// Every control token the prompt format's constants contain (MarkedText::templ marks these).
inline constexpr std::string_view kControlTokens[] = {
    kBos, kEos, kUser, kAssistant, kLatestReminder, kThinkOpen, kThinkClose, kDsml,
    kTaskAction, kTaskQuery, kTaskAuthority, kTaskDomain, kTaskTitle, kTaskReadUrl};

inline constexpr std::string_view kToolResultOpen = "<tool_result>";
inline constexpr std::string_view kToolResultClose = "</tool_result>";

inline constexpr std::string_view kThinkMaxPrefix =
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
    "You MUST be very thorough in your thinking and comprehensively decompose the problem to "
    "resolve the root cause, rigorously stress-testing your logic against all potential paths, "
    "edge cases, and adversarial scenarios.\n"
    "Explicitly write out your entire deliberation process, documenting every intermediate "
    "step, considered alternative, and rejected hypothesis to ensure absolutely no assumption "
    "is left unchecked.\n\n";

inline constexpr std::string_view kResponseFormatLead =
    "## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n";

// The tools section is split around the schema lines.
inline constexpr std::string_view kToolsHead =
    "## Tools\n\n"
    "You have access to a set of tools to help answer the user's question. You can invoke "
    "tools by writing a \"<｜DSML｜tool_calls>\" block like the following:\n\n"
    "<｜DSML｜tool_calls>\n"
    "<｜DSML｜invoke name=\"$TOOL_NAME\">\n"
    "<｜DSML｜parameter name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE"
    "</｜DSML｜parameter>\n"
    "...\n"
    "</｜DSML｜invoke>\n"
    "<｜DSML｜invoke name=\"$TOOL_NAME2\">\n"
    "...\n"
    "</｜DSML｜invoke>\n"
    "</｜DSML｜tool_calls>\n\n"
    "String parameters should be specified as is and set `string=\"true\"`. For all other "
    "types (numbers, booleans, arrays, objects), pass the value in JSON format and set "
    "`string=\"false\"`.\n\n"
    "If thinking_mode is enabled (triggered by <think>), you MUST output your complete "
    "reasoning inside <think>...</think> BEFORE any tool calls or final response.\n\n"
    "Otherwise, output directly after </think> with tool calls or final response.\n\n"
    "### Available Tool Schemas\n\n";
inline constexpr std::string_view kToolsTail =
    "\n\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke "
    "tool calls.\n";

}  // namespace ds4::chat::mark
