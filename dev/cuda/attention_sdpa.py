#!/usr/bin/env python3
"""dev/cuda/attention_sdpa.py: PyTorch's scaled_dot_product_attention at the shapes of
dev/cuda/attention_forward.cu and attention_backward.cu, timed the same way (CUDA events, median of
--reps runs after a warm-up), so the flash-attention kernels of llmc/attention.cuh can be compared
side by side in one run on one GPU.

FLOP convention (the same as the CUDA programs): forward, causal = 4 * B * H * T * T * hd / 2;
backward = 2.5 x forward; forward + backward = 3.5 x forward.
GQA (--KV < --H) uses enable_gqa=True where this torch has it, otherwise K and V are expanded to
every query head before the call (the expansion is outside the timed region).

Usage: attention_sdpa.py [--B 4] [--T 4096] [--H 32] [--KV 32] [--hd 128] [--reps 20]
Needs torch 2.x and a CUDA GPU; exits 1 with a message otherwise.
"""
import argparse
import inspect
import sys


def main():
    p = argparse.ArgumentParser(description="time torch scaled_dot_product_attention (causal, bf16), forward and backward")
    p.add_argument("--B", type=int, default=4)
    p.add_argument("--T", type=int, default=4096)
    p.add_argument("--H", type=int, default=32)
    p.add_argument("--KV", type=int, default=32)
    p.add_argument("--hd", type=int, default=128)
    p.add_argument("--reps", type=int, default=20, help="timed runs (median reported)")
    a = p.parse_args()
    if min(a.B, a.T, a.H, a.KV, a.hd, a.reps) < 1 or a.H % a.KV != 0:
        sys.exit("error: need positive sizes and --H a multiple of --KV (got H=%d KV=%d)" % (a.H, a.KV))
    try:
        import torch
        import torch.nn.functional as F
    except ImportError as e:
        sys.exit("error: cannot import torch (%s); run this with a Python that has PyTorch 2.x" % e)
    if not hasattr(F, "scaled_dot_product_attention"):
        sys.exit("error: torch %s has no scaled_dot_product_attention; PyTorch 2.x is needed" % torch.__version__)
    if not torch.cuda.is_available():
        sys.exit("error: no usable CUDA device for torch %s (check nvidia-smi and CUDA_VISIBLE_DEVICES)" % torch.__version__)

    dev = torch.device("cuda")
    gen = torch.Generator(device=dev).manual_seed(0)
    def rand(*shape):
        return (torch.rand(*shape, device=dev, generator=gen) * 2 - 1).to(torch.bfloat16)
    # [B, heads, T, hd], the layout SDPA expects
    q = rand(a.B, a.H, a.T, a.hd).requires_grad_()
    k = rand(a.B, a.KV, a.T, a.hd).requires_grad_()
    v = rand(a.B, a.KV, a.T, a.hd).requires_grad_()
    dout = rand(a.B, a.H, a.T, a.hd)
    # enable_gqa (PyTorch >= 2.5); a builtin may carry no signature, its docstring names its arguments
    try:
        has_gqa = "enable_gqa" in inspect.signature(F.scaled_dot_product_attention).parameters
    except ValueError:
        has_gqa = "enable_gqa" in (F.scaled_dot_product_attention.__doc__ or "")
    if a.KV != a.H and not has_gqa:
        k = k.detach().repeat_interleave(a.H // a.KV, dim=1).requires_grad_()
        v = v.detach().repeat_interleave(a.H // a.KV, dim=1).requires_grad_()
    kwargs = {"is_causal": True}
    if a.KV != a.H and has_gqa:
        kwargs["enable_gqa"] = True

    def fwd():
        return F.scaled_dot_product_attention(q, k, v, **kwargs)

    def fwd_bwd():
        o = fwd()
        o.backward(dout)
        q.grad = k.grad = v.grad = None

    def median_ms(fn):
        fn()
        torch.cuda.synchronize()
        times = []
        for _ in range(a.reps):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            e.record()
            e.synchronize()
            times.append(s.elapsed_time(e))
        times.sort()
        return times[len(times) // 2]

    with torch.no_grad():
        f_ms = median_ms(fwd)
    fb_ms = median_ms(fwd_bwd)
    b_ms = fb_ms - f_ms
    flops = 4.0 * a.B * a.H * a.T * a.T * a.hd / 2
    print("device: %s, torch %s, gqa %s" % (torch.cuda.get_device_name(0), torch.__version__,
          "enable_gqa" if kwargs.get("enable_gqa") else ("expanded" if a.KV != a.H else "none (MHA)")))
    print("sdpa B=%d T=%d H=%d KV=%d hd=%d causal bf16; forward %.1f GFLOP (4*B*H*T*T*hd/2), backward 2.5x"
          % (a.B, a.T, a.H, a.KV, a.hd, flops / 1e9))
    print("  forward:            %8.3f ms  %7.1f TFLOP/s" % (f_ms, flops / f_ms / 1e9))
    print("  backward:           %8.3f ms  %7.1f TFLOP/s  (forward+backward minus forward)" % (b_ms, 2.5 * flops / b_ms / 1e9))
    print("  forward + backward: %8.3f ms  %7.1f TFLOP/s  (median of %d)" % (fb_ms, 3.5 * flops / fb_ms / 1e9, a.reps))


if __name__ == "__main__":
    main()
