// llmc/run/safetensors.h: read and write the safetensors format (Hugging Face's weight files).
// Layout: uint64 little-endian header size N, N bytes of JSON
//   {"__metadata__": {"key": "string", ...}, "tensor name": {"dtype": "F32", "shape": [..],
//    "data_offsets": [begin, end]}, ...}
// then the raw little-endian tensor bytes; offsets are relative to the end of the header.
// Reading converts F32 / F16 / BF16 to float and I32 / I64 to int32; every inconsistency
// (truncated file, offsets out of range, size not matching shape) names the file. st_open reads the
// header only and each tensor when asked (pread), so a reader holds one tensor at a time, not the file.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>
#include "llmc/json.h"
#include "llmc/utils.h"

struct StTensor {
    std::string name, dtype;
    std::vector<int64_t> shape;
    size_t begin = 0, end = 0;   // byte range inside the data section
    int64_t numel() const { int64_t n = 1; for (int64_t d : shape) n *= d; return n; }
};

struct SafeTensors {
    std::string path;
    std::vector<uint8_t> bytes;       // a whole file image (st_parse's input), or st_open's first 8 + header bytes
    int fd = -1;                      // st_open: the open file, read per tensor
    uint64_t file_size = 0;           // st_open: its size
    struct timespec mtime = {};       // st_open: its modification time (a file that changes is reported)
    size_t data_start = 0;
    std::vector<StTensor> tensors;
    std::map<std::string, std::string> metadata;
};

static inline int st_dtype_size(const std::string& dt) {
    if (dt == "F32" || dt == "I32") return 4;
    if (dt == "F16" || dt == "BF16" || dt == "I16") return 2;
    if (dt == "F64" || dt == "I64") return 8;
    if (dt == "U8" || dt == "I8" || dt == "BOOL") return 1;
    return 0;
}

// Parses the file image already in st->bytes; returns an error message, empty on success.
// Parses the header in st->bytes: a whole file image, or (st->fd open) the file's first bytes, its size file_size.
static inline std::string st_parse(SafeTensors* st) {
    const std::vector<uint8_t>& b = st->bytes;
    const uint64_t size = st->fd >= 0 ? st->file_size : b.size();
    if (size < 8 || b.size() < 8) return "file is shorter than the 8-byte header size";
    uint64_t n = 0;
    memcpy(&n, b.data(), 8);
    if (n > size - 8 || n > b.size() - 8) return "header size " + std::to_string(n) + " runs past the end of the file (truncated?)";
    Json j;
    std::string err;
    if (!json_parse((const char*)b.data() + 8, (size_t)n, &j, &err)) return "header is not valid JSON: " + err;
    if (j.kind != Json::OBJ) return "header is not a JSON object";
    st->data_start = 8 + (size_t)n;
    const size_t data_size = (size_t)(size - st->data_start);
    for (const auto& kv : j.obj) {
        if (kv.first == "__metadata__") {
            if (kv.second.kind != Json::OBJ) return "__metadata__ is not an object";
            for (const auto& m : kv.second.obj) {
                if (m.second.kind != Json::STR) return "__metadata__ value '" + m.first + "' is not a string";
                st->metadata[m.first] = m.second.str;
            }
            continue;
        }
        const Json& v = kv.second;
        const Json* dt = v.get("dtype");
        const Json* sh = v.get("shape");
        const Json* off = v.get("data_offsets");
        if (v.kind != Json::OBJ || !dt || dt->kind != Json::STR || !sh || sh->kind != Json::ARR || !off ||
            off->kind != Json::ARR || off->arr.size() != 2)
            return "tensor '" + kv.first + "' lacks dtype, shape or data_offsets";
        StTensor t;
        t.name = kv.first;
        t.dtype = dt->str;
        // the product of the dimensions (zeros counted as 1) stays within the data size, so numel() cannot overflow
        uint64_t extent = 1;
        for (const Json& d : sh->arr) {
            if (d.kind != Json::NUM || d.num < 0 || d.num > 1e12 || d.num != (double)(int64_t)d.num)
                return "tensor '" + kv.first + "' has a bad shape";
            t.shape.push_back((int64_t)d.num);
            extent *= std::max<uint64_t>((uint64_t)d.num, 1);
            if (extent > std::max<uint64_t>(data_size, 1))
                return "tensor '" + kv.first + "' byte size does not match its shape and dtype";
        }
        if (off->arr[0].kind != Json::NUM || off->arr[1].kind != Json::NUM || off->arr[0].num < 0 ||
            off->arr[1].num < off->arr[0].num)
            return "tensor '" + kv.first + "' has bad data_offsets";
        if (off->arr[1].num > (double)data_size) return "tensor '" + kv.first + "' runs past the end of the file (truncated?)";
        if (off->arr[0].num != (double)(int64_t)off->arr[0].num || off->arr[1].num != (double)(int64_t)off->arr[1].num)
            return "tensor '" + kv.first + "' has bad data_offsets";
        t.begin = (size_t)off->arr[0].num;
        t.end = (size_t)off->arr[1].num;
        int es = st_dtype_size(t.dtype);
        if (es == 0) return "tensor '" + kv.first + "' has unsupported dtype " + t.dtype;
        if ((uint64_t)t.numel() * (uint64_t)es != t.end - t.begin)
            return "tensor '" + kv.first + "' byte size does not match its shape and dtype";
        st->tensors.push_back(t);
    }
    return "";
}

