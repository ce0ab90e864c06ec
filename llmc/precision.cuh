// llmc/precision.cuh: the element type of the GPU's weights, activations and gradients.
//   floatX          __nv_bfloat16 by default; __half in the fp16 build (make PRECISION=FP16, which defines
//                   ENABLE_FP16: trained under a loss scale, llmc/loss_scale.h); float in the fp32 build
//                   (make PRECISION=FP32, which defines ENABLE_FP32), kept for tight testing against the fp32 reference
//   CUDA_FLOATX     cuBLASLt's name for floatX
//   PRECISION_NAME  "bf16", "fp16" or "fp32", for logs; PRECISION_UPPER the make variable's value (BF16, FP16, FP32)
//   to_float(x)     bf16, fp16 or fp32 -> fp32 (exact)
//   to_floatX(f)    fp32 -> floatX (round to nearest even in bf16 and fp16, fp16 overflowing to infinity past
//                   65504; the identity in fp32)
//   floatX2, to_floatX2(lo, hi)   two floatX in one 32-bit word, lo in the low half, and two fp32 rounded into one
//                   (the 16-bit builds: a tensor-core fragment register)
// Every reduction accumulates in fp32 whatever floatX is; master weights and AdamW moments are fp32
// (bf16 moments optional) in every build.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <library_types.h>

#if defined(ENABLE_FP32) && defined(ENABLE_FP16)
#error "ENABLE_FP32 and ENABLE_FP16 name two precisions: build with one PRECISION"
#endif
#ifdef ENABLE_FP32
typedef float floatX;
static const cudaDataType_t CUDA_FLOATX = CUDA_R_32F;
static const char PRECISION_NAME[] = "fp32", PRECISION_UPPER[] = "FP32";
#elif defined(ENABLE_FP16)
typedef __half floatX;
static const cudaDataType_t CUDA_FLOATX = CUDA_R_16F;
static const char PRECISION_NAME[] = "fp16", PRECISION_UPPER[] = "FP16";
#else
typedef __nv_bfloat16 floatX;
static const cudaDataType_t CUDA_FLOATX = CUDA_R_16BF;
static const char PRECISION_NAME[] = "bf16", PRECISION_UPPER[] = "BF16";
#endif

__host__ __device__ __forceinline__ float to_float(float x) { return x; }
__host__ __device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__host__ __device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__host__ __device__ __forceinline__ floatX to_floatX(float f) { return (floatX)f; }
#ifndef ENABLE_FP32
#ifdef ENABLE_FP16
typedef __half2 floatX2;
__device__ __forceinline__ floatX2 to_floatX2(float lo, float hi) { return __floats2half2_rn(lo, hi); }
#else
typedef __nv_bfloat162 floatX2;
__device__ __forceinline__ floatX2 to_floatX2(float lo, float hi) { return __floats2bfloat162_rn(lo, hi); }
#endif
#endif
