#!/usr/bin/env python3
"""dev/probe/lt_trace.py: two cuBLASLt traces (CUBLASLT_LOG_LEVEL=5, CUBLASLT_LOG_FILE) side by side: ours (dev/probe/
fp8_gemm, train_gpt) and PyTorch's (dev/probe/fp8_torch.py). cuBLASLt logs every cublasLtMatmul call with its operands'
descriptors (Adesc=[type=... rows=... cols=... ld=...], computeDesc=[computeType=... transa=... ...], algo=[...]);
this reads the first fp8 call of each file (an operand of type R_8F_*), flattens it into keys (Adesc.type,
computeDesc.transa, ...), writes every pointer as its alignment (the largest power of two up to 256 that divides it,
"null" for 0) and whether C is D, and prints the keys whose values differ, then the keys only one side has, then each
file's lines at the levels Error, Warning and Hints (cuBLASLt's own account of a refusal).
  usage: python3 dev/probe/lt_trace.py OURS.log TORCH.log
Exit status: 0 when both files hold an fp8 call (whatever the differences), 1 when one holds none, 2 on a bad argument.
"""
import re
import sys

POINTER = re.compile(r'^(0[xX][0-9a-fA-F]+|\(nil\))$')


def alignment(v):
    """a pointer as its alignment: 'null', or 'aligned N' (N the largest power of two up to 256 dividing it)"""
    if v.lower() in ('(nil)', '0x0') or int(v, 16) == 0:
        return 'null'
    p, a = int(v, 16), 256
    while a > 1 and p % a:
        a //= 2
    return 'aligned %d' % a


def parse_fields(text, prefix=''):
    """key=value pairs of a trace line, where a value may be a [...] group of its own pairs (flattened as group.key)"""
    out, i, n = {}, 0, len(text)
    while i < n:
        m = re.compile(r'\s*([A-Za-z_][\w\[\]]*)=').match(text, i)
        if not m:
            i += 1
            continue
        key, i = prefix + m.group(1), m.end()
        if i < n and text[i] == '[':
            depth, j = 0, i
            while j < n:
                depth += {'[': 1, ']': -1}.get(text[j], 0)
                if depth == 0:
                    break
                j += 1
            out.update(parse_fields(text[i + 1:j], key + '.'))
            i = j + 1
        else:
            j = i
            while j < n and not text[j].isspace():
                j += 1
            out[key] = text[i:j]
            i = j
    return out


def first_fp8_call(path):
    """(fields, line number) of the file's first cublasLtMatmul call with an fp8 operand, or (None, count of calls)"""
    calls = 0
    with open(path, errors='replace') as f:
        for no, line in enumerate(f, 1):
            if '[cublasLtMatmul]' not in line:
                continue
            calls += 1
            fields = parse_fields(line.split('[cublasLtMatmul]', 1)[1])
            if any(v.startswith('R_8F') for k, v in fields.items() if k.endswith('desc.type')):
                raw = dict(fields)
                for k, v in fields.items():
                    if POINTER.match(v):
                        fields[k] = alignment(v)
                if 'C' in raw and 'D' in raw:
                    fields['C is D'] = str(raw['C'] == raw['D'])
                return fields, no
    return None, calls


def levels(path, limit=20):
    """the file's lines at the levels Error, Warning and Hint, at most `limit`"""
    out = []
    with open(path, errors='replace') as f:
        for line in f:
            if re.search(r'\]\[(Error|Warning|Hints?)\]', line):
                out.append(line.rstrip()[:300])
                if len(out) == limit:
                    break
    return out


def main(argv):
    if len(argv) != 3 or argv[1].startswith('-'):
        print('usage: python3 dev/probe/lt_trace.py OURS.log TORCH.log', file=sys.stderr)
        return 2
    names = ('ours', 'torch')
    calls = {}
    for name, path in zip(names, argv[1:]):
        try:
            calls[name] = first_fp8_call(path)
        except OSError as e:
            print('error: %s trace %s: %s' % (name, path, e.strerror), file=sys.stderr)
            return 2
    ok = True
    for name, path in zip(names, argv[1:]):
        fields, where = calls[name]
        if fields is None:
            print('%s (%s): no fp8 cublasLtMatmul call among its %d cublasLtMatmul lines' % (name, path, where))
            ok = False
        else:
            print('%s (%s): first fp8 cublasLtMatmul call at line %d' % (name, path, where))
    if ok:
        a, b = calls['ours'][0], calls['torch'][0]
        skip = ('stream', 'workSpace')  # addresses that say nothing about the call
        differ = [k for k in sorted(a) if k in b and a[k] != b[k] and k not in skip]
        print('\nkeys whose values differ (%d):' % len(differ))
        for k in differ:
            print('  %-40s ours %-24s torch %s' % (k, a[k], b[k]))
        for name, x, y in (('ours', a, b), ('torch', b, a)):
            only = [k for k in sorted(x) if k not in y]
            print('\nkeys only in %s (%d):' % (name, len(only)))
            for k in only:
                print('  %-40s %s' % (k, x[k]))
    for name, path in zip(names, argv[1:]):
        lines = levels(path)
        print('\n%s: %d line(s) at Error, Warning or Hint%s' % (name, len(lines), ':' if lines else ''))
        for line in lines:
            print('  ' + line)
    return 0 if ok else 1


if __name__ == '__main__':
    sys.exit(main(sys.argv))
