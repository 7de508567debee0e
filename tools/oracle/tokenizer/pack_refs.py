#!/usr/bin/env python3
"""Packs the three reference files of reference_ids.py into one compact fixture.

Each output line: {"plain": ids} plus "special": ids only where it differs from plain and
"v4": ids only where it differs from special. ids is null for {"b64": ...} corpus lines.

    python3 pack_refs.py DIR > tests/fixtures/tokenizer/reference_ids.jsonl
"""
import json
import os
import sys


def rows(path):
    with open(path, encoding='utf-8') as f:
        return [json.loads(line) for line in f]


def main():
    d = sys.argv[1]
    plain = rows(os.path.join(d, 'ref_plain.jsonl'))
    special = rows(os.path.join(d, 'ref_special.jsonl'))
    v4 = rows(os.path.join(d, 'ref_special_v4.jsonl'))
    assert len(plain) == len(special) == len(v4)
    for p, s, v in zip(plain, special, v4):
        o = {'plain': p}
        if s != p:
            o['special'] = s
        if v != s:
            o['v4'] = v
        sys.stdout.write(json.dumps(o, separators=(',', ':')) + '\n')


if __name__ == '__main__':
    main()
