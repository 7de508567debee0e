#!/usr/bin/env python3
"""Deterministic tokenizer parity corpus for DwarfStar.

Writes JSONL, one object a line: {"text": "..."} for a valid Unicode string, or
{"b64": "..."} for a byte string that is NOT valid UTF-8 (those are only used for the
round-trip test: HF tokenizers takes Python str and cannot see invalid UTF-8).

The output depends only on this file (own xorshift PRNG, no `random` module, no hash
ordering), so re-running it reproduces tests/fixtures/tokenizer/corpus.jsonl byte for byte:

    python3 tools/oracle/tokenizer/gen_corpus.py > tests/fixtures/tokenizer/corpus.jsonl
"""
import base64
import json
import sys


class Rng:
    """xorshift64*: stable across Python versions, unlike random.Random.choice/shuffle."""

    def __init__(self, seed):
        self.s = (seed * 0x9E3779B97F4A7C15 + 1) & 0xFFFFFFFFFFFFFFFF

    def next(self):
        x = self.s
        x ^= (x >> 12)
        x ^= (x << 25) & 0xFFFFFFFFFFFFFFFF
        x ^= (x >> 27)
        self.s = x
        return (x * 0x2545F4914F6CDD1D) & 0xFFFFFFFFFFFFFFFF

    def below(self, n):
        return self.next() % n

    def range(self, lo, hi):  # inclusive
        return lo + self.below(hi - lo + 1)

    def pick(self, seq):
        return seq[self.below(len(seq))]

    def chance(self, p_percent):
        return self.below(100) < p_percent


