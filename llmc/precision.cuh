// llmc/precision.cuh: the element type of the GPU's weights, activations and gradients.
//   floatX          __nv_bfloat16 by default; float in the fp32 build (make PRECISION=FP32, which defines
//                   ENABLE_FP32), kept for tight testing against the fp32 reference
//   CUDA_FLOATX     cuBLASLt's name for floatX
//   PRECISION_NAME  "bf16" or "fp32", for logs
//   to_float(x)     bf16 or fp32 -> fp32 (exact)
//   to_floatX(f)    fp32 -> floatX (round to nearest even in bf16; the identity in fp32)
// Every reduction accumulates in fp32 whatever floatX is; master weights and AdamW moments are fp32
// (bf16 moments optional) in both builds.
#pragma once
#include <cuda_bf16.h>
#include <library_types.h>

#ifdef ENABLE_FP32
typedef float floatX;
static const cudaDataType_t CUDA_FLOATX = CUDA_R_32F;
static const char PRECISION_NAME[] = "fp32";
#else
typedef __nv_bfloat16 floatX;
static const cudaDataType_t CUDA_FLOATX = CUDA_R_16BF;
static const char PRECISION_NAME[] = "bf16";
#endif

__host__ __device__ __forceinline__ float to_float(float x) { return x; }
__host__ __device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__host__ __device__ __forceinline__ floatX to_floatX(float f) { return (floatX)f; }
