#include "tokenizer/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <string>

#include "core/error.h"
#include "tokenizer/utf8.h"

namespace ds4::tokenizer {
namespace {

#include "tokenizer/unicode_extras.inc"

// HF's `\s` is Unicode White_Space; PCRE2's UCP `\s` also takes U+180E, so spell it out.
constexpr const char* kSpace = R"(\t-\r \x{85}\x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000})";

std::string cls(const char* prop, const char* extra) { return std::string("\\p{") + prop + "}" + extra; }

std::string build_pattern(int i, PreTokenizerKind kind) {
  const std::string L = cls("L", kExtraL), N = cls("N", kExtraN), M = cls("M", kExtraM);
  const std::string P = cls("P", kExtraP), S = cls("S", kExtraS);
  const std::string sp = std::string("[") + kSpace + "]";
  const std::string nsp = std::string("[^") + kSpace + "]";
  if (kind != PreTokenizerKind::DeepSeekV3) {
    // Qwen: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|
    // \s*[\r\n]+|\s+(?!\S)|\s+ ; Qwen3.5 adds \p{M} to the letter run and its complement.
    const std::string letters = kind == PreTokenizerKind::Qwen35 ? L + M : L;
    return "(?i:'s|'t|'re|'ve|'m|'ll|'d)"
           "|[^\\r\\n" + L + N + "]?[" + letters + "]+"
           "|[" + N + "]"
           "| ?[^" + std::string(kSpace) + letters + N + "]+[\\r\\n]*"
           "|" + sp + "*[\\r\\n]+"
           "|" + sp + "+(?!" + nsp + ")"
           "|" + sp + "+";
  }
  switch (i) {
    case 0:
      return "[" + N + "]{1,3}";
    case 1:
      return R"([\x{4e00}-\x{9fa5}\x{3040}-\x{309f}\x{30a0}-\x{30ff}]+)";
    default:
      return R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+)"
             "|[^\\r\\n" + L + P + S + "]?[" + L + M + "]+"
             "| ?[" + P + S + "]+[\\r\\n]*"
             "|" + sp + "*[\\r\\n]+"
             "|" + sp + "+(?!" + nsp + ")"
             "|" + sp + "+";
  }
}

struct Regex {
  pcre2_code* code = nullptr;
  ~Regex() { pcre2_code_free(code); }
};

// One match-data block and JIT stack per thread: pcre2 match data is not shareable, and
// long pieces (a megabyte of spaces) need more than the 32 KiB default JIT stack.
struct ThreadState {
  pcre2_match_data* md = nullptr;
  pcre2_match_context* mctx = nullptr;
  pcre2_jit_stack* stack = nullptr;
  ThreadState() {
    md = pcre2_match_data_create(4, nullptr);
    mctx = pcre2_match_context_create(nullptr);
    stack = pcre2_jit_stack_create(64 * 1024, 64 * 1024 * 1024, nullptr);
    if (!md || !mctx || !stack) ds4::fail("tokenizer: out of memory creating PCRE2 match state");
    pcre2_jit_stack_assign(mctx, nullptr, stack);
  }
  ~ThreadState() {
    pcre2_jit_stack_free(stack);
    pcre2_match_context_free(mctx);
    pcre2_match_data_free(md);
  }
  static ThreadState& get() {
    thread_local ThreadState s;
    return s;
  }
};

}  // namespace

// Byte-level prefilters that prove regex 0 or 1 cannot match, so most pieces skip a PCRE2 call.
// Regex 0 needs a \p{N} character: an ASCII digit or some non-ASCII character. Regex 1 needs
// a CJK/kana character (U+3040..U+30FF, U+4E00..U+9FA5), whose UTF-8 lead bytes are E3..E9.
bool cannot_match(int stage, const char* p, size_t n) {
  if (stage == 0) {
    for (size_t i = 0; i < n; ++i) {
      const auto c = static_cast<uint8_t>(p[i]);
      if (c >= 0x80 || (c >= '0' && c <= '9')) return false;
    }
    return true;
  }
  for (size_t i = 0; i < n; ++i) {
    const auto c = static_cast<uint8_t>(p[i]);
    if (c >= 0xE3 && c <= 0xE9) return false;
  }
  return true;
}

struct PreTokenizer::Impl {
  Regex re[3];
  bool jit[3] = {false, false, false};
  int n_stages = 3;
  bool prefilter = true;  // DeepSeek's stage 0/1 byte prefilters