CODE = [
    'def fib(n: int) -> int:\n    """Return the n-th Fibonacci number."""\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n\nprint([fib(i) for i in range(10)])\n',
    '#include <stdio.h>\n\nint main(int argc, char **argv) {\n\tfor (int i = 0; i < argc; ++i)\n\t\tprintf("%d: %s\\n", i, argv[i]);\n\treturn 0;\n}\n',
    'template <typename T>\nstd::vector<T> take(const std::vector<T>& v, size_t n) {\n  return {v.begin(), v.begin() + std::min(n, v.size())};\n}\n// C++20: auto [a, b] = pair; co_await x; std::span<const uint8_t>\n',
    'fn main() {\n    let v: Vec<u32> = (1..=10).filter(|x| x % 2 == 0).collect();\n    println!("{:?} {}", v, v.iter().sum::<u32>());\n    if let Some(x) = v.first() { eprintln!("first={x}"); }\n}\n',
    'package main\n\nimport (\n\t"fmt"\n\t"strings"\n)\n\nfunc main() {\n\ts := strings.Repeat("go", 3)\n\tfmt.Println(s, len(s))\n}\n',
    'const add = (a, b) => a + b;\nexport default async function load(url) {\n  const r = await fetch(url, { method: "GET" });\n  return r.ok ? r.json() : Promise.reject(new Error(`HTTP ${r.status}`));\n}\n',
    'interface User { id: number; name?: string; tags: Array<string> }\ntype Maybe<T> = T | null | undefined;\nconst u: User = { id: 42, tags: [] } as const;\n',
    'public class Hello {\n    public static void main(String[] args) {\n        System.out.println("Hello, World!");\n        int[] xs = {3, 1, 2}; java.util.Arrays.sort(xs);\n    }\n}\n',
    'fun main() {\n    val m = mapOf("a" to 1, "b" to 2)\n    m.forEach { (k, v) -> println("$k=$v") }\n}\n',
    'import Foundation\nstruct Point: Codable { var x: Double; var y: Double }\nlet p = Point(x: 1.5, y: -2e3)\nprint(String(describing: p))\n',
    'class Stack\n  def initialize; @items = []; end\n  def push(x) = @items.push(x)\n  def pop; @items.pop; end\nend\nputs Stack.new.tap { |s| s.push(1) }.pop\n',
    '<?php\nfunction greet(string $name): string {\n    return "Hello, {$name}!";\n}\necho greet($_GET[\'name\'] ?? \'world\');\n?>\n',
    'module Main where\nimport qualified Data.Map as M\nmain :: IO ()\nmain = mapM_ print $ M.toList $ M.fromListWith (+) [(c, 1 :: Int) | c <- "mississippi"]\n',
    '(defun factorial (n)\n  (if (<= n 1)\n      1\n      (* n (factorial (- n 1)))))\n(format t "~a~%" (factorial 20))\n',
    'SELECT u.id, COUNT(o.id) AS n_orders\nFROM users u LEFT JOIN orders o ON o.user_id = u.id\nWHERE u.created_at >= \'2024-01-01\'\nGROUP BY u.id HAVING COUNT(o.id) > 3 ORDER BY n_orders DESC;\n',
    '#!/usr/bin/env bash\nset -euo pipefail\nfor f in *.log; do\n  [[ -s "$f" ]] && gzip -9 "$f" || echo "skip $f" >&2\ndone\nexport PATH="$HOME/.local/bin:$PATH"\n',
    '<!DOCTYPE html>\n<html lang="en">\n<head><meta charset="utf-8"><title>Test &amp; demo</title></head>\n<body><p class="note">Hi&nbsp;there &lt;3</p></body>\n</html>\n',
    '.card > .title::after {\n  content: "\\2014";\n  color: #ff00aa;\n  margin: 0 auto !important;\n}\n@media (max-width: 600px) { .card { display: none; } }\n',
    '{"name": "dwarfstar", "version": "0.1.0", "deps": {"fmt": "^10.1"}, "list": [1, 2.5, -3e-7, true, null]}\n',
    'server:\n  host: 0.0.0.0\n  port: 8080\n  tls: { enabled: false }\nitems:\n  - name: "a"\n    weight: 0.25\n  - name: b\n',
    '[package]\nname = "ds4"\nedition = "2021"\n\n[dependencies]\nserde = { version = "1.0", features = ["derive"] }\n',
    '# Title\n\nSome *emphasis*, **bold**, `code`, and a [link](https://example.com/a?b=c&d=e#f).\n\n- item one\n- item two\n\n```python\nprint("x")\n```\n',
    '\\documentclass{article}\n\\begin{document}\n$$\\int_0^\\infty e^{-x^2}\\,dx = \\frac{\\sqrt{\\pi}}{2}$$\n\\end{document}\n',
    'local function map(t, f)\n  local r = {}\n  for i, v in ipairs(t) do r[i] = f(v) end\n  return r\nend\nprint(table.concat(map({1,2,3}, tostring), ","))\n',
    'my %h = (a => 1, b => 2);\nwhile (my ($k, $v) = each %h) { print "$k => $v\\n"; }\n$s =~ s/(\\d+)/<$1>/g;\n',
    'x <- c(1, 2, NA, 4)\nmean(x, na.rm = TRUE)\ndf <- data.frame(a = 1:3, b = letters[1:3])\nsummary(df)\n',
    '    .globl main\nmain:\n    pushq %rbp\n    movq %rsp, %rbp\n    movl $0, %eax\n    popq %rbp\n    ret\n',
    'FROM debian:12-slim\nRUN apt-get update && apt-get install -y --no-install-recommends cmake ninja-build \\\n    && rm -rf /var/lib/apt/lists/*\nCMD ["./ds4", "--help"]\n',
    'all: build\n\nbuild:\n\tcmake -S . -B build -G Ninja\n\tcmake --build build -j $(nproc)\n\n.PHONY: all build\n',
    '^(?:[a-z0-9!#$%&\'*+/=?^_`{|}~-]+(?:\\.[a-z0-9!#$%&\'*+/=?^_`{|}~-]+)*)@(?:[a-z0-9-]+\\.)+[a-z]{2,}$',
    'let rec fold f acc = function\n  | [] -> acc\n  | x :: xs -> fold f (f acc x) xs\nlet () = Printf.printf "%d\\n" (fold (+) 0 [1;2;3])\n',
    'defmodule Greeter do\n  def hello(name), do: "Hello, #{name}!"\nend\nIO.puts Greeter.hello("Elixir")\n',
    'using System;\nnamespace Demo {\n  static class P { static void Main() => Console.WriteLine($"{DateTime.Now:yyyy-MM-dd}"); }\n}\n',
    'import numpy as np\nx = np.linspace(0, 1, 11, dtype=np.float32)\nassert abs(x.sum() - 5.5) < 1e-6, f"bad sum {x.sum()!r}"\n',
    'diff --git a/src/x.c b/src/x.c\n@@ -1,3 +1,4 @@\n-int x = 1;\n+int x = 2;\n+// changed\n int y;\n',
    'Traceback (most recent call last):\n  File "main.py", line 3, in <module>\n    1/0\nZeroDivisionError: division by zero\n',
    '2024-05-06T22:09:33.123Z INFO  [worker-3] request id=af31c0 took 12.5ms status=200 bytes=10_240\r\n',
]

