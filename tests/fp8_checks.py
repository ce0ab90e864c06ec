#!/usr/bin/env python3
"""tests/fp8_checks.py DIR [--gpu]: checks what tests/test_fp8.cu wrote to DIR (llmc/fp8.cuh's casts, amax and
scales, llmc/matmul_fp8.cuh's GEMMs) against a reference written here from the formats' definitions, not from
CUDA's or the emulation's code, in numpy (where torch has torch.float8_e4m3fn / float8_e5m2, torch 2.1 or newer,
the numpy reference is itself compared with torch's conversions first):
  - the fp8 grids from the bit fields (OCP 8-bit floating point, E4M3 "fn": bias 7, no infinities, S.1111.111 is
    NaN; E5M2: bias 15, IEEE-like infinities and NaNs); encoding = the nearest grid value, found by a search over
    the enumerated grid, ties to the even code, |x| above the largest finite value saturating to it (CUDA's
    __NV_SATFINITE, inf included), NaN -> 0x7f, the sign kept on zeros;
  - a cast with a scale is that encoding of float32(x * scale) (one fp32 rounding, as the kernels compute it);
  - amax = the largest |x|, NaN ignored;
  - current scaling: scale = float32(fp8_max * 2^-margin) / amax, 1 when amax is 0 or not finite, FLT_MAX when the
    quotient overflows; scale_inv = 1 / scale (TransformerEngine's compute_scale_from_amax);
  - delayed scaling: TransformerEngine's update as transformer_engine/common/recipe/delayed_scaling.cu writes it
    (the amax history with this step's amax in row 0, the window's max (NaN ignored), the new scale when it is
    finite and > 0, else the old one; then the history rolled by one with row 0 zeroed), plus the FLT_MAX clamp of
    llmc/fp8.cuh; compared bit for bit with llmc/fp8.cuh's circular history over every step;
  - the GEMMs against float64 products of the dequantized fp8 operands (tolerances derived at gemm_checks).
--gpu: the results came from a GPU (the tensor cores' shorter fp8 accumulator: looser GEMM tolerances).
Prints "[PASS] name" or "[FAIL] name: detail" per check; exit status 1 on any failure."""
import os
import sys
import numpy as np

args = [a for a in sys.argv[1:] if not a.startswith('--')]
GPU = '--gpu' in sys.argv[1:]
if len(args) != 1:
    sys.exit('usage: fp8_checks.py DIR [--gpu]')
D = args[0]
failed = 0


def check(ok, name, detail=''):
    global failed
    if ok:
        print(f'[PASS] {name}')
    else:
        failed += 1
        print(f'[FAIL] {name}: {detail}')


def load(name, dtype):
    return np.fromfile(os.path.join(D, name), dtype=dtype)


def bf16(name):  # bf16 bits -> float32 (exact)
    return (load(name, np.uint16).astype(np.uint32) << 16).view(np.float32)


# ---------------------------------------------------------------- the formats
FORMATS = {  # mantissa bits, exponent bits, bias
    'e4m3': (3, 4, 7),
    'e5m2': (2, 5, 15),
}
FLT_MAX = np.float32(np.finfo(np.float32).max)


def decode_table(fmt):
    """value of each of the 256 codes, float64 (NaN for NaNs)"""
    mb, eb, bias = FORMATS[fmt]
    vals = np.empty(256)
    for code in range(256):
        s, e, m = code >> 7, (code >> mb) & ((1 << eb) - 1), code & ((1 << mb) - 1)
        if fmt == 'e4m3' and e == 15 and m == 7:
            v = np.nan
        elif fmt == 'e5m2' and e == 31:
            v = np.inf if m == 0 else np.nan
        elif e == 0:
            v = (m / 2 ** mb) * 2.0 ** (1 - bias)
        else:
            v = (1 + m / 2 ** mb) * 2.0 ** (e - bias)
        vals[code] = -v if s else v
    return vals


