// llmc/grad_clip.h: the gradient clipping coefficient, one definition for the host and the device.
//   clip_coef(norm, clip)   min(1, clip / (norm + 1e-6)), 1 when clip <= 0 (no clipping), as
//                           torch.nn.utils.clip_grad_norm_; the optimizer scales every gradient by it.
// In the type of its arguments: double in the CPU trainer and in the CUDA trainer's data-parallel norm (fp64 sum of
// squares), float in llmc/grad_norm.cuh's one-GPU kernel. A NaN or inf norm gives 1 or 0 (the numerics guard,
// llmc/run/guard.h, skips such a step before its update).
// HOST_DEVICE: __host__ __device__ under nvcc, nothing in a plain C++ build.
#pragma once

#ifdef __CUDACC__
#define HOST_DEVICE __host__ __device__
#else
#define HOST_DEVICE
#endif

template <typename T>
HOST_DEVICE inline T clip_coef(T norm, T clip) {
    if (!(clip > (T)0)) return (T)1;
    const T c = clip / (norm + (T)1e-6);
    return c < (T)1 ? c : (T)1;  // NaN: 1
}

// Under loss scaling (llmc/loss_scale.h) the gradients are S times the true ones, inv_scale = 1 / S: *norm = the true
// gradients' norm from the scaled ones' raw_norm; returns the optimizer's factor for the scaled gradients, clip_coef
// of the true norm times 1 / S. inv_scale 1: clip_coef of raw_norm.
template <typename T>
HOST_DEVICE inline T unscaled_clip(T raw_norm, T clip, T inv_scale, T* norm) {
    *norm = raw_norm * inv_scale;
    return clip_coef(*norm, clip) * inv_scale;
}
