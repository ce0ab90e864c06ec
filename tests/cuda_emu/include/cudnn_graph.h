// tests/cuda_emu/include/cudnn_graph.h: the part of cuDNN's backend graph API that llmc/attention_cudnn.cuh uses, on
// the host. Descriptors take their attributes (each checked against the descriptor's type and the attribute's type, as
// cuDNN checks them; none after finalize), finalize checks what cuDNN documents (shapes that broadcast, matrix products
// whose inner dimensions meet, reductions to extent 1 or to a divisor), and the operation graph is then:
//   - matched, as cuDNN's fused attention engines match it: the heuristic offers engine configurations only for the
//     graphs of a causal attention forward and of its deterministic backward (with or without GQA), named by their
//     operations in order and each one's output type (EMU_DNN_PATTERNS below), with bf16 inputs and outputs, or fp16
//     ones (the same pattern with every bf16 tensor fp16; never the two mixed), a head dim that is a multiple of 8 up
//     to 128, and every operand's innermost dimension contiguous; any other graph gets no
//     configuration, and a message for cudnnGetLastErrorString saying why;
//   - executed by an interpreter: each operation on the host in fp32 on whole tensors (the T x T intermediates
//     stored), every output rounded to its tensor's type (bf16 or fp16 where the graph says so), the device tensors read and
//     written through their strides. So a graph that means something else than attention computes something else,
//     and tests/test_attention.cu compares the result with the CPU reference.
// The variant pack must hold every non-virtual tensor of the graph once and nothing else; each device pointer must lie
// in a live cudaMalloc allocation with the tensor's whole extent inside it, 16-byte aligned; the workspace must hold
// the plan's size (which the emulation sets to B*H*T*4 bytes forward and B*H*T*T*2 backward, the deterministic engine's
// order) and is overwritten with NaN bytes on each run. The run is queued on the handle's stream (cudnnSetStream).
// Test hooks, read when a heuristic or plan is finalized: EMU_DNN_NO_ENGINE=1 (the heuristic offers nothing),
// EMU_DNN_CONFIGS=N (configurations offered, default 3), EMU_DNN_BAD_PLANS=K (the first K plans fail to finalize, as
// a configuration whose kernel does not compile). g_emu_dnn_runs counts executions.
#pragma once
#include "cuda_emu.h"
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

typedef enum {
    CUDNN_STATUS_SUCCESS = 0,
    CUDNN_STATUS_NOT_INITIALIZED = 1001,
    CUDNN_STATUS_BAD_PARAM = 2000,
    CUDNN_STATUS_NOT_SUPPORTED = 3000,
    CUDNN_STATUS_INTERNAL_ERROR = 4000,
    CUDNN_STATUS_EXECUTION_FAILED = 5000
} cudnnStatus_t;
typedef enum {
    CUDNN_DATA_FLOAT = 0, CUDNN_DATA_HALF = 2, CUDNN_DATA_INT32 = 4, CUDNN_DATA_BFLOAT16 = 9, CUDNN_DATA_BOOLEAN = 11
} cudnnDataType_t;
static inline bool emu_dnn_16bit(int dtype) { return dtype == CUDNN_DATA_BFLOAT16 || dtype == CUDNN_DATA_HALF; }
typedef enum { CUDNN_REDUCE_TENSOR_ADD = 0, CUDNN_REDUCE_TENSOR_MAX = 3 } cudnnReduceTensorOp_t;
typedef enum {
    CUDNN_POINTWISE_ADD = 0,
    CUDNN_POINTWISE_MUL = 1,
    CUDNN_POINTWISE_DIV = 6,
    CUDNN_POINTWISE_SUB = 9,
    CUDNN_POINTWISE_EXP = 13,
    CUDNN_POINTWISE_LOG = 15,
    CUDNN_POINTWISE_IDENTITY = 21,
    CUDNN_POINTWISE_CMP_GE = 303,
    CUDNN_POINTWISE_GEN_INDEX = 501,
    CUDNN_POINTWISE_BINARY_SELECT = 601
} cudnnPointwiseMode_t;
typedef enum { CUDNN_HEUR_MODE_INSTANT = 0, CUDNN_HEUR_MODE_FALLBACK = 2, CUDNN_HEUR_MODE_A = 3 } cudnnBackendHeurMode_t;
typedef enum {
    CUDNN_TYPE_HANDLE = 0,
    CUDNN_TYPE_DATA_TYPE = 1,
    CUDNN_TYPE_BOOLEAN = 2,
    CUDNN_TYPE_INT64 = 3,
    CUDNN_TYPE_FLOAT = 4,
    CUDNN_TYPE_VOID_PTR = 6,
    CUDNN_TYPE_HEUR_MODE = 8,
    CUDNN_TYPE_POINTWISE_MODE = 14,
    CUDNN_TYPE_BACKEND_DESCRIPTOR = 15,
    CUDNN_TYPE_REDUCTION_OPERATOR_TYPE = 18
} cudnnBackendAttributeType_t;
typedef enum {
    CUDNN_BACKEND_POINTWISE_DESCRIPTOR = 0,
    CUDNN_BACKEND_ENGINECFG_DESCRIPTOR = 3,
    CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR = 4,
    CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR = 5,
    CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR = 13,
    CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR = 15,
    CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR = 16,
    CUDNN_BACKEND_TENSOR_DESCRIPTOR = 17,
    CUDNN_BACKEND_MATMUL_DESCRIPTOR = 18,
    CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR = 19,
    CUDNN_BACKEND_REDUCTION_DESCRIPTOR = 21,
    CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR = 22,
    CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR = 31
} cudnnBackendDescriptorType_t;
typedef enum {
    CUDNN_ATTR_POINTWISE_MODE = 0,
    CUDNN_ATTR_POINTWISE_MATH_PREC = 1,
    CUDNN_ATTR_POINTWISE_AXIS = 9,
    CUDNN_ATTR_ENGINEHEUR_MODE = 200,
    CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH = 201,
    CUDNN_ATTR_ENGINEHEUR_RESULTS = 202,
    CUDNN_ATTR_ENGINECFG_WORKSPACE_SIZE = 303,
    CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG = 401,
    CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE = 402,
    CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR = 750,
    CUDNN_ATTR_OPERATION_POINTWISE_XDESC = 751,
    CUDNN_ATTR_OPERATION_POINTWISE_BDESC = 752,
    CUDNN_ATTR_OPERATION_POINTWISE_YDESC = 753,
    CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1 = 754,
    CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2 = 755,
    CUDNN_ATTR_OPERATION_POINTWISE_TDESC = 758,
    CUDNN_ATTR_OPERATIONGRAPH_OPS = 801,
    CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT = 900,
    CUDNN_ATTR_TENSOR_DATA_TYPE = 901,
    CUDNN_ATTR_TENSOR_DIMENSIONS = 902,
    CUDNN_ATTR_TENSOR_STRIDES = 903,
    CUDNN_ATTR_TENSOR_UNIQUE_ID = 906,
    CUDNN_ATTR_TENSOR_IS_VIRTUAL = 907,
    CUDNN_ATTR_TENSOR_IS_BY_VALUE = 908,
    CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS = 1000,
    CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS = 1001,
    CUDNN_ATTR_VARIANT_PACK_WORKSPACE = 1003,
    CUDNN_ATTR_MATMUL_COMP_TYPE = 1500,
    CUDNN_ATTR_OPERATION_MATMUL_ADESC = 1520,
    CUDNN_ATTR_OPERATION_MATMUL_BDESC = 1521,
    CUDNN_ATTR_OPERATION_MATMUL_CDESC = 1522,
    CUDNN_ATTR_OPERATION_MATMUL_DESC = 1523,
    CUDNN_ATTR_REDUCTION_OPERATOR = 1600,
    CUDNN_ATTR_REDUCTION_COMP_TYPE = 1601,
    CUDNN_ATTR_OPERATION_REDUCTION_XDESC = 1610,
    CUDNN_ATTR_OPERATION_REDUCTION_YDESC = 1611,
    CUDNN_ATTR_OPERATION_REDUCTION_DESC = 1612,
    CUDNN_ATTR_OPERATION_RESHAPE_XDESC = 2200,
    CUDNN_ATTR_OPERATION_RESHAPE_YDESC = 2201
} cudnnBackendAttributeName_t;
typedef void* cudnnBackendDescriptor_t;
struct EmuDnnHandle { cudaStream_t stream = nullptr; };
typedef EmuDnnHandle* cudnnHandle_t;

