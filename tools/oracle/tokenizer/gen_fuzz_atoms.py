#!/usr/bin/env python3
"""Second, denser fuzz corpus for local checks against HF (not a committed fixture): strings
made of short "atoms" chosen to sit on the pre-tokenizer's decision boundaries (whitespace
kinds, apostrophes, marks, digits of every kind, CJK/kana edges, punctuation runs, symbols,
code points new in Unicode 15/16, special-token text). Deterministic.

    python3 gen_fuzz_atoms.py SEED N > fuzz.jsonl
then reference_ids.mjs / .py on it, and `ds4-gguf tokenize` on it, and compare.
"""
import json
import sys

sys.path.insert(0, __file__.rsplit('/', 1)[0])
from gen_corpus import Rng  # noqa: E402

ATOMS = [
    ' ', '  ', '   ', '\t', '\n', '\r', '\r\n', '\n\n', ' \n', '\u00a0', '\u3000', '\u0085', '\u180e', '\u2028',
    '\u2029', '\u000b', '\u000c', '\u200b', '\ufeff', "'", "'s", "'S", "'ll", "'re", 'a', 'A', 'ab', 'Hello', 'é',
    'e\u0301', '\u0301', '\u0903', '1', '12', '123', '1234', '١', '²', 'Ⅻ', '½', '中', '中文', '龥', '龦', '〇', 'ア', 'ｱ',
    'ー', 'ぁ', 'ゟ', '゠', '・', '!', '!!', '?', '.', '..', '...', '-', '--', '_', '__', '`', '~', '$', '€', '+', '=',
    '==', '->', '=>', '//', '/*', '*/', '#', '@', '&', '|', '\\', '(', ')', '[', ']', '{', '}', '"', ',', ';', ':',
    '😀', '👍🏽', '\u200d', '\ufe0f', '<', '>', '</', '｜', '▁', '<｜User｜>', '<｜Assistant｜>', '<think>', '</think>',
    '｜DSML｜', '<｜begin▁of▁sentence｜>', '<｜end▁of▁sentence｜>', '<｜place▁holder▁no▁5｜>', 'x', 'Zz', 'ß', 'ǅ', 'ʰ',
    'ª', '\u0000', '\u007f', '\u0080', '\u00ad', 'ㅤ', '\U000105c0', '\U0001cc00', '\U00011f00', '\U00016d6d',
    '\U00010d40', '\u1c89', '\u0897', '\U0001fae8', '\u2427', '\u31e4', 'Ω', 'ω', 'Я', 'я', 'ا', 'ש', 'क', 'ि', '्',
    'ก', 'ั', '한', 'ᄀ', 'ᅡ', '\ue000', '\U000f0000', '\uffff', '\U0010ffff', '\U0001d7d8', '٫', '٬', '°', '℃',
    '™', '©', '±', '√', '∑', '←', '■', '♪', '¥', '₿', '\u2060', '\u061c', '\u202e',
]


def main():
    r = Rng(int(sys.argv[1]))
    n = int(sys.argv[2])
    seen = set()
    while len(seen) < n:
        s = ''.join(r.pick(ATOMS) for _ in range(r.range(1, 24)))
        if s in seen:
            continue
        seen.add(s)
        sys.stdout.write(json.dumps({'text': s}) + '\n')


if __name__ == '__main__':
    main()
