#!/usr/bin/env python3
"""dev/probe/fp8_torch.py: PyTorch's own fp8 GEMM (torch._scaled_mm) on this machine, the control beside
dev/probe/fp8_gemm.cu. If PyTorch's call runs where ours is refused, the difference is in how we set up cuBLASLt (or
which libcublasLt we load), not in the GPU or the driver; run both under CUBLASLT_LOG_LEVEL=5 and compare their traces
with dev/probe/lt_trace.py.

Prints the versions (torch, its CUDA, the device) and the libcublasLt file the process loaded (/proc/self/maps) with
its cublasLtGetVersion, then one line per case at fp8_gemm's default shape (gpt3_1.3b's qkv forward at B*T = 4096:
out[4096, 6144] = x[4096, 2048] @ W[6144, 2048]^T, cuBLAS's m = 6144, n = 4096, k = 2048):
  pytorch       E4M3 x E4M3 -> bf16, per-tensor scales each in its own tensor, fast accumulation off
  fast_accum    the same with use_fast_accum=True
  bias          a bf16 bias
  out_fp32      fp32 output
  e5m2_x_e4m3   an E5M2 operand (the backward's output gradients)
  scale_off4_a  scale_a a view 4 bytes into a tensor (a 4-byte-aligned scale pointer, as the trainer once passed)
  scale_off4_b  the same for scale_b
  out_e4m3      E4M3 output with scale_result
Each line: "case NAME: ok (max |out - ref| / max |ref| = E)", "case NAME: refused: MESSAGE" (PyTorch raised), or
"case NAME: WRONG (...)" where it ran and differs from the fp32 product of the dequantized operands by more than the
output's rounding allows (bf16 2^-7, E4M3 2^-3, fp32 2^-10; fast accumulation twice that).
  usage: python3 dev/probe/fp8_torch.py [--m M] [--n N] [--k K]
Exit status: 0 when every case ran right or was refused with a message (the table is the result), 1 when one ran and
computed a wrong product, 2 when there is no torch with a CUDA device ("no CUDA device") or a flag is wrong.
"""
import argparse
import ctypes
import sys