TABLES = {f: decode_table(f) for f in FORMATS}
# positive finite grid: codes 0 .. largest finite, increasing in value
GRIDS = {}
for f, t in TABLES.items():
    codes = [c for c in range(128) if np.isfinite(t[c])]
    GRIDS[f] = (np.array([t[c] for c in codes]), np.array(codes, dtype=np.uint8))
FMAX = {f: GRIDS[f][0][-1] for f in FORMATS}


def encode(x, fmt):
    """float32 array -> fp8 codes (uint8): nearest grid value, ties to the even code, saturating"""
    x = np.asarray(x, dtype=np.float32)
    grid, codes = GRIDS[fmt]
    with np.errstate(invalid='ignore'):
        a = np.abs(x.astype(np.float64))
    sign = np.where(np.signbit(x), 0x80, 0).astype(np.uint8)
    out = np.zeros(x.shape, dtype=np.uint8)
    fin = np.isfinite(a) & (a < grid[-1])
    hi = np.searchsorted(grid, a[fin], side='left')  # grid[hi-1] < a <= grid[hi]
    hi = np.clip(hi, 1, len(grid) - 1)
    lo = hi - 1
    dlo, dhi = a[fin] - grid[lo], grid[hi] - a[fin]
    pick_hi = (dhi < dlo) | ((dhi == dlo) & (codes[hi] % 2 == 0))
    out[fin] = np.where(pick_hi, codes[hi], codes[lo])
    out[~fin] = codes[-1]  # |x| >= largest finite (inf included): saturate
    out |= sign
    out[np.isnan(x)] = 0x7f
    return out


def scale_from_amax(amax, scaled_max, fallback):
    amax = np.float32(amax)
    if not (amax > 0) or not np.isfinite(amax):
        return np.float32(fallback)
    with np.errstate(over='ignore'):
        s = np.float32(scaled_max) / amax
    return FLT_MAX if np.isinf(s) else s


def scaled_max(fmt, margin):
    return np.float32(FMAX[fmt] * 2.0 ** -margin)


def nanmax_abs(x):
    return np.float32(np.nanmax(np.abs(x))) if np.any(~np.isnan(x)) else np.float32(0)


def same_codes(got, exp):
    bad = np.nonzero(got != exp)[0]
    return len(bad) == 0, (f'{len(bad)} of {len(exp)} differ, first at {bad[0]}: got 0x{got[bad[0]]:02x} '
                           f'expected 0x{exp[bad[0]]:02x}' if len(bad) else '')


def bits_equal(a, b):
    return np.array_equal(np.asarray(a, np.float32).view(np.uint32), np.asarray(b, np.float32).view(np.uint32))


# ---------------------------------------------------------------- the reference against torch's float8 dtypes
try:
    import torch
    TORCH_FP8 = {'e4m3': getattr(torch, 'float8_e4m3fn', None), 'e5m2': getattr(torch, 'float8_e5m2', None)}
except ImportError:
    TORCH_FP8 = {}
if TORCH_FP8 and all(TORCH_FP8.values()):
    sweep = load('enc_in.f32', np.float32)
    for f, dt in TORCH_FP8.items():
        dec = torch.arange(256, dtype=torch.uint8).view(dt).float().numpy().astype(np.float64)
        ok_dec = np.array_equal(np.isnan(dec), np.isnan(TABLES[f])) and np.array_equal(
            dec[~np.isnan(dec)], TABLES[f][~np.isnan(TABLES[f])])
        # torch's conversion does not saturate (beyond the largest value it gives NaN / inf): compare where
        # |x| <= the largest finite value, by value (torch and CUDA may differ on the sign of a zero)
        x = sweep[np.isfinite(sweep) & (np.abs(sweep) <= FMAX[f])]
        got = torch.from_numpy(x).to(dt).float().numpy()
        ok_enc = np.array_equal(got.astype(np.float64), TABLES[f][encode(x, f)])
        check(ok_dec and ok_enc, f'the numpy reference agrees with torch.{dt} ({torch.__version__}): 256 decodes, '
                                 f'{len(x)} encodes', f'decode {"ok" if ok_dec else "differs"}, encode '
                                 f'{"ok" if ok_enc else "differs"}')