inline long g_emu_dnn_runs = 0;
inline std::string g_emu_dnn_error;  // the last refusal's reason (cudnnGetLastErrorString)

static inline size_t cudnnGetVersion() { return 91900; }
static inline const char* cudnnGetErrorString(cudnnStatus_t s) {
    switch (s) {
        case CUDNN_STATUS_SUCCESS: return "CUDNN_STATUS_SUCCESS";
        case CUDNN_STATUS_NOT_INITIALIZED: return "CUDNN_STATUS_NOT_INITIALIZED";
        case CUDNN_STATUS_BAD_PARAM: return "CUDNN_STATUS_BAD_PARAM";
        case CUDNN_STATUS_NOT_SUPPORTED: return "CUDNN_STATUS_NOT_SUPPORTED";
        case CUDNN_STATUS_EXECUTION_FAILED: return "CUDNN_STATUS_EXECUTION_FAILED";
        default: return "CUDNN_STATUS_INTERNAL_ERROR";
    }
}
static inline void cudnnGetLastErrorString(char* msg, size_t max) {
    if (!max) return;
    snprintf(msg, max, "%s", g_emu_dnn_error.c_str());
    g_emu_dnn_error.clear();
}
// records why a call is refused and returns the status
static inline cudnnStatus_t emu_dnn_fail(cudnnStatus_t s, const std::string& why) {
    g_emu_dnn_error = "EMU cuDNN: " + why;
    return s;
}
static inline cudnnStatus_t cudnnCreate(cudnnHandle_t* h) { *h = new EmuDnnHandle(); return CUDNN_STATUS_SUCCESS; }
static inline cudnnStatus_t cudnnDestroy(cudnnHandle_t h) { delete h; return CUDNN_STATUS_SUCCESS; }
static inline cudnnStatus_t cudnnSetStream(cudnnHandle_t h, cudaStream_t s) { h->stream = s; return CUDNN_STATUS_SUCCESS; }

// ---- descriptors -------------------------------------------------------------------------------------------------

struct EmuDnnAttr {
    cudnnBackendAttributeType_t type;
    std::vector<int64_t> i;  // integers, enums, booleans
    std::vector<float> f;
    std::vector<void*> p;    // pointers, descriptors, handles
};
struct EmuDnnDesc {
    cudnnBackendDescriptorType_t type;
    bool finalized = false;
    std::map<int, EmuDnnAttr> attrs;
    // a tensor, once finalized
    int dtype = 0;
    std::vector<int64_t> dims, strides;
    int64_t uid = -1;
    bool is_virtual = false, by_value = false;
    // an operation graph: its operations in an order where each reads what earlier ones wrote; its pattern
    std::vector<EmuDnnDesc*> order;
    std::string pattern;
    // an engine configuration or plan: its graph; a plan's workspace
    EmuDnnDesc* graph = nullptr;
    int64_t workspace = 0;
    int configs = 0;     // a heuristic: the configurations it offers
    int64_t number = 0;  // an engine configuration: its place in the heuristic's list
};
static inline EmuDnnDesc* emu_dnn(cudnnBackendDescriptor_t d) { return (EmuDnnDesc*)d; }

// The attributes each descriptor type takes, with their types (what cudnnBackendSetAttribute checks).
struct EmuDnnAttrSpec { cudnnBackendDescriptorType_t desc; int attr; cudnnBackendAttributeType_t type; };
static const EmuDnnAttrSpec EMU_DNN_ATTRS[] = {
    {CUDNN_BACKEND_TENSOR_DESCRIPTOR, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE},
    {CUDNN_BACKEND_TENSOR_DESCRIPTOR, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64},
    {CUDNN_BACKEND_TENSOR_DESCRIPTOR, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64},
    {CUDNN_BACKEND_TENSOR_DESCRIPTOR, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64},
    {CUDNN_BACKEND_TENSOR_DESCRIPTOR, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64},
    {CUDNN_BACKEND_TENSOR_DESCRIPTOR, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN},
    {CUDNN_BACKEND_TENSOR_DESCRIPTOR, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN},
    {CUDNN_BACKEND_POINTWISE_DESCRIPTOR, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE},
    {CUDNN_BACKEND_POINTWISE_DESCRIPTOR, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE},
    {CUDNN_BACKEND_POINTWISE_DESCRIPTOR, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64},
    {CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR},
    {CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR},
    {CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR},
    {CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR},
    {CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR},
    {CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT},
    {CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT},
    {CUDNN_BACKEND_MATMUL_DESCRIPTOR, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE},
    {CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR},
    {CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR},
    {CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR},
    {CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR},
    {CUDNN_BACKEND_REDUCTION_DESCRIPTOR, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE},
    {CUDNN_BACKEND_REDUCTION_DESCRIPTOR, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE},
    {CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR},
    {CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR},
    {CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR},
    {CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR},
    {CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR},
    {CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR},
    {CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, 800 /* the handle, deprecated */, CUDNN_TYPE_HANDLE},
    {CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR},
    {CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE},
    {CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR},
    {CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, 400 /* the handle, deprecated */, CUDNN_TYPE_HANDLE},
    {CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64},
    {CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR},
    {CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR},
};