PROSE = [
    'The quick brown fox jumps over the lazy dog. It\'s 5 o\'clock; don\'t you think?',
    'Il était une fois, dans un château près de Besançon, une élève très appliquée.',
    'Über den Wolken muss die Freiheit wohl grenzenlos sein – sagte der Großvater.',
    'El niño comió paella y dijo: «¡Qué rica está!» ¿Verdad, señora?',
    'Rispondi in italiano con una frase: chi era Ada Lovelace? È stata la prima programmatrice.',
    'Dziś jest piękny dzień, a źrebię biegnie po łące. Żółć gęślą jaźń.',
    'Příliš žluťoučký kůň úpěl ďábelské ódy.',
    'Árvíztűrő tükörfúrógép és öt szép szűz lány őrült írót nyúz.',
    'Pijamalı hasta yağız şoföre çabucak güvendi.',
    'Съешь же ещё этих мягких французских булок, да выпей чаю.',
    'Жебракують філософи при ґанку церкви в Гадячі, ще й шатро їхнє п’яне знаємо.',
    'Τάχιστη αλώπηξ βαφής ψημένη γη, δρασκελίζει υπέρ νωθρού κυνός.',
    'ქართული ენა ერთ-ერთი უძველესი ენაა.',
    'Հայերենը հնդեվրոպական լեզու է։',
    'صِف خَلقَ خَودِ كَمِثلِ الشَمسِ إِذ بَزَغَت — يَحظى الضَجيعُ بِها نَجلاءَ مِعطارِ',
    'דג סקרן שט בים מאוכזב ולפתע מצא חברה.',
    'ऋषियों को सताने वाले दुष्ट राक्षसों के राजा रावण का सर्वनाश करने वाले विष्णुवतार भगवान श्रीराम।',
    'আমি বাংলায় গান গাই। ১২৩৪৫ টাকা।',
    'யாமறிந்த மொழிகளிலே தமிழ்மொழி போல் இனிதாவது எங்கும் காணோம்.',
    'నేను తెలుగు మాట్లాడగలను.',
    'เป็นมนุษย์สุดประเสริฐเลิศคุณค่า กว่าบรรดาฝูงสัตว์เดรัจฉาน',
    'ພາສາລາວເປັນພາສາທີ່ສວຍງາມ',
    'ខ្ញុំអាចញ៉ាំកញ្ចក់បាន',
    'မြန်မာဘာသာစကား',
    '키스의 고유조건은 입술끼리 만나야 하고 특별한 기술은 필요치 않다.',
    'いろはにほへと ちりぬるを わかよたれそ つねならむ、カタカナもｶﾀｶﾅも混ぜる。',
    '我能吞下玻璃而不伤身体。今天是2024年5月6日，气温23.5°C！',
    '龍蝦與鱷魚：繁體中文測試，標點符號「」『』……——',
    'ሰማይ አይታረስ ንጉሥ አይከሰስ።',
    'ᚠᛇᚻ᛫ᛒᛦᚦ᛫ᚠᚱᚩᚠᚢᚱ᛫ᚠᛁᚱᚪ᛫ᚷᛖᚻᚹᛦᛚᚳᚢᛗ',
    'Ꭰ ᏣᎳᎩ ᎦᏬᏂᎯᏍᏗ',
    'Tiếng Việt có dấu: Trăm năm trong cõi người ta, chữ tài chữ mệnh khéo là ghét nhau.',
    'Ẽ̃ combining: e\u0301 a\u0308 o\u0302\u0323 Z\u0336\u0335 n\u0303',
    'ᠮᠣᠩᠭᠣᠯ ᠪᠢᠴᠢᠭ᠌',
    '𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝕞𝕒𝕥𝕙 𝐛𝐨𝐥𝐝 𝑖𝑡𝑎𝑙𝑖𝑐 ℕ ℤ ℚ ℝ ℂ ∀x∈ℝ: x²≥0',
    'Ελληνικά και English mixed με 123 αριθμούς και symbols €£¥₹₽.',
]

