#!/usr/bin/env python3
"""tests/tokenizer/utf8_cases.py OUT: byte sequences and what Python's strict UTF-8 decoder makes of
their first character, for test_tokenizer's `utf8` mode (tests/t_tokenizer.sh runs both).

Each record is 4 bytes of input (zero-padded), 1 byte of input length, then int32 code point and int32
length of the first character as Python decodes it: the shortest prefix that decodes to exactly one
character, or code point -1 and length 1 when none does (the first byte is not the start of a
well-formed sequence: overlong forms, surrogates, code points above U+10FFFF, stray continuation bytes,
truncated sequences). The cases: every single byte, every two-byte pair, and the three- and four-byte
sequences whose second byte takes every value and whose later bytes sit at the edges of the
continuation range (0x7F, 0x80, 0xBF, 0xC0).
"""
import itertools
import struct
import sys


def first_char(b):
    for k in range(1, min(4, len(b)) + 1):
        try:
            s = b[:k].decode("utf-8")
        except UnicodeDecodeError:
            continue
        if len(s) == 1:
            return ord(s), k
    return -1, 1


def cases():
    for a in range(256):
        yield bytes([a])
    for a, b in itertools.product(range(256), range(256)):
        yield bytes([a, b])
    edges = (0x7F, 0x80, 0xBF, 0xC0)
    for a, b, c in itertools.product(range(0xE0, 0xF0), range(256), edges):
        yield bytes([a, b, c])
    for a, b, c, d in itertools.product(range(0xF0, 0xF8), range(256), edges, edges):
        yield bytes([a, b, c, d])


with open(sys.argv[1], "wb") as f:
    n = 0
    for b in cases():
        cp, k = first_char(b)
        f.write(b.ljust(4, b"\0") + bytes([len(b)]) + struct.pack("<ii", cp, k))
        n += 1
print("utf8 cases: %d" % n)
