#!/usr/bin/env python3
"""tests/cuda_emu/rewrite.py SRC DST: copies train_gpt.cu, test_gpt.cu and the .h, .cuh and .cu files of llmc/ (and its
subfolders) and tests/ from the repository SRC into DST (same relative paths), with the one change g++ needs to build them
against tests/cuda_emu/include: every launch kernel<<<cfg>>>(args) becomes EmuLaunch(cfg).go(kernel, "kernel", "file", line)(args) (the name and place
name the launch in the stream mode's messages).
Nothing else is edited: the inline PTX of llmc/mma.cuh and the dynamic shared memory (its DYNAMIC_SMEM) come
from the emulation's own tests/cuda_emu/include/llmc/mma.cuh, which the builds find first on the include path.
Prints the count of rewritten launches per file."""
import os, re, sys
if len(sys.argv) != 3:
    sys.exit("usage: rewrite.py SRC DST")
SRC, DST = sys.argv[1], sys.argv[2]
def rewrite_launches(text, name):
    out, i, n = [], 0, 0
    while True:
        j = text.find('<<<', i)
        if j < 0:
            out.append(text[i:]); break
        # kernel expression before <<<: identifier with optional template args (one nesting level)
        k = j
        if text[k-1] == '>':
            depth = 0
            while True:
                k -= 1
                if text[k] == '>': depth += 1
                elif text[k] == '<':
                    depth -= 1
                    if depth == 0: break
        m = re.search(r'[A-Za-z_][A-Za-z_0-9:]*$', text[:k])
        ks = m.start()
        kernel = text[ks:j]
        e = text.find('>>>', j)
        cfg = text[j+3:e]
        p = e + 3
        while text[p].isspace(): p += 1
        assert text[p] == '(', (name, text[j-40:p+10])
        line = text.count('\n', 0, j) + 1
        out.append(text[i:ks] + 'EmuLaunch(' + cfg + ').go(' + kernel + ', "' + kernel.strip() + '", "' + name + '", ' + str(line) + ')(')
        i = p + 1; n += 1
    return ''.join(out), n
total = 0
roots = ['.', 'tests', 'dev/probe'] + sorted(os.path.relpath(d, SRC) for d, _, _ in os.walk(os.path.join(SRC, 'llmc')))
for root in roots:
    for f in sorted(os.listdir(os.path.join(SRC, root))):
        if root == '.' and f not in ('train_gpt.cu', 'test_gpt.cu'): continue
        if not os.path.isfile(os.path.join(SRC, root, f)): continue
        if not (f.endswith('.cuh') or f.endswith('.h') or f.endswith('.cu')): continue
        t = open(os.path.join(SRC, root, f)).read()
        t, n = rewrite_launches(t, os.path.normpath(os.path.join(root, f)))
        total += n
        os.makedirs(os.path.join(DST, root), exist_ok=True)
        open(os.path.join(DST, root, f), 'w').write(t)
        if n: print(f'{root}/{f}: {n} launches')
print('total launches rewritten', total)
