// llmc/data/zip_npy.h: minimal readers for NumPy arrays, enough for PaddleNLP token data sets.
//   npy_parse   a .npy buffer (format versions 1.0, 2.0, 3.0) holding a 1-D integer array
//   zip_list    the central directory of a zip archive (zip64 extensions included)
//   npz_array   one array of a .npz written by np.savez (members stored, not deflated)
// Every function reads from a buffer in memory (usually an mmap) and returns an error string,
// empty on success, so callers decide how to fail (die with the file name, or, in the fuzzer,
// carry on). The arrays returned point into the caller's buffer; nothing is copied.
// Byte layouts: docs/data_formats.md.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

// Little-endian field readers: byte by byte, so any alignment and any host works.
static inline uint16_t le_u16(const uint8_t* p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static inline uint32_t le_u32(const uint8_t* p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static inline uint64_t le_u64(const uint8_t* p) { return (uint64_t)le_u32(p) | ((uint64_t)le_u32(p + 4) << 32); }

// ----------------------------------------------------------------------------------------------
// .npy: "\x93NUMPY", major, minor, header length (uint16 for 1.x, uint32 for 2.x/3.x), then an
// ASCII Python dict {'descr': '<i4', 'fortran_order': False, 'shape': (N,), } padded with
// spaces and ending in '\n', then the raw array bytes.

struct NpyArray {
    char kind;            // 'i' signed or 'u' unsigned integer
    int itemsize;         // bytes per element: 1, 2, 4 or 8
    uint64_t count;       // number of elements (the one dimension)
    const uint8_t* data;  // count * itemsize bytes, little-endian, any alignment
};

// Header dict parsing: a cursor over the header text.
struct NpyCursor { const char* s; size_t n; size_t pos; };

static inline void npy_skip_space(NpyCursor* c) {
    while (c->pos < c->n && (c->s[c->pos] == ' ' || c->s[c->pos] == '\t' || c->s[c->pos] == '\n' || c->s[c->pos] == '\r')) c->pos++;
}

static inline bool npy_accept(NpyCursor* c, char ch) {
    npy_skip_space(c);
    if (c->pos < c->n && c->s[c->pos] == ch) { c->pos++; return true; }
    return false;
}

// A quoted Python string without escapes ('descr' values and keys never need them).
static inline bool npy_quoted(NpyCursor* c, std::string* out) {
    npy_skip_space(c);
    if (c->pos >= c->n || (c->s[c->pos] != '\'' && c->s[c->pos] != '"')) return false;
    char q = c->s[c->pos++];
    size_t start = c->pos;
    while (c->pos < c->n && c->s[c->pos] != q) c->pos++;
    if (c->pos >= c->n) return false;
    out->assign(c->s + start, c->pos - start);
    c->pos++;
    return true;
}

static std::string npy_parse(const uint8_t* buf, size_t size, NpyArray* out) {
    if (size < 10) return "truncated: " + std::to_string(size) + " bytes, shorter than the 10-byte .npy preamble";
    if (memcmp(buf, "\x93NUMPY", 6) != 0) return "bad magic (expected \\x93NUMPY): not a .npy array";
    int major = buf[6], minor = buf[7];
    size_t hstart, hlen;
    if (major == 1) {
        hstart = 10;
        hlen = le_u16(buf + 8);
    } else if (major == 2 || major == 3) {
        if (size < 12) return "truncated: " + std::to_string(size) + " bytes, shorter than the 12-byte .npy 2.0 preamble";
        hstart = 12;
        hlen = le_u32(buf + 8);
    } else {
        return "unsupported .npy format version " + std::to_string(major) + "." + std::to_string(minor) + " (known: 1.0, 2.0, 3.0)";
    }
    if (hlen > size - hstart) return "truncated header: it declares " + std::to_string(hlen) + " bytes, the file has " + std::to_string(size - hstart) + " after the preamble";

    NpyCursor c = {(const char*)buf + hstart, hlen, 0};
    std::string descr;
    int fortran = -1;
    std::vector<uint64_t> shape;
    bool have_shape = false;
    if (!npy_accept(&c, '{')) return "malformed header: expected a '{' dict";
    while (!npy_accept(&c, '}')) {
        std::string key;
        if (!npy_quoted(&c, &key)) return "malformed header: expected a quoted key at header byte " + std::to_string(c.pos);
        if (!npy_accept(&c, ':')) return "malformed header: expected ':' after '" + key + "'";
        npy_skip_space(&c);
        if (key == "descr") {
            if (c.pos < c.n && c.s[c.pos] == '[') return "structured dtype (a list 'descr') is not a token array";
            if (!npy_quoted(&c, &descr)) return "malformed header: 'descr' is not a quoted string";
        } else if (key == "fortran_order") {
            if (c.n - c.pos >= 4 && memcmp(c.s + c.pos, "True", 4) == 0) { fortran = 1; c.pos += 4; }
            else if (c.n - c.pos >= 5 && memcmp(c.s + c.pos, "False", 5) == 0) { fortran = 0; c.pos += 5; }
            else return "malformed header: 'fortran_order' is neither True nor False";
        } else if (key == "shape") {
            if (!npy_accept(&c, '(')) return "malformed header: 'shape' is not a tuple";
            shape.clear();
            while (!npy_accept(&c, ')')) {
                npy_skip_space(&c);
                uint64_t v = 0;
                size_t digits = 0;
                while (c.pos < c.n && c.s[c.pos] >= '0' && c.s[c.pos] <= '9') {
                    if (v > (UINT64_C(1) << 56)) return "malformed header: a 'shape' dimension is too large";
                    v = v * 10 + (uint64_t)(c.s[c.pos++] - '0');
                    digits++;
                }
                if (digits == 0) return "malformed header: 'shape' holds something other than non-negative integers";
                shape.push_back(v);
                if (!npy_accept(&c, ',')) {
                    if (!npy_accept(&c, ')')) return "malformed header: expected ',' or ')' in 'shape'";
                    break;
                }
            }
            have_shape = true;
        } else {
            return "malformed header: unexpected key '" + key + "'";
        }
        if (!npy_accept(&c, ',')) {
            if (!npy_accept(&c, '}')) return "malformed header: expected ',' or '}' after '" + key + "'";
            break;
        }
    }
    npy_skip_space(&c);
    if (c.pos != c.n) return "malformed header: text after the closing '}'";
    if (descr.empty() || fortran < 0 || !have_shape) return "malformed header: it needs 'descr', 'fortran_order' and 'shape'";

    // descr: byte order ('<' little, '>' big, '|' not applicable, '=' native), kind, item size.
    size_t k = 0;
    char order = '=';
    if (descr[0] == '<' || descr[0] == '>' || descr[0] == '|' || descr[0] == '=') { order = descr[0]; k = 1; }
    if (k >= descr.size()) return "malformed header: empty dtype '" + descr + "'";
    char kind = descr[k];
    std::string size_text = descr.substr(k + 1);
    int itemsize = (size_text == "1") ? 1 : (size_text == "2") ? 2 : (size_text == "4") ? 4 : (size_text == "8") ? 8 : 0;
    if (kind == 'f' || kind == 'c') return "dtype '" + descr + "' is floating point; an integer array is expected (re-save with .astype(np.int32))";
    if ((kind != 'i' && kind != 'u') || itemsize == 0) return "unsupported dtype '" + descr + "' (expected an integer dtype such as '<i4' or '<u2')";
    if (order == '>' && itemsize > 1) return "dtype '" + descr + "' is big-endian; re-save with .astype('<" + std::string(1, kind) + size_text + "')";
    if (shape.size() != 1) return "expected a 1-D array, got " + std::to_string(shape.size()) + " dimensions";

    size_t data_off = hstart + hlen;
    uint64_t avail = size - data_off;
    uint64_t count = shape[0];
    if (count > avail / (uint64_t)itemsize) return "truncated data: shape (" + std::to_string(count) + ",) of " + descr + " needs " + std::to_string(count) + " x " + std::to_string(itemsize) + " bytes, only " + std::to_string(avail) + " follow the header";
    if (count * (uint64_t)itemsize != avail) return std::to_string(avail - count * (uint64_t)itemsize) + " unexpected bytes after the array data (corrupt file?)";
    out->kind = kind;
    out->itemsize = itemsize;
    out->count = count;
    out->data = buf + data_off;
    return "";
}

// ----------------------------------------------------------------------------------------------
// zip: find the end-of-central-directory record (and its zip64 twin when the 32-bit fields
// overflow), then read the central directory entries.

struct ZipEntry {
    std::string name;
    uint16_t flags;         // general purpose bits; bit 0 = encrypted
    uint16_t method;        // 0 stored, 8 deflate, ...
    uint32_t crc32;
    uint64_t csize, usize;  // compressed and uncompressed sizes
    uint64_t local_offset;  // offset of the member's local file header
};

static std::string zip_list(const uint8_t* buf, size_t size, std::vector<ZipEntry>* out) {
    out->clear();
    if (size < 22) return "truncated: " + std::to_string(size) + " bytes, too short for a zip archive";
    // The end record is 22 bytes plus a comment of at most 65535 bytes, at the very end.
    size_t eocd = SIZE_MAX;
    size_t lowest = size - 22 > 65535 ? size - 22 - 65535 : 0;
    for (size_t p = size - 22 + 1; p-- > lowest;) {
        if (le_u32(buf + p) == 0x06054b50u && p + 22 + le_u16(buf + p + 20) == size) { eocd = p; break; }
    }
    if (eocd == SIZE_MAX) return "no zip end-of-central-directory record: not a zip/.npz archive, or truncated";
    uint64_t entries = le_u16(buf + eocd + 10);
    uint64_t cd_size = le_u32(buf + eocd + 12);
    uint64_t cd_off = le_u32(buf + eocd + 16);
    if (entries == 0xFFFF || cd_size == 0xFFFFFFFFu || cd_off == 0xFFFFFFFFu) {
        // zip64: a 20-byte locator just before the end record points at the 56-byte zip64 record.
        if (eocd < 20 || le_u32(buf + eocd - 20) != 0x07064b50u) return "zip64 end-of-central-directory locator missing";
        uint64_t z = le_u64(buf + eocd - 20 + 8);
        if (z > size || size - z < 56 || le_u32(buf + z) != 0x06064b50u) return "zip64 end-of-central-directory record missing or out of bounds";
        entries = le_u64(buf + z + 32);
        cd_size = le_u64(buf + z + 40);
        cd_off = le_u64(buf + z + 48);
    }
    if (cd_off > size || cd_size > size - cd_off) return "central directory (offset " + std::to_string(cd_off) + ", " + std::to_string(cd_size) + " bytes) lies outside the file: truncated archive";
    uint64_t p = cd_off, end = cd_off + cd_size;
    for (uint64_t i = 0; i < entries; i++) {
        if (end - p < 46 || le_u32(buf + p) != 0x02014b50u) return "central directory entry " + std::to_string(i) + " is malformed";
        ZipEntry e;
        e.flags = le_u16(buf + p + 8);
        e.method = le_u16(buf + p + 10);
        e.crc32 = le_u32(buf + p + 16);
        e.csize = le_u32(buf + p + 20);
        e.usize = le_u32(buf + p + 24);
        uint64_t name_len = le_u16(buf + p + 28), extra_len = le_u16(buf + p + 30), comment_len = le_u16(buf + p + 32);
        e.local_offset = le_u32(buf + p + 42);
        if (end - p - 46 < name_len + extra_len + comment_len) return "central directory entry " + std::to_string(i) + " runs past the directory";
        e.name.assign((const char*)buf + p + 46, name_len);
        // zip64 extra field (id 1): the 64-bit values of whichever 32-bit fields read 0xFFFFFFFF.
        const uint8_t* x = buf + p + 46 + name_len;
        for (uint64_t q = 0; q + 4 <= extra_len;) {
            uint64_t id = le_u16(x + q), len = le_u16(x + q + 2);
            if (q + 4 + len > extra_len) return "central directory entry '" + e.name + "' has a malformed extra field";
            if (id == 1) {
                uint64_t r = q + 4, rend = q + 4 + len;
                if (e.usize == 0xFFFFFFFFu) { if (rend - r < 8) return "short zip64 field in '" + e.name + "'"; e.usize = le_u64(x + r); r += 8; }
                if (e.csize == 0xFFFFFFFFu) { if (rend - r < 8) return "short zip64 field in '" + e.name + "'"; e.csize = le_u64(x + r); r += 8; }
                if (e.local_offset == 0xFFFFFFFFu) { if (rend - r < 8) return "short zip64 field in '" + e.name + "'"; e.local_offset = le_u64(x + r); }
            }
            q += 4 + len;
        }
        out->push_back(e);
        p += 46 + name_len + extra_len + comment_len;
    }
    return "";
}

// CRC-32 (the zip polynomial, reflected 0xEDB88320), to catch corrupt members.
struct ZipCrcTable {
    uint32_t v[256];
    ZipCrcTable() {
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
            v[i] = c;
        }
    }
};
static inline uint32_t zip_crc32(const uint8_t* p, uint64_t n) {
    static const ZipCrcTable table;  // built once, thread-safe (C++11 static initialisation)
    uint32_t c = 0xFFFFFFFFu;
    for (uint64_t i = 0; i < n; i++) c = table.v[(c ^ p[i]) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

// The array `name` (without ".npy") of a .npz archive, which must be stored uncompressed.
static std::string npz_array(const uint8_t* buf, size_t size, const char* name, NpyArray* out) {
    std::vector<ZipEntry> entries;
    std::string err = zip_list(buf, size, &entries);
    if (!err.empty()) return err;
    std::string member = std::string(name) + ".npy";
    for (const ZipEntry& e : entries) {
        if (e.name != member) continue;
        if (e.flags & 1) return "member '" + member + "' is encrypted";
        if (e.method != 0) return "member '" + member + "' is compressed (zip method " + std::to_string(e.method) + (e.method == 8 ? ", deflate: np.savez_compressed" : "") + "); re-save the arrays with np.savez, which stores them uncompressed";
        if (e.csize != e.usize) return "member '" + member + "' is stored but its sizes differ (" + std::to_string(e.csize) + " vs " + std::to_string(e.usize) + ")";
        uint64_t h = e.local_offset;
        if (h > size || size - h < 30 || le_u32(buf + h) != 0x04034b50u) return "local header of '" + member + "' is missing or out of bounds";
        uint64_t data = h + 30 + le_u16(buf + h + 26) + le_u16(buf + h + 28);
        if (data > size || e.csize > size - data) return "data of '" + member + "' runs past the end of the archive: truncated file";
#ifndef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION  // the fuzzer skips the checksum to reach the npy parser
        if (zip_crc32(buf + data, e.csize) != e.crc32) return "member '" + member + "' fails its CRC-32 check: corrupt file";
#endif
        err = npy_parse(buf + data, e.csize, out);
        if (!err.empty()) return "member '" + member + "': " + err;
        return "";
    }
    std::string names;
    for (const ZipEntry& e : entries) names += (names.empty() ? "" : ", ") + e.name;
    return "no array '" + std::string(name) + "' in the archive (members: " + (names.empty() ? "none" : names) + ")";
}