else:
    print('[SKIP] the numpy reference against torch.float8_e4m3fn / float8_e5m2: this torch has none (before 2.1)')

# ---------------------------------------------------------------- decode
check(FMAX['e4m3'] == 448 and FMAX['e5m2'] == 57344 and GRIDS['e4m3'][0][1] == 2.0 ** -9 and
      GRIDS['e5m2'][0][1] == 2.0 ** -16 and np.isnan(TABLES['e4m3']).sum() == 2 and
      np.isnan(TABLES['e5m2']).sum() == 6 and np.isinf(TABLES['e5m2']).sum() == 2,
      'reference grids: largest finite 448 / 57344, smallest subnormal 2^-9 / 2^-16, NaN and inf codes')
for f in FORMATS:
    ref = TABLES[f].astype(np.float32)
    for ext, got in (('f32', load(f'decode_{f}.f32', np.float32)), ('bf16', bf16(f'decode_{f}.bf16'))):
        ok = np.array_equal(np.isnan(got), np.isnan(ref)) and bits_equal(got[~np.isnan(ref)], ref[~np.isnan(ref)])
        check(ok, f'fp8_dequantize {f} -> {ext}: all 256 codes decode to the reference values',
              f'{np.sum(got[~np.isnan(ref)] != ref[~np.isnan(ref)])} values differ')

# ---------------------------------------------------------------- encode sweep (scale 1)
x = load('enc_in.f32', np.float32)
for f in FORMATS:
    grid = GRIDS[f][0]
    with np.errstate(invalid='ignore'):
        a = np.abs(x.astype(np.float64))
    mids = (grid[:-1] + grid[1:]) / 2
    ties = np.isin(a, mids).sum()
    sub = ((a > 0) & (a < grid[2 ** FORMATS[f][0]])).sum()
    sat = (np.isfinite(a) & (a > grid[-1])).sum()
    ok, detail = same_codes(load(f'enc_{f}.u8', np.uint8), encode(x, f))
    check(ok, f'fp8_cast fp32 -> {f}, scale 1: {len(x)} inputs ({ties} ties, {sub} in the subnormal range, '
              f'{sat} finite beyond the largest, {np.isinf(x).sum()} inf, {np.isnan(x).sum()} NaN) match the '
              'reference encoding', detail)
    got = load(f'enc_amax_{f}.f32', np.float32)[0]
    check(got == nanmax_abs(x), f'fp8_cast {f}: the amax of the sweep (NaN ignored, inf kept) is max |x|',
          f'got {got}, expected {nanmax_abs(x)}')

# ---------------------------------------------------------------- bf16 inputs with a scale
x = bf16('sc_in.bf16')
s = load('sc_scale.f32', np.float32)[0]
y = x * s  # float32 * float32: one fp32 rounding
amaxes = load('sc_amax.f32', np.float32)
for k, f in enumerate(FORMATS):
    ok, detail = same_codes(load(f'sc_{f}.u8', np.uint8), encode(y, f))
    check(ok, f'fp8_cast bf16 -> {f}, scale {s}: {len(x)} values over 2^-14..2^12 ({(np.abs(y) > FMAX[f]).sum()} '
              'saturating) match the reference', detail)
    check(amaxes[k] == nanmax_abs(x), f'fp8_cast bf16 -> {f}: amax of the unscaled input',
          f'got {amaxes[k]}, expected {nanmax_abs(x)}')