static inline cudnnStatus_t cudnnBackendCreateDescriptor(cudnnBackendDescriptorType_t type, cudnnBackendDescriptor_t* d) {
    EmuDnnDesc* e = new EmuDnnDesc();
    e->type = type;
    *d = e;
    return CUDNN_STATUS_SUCCESS;
}
static inline cudnnStatus_t cudnnBackendDestroyDescriptor(cudnnBackendDescriptor_t d) {
    delete emu_dnn(d);
    return CUDNN_STATUS_SUCCESS;
}
static inline cudnnStatus_t cudnnBackendSetAttribute(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
                                                     cudnnBackendAttributeType_t type, int64_t n, const void* v) {
    EmuDnnDesc* e = emu_dnn(d);
    if (e->finalized)
        return emu_dnn_fail(CUDNN_STATUS_NOT_INITIALIZED, "attribute " + std::to_string((int)name) + " set on a finalized descriptor");
    const EmuDnnAttrSpec* spec = nullptr;
    for (const EmuDnnAttrSpec& s : EMU_DNN_ATTRS)
        if (s.desc == e->type && s.attr == (int)name) spec = &s;
    if (!spec)
        return emu_dnn_fail(CUDNN_STATUS_BAD_PARAM, "attribute " + std::to_string((int)name) + " is not one of descriptor type " +
                                                        std::to_string((int)e->type) + "'s");
    if (spec->type != type)
        return emu_dnn_fail(CUDNN_STATUS_BAD_PARAM, "attribute " + std::to_string((int)name) + " takes attribute type " +
                                                        std::to_string((int)spec->type) + ", given " + std::to_string((int)type));
    if (n < 1 || !v) return emu_dnn_fail(CUDNN_STATUS_BAD_PARAM, "attribute " + std::to_string((int)name) + " given no value");
    EmuDnnAttr a;
    a.type = type;
    for (int64_t k = 0; k < n; k++) {
        switch (type) {
            case CUDNN_TYPE_INT64: a.i.push_back(((const int64_t*)v)[k]); break;
            case CUDNN_TYPE_BOOLEAN: a.i.push_back(((const bool*)v)[k] ? 1 : 0); break;
            case CUDNN_TYPE_FLOAT: a.f.push_back(((const float*)v)[k]); break;
            case CUDNN_TYPE_DATA_TYPE: a.i.push_back(((const cudnnDataType_t*)v)[k]); break;
            case CUDNN_TYPE_POINTWISE_MODE: a.i.push_back(((const cudnnPointwiseMode_t*)v)[k]); break;
            case CUDNN_TYPE_HEUR_MODE: a.i.push_back(((const cudnnBackendHeurMode_t*)v)[k]); break;
            case CUDNN_TYPE_REDUCTION_OPERATOR_TYPE: a.i.push_back(((const cudnnReduceTensorOp_t*)v)[k]); break;
            default: a.p.push_back(((void* const*)v)[k]); break;  // pointers, descriptors, handles
        }
    }
    if (type == CUDNN_TYPE_BACKEND_DESCRIPTOR)
        for (void* p : a.p)
            if (!p || !emu_dnn(p)->finalized)
                return emu_dnn_fail(CUDNN_STATUS_BAD_PARAM, "attribute " + std::to_string((int)name) + " given a descriptor that is not finalized");
    e->attrs[(int)name] = a;
    return CUDNN_STATUS_SUCCESS;
}

// the value of attribute `name` of e, or null
static inline const EmuDnnAttr* emu_dnn_attr(const EmuDnnDesc* e, int name) {
    auto it = e->attrs.find(name);
    return it == e->attrs.end() ? nullptr : &it->second;
}
static inline EmuDnnDesc* emu_dnn_desc_attr(const EmuDnnDesc* e, int name) {
    const EmuDnnAttr* a = emu_dnn_attr(e, name);
    return a ? emu_dnn(a->p[0]) : nullptr;
}
static inline int64_t emu_dnn_int_attr(const EmuDnnDesc* e, int name, int64_t fallback) {
    const EmuDnnAttr* a = emu_dnn_attr(e, name);
    return a ? a->i[0] : fallback;
}
static inline int64_t emu_dnn_env(const char* name, int64_t fallback) {
    const char* v = getenv(name);
    return v && *v ? atoll(v) : fallback;
}
static inline int64_t emu_dnn_count(const EmuDnnDesc* t) {
    int64_t n = 1;
    for (int64_t d : t->dims) n *= d;
    return n;
}
static inline std::string emu_dnn_dims(const EmuDnnDesc* t) {
    std::string s = "[";
    for (size_t k = 0; k < t->dims.size(); k++) s += (k ? "," : "") + std::to_string(t->dims[k]);
    return s + "] (uid " + std::to_string(t->uid) + ")";
}

// One operation of a graph, read from its descriptor: kind, mode, inputs x, b, t, output y.
struct EmuDnnOp {
    cudnnBackendDescriptorType_t kind;
    int mode = -1;      // pointwise mode or reduction operator
    int64_t axis = -1;  // GEN_INDEX
    int math = CUDNN_DATA_FLOAT;
    EmuDnnDesc *x = nullptr, *b = nullptr, *t = nullptr, *y = nullptr;
};
static inline EmuDnnOp emu_dnn_op(const EmuDnnDesc* op) {
    EmuDnnOp o;
    o.kind = op->type;
    switch (op->type) {
        case CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR: {
            const EmuDnnDesc* pw = emu_dnn_desc_attr(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR);
            o.mode = (int)emu_dnn_int_attr(pw, CUDNN_ATTR_POINTWISE_MODE, -1);
            o.math = (int)emu_dnn_int_attr(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, -1);
            o.axis = emu_dnn_int_attr(pw, CUDNN_ATTR_POINTWISE_AXIS, -1);
            o.x = emu_dnn_desc_attr(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC);
            o.b = emu_dnn_desc_attr(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC);
            o.t = emu_dnn_desc_attr(op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC);
            o.y = emu_dnn_desc_attr(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC);
            break;
        }
        case CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR:
            o.x = emu_dnn_desc_attr(op, CUDNN_ATTR_OPERATION_MATMUL_ADESC);
            o.b = emu_dnn_desc_attr(op, CUDNN_ATTR_OPERATION_MATMUL_BDESC);
            o.y = emu_dnn_desc_attr(op, CUDNN_ATTR_OPERATION_MATMUL_CDESC);
            break;
        case CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR:
            o.mode = (int)emu_dnn_int_attr(emu_dnn_desc_attr(op, CUDNN_ATTR_OPERATION_REDUCTION_DESC), CUDNN_ATTR_REDUCTION_OPERATOR, -1);
            o.x = emu_dnn_desc_attr(op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC);
            o.y = emu_dnn_desc_attr(op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC);
            break;
        default:  // reshape
            o.x = emu_dnn_desc_attr(op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC);
            o.y = emu_dnn_desc_attr(op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC);
            break;
    }
    return o;
}

