#!/usr/bin/env python3
"""Reference token ids from HF `tokenizers` (the independent oracle for the parity test).

Needs the Python `tokenizers` package (not installed on the dev machine; it is on the GPU
device image). Usage:

    python3 reference_ids.py --tokenizer-json tokenizer.json --corpus corpus.jsonl --out DIR

Writes to DIR, one JSON line per corpus line (null for {"b64": ...} lines, which HF cannot take):
  ref_plain.jsonl       no added-token recognition at all: the tokenizer.json with its
                        "added_tokens" list emptied (plain BPE over pre-tokenized text)
  ref_special.jsonl     HF default: Tokenizer.encode(text, add_special_tokens=True) on the
                        unmodified tokenizer.json (every added token is split out first)
  ref_special_v4.jsonl  as ref_special, after appending v4_added_tokens.json to added_tokens
  classes.json          which code points HF's regex engine puts in \\p{L} \\p{N} ... (probe)
  pieces.jsonl          HF pre-tokenizer pieces per corpus line (for debugging only)
  meta.json             package versions
"""
import argparse
import base64
import copy
import json
import os
import sys

import tokenizers
from tokenizers import Regex, Tokenizer, pre_tokenizers


def load_corpus(path):
    texts = []
    with open(path, encoding='utf-8') as f:
        for line in f:
            o = json.loads(line)
            texts.append(o['text'] if 'text' in o else None)
    return texts


def encode_all(tok, texts):
    valid = [t for t in texts if t is not None]
    encs = tok.encode_batch(valid, add_special_tokens=True)
    it = iter(encs)
    return [next(it).ids if t is not None else None for t in texts]


def write_jsonl(path, rows):
    with open(path, 'w', encoding='utf-8') as f:
        for r in rows:
            f.write(json.dumps(r, separators=(',', ':')) + '\n')


def ranges(cps):
    out = []
    for c in sorted(cps):
        if out and out[-1][1] == c - 1:
            out[-1][1] = c
        else:
            out.append([c, c])
    return out


def probe_classes():
    all_cps = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    s = ''.join(map(chr, all_cps))
    pats = {
        'N': r'\p{N}', 'L': r'\p{L}', 'M': r'\p{M}', 'P': r'\p{P}', 'S': r'\p{S}', 's': r'\s', 'S_upper': r'\S',
        'notLPS': r'[^\r\n\p{L}\p{P}\p{S}]', 'LM': r'[\p{L}\p{M}]', 'PS': r'[\p{P}\p{S}]',
        'cjk': '[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]',
    }
    out = {}
    for name, p in pats.items():
        pt = pre_tokenizers.Split(Regex(p), behavior='removed')
        kept = set()
        for piece, _ in pt.pre_tokenize_str(s):
            kept.update(ord(ch) for ch in piece)
        matched = set(all_cps) - kept
        out[name] = ranges(matched)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--tokenizer-json', required=True)
    ap.add_argument('--corpus', required=True)
    ap.add_argument('--v4', default=os.path.join(os.path.dirname(os.path.abspath(__file__)), 'v4_added_tokens.json'))
    ap.add_argument('--out', required=True)
    ap.add_argument('--no-probe', action='store_true')
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)

    base = json.load(open(a.tokenizer_json, encoding='utf-8'))
    texts = load_corpus(a.corpus)

    plain = copy.deepcopy(base)
    plain['added_tokens'] = []
    v4 = copy.deepcopy(base)
    for t in json.load(open(a.v4, encoding='utf-8'))['tokens']:
        v4['added_tokens'].append({'id': t['id'], 'content': t['content'], 'single_word': False, 'lstrip': False,
                                   'rstrip': False, 'normalized': False, 'special': True})

    for name, js in [('plain', plain), ('special', base), ('special_v4', v4)]:
        tok = Tokenizer.from_str(json.dumps(js))
        write_jsonl(os.path.join(a.out, f'ref_{name}.jsonl'), encode_all(tok, texts))
        print(name, 'done', file=sys.stderr, flush=True)

    tok = Tokenizer.from_str(json.dumps(base))
    pieces = [[p for p, _ in tok.pre_tokenizer.pre_tokenize_str(t)] if t is not None else None for t in texts]
    write_jsonl(os.path.join(a.out, 'pieces.jsonl'), pieces)

    if not a.no_probe:
        json.dump(probe_classes(), open(os.path.join(a.out, 'classes.json'), 'w'))
        print('probe done', file=sys.stderr, flush=True)
    json.dump({'tokenizers': tokenizers.__version__, 'python': sys.version}, open(os.path.join(a.out, 'meta.json'), 'w'))


if __name__ == '__main__':
    main()