EMOJI = [
    '😀', '😃', '👍', '👍🏽', '👨‍👩‍👧‍👦', '🧑🏿‍💻', '🏳️‍🌈', '🇯🇵', '🇺🇸', '🇪🇺', '1️⃣', '#️⃣', '❤️', '❤', '☺️',
    '👩🏻‍❤️‍💋‍👨🏼', '🫠', '🦀', '🐍', '🚀', '✨', '🔥', '💯', '🏴󠁧󠁢󠁳󠁣󠁴󠁿', '🤷‍♀️', '👁️‍🗨️', '🧔🏻‍♂️', '™️', '©', '®️',
]

SPECIAL_TEXT = [
    '<｜begin▁of▁sentence｜>', '<｜end▁of▁sentence｜>', '<｜▁pad▁｜>', '<｜User｜>', '<｜Assistant｜>', '<|EOT|>',
    '<think>', '</think>', '｜DSML｜', '<｜DSML｜tool_calls>', '</｜DSML｜tool_calls>', '<｜DSML｜invoke name="get_weather">',
    '<｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>', '</｜DSML｜invoke>',
    '<｜latest_reminder｜>', '<｜action｜>', '<｜query｜>', '<｜authority｜>', '<｜domain｜>', '<｜title｜>', '<｜read_url｜>',
    '<｜fim▁hole｜>', '<｜fim▁begin｜>', '<｜fim▁end｜>', '<｜tool▁calls▁begin｜>', '<｜tool▁calls▁end｜>',
    '<｜tool▁call▁begin｜>', '<｜tool▁call▁end｜>', '<｜tool▁outputs▁begin｜>', '<｜tool▁outputs▁end｜>',
    '<｜tool▁output▁begin｜>', '<｜tool▁output▁end｜>', '<｜tool▁sep｜>', '<｜place▁holder▁no▁0｜>',
    '<｜place▁holder▁no▁17｜>', '<｜place▁holder▁no▁799｜>', '<｜place▁holder▁no▁800｜>',
    # near misses: must stay ordinary text in every mode
    '<｜User|>', '<|User|>', '<｜user｜>', '<｜User｜', '｜User｜>', '<｜begin▁of▁sentence', '<thinking>', '< think>',
    '<｜DSML', 'DSML｜', '｜dsml｜', '<tool_result>', '</tool_result>', '<｜｜>', '｜', '▁', '<｜', '｜>',
]