// The operation's name in a pattern ("matmul", "mul", "gen_index2", ...) and its output's type
static inline std::string emu_dnn_op_name(const EmuDnnOp& o) {
    std::string n;
    if (o.kind == CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR) n = "matmul";
    else if (o.kind == CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR) n = "reshape";
    else if (o.kind == CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR) n = o.mode == CUDNN_REDUCE_TENSOR_MAX ? "max" : "sum";
    else switch (o.mode) {
        case CUDNN_POINTWISE_ADD: n = "add"; break;
        case CUDNN_POINTWISE_MUL: n = "mul"; break;
        case CUDNN_POINTWISE_DIV: n = "div"; break;
        case CUDNN_POINTWISE_SUB: n = "sub"; break;
        case CUDNN_POINTWISE_EXP: n = "exp"; break;
        case CUDNN_POINTWISE_LOG: n = "log"; break;
        case CUDNN_POINTWISE_IDENTITY: n = "identity"; break;
        case CUDNN_POINTWISE_CMP_GE: n = "cmp_ge"; break;
        case CUDNN_POINTWISE_GEN_INDEX: n = "gen_index" + std::to_string(o.axis); break;
        case CUDNN_POINTWISE_BINARY_SELECT: n = "select"; break;
        default: n = "pointwise" + std::to_string(o.mode);
    }
    const int t = o.y->dtype;
    return n + ":" + (t == CUDNN_DATA_FLOAT ? "f" : t == CUDNN_DATA_BFLOAT16 ? "b" : t == CUDNN_DATA_HALF ? "h"
                      : t == CUDNN_DATA_INT32 ? "i" : "?");
}

// The graphs the fused attention engines run: a causal forward with statistics, the deterministic backward, the
// backward with GQA (dK and dV per query head, then summed over the group). Operations in order, output types
// (f fp32, b bf16, i int32, ? boolean).
static const char* EMU_DNN_PATTERNS[][2] = {
    {"attention forward",
     "matmul:f mul:f gen_index2:i gen_index3:i cmp_ge:? select:f max:f sub:f exp:f sum:f log:f add:f div:b matmul:b"},
    {"attention backward",
     "mul:f sum:f mul:f matmul:f mul:f sub:f gen_index2:i gen_index3:i cmp_ge:? select:f exp:f reshape:b matmul:b "
     "matmul:f sub:f mul:f mul:f reshape:b matmul:b reshape:f matmul:b"},
    {"attention backward with GQA",
     "mul:f sum:f mul:f matmul:f mul:f sub:f gen_index2:i gen_index3:i cmp_ge:? select:f exp:f reshape:b matmul:b "
     "sum:b matmul:f sub:f mul:f mul:f reshape:b matmul:b sum:b reshape:f matmul:b"},
};

// broadcast check: every dimension of x equals y's or is 1
static inline bool emu_dnn_broadcasts(const EmuDnnDesc* x, const EmuDnnDesc* y) {
    if (x->dims.size() != y->dims.size()) return false;
    for (size_t k = 0; k < x->dims.size(); k++)
        if (x->dims[k] != y->dims[k] && x->dims[k] != 1) return false;
    return true;
}

static inline cudnnStatus_t emu_dnn_finalize_tensor(EmuDnnDesc* e) {
    const EmuDnnAttr *dt = emu_dnn_attr(e, CUDNN_ATTR_TENSOR_DATA_TYPE), *dims = emu_dnn_attr(e, CUDNN_ATTR_TENSOR_DIMENSIONS),
                     *st = emu_dnn_attr(e, CUDNN_ATTR_TENSOR_STRIDES), *uid = emu_dnn_attr(e, CUDNN_ATTR_TENSOR_UNIQUE_ID),
                     *al = emu_dnn_attr(e, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT);
    if (!dt || !dims || !st || !uid || !al)
        return emu_dnn_fail(CUDNN_STATUS_BAD_PARAM, "a tensor needs its data type, dimensions, strides, unique id and byte alignment");
    if (dims->i.size() != st->i.size()) return emu_dnn_fail(CUDNN_STATUS_BAD_PARAM, "a tensor's dimensions and strides differ in count");
    for (size_t k = 0; k < dims->i.size(); k++)
        if (dims->i[k] < 1 || st->i[k] < 1) return emu_dnn_fail(CUDNN_STATUS_BAD_PARAM, "a tensor's dimensions and strides must be >= 1");
    if (dt->i[0] != CUDNN_DATA_FLOAT && !emu_dnn_16bit((int)dt->i[0]) && dt->i[0] != CUDNN_DATA_INT32 &&
        dt->i[0] != CUDNN_DATA_BOOLEAN)
        return emu_dnn_fail(CUDNN_STATUS_NOT_SUPPORTED, "data type " + std::to_string(dt->i[0]) + " is not emulated");
    e->dtype = (int)dt->i[0];
    e->dims = dims->i;
    e->strides = st->i;
    e->uid = uid->i[0];
    e->is_virtual = emu_dnn_int_attr(e, CUDNN_ATTR_TENSOR_IS_VIRTUAL, 0) != 0;
    e->by_value = emu_dnn_int_attr(e, CUDNN_ATTR_TENSOR_IS_BY_VALUE, 0) != 0;
    if (e->by_value && (e->is_virtual || e->dtype != CUDNN_DATA_FLOAT || emu_dnn_count(e) != 1))
        return emu_dnn_fail(CUDNN_STATUS_NOT_SUPPORTED, "a by-value tensor must be one non-virtual float");
    return CUDNN_STATUS_SUCCESS;
}

