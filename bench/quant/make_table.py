#!/usr/bin/env python3
"""Markdown table of ds4-eval JSON results (bench/quant/run_table.sh writes WORK/eval-NAME.json).

Usage: make_table.py WORK_DIR [PREFIX]   (PREFIX defaults to "eval-")
"""
import json
import os
import sys

ROWS = [
    ('q8_0', 'models/ds4-demo.gguf (Q8_0): the reference', ''),
    ('f32', 'f32: the reference dequantized (`* f32`)', ''),
    ('q2', 'demo-q2 (flash-q2, down Q4_0), no imatrix', ''),
    ('q2-imx', 'demo-q2 with the imatrix', ''),
    ('q2-boost-imx', 'demo-q2-boost (layers 0 and 5: experts Q4_K / Q8_0) with the imatrix', ''),
    ('down', 'only experts\' down -> Q4_0, no imatrix', ''),
    ('down-imx', 'only experts\' down -> Q4_0, with the imatrix', ''),
    ('gateup', 'only experts\' gate/up -> IQ2_XXS, no imatrix', ''),
    ('gateup-imx', 'only experts\' gate/up -> IQ2_XXS, with the imatrix', ''),
    ('prune-0.75', 'Q8_0, prune 25% of learned-layer experts by profile', ''),
    ('prune-0.75-random1', 'Q8_0, prune 25% at random (seed 1)', ''),
    ('prune-0.75-random2', 'Q8_0, prune 25% at random (seed 2)', ''),
    ('prune-0.75-random3', 'Q8_0, prune 25% at random (seed 3)', ''),
    ('prune-0.5', 'Q8_0, prune 50% of learned-layer experts by profile', ''),
    ('prune-0.5-random1', 'Q8_0, prune 50% at random (seed 1)', ''),
    ('prune-0.5-random2', 'Q8_0, prune 50% at random (seed 2)', ''),
    ('prune-0.5-random3', 'Q8_0, prune 50% at random (seed 3)', ''),
    ('pruned-0.75', 'Q8_0, 25% by profile dropped from the file (`quantize --recipe keep --prune`)', ''),
    ('pruned-0.5', 'Q8_0, 50% by profile dropped from the file', ''),
    ('q2-imx-pruned-0.75', 'demo-q2 with the imatrix, 25% by profile dropped from the file', ''),
    ('q2-imxB', 'demo-q2 with imatrix B (other books, chunks of 512)', ''),
    ('q2-ones', 'demo-q2, no imatrix, `--uniform-weights`', ''),
]

# Second table: KL mean per tensor class (rows) and importance-weight variant (columns).
CLASSES = [
    ('gateup', "experts' gate/up -> IQ2_XXS"),
    ('gateup-q2k', "experts' gate/up -> Q2_K"),
    ('down', "experts' down -> Q4_0"),
    ('dense', 'attention + shared expert -> Q4_0'),
]
VARIANTS = [('', 'none'), ('-ones', 'ones'), ('-flat', 'flat'), ('-shuf', 'shuffled'), ('-imx', 'imatrix'),
            ('-imxB', 'imatrix B')]


def main():
    work = sys.argv[1]
    prefix = sys.argv[2] if len(sys.argv) > 2 else 'eval-'
    print('| variant | file MB | ppl | KL mean | KL p99 | top-1 agreement |')
    print('|---|---|---|---|---|---|')
    for name, what, _ in ROWS:
        p = os.path.join(work, f'{prefix}{name}.json')
        if not os.path.exists(p):
            continue
        j = json.load(open(p))
        size = os.path.getsize(j['model']) / 1e6 if os.path.exists(j['model']) else float('nan')
        print(f"| {what} | {size:.1f} | {j['ppl']:.3f} | {j['kl_mean']:.5f} | {j['kl_p99']:.4f} | "
              f"{j['top1_agreement']:.4f} |")
    j = json.load(open(p))
    print(f"\n({j['predictions']} scored predictions in {j['chunks']} chunks of {j['ctx']} tokens)")
    print('\n| tensor class (KL mean) | ' + ' | '.join(v for _, v in VARIANTS) + ' |')
    print('|---' * (len(VARIANTS) + 1) + '|')
    for c, what in CLASSES:
        cells = []
        for v, _ in VARIANTS:
            p = os.path.join(work, f'{prefix}{c}{v}.json')
            cells.append(f"{json.load(open(p))['kl_mean']:.5f}" if os.path.exists(p) else '=' if v == '-ones' else '')
        print(f'| {what} | ' + ' | '.join(cells) + ' |')


if __name__ == '__main__':
    main()