# ---------------------------------------------------------------- transposed cast
R, C = 37, 53
x = bf16('tr_in.bf16')
s = load('tr_scale.f32', np.float32)[0]
q, qt = load('tr_q.u8', np.uint8), load('tr_qt.u8', np.uint8)
exp = encode(x * s, 'e4m3')
ok, detail = same_codes(q, exp)
check(ok, f'fp8_cast_transpose [{R},{C}] e4m3: the plain output matches the reference', detail)
ok, detail = same_codes(qt, exp.reshape(R, C).T.ravel())
check(ok, f'fp8_cast_transpose [{R},{C}] e4m3: the transposed output [{C},{R}] is the reference transposed', detail)
got = load('tr_amax.f32', np.float32)[0]
check(got == nanmax_abs(x), 'fp8_cast_transpose: amax over all tiles', f'got {got}, expected {nanmax_abs(x)}')

# ---------------------------------------------------------------- current scaling
state = load('cur_state.f32', np.float32).reshape(3, 2)
names = ['random values', 'all zeros (scale 1)', 'amax below 448 / FLT_MAX (scale clamped to FLT_MAX)']
for i in range(3):
    x = bf16(f'cur{i}_in.bf16')
    sc = scale_from_amax(nanmax_abs(x), scaled_max('e4m3', 0), 1.0)
    sinv = np.float32(1) / sc
    ok_scale = bits_equal([state[i, 0], state[i, 1]], [sc, sinv])
    ok, detail = same_codes(load(f'cur{i}_q.u8', np.uint8), encode(x * sc, 'e4m3'))
    check(ok_scale and ok, f'current scaling e4m3, {names[i]}: scale, scale_inv and codes match the reference',
          f'scale {state[i, 0]!r} / {state[i, 1]!r}, expected {sc!r} / {sinv!r}; {detail}')
check(state[1, 0] == 1 and state[2, 0] == FLT_MAX, 'current scaling: the zero tensor keeps scale 1, the tiny one FLT_MAX')
x = bf16('cur3_in.bf16')
st = load('cur3_state.f32', np.float32)
sc = scale_from_amax(nanmax_abs(x), scaled_max('e5m2', 1), 1.0)
ok, detail = same_codes(load('cur3_qt.u8', np.uint8), encode(x * sc, 'e5m2').reshape(40, 24).T.ravel())
check(ok and bits_equal(st, [sc, np.float32(1) / sc]),
      'current scaling e5m2, margin 1, transposed cast [40,24]: scale and transposed codes match the reference',
      f'scale {st[0]!r}, expected {sc!r}; {detail}')


# ---------------------------------------------------------------- delayed scaling
def te_delayed(amax_seq, n, length, fmt, margin):
    """TransformerEngine's delayed-scaling update, step by step: returns the scales and scale_invs after each"""
    hist = np.zeros((length, n), dtype=np.float32)
    scale = np.ones(n, dtype=np.float32)
    smax = scaled_max(fmt, margin)
    scales, invs = [], []
    for a in amax_seq:
        hist[0] = a                              # this step's amax, as the casts leave it in row 0
        window = np.fmax.reduce(hist, axis=0)    # "max" algorithm; fmax ignores NaN like CUDA's fmaxf
        scale = np.array([scale_from_amax(window[i], smax, scale[i]) for i in range(n)], dtype=np.float32)
        scales.append(scale.copy())
        invs.append(np.float32(1) / scale)
        rolled = np.empty_like(hist)             # roll: row i <- row i+1, last row <- row 0, then row 0 <- 0
        rolled[:-1] = hist[1:]
        rolled[-1] = hist[0]
        rolled[0] = 0
        hist = rolled
    return np.array(scales), np.array(invs)