static inline cudnnStatus_t emu_dnn_finalize_op(EmuDnnDesc* e) {
    const EmuDnnOp o = emu_dnn_op(e);
    if (!o.x || !o.y) return emu_dnn_fail(CUDNN_STATUS_BAD_PARAM, "an operation needs its input and output tensors");
    for (const EmuDnnDesc* t : {o.x, o.b, o.t, o.y})
        if (t && t->type != CUDNN_BACKEND_TENSOR_DESCRIPTOR) return emu_dnn_fail(CUDNN_STATUS_BAD_PARAM, "an operand is not a tensor");
    if (o.y->by_value) return emu_dnn_fail(CUDNN_STATUS_BAD_PARAM, "an operation writes a by-value tensor");
    if (e->type == CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR) {
        if (o.mode < 0 || o.math < 0) return emu_dnn_fail(CUDNN_STATUS_BAD_PARAM, "a pointwise descriptor needs its mode and math precision");
        const bool unary = o.mode == CUDNN_POINTWISE_EXP || o.mode == CUDNN_POINTWISE_LOG ||
                           o.mode == CUDNN_POINTWISE_IDENTITY || o.mode == CUDNN_POINTWISE_GEN_INDEX;
        if (!unary && !o.b) return emu_dnn_fail(CUDNN_STATUS_BAD_PARAM, "pointwise mode " + std::to_string(o.mode) + " needs a second input (BDESC)");
        if (o.mode == CUDNN_POINTWISE_BINARY_SELECT && !o.t) return emu_dnn_fail(CUDNN_STATUS_BAD_PARAM, "BINARY_SELECT needs its condition (TDESC)");
        if (o.mode == CUDNN_POINTWISE_GEN_INDEX && (o.axis < 0 || o.axis >= (int64_t)o.y->dims.size()))
            return emu_dnn_fail(CUDNN_STATUS_BAD_PARAM, "GEN_INDEX needs an axis of its output");
        for (const EmuDnnDesc* in : {o.x, o.b, o.t})
            if (in && !emu_dnn_broadcasts(in, o.y))
                return emu_dnn_fail(CUDNN_STATUS_BAD_PARAM, "pointwise input " + emu_dnn_dims(in) + " does not broadcast to " + emu_dnn_dims(o.y));
        const EmuDnnAttr *a1 = emu_dnn_attr(e, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1), *a2 = emu_dnn_attr(e, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2);
        if ((a1 && a1->f[0] != 1.0f) || (a2 && a2->f[0] != 1.0f))
            return emu_dnn_fail(CUDNN_STATUS_NOT_SUPPORTED, "pointwise alphas other than 1 are not emulated");
    } else if (e->type == CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR) {
        if (!o.b || !emu_dnn_attr(e, CUDNN_ATTR_OPERATION_MATMUL_DESC))
            return emu_dnn_fail(CUDNN_STATUS_BAD_PARAM, "a matmul needs A, B, C and its matmul descriptor");
        const auto &a = o.x->dims, &b = o.b->dims, &c = o.y->dims;
        bool ok = a.size() == 4 && b.size() == 4 && c.size() == 4 && a[3] == b[2] && c[2] == a[2] && c[3] == b[3];
        for (int k = 0; ok && k < 2; k++) ok = c[k] == a[k] && b[k] >= 1 && a[k] % b[k] == 0;
        if (!ok) return emu_dnn_fail(CUDNN_STATUS_BAD_PARAM, "matmul shapes do not meet: A " + emu_dnn_dims(o.x) + " B " +
                                                                 emu_dnn_dims(o.b) + " C " + emu_dnn_dims(o.y));
    } else if (e->type == CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR) {
        if (o.mode != CUDNN_REDUCE_TENSOR_ADD && o.mode != CUDNN_REDUCE_TENSOR_MAX)
            return emu_dnn_fail(CUDNN_STATUS_NOT_SUPPORTED, "reduction operator " + std::to_string(o.mode) + " is not emulated");
        bool ok = o.x->dims.size() == o.y->dims.size();
        for (size_t k = 0; ok && k < o.x->dims.size(); k++) ok = o.x->dims[k] % o.y->dims[k] == 0;
        if (!ok) return emu_dnn_fail(CUDNN_STATUS_BAD_PARAM, "reduction of " + emu_dnn_dims(o.x) + " to " + emu_dnn_dims(o.y));
    } else if (emu_dnn_count(o.x) != emu_dnn_count(o.y)) {
        return emu_dnn_fail(CUDNN_STATUS_BAD_PARAM, "reshape of " + emu_dnn_dims(o.x) + " to " + emu_dnn_dims(o.y) + " changes the count");
    }
    return CUDNN_STATUS_SUCCESS;
}

// An operation graph: every tensor uid names one tensor; every virtual tensor is written by exactly one operation, and
// the operations are ordered so that each reads only what earlier ones wrote (non-virtual tensors are inputs unless an
// operation writes them); the pattern is the ordered operations' names.
static inline cudnnStatus_t emu_dnn_finalize_graph(EmuDnnDesc* e) {
    const EmuDnnAttr* ops = emu_dnn_attr(e, CUDNN_ATTR_OPERATIONGRAPH_OPS);
    if (!ops) return emu_dnn_fail(CUDNN_STATUS_BAD_PARAM, "an operation graph needs its operations");
    std::map<int64_t, EmuDnnDesc*> by_uid;
    std::map<EmuDnnDesc*, int> writers;
    std::vector<EmuDnnDesc*> pending;
    for (void* p : ops->p) {
        EmuDnnDesc* op = emu_dnn(p);
        pending.push_back(op);
        const EmuDnnOp o = emu_dnn_op(op);
        for (EmuDnnDesc* t : {o.x, o.b, o.t, o.y}) {
            if (!t) continue;
            auto it = by_uid.find(t->uid);
            if (it != by_uid.end() && it->second != t)
                return emu_dnn_fail(CUDNN_STATUS_BAD_PARAM, "two tensors share unique id " + std::to_string(t->uid));
            by_uid[t->uid] = t;
        }
        if (++writers[o.y] > 1) return emu_dnn_fail(CUDNN_STATUS_BAD_PARAM, "two operations write tensor " + emu_dnn_dims(o.y));
    }
    std::map<EmuDnnDesc*, bool> ready;
    e->order.clear();
    while (!pending.empty()) {
        size_t k = 0;
        for (; k < pending.size(); k++) {
            const EmuDnnOp o = emu_dnn_op(pending[k]);
            bool ok = true;
            for (EmuDnnDesc* t : {o.x, o.b, o.t})
                if (t && writers.count(t) && !ready[t]) ok = false;
            if (ok) break;
        }
        if (k == pending.size()) return emu_dnn_fail(CUDNN_STATUS_BAD_PARAM, "the operations read each other's outputs in a cycle");
        const EmuDnnOp o = emu_dnn_op(pending[k]);
        ready[o.y] = true;
        e->order.push_back(pending[k]);
        pending.erase(pending.begin() + (long)k);
    }
    for (auto& kv : by_uid)
        if (kv.second->is_virtual && !writers.count(kv.second))
            return emu_dnn_fail(CUDNN_STATUS_BAD_PARAM, "virtual tensor " + emu_dnn_dims(kv.second) + " is read but never written");
    e->pattern.clear();
    for (EmuDnnDesc* op : e->order) e->pattern += (e->pattern.empty() ? "" : " ") + emu_dnn_op_name(emu_dnn_op(op));
    return CUDNN_STATUS_SUCCESS;
}

