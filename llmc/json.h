// llmc/json.h: a small JSON reader (enough for safetensors headers, model configs and
// checkpoint state) and escaping for the writers. Parsing never aborts: it returns false
// with an error message, so callers can name the file that was malformed.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

struct Json {
    enum Kind { NUL, BOOL, NUM, STR, ARR, OBJ } kind = NUL;
    bool b = false;
    double num = 0.0;
    std::string str;
    std::vector<Json> arr;
    std::vector<std::pair<std::string, Json>> obj;  // insertion order kept (safetensors offsets)

    const Json* get(const std::string& key) const {
        for (const auto& kv : obj)
            if (kv.first == key) return &kv.second;
        return nullptr;
    }
};

struct JsonParser {
    const char* p;
    const char* end;
    std::string err;
    int depth = 0;

    void ws() { while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++; }
    bool fail(const char* msg) { if (err.empty()) err = msg; return false; }

    static void put_utf8(std::string& s, unsigned cp) {
        if (cp < 0x80) s += (char)cp;
        else if (cp < 0x800) { s += (char)(0xC0 | (cp >> 6)); s += (char)(0x80 | (cp & 0x3F)); }
        else if (cp < 0x10000) { s += (char)(0xE0 | (cp >> 12)); s += (char)(0x80 | ((cp >> 6) & 0x3F)); s += (char)(0x80 | (cp & 0x3F)); }
        else { s += (char)(0xF0 | (cp >> 18)); s += (char)(0x80 | ((cp >> 12) & 0x3F)); s += (char)(0x80 | ((cp >> 6) & 0x3F)); s += (char)(0x80 | (cp & 0x3F)); }
    }
    bool hex4(unsigned* out) {
        if (end - p < 4) return fail("truncated \\u escape");
        unsigned v = 0;
        for (int i = 0; i < 4; i++) {
            char ch = *p++;
            v <<= 4;
            if (ch >= '0' && ch <= '9') v |= ch - '0';
            else if (ch >= 'a' && ch <= 'f') v |= ch - 'a' + 10;
            else if (ch >= 'A' && ch <= 'F') v |= ch - 'A' + 10;
            else return fail("bad hex digit in \\u escape");
        }
        *out = v;
        return true;
    }
    bool string(std::string& s) {
        if (p >= end || *p != '"') return fail("expected string");
        p++;
        while (p < end && *p != '"') {
            char ch = *p++;
            if (ch != '\\') { s += ch; continue; }
            if (p >= end) return fail("truncated escape");
            char e = *p++;
            switch (e) {
                case '"': s += '"'; break;
                case '\\': s += '\\'; break;
                case '/': s += '/'; break;
                case 'b': s += '\b'; break;
                case 'f': s += '\f'; break;
                case 'n': s += '\n'; break;
                case 'r': s += '\r'; break;
                case 't': s += '\t'; break;
                case 'u': {
                    unsigned cp;
                    if (!hex4(&cp)) return false;
                    if (cp >= 0xD800 && cp < 0xDC00 && end - p >= 6 && p[0] == '\\' && p[1] == 'u') {
                        p += 2;
                        unsigned lo;
                        if (!hex4(&lo)) return false;
                        if (lo >= 0xDC00 && lo < 0xE000) cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                        else { put_utf8(s, 0xFFFD); cp = lo; }
                    }
                    put_utf8(s, cp);
                    break;
                }
                default: return fail("unknown escape");
            }
        }
        if (p >= end) return fail("unterminated string");
        p++;
        return true;
    }
    bool value(Json& v) {
        if (++depth > 64) return fail("nesting too deep");
        ws();
        if (p >= end) return fail("unexpected end");
        bool ok = true;
        if (*p == '{') {
            v.kind = Json::OBJ; p++; ws();
            if (p < end && *p == '}') { p++; depth--; return true; }
            while (ok) {
                ws();
                std::string key;
                if (!string(key)) return false;
                ws();
                if (p >= end || *p != ':') return fail("expected ':'");
                p++;
                v.obj.emplace_back(key, Json());
                if (!value(v.obj.back().second)) return false;
                ws();
                if (p < end && *p == ',') { p++; continue; }
                if (p < end && *p == '}') { p++; break; }
                return fail("expected ',' or '}'");
            }
        } else if (*p == '[') {
            v.kind = Json::ARR; p++; ws();
            if (p < end && *p == ']') { p++; depth--; return true; }
            while (ok) {
                v.arr.emplace_back();
                if (!value(v.arr.back())) return false;
                ws();
                if (p < end && *p == ',') { p++; continue; }
                if (p < end && *p == ']') { p++; break; }
                return fail("expected ',' or ']'");
            }
        } else if (*p == '"') {
            v.kind = Json::STR;
            ok = string(v.str);
        } else if (end - p >= 4 && std::string(p, 4) == "true") { v.kind = Json::BOOL; v.b = true; p += 4; }
        else if (end - p >= 5 && std::string(p, 5) == "false") { v.kind = Json::BOOL; v.b = false; p += 5; }
        else if (end - p >= 4 && std::string(p, 4) == "null") { v.kind = Json::NUL; p += 4; }
        else {
            // numbers: copy to a bounded buffer so strtod never reads past the end
            char buf[64];
            int n = 0;
            while (p < end && n < 63 && *p != 0 && strchr("+-0123456789.eE", *p) != nullptr) buf[n++] = *p++;
            buf[n] = 0;
            char* q = nullptr;
            v.kind = Json::NUM;
            v.num = strtod(buf, &q);
            if (n == 0 || q != buf + n) return fail("bad number or unexpected character");
        }
        depth--;
        return ok;
    }
};

// Parse text into out; on failure returns false and sets *err.
static inline bool json_parse(const char* text, size_t len, Json* out, std::string* err) {
    JsonParser ps{text, text + len, "", 0};
    *out = Json();
    bool ok = ps.value(*out);
    if (ok) {
        ps.ws();
        if (ps.p != ps.end) { ok = false; ps.err = "trailing characters after JSON value"; }
    }
    if (!ok && err) *err = ps.err + " at byte " + std::to_string(ps.p - text);
    return ok;
}

static inline std::string json_escape(const std::string& s) {
    std::string o = "\"";
    for (unsigned char ch : s) {
        if (ch == '"') o += "\\\"";
        else if (ch == '\\') o += "\\\\";
        else if (ch == '\n') o += "\\n";
        else if (ch < 0x20) { char b[8]; snprintf(b, sizeof(b), "\\u%04x", ch); o += b; }
        else o += (char)ch;
    }
    return o + "\"";
}

// The text of a parsed value (numbers as %.17g, so every double comes back exactly).
static inline std::string json_dump(const Json& j) {
    switch (j.kind) {
        case Json::NUL: return "null";
        case Json::BOOL: return j.b ? "true" : "false";
        case Json::NUM: { char b[32]; snprintf(b, sizeof(b), "%.17g", j.num); return b; }
        case Json::STR: return json_escape(j.str);
        case Json::ARR: {
            std::string o = "[";
            for (size_t i = 0; i < j.arr.size(); i++) o += (i ? "," : "") + json_dump(j.arr[i]);
            return o + "]";
        }
        case Json::OBJ: {
            std::string o = "{";
            for (size_t i = 0; i < j.obj.size(); i++) o += (i ? "," : "") + json_escape(j.obj[i].first) + ":" + json_dump(j.obj[i].second);
            return o + "}";
        }
    }
    return "null";
}
