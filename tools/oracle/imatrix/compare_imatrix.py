#!/usr/bin/env python3
"""Compares two GGUF imatrix files (ours and llama-imatrix's) tensor by tensor.

Usage: compare_imatrix.py OURS.gguf LLAMA.gguf

Per weight present in both: max |a - b| / max |b| of in_sum2 (printed by category), whether the
counts agree, and the weights only one file has. Plain Python (no numpy): a minimal GGUF v3
reader for the metadata and F32 tensors these files hold.
"""
import array
import math
import statistics
import struct
import sys

TYPES = {0: 'B', 1: 'b', 2: 'H', 3: 'h', 4: 'I', 5: 'i', 6: 'f', 7: '?', 10: 'Q', 11: 'q', 12: 'd'}


def read_gguf(path):
    b = open(path, 'rb').read()
    pos = 0

    def rd(fmt):
        nonlocal pos
        v = struct.unpack_from('<' + fmt, b, pos)
        pos += struct.calcsize('<' + fmt)
        return v

    def rstr():
        nonlocal pos
        (n,) = rd('Q')
        s = b[pos:pos + n].decode()
        pos += n
        return s

    def rval(t):
        if t == 8:
            return rstr()
        if t == 9:
            (et,) = rd('I')
            (n,) = rd('Q')
            return [rval(et) for _ in range(n)]
        return rd(TYPES[t])[0]

    magic, _version = rd('4sI')
    if magic != b'GGUF':
        raise SystemExit(f'{path}: not GGUF')
    n_tensors, n_kv = rd('QQ')
    kv = {}
    for _ in range(n_kv):
        k = rstr()
        (t,) = rd('I')
        kv[k] = rval(t)
    infos = []
    for _ in range(n_tensors):
        name = rstr()
        (nd,) = rd('I')
        ne = rd('Q' * nd)
        (ty,) = rd('I')
        (off,) = rd('Q')
        if ty != 0:
            raise SystemExit(f'{path}: {name} is not F32')
        infos.append((name, ne, off))
    align = kv.get('general.alignment', 32)
    data = (pos + align - 1) // align * align
    out = {}
    for name, ne, off in infos:
        a = array.array('f')
        a.frombytes(b[data + off:data + off + 4 * math.prod(ne)])
        out[name] = a
    return kv, out


def main():
    _, ours = read_gguf(sys.argv[1])
    _, ref = read_gguf(sys.argv[2])
    cats, counts_same, counts_diff = {}, 0, 0
    for n in sorted(ours):
        if not n.endswith('.in_sum2'):
            continue
        base = n[:-len('.in_sum2')]
        if n not in ref:
            print('only in', sys.argv[1] + ':', base)
            continue
        x, y = ours[n], ref[n]
        cx, cy = list(ours[base + '.counts']), list(ref[base + '.counts'])
        if len(y) > len(x) and len(y) % len(x) == 0 and len(cy) == 1:
            # llama-imatrix's grouped projection: G slices side by side, one count per token;
            # ours sums the slices and counts each as a row.
            g = len(y) // len(x)
            y = [sum(y[k * len(x) + j] for k in range(g)) for j in range(len(x))]
            cy = [c * g for c in cy]
            print(f'{base}: {g} slices of llama-imatrix folded')
        if len(x) != len(y):
            print(f'{base}: {len(x)} values here, {len(y)} there')
            continue
        rel = max(abs(p - q) for p, q in zip(x, y)) / max(max(abs(q) for q in y), 1e-30)
        layer = int(base.split('.')[1]) if base.startswith('blk.') else -1
        cat = 'hc_*fn' if 'hc_' in base else ('experts layer %d' % layer if '_exps' in base else 'other matrices')
        cats.setdefault(cat, []).append(rel)
        if cx == cy:
            counts_same += 1
        else:
            counts_diff += 1
    for n in sorted(ref):
        if n.endswith('.in_sum2') and n not in ours:
            print('only in', sys.argv[2] + ':', n[:-len('.in_sum2')])
    for c, v in sorted(cats.items()):
        print(f'{c}: {len(v)} tensors, max-relative difference median {statistics.median(v):.2e}, max {max(v):.2e}')
    print(f'counts identical for {counts_same} tensors, different for {counts_diff}')


if __name__ == '__main__':
    main()