// Whether an attention engine takes graph g (EMU_DNN_PATTERNS and the constraints above); why not in *why.
static inline bool emu_dnn_engine_takes(const EmuDnnDesc* g, std::string* why) {
    // an fp16 graph is a bf16 pattern with every "b" an "h" (a graph with both is no pattern)
    std::string as_bf16 = g->pattern;
    if (as_bf16.find(":b") == std::string::npos)
        for (size_t at = as_bf16.find(":h"); at != std::string::npos; at = as_bf16.find(":h", at)) as_bf16[at + 1] = 'b';
    bool known = false;
    for (const auto& p : EMU_DNN_PATTERNS) known = known || as_bf16 == p[1];
    if (!known) {
        *why = "no engine for the graph \"" + g->pattern + "\"";
        return false;
    }
    int half_type = -1;  // the graph's one 16-bit type: bf16 and fp16 tensors never mix
    for (EmuDnnDesc* op : g->order) {
        const EmuDnnOp o = emu_dnn_op(op);
        for (const EmuDnnDesc* t : {o.x, o.b, o.t, o.y}) {
            if (!t || !emu_dnn_16bit(t->dtype)) continue;
            if (half_type >= 0 && t->dtype != half_type) {
                *why = "tensors of two 16-bit types (bf16 and fp16) in one graph";
                return false;
            }
            half_type = t->dtype;
        }
        if (o.kind == CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR &&
            o.math != (o.mode == CUDNN_POINTWISE_CMP_GE ? CUDNN_DATA_BOOLEAN : CUDNN_DATA_FLOAT)) {
            *why = "pointwise mode " + std::to_string(o.mode) + " with math precision " + std::to_string(o.math);
            return false;
        }
        for (const EmuDnnDesc* t : {o.x, o.b, o.t, o.y}) {
            if (!t || t->is_virtual || t->by_value) continue;
            if (emu_dnn_int_attr(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, 0) != 16) {
                *why = "tensor " + emu_dnn_dims(t) + " without 16-byte alignment";
                return false;
            }
            if (t->dims.size() != 4 || (t->strides[3] != 1 && t->strides[2] != 1)) {
                *why = "tensor " + emu_dnn_dims(t) + " has neither of its last two dimensions contiguous";
                return false;
            }
            const int64_t hd = t->strides[3] == 1 ? t->dims[3] : t->dims[2];
            if (emu_dnn_16bit(t->dtype) && (hd % 8 != 0 || hd > 128)) {
                *why = "head dim " + std::to_string(hd) + " (multiples of 8 up to 128)";
                return false;
            }
        }
    }
    return true;
}

static inline cudnnStatus_t cudnnBackendFinalize(cudnnBackendDescriptor_t d) {
    EmuDnnDesc* e = emu_dnn(d);
    if (e->finalized) return emu_dnn_fail(CUDNN_STATUS_BAD_PARAM, "descriptor finalized twice");
    cudnnStatus_t s = CUDNN_STATUS_SUCCESS;
    switch (e->type) {
        case CUDNN_BACKEND_TENSOR_DESCRIPTOR: s = emu_dnn_finalize_tensor(e); break;
        case CUDNN_BACKEND_POINTWISE_DESCRIPTOR:
        case CUDNN_BACKEND_MATMUL_DESCRIPTOR:
        case CUDNN_BACKEND_REDUCTION_DESCRIPTOR: break;
        case CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR:
        case CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR:
        case CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR:
        case CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR: s = emu_dnn_finalize_op(e); break;
        case CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR: s = emu_dnn_finalize_graph(e); break;
        case CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR: {
            e->graph = emu_dnn_desc_attr(e, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH);
            if (!e->graph || !emu_dnn_attr(e, CUDNN_ATTR_ENGINEHEUR_MODE))
                return emu_dnn_fail(CUDNN_STATUS_BAD_PARAM, "a heuristic needs its operation graph and mode");
            std::string why;
            if (emu_dnn_env("EMU_DNN_NO_ENGINE", 0)) why = "no engine (EMU_DNN_NO_ENGINE)";
            e->configs = why.empty() && emu_dnn_engine_takes(e->graph, &why) ? (int)emu_dnn_env("EMU_DNN_CONFIGS", 3) : 0;
            if (!e->configs) g_emu_dnn_error = "EMU cuDNN: " + why;
            break;
        }
        case CUDNN_BACKEND_ENGINECFG_DESCRIPTOR: return emu_dnn_fail(CUDNN_STATUS_BAD_PARAM, "engine configurations come from a heuristic");
        case CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR: {
            const EmuDnnDesc* cfg = emu_dnn_desc_attr(e, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG);
            if (!cfg || cfg->type != CUDNN_BACKEND_ENGINECFG_DESCRIPTOR)
                return emu_dnn_fail(CUDNN_STATUS_BAD_PARAM, "a plan needs an engine configuration");
            if (cfg->number < emu_dnn_env("EMU_DNN_BAD_PLANS", 0))
                return emu_dnn_fail(CUDNN_STATUS_NOT_SUPPORTED, "engine configuration " + std::to_string(cfg->number) +
                                                                    " does not compile (EMU_DNN_BAD_PLANS)");
            e->graph = cfg->graph;
            // the workspace: B*H*T*4 bytes forward, B*H*T*T*2 backward, from the scores' product [B, H, T, T] (the
            // forward's first operation, the backward's fourth)
            const bool forward = e->graph->pattern.rfind("matmul", 0) == 0;
            const auto& sd = emu_dnn_op(e->graph->order[forward ? 0 : 3]).y->dims;
            e->workspace = forward ? sd[0] * sd[1] * sd[2] * 4 : sd[0] * sd[1] * sd[2] * sd[3] * 2;
            break;
        }
        case CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR: {
            const EmuDnnAttr *u = emu_dnn_attr(e, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS), *p = emu_dnn_attr(e, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS);
            if (!u || !p || u->i.size() != p->p.size())
                return emu_dnn_fail(CUDNN_STATUS_BAD_PARAM, "a variant pack needs as many data pointers as unique ids");
            break;
        }
    }
    if (s == CUDNN_STATUS_SUCCESS) e->finalized = true;
    return s;
}