  // Splits [a, b) of text with regex `stage` and recurses into the next stage for each part.
  void run(int stage, const char* text, uint32_t a, uint32_t b, std::vector<Span>& out, ThreadState& ts) const {
    if (stage == n_stages) {
      out.push_back({a, b});
      return;
    }
    if (prefilter && stage < 2 && cannot_match(stage, text + a, b - a)) {
      run(stage + 1, text, a, b, out, ts);
      return;
    }
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text + a);
    const PCRE2_SIZE len = b - a;
    PCRE2_SIZE pos = 0, prev = 0;
    while (pos < len) {
      // The piece is the whole subject: lookahead at its end sees end of string, as in HF.
      const int rc = jit[stage] ? pcre2_jit_match(re[stage].code, subject, len, pos, PCRE2_NO_UTF_CHECK, ts.md, ts.mctx)
                                : pcre2_match(re[stage].code, subject, len, pos, PCRE2_NO_UTF_CHECK, ts.md, ts.mctx);
      if (rc == PCRE2_ERROR_NOMATCH) break;
      if (rc < 0) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(rc, msg, sizeof msg);
        ds4::fail("tokenizer: pre-tokenizer regex {} failed on a {}-byte piece: {}", stage, len,
                  reinterpret_cast<const char*>(msg));
      }
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(ts.md);
      const PCRE2_SIZE ms = ov[0], me = ov[1];
      if (me == ms) {  // cannot happen with these patterns; guard against looping forever
        pos = ms + utf8_valid_len(std::string_view(text + a, len), ms);
        continue;
      }
      if (ms > prev) run(stage + 1, text, a + uint32_t(prev), a + uint32_t(ms), out, ts);
      run(stage + 1, text, a + uint32_t(ms), a + uint32_t(me), out, ts);
      prev = pos = me;
    }
    if (prev < len) run(stage + 1, text, a + uint32_t(prev), b, out, ts);
  }
};

std::string PreTokenizer::pattern(int i, PreTokenizerKind kind) { return build_pattern(i, kind); }

std::string PreTokenizer::class_extra(std::string_view name) {
  if (name == "L") return kExtraL;
  if (name == "N") return kExtraN;
  if (name == "M") return kExtraM;
  if (name == "P") return kExtraP;
  if (name == "S") return kExtraS;
  ds4::fail("tokenizer: no character class named \"{}\"", name);
}

std::string PreTokenizer::class_body(std::string_view name) {
  if (name == "L") return cls("L", kExtraL);
  if (name == "N") return cls("N", kExtraN);
  if (name == "M") return cls("M", kExtraM);
  if (name == "P") return cls("P", kExtraP);
  if (name == "S") return cls("S", kExtraS);
  if (name == "s") return kSpace;
  ds4::fail("tokenizer: no character class named \"{}\"", name);
}

PreTokenizer::PreTokenizer(PreTokenizerKind kind) : impl_(std::make_unique<Impl>()) {
  if (kind != PreTokenizerKind::DeepSeekV3) impl_->n_stages = 1, impl_->prefilter = false;
  for (int i = 0; i < impl_->n_stages; ++i) {
    const std::string p = build_pattern(i, kind);
    int err = 0;
    PCRE2_SIZE off = 0;
    impl_->re[i].code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(p.data()), p.size(), PCRE2_UTF | PCRE2_UCP, &err,
                                      &off, nullptr);
    if (!impl_->re[i].code) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof msg);
      ds4::fail("tokenizer: cannot compile pre-tokenizer regex {} at offset {}: {}", i, off,
                reinterpret_cast<const char*>(msg));
    }
    // JIT is an optimisation only; the interpreter gives the same matches.
    impl_->jit[i] = pcre2_jit_compile(impl_->re[i].code, PCRE2_JIT_COMPLETE) == 0;
  }
}

PreTokenizer::~PreTokenizer() = default;

void PreTokenizer::split(std::string_view text, std::vector<Span>& out) const {
  if (text.size() > 0xFFFFFFFFu) ds4::fail("tokenizer: input of {} bytes exceeds the 4 GiB limit", text.size());
  ThreadState& ts = ThreadState::get();
  const uint32_t n = static_cast<uint32_t>(text.size());
  uint32_t i = 0;
  while (i < n) {
    // Maximal valid run, then maximal invalid run.
    uint32_t j = i;
    while (j < n) {
      const size_t l = utf8_valid_len(text, j);
      if (l == 0) break;
      j += uint32_t(l);
    }
    if (j > i) impl_->run(0, text.data(), i, j, out, ts);
    uint32_t k = j;
    while (k < n && utf8_valid_len(text, k) == 0) ++k;
    if (k > j) out.push_back({j, k});
    i = k;
  }
}

}  // namespace ds4::tokenizer