PUNCT_ASCII = '!"#$%&\'()*+,-./:;<=>?@[\\]^_`{|}~'
PUNCT_UNI = '，。、；：？！…—–―‘’“”«»‹›「」『』【】〔〕（）《》〈〉・·•‰′″¡¿§¶†‡※⁂⁇⁈⸘'
SYMBOLS = '+−×÷=≠≈≤≥±∞∑∏√∫∂∇∈∉⊂⊃∪∩∧∨¬⇒⇔→←↑↓↔°℃℉€£¥¢₩₹₽₿$^`~|©®™✓✗★☆♠♣♥♦♪♫⌘⌥⎋'
WS = [' ', '  ', '   ', '\t', '\t\t', '\n', '\n\n', '\r\n', '\r', '\r\n\r\n', ' \n', '\n ', ' \t ', '\u00a0', '\u3000',
      '\u2028', '\u2029', '\u0085', '\u000b', '\u000c', '\u2009', '\u200a', '\u202f', '\u205f', '\u1680', '\u200b',
      '\ufeff', '\u180e', '\u2060', '        ', '\n\n\n\n']
DIGITS = ['0123456789', '٠١٢٣٤٥٦٧٨٩', '۰۱۲۳۴۵۶۷۸۹', '०१२३४५६७८९', '০১২৩৪৫৬৭৮৯', '０１２３４５６７８９', '¹²³⁴⁵⁶⁷⁸⁹⁰',
          '₀₁₂₃₄₅₆₇₈₉', '½¼¾⅓⅔⅛', 'ⅠⅡⅢⅣⅤⅥⅦⅧⅨⅩⅪⅫ', '①②③④⑤⑥⑦⑧⑨⑩', '〇一二三四五六七八九', '𝟎𝟏𝟐𝟑𝟒𝟓𝟔𝟕𝟖𝟗', '๐๑๒๓๔๕๖๗๘๙']

# Code point ranges for random sampling. Wide on purpose: the pre-tokenizer's regex classes
# (\p{L} \p{N} \p{M} \p{P} \p{S} \s) must agree with HF's engine over all of Unicode.
BLOCKS = [
    (0x20, 0x7E), (0xA0, 0x24F), (0x250, 0x36F), (0x370, 0x52F), (0x530, 0x5FF), (0x600, 0x6FF), (0x700, 0x8FF),
    (0x900, 0xDFF), (0xE00, 0xFFF), (0x1000, 0x1FFF), (0x2000, 0x206F), (0x2070, 0x2BFF), (0x2C00, 0x2E7F),
    (0x2E80, 0x2FFF), (0x3000, 0x30FF), (0x3100, 0x4DBF), (0x4DC0, 0x4DFF), (0x4E00, 0x9FFF), (0xA000, 0xABFF),
    (0xAC00, 0xD7FF), (0xE000, 0xF8FF), (0xF900, 0xFFFD), (0x10000, 0x1FFFF), (0x20000, 0x3FFFF),
    (0xE0000, 0xE01EF), (0xF0000, 0x10FFFF), (0x0, 0x1F), (0x7F, 0x9F),
]


def rand_cp(r):
    lo, hi = r.pick(BLOCKS)
    return chr(r.range(lo, hi))


def rand_unicode(r, n):
    return ''.join(rand_cp(r) for _ in range(n))


def slice_of(r, s, max_len):
    if len(s) <= 1:
        return s
    a = r.below(len(s))
    b = min(len(s), a + r.range(1, max_len))
    return s[a:b]


def rand_number(r):
    kind = r.below(8)
    if kind == 0:
        return str(r.below(10 ** r.range(1, 25)))
    if kind == 1:
        return f'{r.below(100000)}.{r.below(1000000):06d}'
    if kind == 2:
        return f'{r.range(1, 9)},{r.below(1000):03d},{r.below(1000):03d}'
    if kind == 3:
        return f'-{r.below(1000)}e{r.range(-40, 40)}'
    if kind == 4:
        return f'0x{r.next():x}'
    if kind == 5:
        return f'{r.range(1900, 2100)}-{r.range(1, 12):02d}-{r.range(1, 28):02d} {r.below(24):02d}:{r.below(60):02d}'
    if kind == 6:
        d = r.pick(DIGITS)
        return ''.join(r.pick(d) for _ in range(r.range(1, 12)))
    return f'+{r.range(1, 99)} ({r.below(1000):03d}) {r.below(10 ** 7):07d}'


