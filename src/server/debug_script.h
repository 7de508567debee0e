#pragma once
// TEST SCAFFOLDING (ds4-server --debug-script FILE). Forces the text a request "generates",
// so tests can drive paths a tiny random model never reaches on its own (DSML tool calls,
// reasoning then answer). The forced text is tokenized and fed through the normal loop —
// logprobs, evaluation, DSML parsing, tool-call ids and replay all run as usual; only the
// choice of token is taken from the script. File format (JSON):
//   {"rules": [{"when": "substring", "text": "forced output", "reasoning": "optional",
//               "with_tools": true|false (optional), "token_delay_ms": N (optional)}, ...]}
// The first rule whose `when` occurs in the prompt text after its last "<｜User｜>" applies;
// the forced output ends as if EOS was sampled. No rule matches → normal sampling.
// With `reasoning`, the output is reasoning + "</think>" + text when the prompt opened a
// thinking block and `text` alone otherwise, so one script serves clients that ask for
// thinking and clients that do not. With `with_tools`, the rule applies only to requests that
// do (true) or do not (false) offer tools (a client's side requests, such as title
// generation, often quote the user's prompt but offer no tools). With `token_delay_ms`, the
// worker waits that long after each forced token, so a test can watch a stream arrive (and stop
// it) at a pace that does not depend on the machine.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ds4::server {

class DebugScript {
 public:
  static DebugScript load(const std::string& path);  // throws ds4::Error naming the file and field
  // `token_delay_ms`, when given, receives the matching rule's delay (0 when it has none).
  std::optional<std::string> match(std::string_view prompt_text, bool in_reasoning = false,
                                   bool has_tools = false, int64_t* token_delay_ms = nullptr) const;
  bool empty() const { return rules_.empty(); }

 private:
  struct Rule {
    std::string when;
    std::string text;
    std::optional<std::string> reasoning;
    std::optional<bool> with_tools;
    int64_t token_delay_ms = 0;
  };
  std::vector<Rule> rules_;
};

}  // namespace ds4::server