// Stops the run when st_open's file has changed size or been written since it was opened (read_file_bytes's rule for
// whole files, here for a file read a tensor at a time).
static inline void st_check_unchanged(const SafeTensors* st) {
    struct stat now;
    if (fstat(st->fd, &now) != 0 || (uint64_t)now.st_size != st->file_size || now.st_mtim.tv_sec != st->mtime.tv_sec ||
        now.st_mtim.tv_nsec != st->mtime.tv_nsec)
        die("%s: changed size while being read (%llu bytes when opened, %lld now); is another program writing it?",
            path_label(st->path).c_str(), (unsigned long long)st->file_size, (long long)now.st_size);
}

// Opens a safetensors file: its header now, each tensor's bytes when read (st_read_f32, st_read_i32).
static inline void st_open(SafeTensors* st, const std::string& path) {
    st->path = path;
    struct stat sb;
    st->fd = open_input(path, nullptr, true, &sb);
    st->file_size = (uint64_t)sb.st_size;
    auto read_at = [&](uint64_t at, size_t n) {
        const size_t have = st->bytes.size();
        st->bytes.resize(have + n);
        size_t got = 0;
        while (got < n) {
            const ssize_t r = pread(st->fd, st->bytes.data() + have + got, n - got, (off_t)(at + got));
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) die("%s: read failed: %s", path_label(path).c_str(), r < 0 ? strerror(errno) : "the file ends early");
            got += (size_t)r;
        }
    };
    uint64_t n = 0;
    if (st->file_size >= 8) {
        read_at(0, 8);
        memcpy(&n, st->bytes.data(), 8);
        if (n <= st->file_size - 8 && n <= (100ull << 20)) read_at(8, (size_t)n);  // safetensors caps headers at 100 MB
    }
    st->mtime = sb.st_mtim;
    st_check_unchanged(st);
    std::string err = st_parse(st);
    if (!err.empty()) die("%s: not a valid safetensors file: %s", path_label(path).c_str(), err.c_str());
}

static inline void st_close(SafeTensors* st) {
    if (st->fd >= 0) close(st->fd);
    st->fd = -1;
}

// The bytes of tensor t: in the image, or read into *tmp.
static inline const uint8_t* st_data(const SafeTensors* st, const StTensor* t, std::vector<uint8_t>* tmp) {
    if (st->fd < 0) return st->bytes.data() + st->data_start + t->begin;
    const size_t n = t->end - t->begin;
    tmp->resize(n);
    size_t got = 0;
    while (got < n) {
        const ssize_t r = pread(st->fd, tmp->data() + got, n - got, (off_t)(st->data_start + t->begin + got));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) die("%s: cannot read tensor '%s': %s", path_label(st->path).c_str(), t->name.c_str(),
                        r < 0 ? strerror(errno) : "the file ends early (changed since it was opened?)");
        got += (size_t)r;
    }
    st_check_unchanged(st);
    return tmp->data();
}

static inline const StTensor* st_find(const SafeTensors* st, const std::string& name) {
    for (const StTensor& t : st->tensors)
        if (t.name == name) return &t;
    return nullptr;
}

static inline const StTensor* st_require(const SafeTensors* st, const std::string& name, int64_t numel) {
    const StTensor* t = st_find(st, name);
    if (!t) die("%s: tensor '%s' not found", path_label(st->path).c_str(), name.c_str());
    if (numel >= 0 && t->numel() != numel)
        die("%s: tensor '%s' has %lld elements, expected %lld", path_label(st->path).c_str(), name.c_str(),
            (long long)t->numel(), (long long)numel);
    return t;
}

static inline float st_bf16_to_f32(uint16_t h) { uint32_t u = (uint32_t)h << 16; float f; memcpy(&f, &u, 4); return f; }
static inline float st_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1F, man = h & 0x3FF, u;
    if (exp == 0) {
        if (man == 0) u = sign;
        else { // subnormal: normalise
            int e = -1;
            do { man <<= 1; e++; } while (!(man & 0x400));
            u = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3FF) << 13);
        }
    } else if (exp == 31) u = sign | 0x7F800000u | (man << 13);
    else u = sign | ((exp + 127 - 15) << 23) | (man << 13);
    float f;
    memcpy(&f, &u, 4);
    return f;
}