for tag in ('A', 'B'):
    n, length, margin, fmt_id, steps = load(f'del{tag}_cfg.i32', np.int32)
    fmt = 'e4m3' if fmt_id == 0 else 'e5m2'
    amax_seq = load(f'del{tag}_amax.f32', np.float32).reshape(steps, n)
    got_s = load(f'del{tag}_scale.f32', np.float32).reshape(steps, n)
    got_i = load(f'del{tag}_scale_inv.f32', np.float32).reshape(steps, n)
    ref_s, ref_i = te_delayed(amax_seq, n, length, fmt, margin)
    bad = np.nonzero(got_s.view(np.uint32) != ref_s.view(np.uint32))
    detail = f'{len(bad[0])} differ, first step {bad[0][0]} tensor {bad[1][0]}: got {got_s[bad][0]!r}, ' \
             f'expected {ref_s[bad][0]!r}' if len(bad[0]) else ''
    changes = int(np.sum(ref_s[1:] != ref_s[:-1]))
    specials = int(np.sum(~np.isfinite(amax_seq) | (amax_seq == 0)))
    check(len(bad[0]) == 0 and bits_equal(got_i, ref_i),
          f'delayed scaling {fmt}, history {length}, margin {margin}, {n} tensors x {steps} steps ({specials} amaxes '
          f'0/inf/NaN, {changes} scale changes): scales and scale_invs equal TransformerEngine\'s rule bit for bit',
          detail)
    if tag == 'A':
        # the spike of step 3 (tensor 0) sets the scale until it leaves the 1024-step window at step 1027;
        # the inf of step 10 (tensor 2) freezes that scale until step 1034
        check(ref_s[1026, 0] == ref_s[3, 0] and ref_s[1027, 0] != ref_s[3, 0] and
              np.all(ref_s[10:1034, 2] == ref_s[9, 2]) and ref_s[1034, 2] != ref_s[9, 2] and
              np.all(ref_s[:5, 1] == 1),
              'delayed scaling e4m3: the sequence exercises the window (a spike leaving it, an inf freezing the '
              'scale, zero amaxes keeping scale 1)')
    else:
        check(np.all(ref_s[:20, 1] == FLT_MAX) and np.isnan(amax_seq[7, 0]),
              'delayed scaling e5m2: tiny amaxes give FLT_MAX, a NaN amax is ignored')