def gen_valid(r, i):
    """One valid string; the category cycles with i so every kind is well represented."""
    cat = i % 16
    if cat == 0:
        s = r.pick(CODE)
        if r.chance(40):
            s = slice_of(r, s, 200)
        if r.chance(20):
            s = s.replace('\n', '\r\n')
        if r.chance(15):
            s = s.replace('    ', '\t')
        return s
    if cat == 1:
        s = r.pick(PROSE)
        if r.chance(50):
            s = s + r.pick([' ', '\n', '  ', '\n\n', '']) + r.pick(PROSE)
        if r.chance(30):
            s = slice_of(r, s, 60)
        return s
    if cat == 2:
        return rand_unicode(r, r.range(1, 40))
    if cat == 3:
        parts = []
        for _ in range(r.range(1, 8)):
            parts.append(rand_number(r))
            parts.append(r.pick([' ', '', ', ', '+', '-', '/', 'x', 'abc', '元', '%', '. ', '\n']))
        return ''.join(parts)
    if cat == 4:
        parts = []
        for _ in range(r.range(1, 10)):
            parts.append(r.pick(WS) * r.range(1, 4))
            parts.append(r.pick(['word', 'a', 'Hello', '你好', 'x1', '.', '!', '42', 'é', 'über', '😀', '']))
        return ''.join(parts)
    if cat == 5:
        parts = []
        for _ in range(r.range(1, 8)):
            parts.append(r.pick(EMOJI))
            if r.chance(40):
                parts.append(r.pick([' ', 'ok', '!', '\n', '好', '']))
        return ''.join(parts)
    if cat == 6:
        # special-token text inside ordinary text
        parts = []
        for _ in range(r.range(1, 6)):
            parts.append(r.pick(SPECIAL_TEXT))
            if r.chance(60):
                parts.append(r.pick([' ', 'Hello', ' world', '\n', '\n\n', 'x', '你好', '123', '  ', '\t', '<', '>',
                                     '"', ' <', '</', 'tool_calls>', '']))
        return ''.join(parts)
    if cat == 7:
        unit = r.pick(['a', ' ', 'ab', '\n', '\t', '=', '-', '*', '0', '12', 'é', '好', '😀', '. ', ' a', 'A',
                       '\r\n', '_', '/', '  \n', 'abc ', '🙂 ', 'ー'])
        n = r.range(2, 3000 if r.chance(20) else 200)
        return unit * n
    if cat == 8:
        return ''.join(r.pick(PUNCT_ASCII + PUNCT_UNI + SYMBOLS + 'abcXYZ 中\n') for _ in range(r.range(1, 30)))
    if cat == 9:
        return ''.join(chr(r.range(0x20, 0x7E)) for _ in range(r.range(1, 80)))
    if cat == 10:
        base = r.pick(['a', 'e', 'o', 'n', 'Z', ' ', '1', '.', '中', 'ก', 'क', '', '\n'])
        marks = ''.join(chr(r.pick([r.range(0x300, 0x36F), r.range(0x1AB0, 0x1AFF), r.range(0x20D0, 0x20FF),
                                    r.range(0xFE20, 0xFE2F), 0x93F, 0x94D, 0xE31, 0x200D, 0x200C, 0xFE0F]))
                        for _ in range(r.range(1, 6)))
        return (base + marks) * r.range(1, 4) + r.pick(['', ' word', 'x', '\n'])
    if cat == 11:
        # mixed scripts and classes adjacent with no spaces: stresses the regex alternation order
        pieces = [r.pick(PROSE)[:r.range(1, 12)], rand_number(r), r.pick(EMOJI), r.pick(PUNCT_ASCII),
                  r.pick(PUNCT_UNI), r.pick(SYMBOLS), r.pick(WS), rand_unicode(r, 2), 'abc', 'ABC', "'s", "'ll",
                  'カタカナ', 'ひらがな', '漢字', '한국어', ' \'quoted\'', '"q"', '(x)', '[1]', '{k}']
        return ''.join(r.pick(pieces) for _ in range(r.range(2, 10)))
    if cat == 12:
        # chat-like rendered text
        u = r.pick(PROSE)
        return r.pick(['', '<｜begin▁of▁sentence｜>']) + r.pick(['You are helpful.', '']) + '<｜User｜>' + u + \
            '<｜Assistant｜>' + r.pick(['</think>', '<think>', '']) + r.pick(PROSE) + r.pick(['<｜end▁of▁sentence｜>', ''])
    if cat == 13:
        s = r.pick(CODE) + r.pick(PROSE)
        return ''.join(c.upper() if r.chance(10) else c for c in s)[:r.range(5, 400)]
    if cat == 14:
        # letters around digit runs and CJK/kana boundaries (regexes 1 and 2)
        return ''.join(r.pick(['abc', '12345', '１２３', '中文', 'ひら', 'カタ', 'ｶﾀ', '㐀', '龥', '龦', '〆', 'ー', ' ', '\n',
                               '7', '٣', 'x9', '9x', '一二', 'ゟ', '゠', 'ヿ', '぀', '〇']) for _ in range(r.range(1, 15)))
    # cat 15: short odd strings
    return r.pick(['', ' ', '\n', '\r', '\r\n', '\t', 'a', 'A', '0', '00', '000', '0000', "'", "'s", ' \'s', '\u0000',
                   '\u0001\u0002', '\u007f', '\u0080', '\u00ad', '\u00a0\u00a0', '\ufffd', '\U0010ffff', '\uffff',
                   '\ue000', '\u0300', 'a\u0300', ' \u0300', '\u200d', '\ufeffhello', 'hello\u0000world',
                   'I\'M', 'you\'RE', "don't", 'It\u2019s', 'a.b.c', '...', '?!', ' ?!\n', '\n\r', '\r\r\n\n'])