def loaded_cublaslt():
    """The libcublasLt this process mapped, and its version (cublasLtGetVersion), or a note why not."""
    try:
        with open('/proc/self/maps') as f:
            paths = sorted({line.split()[-1] for line in f if 'libcublasLt' in line and '/' in line})
    except OSError as e:
        return 'unknown (/proc/self/maps: %s)' % e
    if not paths:
        return 'none mapped'
    out = []
    for p in paths:
        try:
            lib = ctypes.CDLL(p)
            lib.cublasLtGetVersion.restype = ctypes.c_size_t
            out.append('%s (cublasLtGetVersion %d)' % (p, lib.cublasLtGetVersion()))
        except (OSError, AttributeError) as e:
            out.append('%s (version unknown: %s)' % (p, e))
    return '; '.join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--m', type=int, default=6144, help="cuBLAS's m: the output features (default 6144)")
    ap.add_argument('--n', type=int, default=4096, help="cuBLAS's n: the tokens (default 4096)")
    ap.add_argument('--k', type=int, default=2048, help="cuBLAS's k: the input features (default 2048)")
    args = ap.parse_args()
    for name in ('m', 'n', 'k'):
        v = getattr(args, name)
        if v < 16 or v % 16:
            print('error: --%s %d: fp8 GEMMs need a positive multiple of 16' % (name, v), file=sys.stderr)
            return 2
    try:
        import torch
    except ImportError as e:
        print('no CUDA device: torch is not importable (%s)' % e)
        return 2
    if not torch.cuda.is_available():
        print('no CUDA device: torch %s sees none' % torch.__version__)
        return 2
    if not hasattr(torch, '_scaled_mm') or not hasattr(torch, 'float8_e4m3fn'):
        print('no CUDA device: torch %s has no torch._scaled_mm / float8 types' % torch.__version__)
        return 2

    dev = torch.device('cuda')
    props = torch.cuda.get_device_properties(0)
    print('torch %s (CUDA %s), %s, compute capability %d.%d' % (torch.__version__, torch.version.cuda, props.name,
                                                                  props.major, props.minor))
    M, N, K = args.m, args.n, args.k  # cuBLAS's: out is [N tokens, M features]
    gen = torch.Generator(device=dev).manual_seed(1234)
    x = torch.randn(N, K, device=dev, generator=gen)
    w = torch.randn(M, K, device=dev, generator=gen)
    bias = torch.randn(M, device=dev, generator=gen).to(torch.bfloat16)
    # the first GEMM loads cuBLASLt: a bf16 one, so that the library shows below whatever the fp8 cases do
    (x.to(torch.bfloat16) @ w.to(torch.bfloat16).t()).float().sum().item()
    print('libcublasLt loaded: %s' % loaded_cublaslt())

    e4, e5 = torch.float8_e4m3fn, torch.float8_e5m2

    def quant(t, dtype):
        """t in dtype with a per-tensor scale (amax to the format's max); returns (q, scale_inv on the device)."""
        fmax = torch.finfo(dtype).max
        s = fmax / t.abs().max().clamp(min=1e-12)
        return (t * s).to(dtype), (1.0 / s).float().reshape(())

    def offset4(v):
        """a one-element view 4 bytes into a tensor of its own: a scale pointer aligned to 4 bytes only"""
        buf = torch.empty(2, device=dev, dtype=torch.float32)
        buf[1] = v
        return buf[1:2].reshape(())

    cases = [
        ('pytorch', {}),
        ('fast_accum', {'fast': True}),
        ('bias', {'bias': True}),
        ('out_fp32', {'out': torch.float32}),
        ('e5m2_x_e4m3', {'a_type': e5}),
        ('scale_off4_a', {'off_a': True}),
        ('scale_off4_b', {'off_b': True}),
        ('out_e4m3', {'out': e4}),
    ]
    wrong = 0
    for name, c in cases:
        a_type = c.get('a_type', e4)
        out_type = c.get('out', torch.bfloat16)
        a8, sa = quant(x, a_type)          # [N, K] row-major
        b8, sb = quant(w, e4)              # [M, K] row-major: b8.t() is [K, M] column-major, as _scaled_mm wants
        if c.get('off_a'):
            sa = offset4(sa.item())
        if c.get('off_b'):
            sb = offset4(sb.item())
        kw = {'out_dtype': out_type, 'use_fast_accum': bool(c.get('fast'))}
        if c.get('bias'):
            kw['bias'] = bias
        ref = (a8.float() * sa) @ (b8.float() * sb).t()
        if c.get('bias'):
            ref = ref + bias.float()
        if out_type == e4:  # the output scaled into E4M3's range: scale_result is cuBLASLt's D scale, a factor
            s_out = torch.finfo(e4).max / ref.abs().max()
            kw['scale_result'] = s_out.float().reshape(())
            ref = ref * s_out
        try:
            out = torch._scaled_mm(a8, b8.t(), sa, sb, **kw)
            torch.cuda.synchronize()
        except Exception as e:  # PyTorch's message says what cuBLASLt (or its own checks) answered
            print('case %s: refused: %s' % (name, str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__))
            continue
        if isinstance(out, tuple):  # older versions returned (out, amax)
            out = out[0]
        err = ((out.float() - ref).abs().max() / ref.abs().max()).item()
        tol = {torch.bfloat16: 2 ** -7, torch.float32: 2 ** -10, e4: 2 ** -3}[out_type] * (2 if c.get('fast') else 1)
        if err <= tol:
            print('case %s: ok (max |out - ref| / max |ref| = %.3g)' % (name, err))
        else:
            # the factor k of the least-squares fit out = k ref: 1 when only rounding differs; for out_e4m3,
            # 1 / s_out^2 would say that scale_result divides the output rather than multiplies it
            o, r = out.float().flatten(), ref.flatten()
            k = ((o * r).sum() / (r * r).sum()).item()
            extra = ', s_out %.4g, 1 / s_out^2 %.4g' % (s_out.item(), 1 / s_out.item() ** 2) if out_type == e4 else ''
            print('case %s: WRONG (max |out - ref| / max |ref| = %.3g, above %.3g; out = %.4g ref by least '
                  'squares%s)' % (name, err, tol, k, extra))
            wrong += 1
    return 1 if wrong else 0


if __name__ == '__main__':
    sys.exit(main())