# ---------------------------------------------------------------- GEMMs
def gemm_checks():
    """Each result against float64 products of the dequantized operands, q * scale_inv.
    Emulation: each product of two fp8 values is exact in fp32 (at most 4 + 4 significant bits), the K products
    are summed in fp32 in order: |acc - exact| <= (K - 1) u P with u = 2^-24 and P = sum |a_i b_i|; the scales
    (scale_inv_a * scale_inv_b, then times acc) add two roundings and a bias or beta * D term one more, each at most
    u of its value: (K + 4) u (P + |added term|) covers the fp32 part e. A bf16 output (8 significant bits) adds a
    rounding of at most 2^-8 of the value v it rounds, |v| <= |ref| + e: tol = 2^-8 |ref| + (1 + 2^-8) e.
    GPU (--gpu): the tensor cores' fp8 partial sums keep fewer bits than fp32 (about 14, DeepSeek-V3 technical
    report section 3.3.2), promoted to fp32 only every so many K (never in fast accumulation), and the K here are
    below one promotion interval: u = 2^-13 for every GEMM there (an estimate, not measured yet)."""
    N, IC, OC = load('gemm_dims.i32', np.int32)
    sc = load('gemm_scales.f32', np.float32)  # [inp, w, dout] x [scale, scale_inv]
    inp, w, dout = bf16('gemm_inp.bf16'), bf16('gemm_w.bf16'), bf16('gemm_dout.bf16')
    u = 2.0 ** -24
    # the operands: current-scaling casts and their transposes
    for name, x, fmt, k, shape in (('inp', inp, 'e4m3', 0, (N, IC)), ('w', w, 'e4m3', 1, (OC, IC)),
                                   ('dout', dout, 'e5m2', 2, (N, OC))):
        s = scale_from_amax(nanmax_abs(x), scaled_max(fmt, 0), 1.0)
        q = load(f'gemm_{name}8.u8', np.uint8)
        qt = load(f'gemm_{name}t8.u8', np.uint8)
        exp = encode(x * s, fmt)
        check(bits_equal(sc[2 * k: 2 * k + 2], [s, np.float32(1) / s]) and np.array_equal(q, exp) and
              np.array_equal(qt, exp.reshape(shape).T.ravel()),
              f'GEMM operand {name} {list(shape)} -> {fmt}: current scale, codes and transpose match the reference')

    def deq(name, fmt, k, shape):
        return TABLES[fmt][load(f'gemm_{name}8.u8', np.uint8)].reshape(shape) * float(sc[2 * k + 1])

    A, W, G = deq('inp', 'e4m3', 0, (N, IC)), deq('w', 'e4m3', 1, (OC, IC)), deq('dout', 'e5m2', 2, (N, OC))
    bias = bf16('gemm_bias.bf16').astype(np.float64)
    dw0, dbias0 = bf16('gemm_dw0.bf16').astype(np.float64).reshape(OC, IC), bf16('gemm_dbias0.bf16').astype(np.float64)
    u = 2.0 ** -13 if GPU else u

    def compare(name, got, ref, fp32_err, bf16_out=True):
        tol = (2.0 ** -8 * np.abs(ref) + (1 + 2.0 ** -8) * fp32_err) if bf16_out else fp32_err
        err = np.abs(got.astype(np.float64) - ref)
        ok = bool(np.all(np.isfinite(got)) and np.all(err <= tol))
        check(ok, f'{name}: matches the dequantized float64 product within the derived tolerance '
                  f'(max err / tol {np.max(err / tol):.3g})', f'{np.sum(err > tol)} of {err.size} beyond')
        return tol

    out_ref = A @ W.T
    P = np.abs(A) @ np.abs(W).T
    tol = compare('matmul_fp8_forward + bias [N,OC]', bf16('gemm_out_bias.bf16').reshape(N, OC), out_ref + bias,
                  (IC + 4) * u * (P + np.abs(bias)))
    noscale = (TABLES['e4m3'][load('gemm_inp8.u8', np.uint8)].reshape(N, IC) @
               TABLES['e4m3'][load('gemm_w8.u8', np.uint8)].reshape(OC, IC).T) + bias
    check(np.any(np.abs(noscale - (out_ref + bias)) > 100 * tol), 'the GEMM check sees the scales (a product '
          'without scale_inv is far outside the tolerance)')
    compare('cublaslt_matmul_fp8 forward without bias [N,OC]', bf16('gemm_out.bf16').reshape(N, OC), out_ref,
            (IC + 4) * u * P)
    amax_d = load('gemm_amax_d.f32', np.float32)[0]
    e = (IC + 4) * u * np.max(P)
    check(abs(amax_d - np.max(np.abs(out_ref))) <= e, 'the amax of D (AMAX_D_POINTER) is max |out| before rounding',
          f'got {amax_d}, expected {np.max(np.abs(out_ref))} +- {e:.3g}')
    compare('matmul_fp8_backward_input [N,IC]', bf16('gemm_dinp.bf16').reshape(N, IC), G @ W,
            (OC + 4) * u * (np.abs(G) @ np.abs(W)))
    Pw = np.abs(G).T @ np.abs(A)
    compare('matmul_fp8_backward_weight, bf16 dW accumulated [OC,IC]', bf16('gemm_dw.bf16').reshape(OC, IC),
            dw0 + G.T @ A, (N + 4) * u * (Pw + np.abs(dw0)))
    compare('matmul_fp8_backward_weight, fp32 dW accumulated [OC,IC]', load('gemm_dw32.f32', np.float32).reshape(OC, IC),
            dw0 + G.T @ A, (N + 4) * u * (Pw + np.abs(dw0)), bf16_out=False)
    # dbias from the bf16 dout: the column sum in fp32 rounded to bf16 (scratch), added to dbias0 in fp32, rounded
    col = dout.reshape(N, OC).astype(np.float64).sum(axis=0)
    compare('matmul_fp8_backward_weight: bias gradient from the bf16 dout [OC]', bf16('gemm_dbias.bf16'), dbias0 + col,
            2.0 ** -8 * np.abs(col) + (N + 4) * 2.0 ** -24 * (np.abs(dout.reshape(N, OC)).sum(axis=0) + np.abs(dbias0)))


gemm_checks()
sys.exit(1 if failed else 0)