def gen_invalid(r):
    """Bytes that are not valid UTF-8, mixed with valid text."""
    bad = [b'\x80', b'\xbf', b'\xc0\xaf', b'\xc3', b'\xe2\x82', b'\xf0\x9f\x98', b'\xff', b'\xfe', b'\xed\xa0\x80',
           b'\xf4\x90\x80\x80', b'\xf8\x88\x80\x80\x80', b'\xe0\x80\x80', b'\xc1\xbf', b'\x80\x80\x80']
    out = b''
    for _ in range(r.range(1, 6)):
        out += r.pick(bad)
        if r.chance(70):
            out += r.pick(['abc', ' ', '好', '😀', '123', '\n', '<｜User｜>', ' word', 'é']).encode('utf-8')
    return out


def main():
    # Optional: SEED N_VALID, for extra fuzz corpora (the committed fixture uses the defaults).
    seed = int(sys.argv[1]) if len(sys.argv) > 1 else 20261129
    r = Rng(seed)
    n_valid = int(sys.argv[2]) if len(sys.argv) > 2 else 5600
    n_invalid = 200
    seen = set()
    lines = []
    i = 0
    while len(lines) < n_valid:
        s = gen_valid(r, i)
        i += 1
        if s in seen:
            continue
        seen.add(s)
        lines.append(json.dumps({'text': s}, ensure_ascii=True))
    for _ in range(n_invalid):
        b = gen_invalid(r)
        try:
            b.decode('utf-8')
            continue  # happened to be valid; keep only invalid ones in this part
        except UnicodeDecodeError:
            pass
        lines.append(json.dumps({'b64': base64.b64encode(b).decode('ascii')}))
    sys.stdout.write('\n'.join(lines) + '\n')


if __name__ == '__main__':
    main()