static inline cudnnStatus_t cudnnBackendGetAttribute(cudnnBackendDescriptor_t const d, cudnnBackendAttributeName_t name,
                                                     cudnnBackendAttributeType_t type, int64_t requested, int64_t* count,
                                                     void* out) {
    EmuDnnDesc* e = emu_dnn(d);
    if (!e->finalized) return emu_dnn_fail(CUDNN_STATUS_NOT_INITIALIZED, "attribute read from a descriptor not finalized");
    if (e->type == CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR && name == CUDNN_ATTR_ENGINEHEUR_RESULTS &&
        type == CUDNN_TYPE_BACKEND_DESCRIPTOR) {
        const int64_t n = std::min<int64_t>(requested, e->configs);
        *count = requested == 0 ? e->configs : n;
        for (int64_t k = 0; k < n; k++) {
            EmuDnnDesc* cfg = emu_dnn(((cudnnBackendDescriptor_t*)out)[k]);
            if (cfg->type != CUDNN_BACKEND_ENGINECFG_DESCRIPTOR) return emu_dnn_fail(CUDNN_STATUS_BAD_PARAM, "results go into engine configurations");
            cfg->graph = e->graph;
            cfg->number = k;
            cfg->finalized = true;
        }
        return CUDNN_STATUS_SUCCESS;
    }
    if (e->type == CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR && name == CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE &&
        type == CUDNN_TYPE_INT64 && requested >= 1) {
        *(int64_t*)out = e->workspace;
        *count = 1;
        return CUDNN_STATUS_SUCCESS;
    }
    return emu_dnn_fail(CUDNN_STATUS_NOT_SUPPORTED, "attribute " + std::to_string((int)name) + " is not readable here");
}

// ---- execution: the graph interpreted on the host ---------------------------------------------------------------

struct EmuDnnValues {  // each tensor's elements in fp32, row-major over its dimensions
    std::map<const EmuDnnDesc*, std::vector<float>> v;
};
static inline int64_t emu_dnn_offset(const EmuDnnDesc* t, const int64_t* idx) {
    int64_t o = 0;
    for (size_t k = 0; k < t->dims.size(); k++) o += idx[k] * t->strides[k];
    return o;
}
// idx of element i of t (row-major)
static inline void emu_dnn_index(const EmuDnnDesc* t, int64_t i, int64_t* idx) {
    for (int k = (int)t->dims.size() - 1; k >= 0; k--) {
        idx[k] = i % t->dims[k];
        i /= t->dims[k];
    }
}
static inline float emu_dnn_round(int dtype, float v) {
    if (dtype == CUDNN_DATA_BFLOAT16) return (float)__nv_bfloat16(v);
    if (dtype == CUDNN_DATA_HALF) return (float)__half(v);
    if (dtype == CUDNN_DATA_INT32) return (float)(int32_t)v;
    if (dtype == CUDNN_DATA_BOOLEAN) return v != 0.0f ? 1.0f : 0.0f;
    return v;
}
// element (row-major index) of x broadcast to y's index idx
static inline float emu_dnn_bcast(const EmuDnnValues& vals, const EmuDnnDesc* x, const int64_t* idx) {
    int64_t i = 0;
    for (size_t k = 0; k < x->dims.size(); k++) i = i * x->dims[k] + (x->dims[k] == 1 ? 0 : idx[k]);
    return vals.v.at(x)[(size_t)i];
}

// bytes from a tensor's first element to the end of its last
static inline size_t emu_dnn_extent(const EmuDnnDesc* t) {
    int64_t last = 0;
    for (size_t k = 0; k < t->dims.size(); k++) last += (t->dims[k] - 1) * t->strides[k];
    return (size_t)(last + 1) * (emu_dnn_16bit(t->dtype) ? 2 : 4);
}

static inline void emu_dnn_run_op(EmuDnnValues& vals, const EmuDnnOp& o) {
    const EmuDnnDesc* y = o.y;
    const int64_t n = emu_dnn_count(y);
    std::vector<float> out((size_t)n);
    if (o.kind == CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR) {
#pragma omp parallel for
        for (int64_t i = 0; i < n; i++) {
            int64_t idx[8];
            emu_dnn_index(y, i, idx);
            const float x = emu_dnn_bcast(vals, o.x, idx), b = o.b ? emu_dnn_bcast(vals, o.b, idx) : 0.0f;
            float r = 0.0f;
            switch (o.mode) {
                case CUDNN_POINTWISE_ADD: r = x + b; break;
                case CUDNN_POINTWISE_MUL: r = x * b; break;
                case CUDNN_POINTWISE_DIV: r = x / b; break;
                case CUDNN_POINTWISE_SUB: r = x - b; break;
                case CUDNN_POINTWISE_EXP: r = std::exp(x); break;
                case CUDNN_POINTWISE_LOG: r = std::log(x); break;
                case CUDNN_POINTWISE_IDENTITY: r = x; break;
                case CUDNN_POINTWISE_CMP_GE: r = x >= b ? 1.0f : 0.0f; break;
                case CUDNN_POINTWISE_GEN_INDEX: r = (float)idx[o.axis]; break;
                case CUDNN_POINTWISE_BINARY_SELECT: r = emu_dnn_bcast(vals, o.t, idx) != 0.0f ? x : b; break;
            }
            out[(size_t)i] = emu_dnn_round(y->dtype, r);
        }
    } else if (o.kind == CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR) {
        const auto &ad = o.x->dims, &bd = o.b->dims;
        const int64_t M = ad[2], K = ad[3], N = bd[3];
        const std::vector<float>&A = vals.v.at(o.x), &Bm = vals.v.at(o.b);
#pragma omp parallel for collapse(2)
        for (int64_t b0 = 0; b0 < ad[0]; b0++)
            for (int64_t b1 = 0; b1 < ad[1]; b1++) {
                // B's batch element: the same, or the group's (b1 / (A's heads / B's heads)), or its only one
                const int64_t c0 = bd[0] == 1 ? 0 : b0 / (ad[0] / bd[0]), c1 = bd[1] == 1 ? 0 : b1 / (ad[1] / bd[1]);
                const float* a = &A[(size_t)((b0 * ad[1] + b1) * M * K)];
                const float* bm = &Bm[(size_t)((c0 * bd[1] + c1) * K * N)];
                float* c = &out[(size_t)((b0 * ad[1] + b1) * M * N)];
                for (int64_t i = 0; i < M; i++)
                    for (int64_t j = 0; j < N; j++) {
                        float acc = 0.0f;
                        for (int64_t p = 0; p < K; p++) acc += a[i * K + p] * bm[p * N + j];
                        c[i * N + j] = emu_dnn_round(y->dtype, acc);
                    }
            }
    } else if (o.kind == CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR) {
        const bool mx = o.mode == CUDNN_REDUCE_TENSOR_MAX;
        std::vector<float> acc((size_t)n, mx ? -INFINITY : 0.0f);
        const std::vector<float>& X = vals.v.at(o.x);
        const int64_t nx = emu_dnn_count(o.x);
        for (int64_t i = 0; i < nx; i++) {  // in order: x's elements, each into its y element
            int64_t idx[8], yi = 0;
            emu_dnn_index(o.x, i, idx);
            for (size_t k = 0; k < y->dims.size(); k++) yi = yi * y->dims[k] + idx[k] / (o.x->dims[k] / y->dims[k]);
            acc[(size_t)yi] = mx ? std::max(acc[(size_t)yi], X[(size_t)i]) : acc[(size_t)yi] + X[(size_t)i];
        }
        for (int64_t i = 0; i < n; i++) out[(size_t)i] = emu_dnn_round(y->dtype, acc[(size_t)i]);
    } else {  // reshape: y's element at memory offset o is x's element at offset o
        const std::vector<float>& X = vals.v.at(o.x);
        std::vector<int64_t> at(emu_dnn_extent(o.x) / (emu_dnn_16bit(o.x->dtype) ? 2 : 4), -1);  // offset -> x's element
        for (int64_t i = 0; i < emu_dnn_count(o.x); i++) {
            int64_t idx[8];
            emu_dnn_index(o.x, i, idx);
            int64_t& a = at[(size_t)emu_dnn_offset(o.x, idx)];
            if (a >= 0) emu_error("EMU cuDNN: a reshape of a tensor whose strides overlap");
            a = i;
        }
        for (int64_t i = 0; i < n; i++) {
            int64_t idx[8];
            emu_dnn_index(y, i, idx);
            const int64_t off = emu_dnn_offset(y, idx);
            if (off >= (int64_t)at.size() || at[(size_t)off] < 0) emu_error("EMU cuDNN: a reshape whose output reaches outside its input");
            out[(size_t)i] = emu_dnn_round(y->dtype, X[(size_t)at[(size_t)off]]);
        }
    }
    vals.v[y] = std::move(out);
}