// Reads a float tensor (F32, F16, BF16, F64) into out[numel].
static inline void st_read_f32(const SafeTensors* st, const StTensor* t, float* out) {
    std::vector<uint8_t> tmp;
    const uint8_t* p = st_data(st, t, &tmp);
    const int64_t n = t->numel();
    if (t->dtype == "F32") { if (n > 0) memcpy(out, p, (size_t)n * 4); }  // out may be null when n is 0
    else if (t->dtype == "BF16") for (int64_t i = 0; i < n; i++) { uint16_t h; memcpy(&h, p + 2 * i, 2); out[i] = st_bf16_to_f32(h); }
    else if (t->dtype == "F16") for (int64_t i = 0; i < n; i++) { uint16_t h; memcpy(&h, p + 2 * i, 2); out[i] = st_f16_to_f32(h); }
    else if (t->dtype == "F64") for (int64_t i = 0; i < n; i++) { double d; memcpy(&d, p + 8 * i, 8); out[i] = (float)d; }
    else die("%s: tensor '%s' has dtype %s, expected a float type", path_label(st->path).c_str(), t->name.c_str(), t->dtype.c_str());
}

// Reads an integer tensor (I32, I64) into out[numel] as int32.
static inline void st_read_i32(const SafeTensors* st, const StTensor* t, int32_t* out) {
    std::vector<uint8_t> tmp;
    const uint8_t* p = st_data(st, t, &tmp);
    const int64_t n = t->numel();
    if (t->dtype == "I32") { if (n > 0) memcpy(out, p, (size_t)n * 4); }
    else if (t->dtype == "I64") for (int64_t i = 0; i < n; i++) { int64_t v; memcpy(&v, p + 8 * i, 8); out[i] = (int32_t)v; }
    else die("%s: tensor '%s' has dtype %s, expected I32 or I64", path_label(st->path).c_str(), t->name.c_str(), t->dtype.c_str());
}

// ----------------------------------------------------------------------------------------------
// Writer: collect (name, dtype, shape, pointer) and write once. The pointers must stay valid
// until st_write. Tensors are written in the order added.
struct StWriter {
    struct Entry { std::string name, dtype; std::vector<int64_t> shape; const void* data; size_t bytes; };
    std::vector<Entry> entries;
    std::map<std::string, std::string> metadata;
};

static inline void st_add(StWriter* w, const std::string& name, const char* dtype, std::vector<int64_t> shape, const void* data) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    w->entries.push_back({name, dtype, shape, data, (size_t)n * (size_t)st_dtype_size(dtype)});
}

// Writes the header of w's tensors (the data section's offsets follow their sizes) and returns the open file, for the
// caller to write their data in order (hf_export_stream); st_write writes the data of w's pointers.
static inline FILE* st_write_header(const StWriter* w, const std::string& path) {
    std::string h = "{";
    if (!w->metadata.empty()) {
        h += "\"__metadata__\":{";
        bool first = true;
        for (const auto& kv : w->metadata) {
            h += (first ? "" : ",") + json_escape(kv.first) + ":" + json_escape(kv.second);
            first = false;
        }
        h += "}";
    }
    size_t off = 0;
    for (size_t i = 0; i < w->entries.size(); i++) {
        const StWriter::Entry& e = w->entries[i];
        if (h.size() > 1) h += ",";
        h += json_escape(e.name) + ":{\"dtype\":\"" + e.dtype + "\",\"shape\":[";
        for (size_t d = 0; d < e.shape.size(); d++) h += (d ? "," : "") + std::to_string(e.shape[d]);
        h += "],\"data_offsets\":[" + std::to_string(off) + "," + std::to_string(off + e.bytes) + "]}";
        off += e.bytes;
    }
    h += "}";
    while (h.size() % 8 != 0) h += ' ';  // keep the data section 8-byte aligned
    FILE* f = fopen_check(path.c_str(), "wb");
    uint64_t n = h.size();
    fwrite_check(&n, 8, 1, f, path_label(path).c_str());
    fwrite_check(h.data(), 1, h.size(), f, path_label(path).c_str());
    return f;
}

static inline void st_write(const StWriter* w, const std::string& path) {
    FILE* f = st_write_header(w, path);
    for (const StWriter::Entry& e : w->entries)
        if (e.bytes) fwrite_check(e.data, 1, e.bytes, f, path_label(path).c_str());
    fclose_check(f, path_label(path).c_str());
}