// the live allocation holding [p, p + bytes), or false
static inline bool emu_dnn_in_allocation(const void* p, size_t bytes) {
    for (const auto& a : g_emu_allocs)
        if ((const char*)p >= (const char*)a.first && (const char*)p + bytes <= (const char*)a.first + a.second) return true;
    return false;
}
static inline cudnnStatus_t cudnnBackendExecute(cudnnHandle_t h, cudnnBackendDescriptor_t plan_d, cudnnBackendDescriptor_t pack_d) {
    const EmuDnnDesc *plan = emu_dnn(plan_d), *pack = emu_dnn(pack_d);
    if (!plan->finalized || plan->type != CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR || !pack->finalized ||
        pack->type != CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR)
        return emu_dnn_fail(CUDNN_STATUS_BAD_PARAM, "execute needs a finalized plan and variant pack");
    const EmuDnnDesc* g = plan->graph;
    const std::vector<int64_t>& uids = emu_dnn_attr(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS)->i;
    const std::vector<void*>& ptrs = emu_dnn_attr(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS)->p;
    const EmuDnnAttr* wsa = emu_dnn_attr(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE);
    void* ws = wsa ? wsa->p[0] : nullptr;
    // the graph's non-virtual tensors, each given exactly once
    std::map<const EmuDnnDesc*, void*> where;
    std::map<const EmuDnnDesc*, float> scalars;
    for (EmuDnnDesc* op : g->order) {
        const EmuDnnOp o = emu_dnn_op(op);
        for (const EmuDnnDesc* t : {o.x, o.b, o.t, o.y}) {
            if (!t || t->is_virtual || where.count(t)) continue;
            int found = 0;
            for (size_t k = 0; k < uids.size(); k++)
                if (uids[k] == t->uid) { found++; where[t] = ptrs[k]; }
            if (found != 1)
                return emu_dnn_fail(CUDNN_STATUS_BAD_PARAM, "the variant pack gives tensor " + emu_dnn_dims(t) + " " + std::to_string(found) + " times");
            if (t->by_value) {
                scalars[t] = *(const float*)where[t];  // a host float, read now
            } else if (((uintptr_t)where[t] % 16) || !emu_dnn_in_allocation(where[t], emu_dnn_extent(t))) {
                return emu_dnn_fail(CUDNN_STATUS_BAD_PARAM, "tensor " + emu_dnn_dims(t) + "'s pointer is not 16-byte aligned "
                                                            "or its extent is not inside one device allocation");
            }
        }
    }
    if (where.size() != uids.size()) return emu_dnn_fail(CUDNN_STATUS_BAD_PARAM, "the variant pack names a tensor the graph does not have");
    if (plan->workspace > 0 && (!ws || !emu_dnn_in_allocation(ws, (size_t)plan->workspace)))
        return emu_dnn_fail(CUDNN_STATUS_BAD_PARAM, "the workspace does not hold the plan's " + std::to_string(plan->workspace) + " bytes");
    g_emu_dnn_runs++;
    emu_count_launch("cudnnBackendExecute", __FILE__, __LINE__);
    const int64_t ws_bytes = plan->workspace;
    std::map<const EmuDnnDesc*, bool> written;
    for (EmuDnnDesc* op : g->order) written[emu_dnn_op(op).y] = true;
    emu_submit(h->stream, "cudnnBackendExecute", __FILE__, __LINE__, [=]() {
        EmuDnnValues vals;
        for (const auto& kv : where) {  // the inputs, read through their strides (an output is only written)
            const EmuDnnDesc* t = kv.first;
            if (written.count(t)) continue;
            std::vector<float> x((size_t)emu_dnn_count(t));
            if (t->by_value) {
                x[0] = scalars.at(t);
            } else {
                for (int64_t i = 0; i < emu_dnn_count(t); i++) {
                    int64_t idx[8];
                    emu_dnn_index(t, i, idx);
                    const int64_t off = emu_dnn_offset(t, idx);
                    x[(size_t)i] = t->dtype == CUDNN_DATA_BFLOAT16 ? (float)((const __nv_bfloat16*)kv.second)[off]
                                   : t->dtype == CUDNN_DATA_HALF     ? (float)((const __half*)kv.second)[off]
                                                                     : ((const float*)kv.second)[off];
                }
            }
            vals.v[t] = std::move(x);
        }
        if (ws_bytes > 0) memset(ws, 0xff, (size_t)ws_bytes);  // cuDNN's scratch: nothing may rely on its contents
        for (EmuDnnDesc* op : g->order) {
            const EmuDnnOp o = emu_dnn_op(op);
            emu_dnn_run_op(vals, o);
            if (!o.y->is_virtual) {  // an output, written through its strides
                const std::vector<float>& y = vals.v.at(o.y);
                void* p = where.at(o.y);
                for (int64_t i = 0; i < emu_dnn_count(o.y); i++) {
                    int64_t idx[8];
                    emu_dnn_index(o.y, i, idx);
                    const int64_t off = emu_dnn_offset(o.y, idx);
                    if (o.y->dtype == CUDNN_DATA_BFLOAT16) ((__nv_bfloat16*)p)[off] = __nv_bfloat16(y[(size_t)i]);
                    else if (o.y->dtype == CUDNN_DATA_HALF) ((__half*)p)[off] = __half(y[(size_t)i]);
                    else ((float*)p)[off] = y[(size_t)i];
                }
            }
        }
    });
    return CUDNN_STATUS_SUCCESS;
}
