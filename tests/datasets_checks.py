# tests/datasets_checks.py: the checks of tests/t_datasets.sh on the token data sets (llmc/data/datasets.h,
# read through build/test_datasets dump) and the preparation tool (build/prepare). Defines the byte
# layouts written by hand (Megatron .bin/.idx, llm.c shards, PaddleNLP .npy/.npz) and one check per
# property, each printing "[PASS] name" or "[FAIL] name: detail". Called by tests/t_datasets.sh from the
# repository root as: python3 tests/datasets_checks.py TMPDIR; exits 1 when a check fails.
import glob, json, os, struct, subprocess, sys, traceback
import numpy as np

def report_abort(kind, exc, tb):  # an unexpected error stops the checks: say so as a failure
    print(f"[FAIL] datasets_checks_aborted: {kind.__name__}: {exc}")
    traceback.print_tb(tb)
sys.excepthook = report_abort

tmp = sys.argv[1]
T, P = "build/test_datasets", "build/prepare"
failed = 0

def check(name, ok, detail=""):
    global failed
    print(f"[PASS] {name}" if ok else f"[FAIL] {name}: {detail}")
    failed += 0 if ok else 1

def path(name):
    return os.path.join(tmp, name)

def run(args):
    return subprocess.run([str(a) for a in args], capture_output=True, text=True)

def dump(p, seq, seed=0, shuffle=0):
    """All samples of data set p as a (num_samples, seq+1) array, and the summary line."""
    r = run([T, "dump", p, seq, seed, shuffle, path("dump.i32")])
    if r.returncode != 0:
        raise RuntimeError(f"dump {p} failed: {r.stderr.strip()}")
    return np.fromfile(path("dump.i32"), dtype=np.int32).reshape(-1, seq + 1), r.stdout.split()

def stream(p):
    rows, _ = dump(p, 1)
    return np.concatenate([rows[:, 0], rows[-1:, 1]])

def windows(s, seq):
    n = (len(s) - 1) // seq
    return np.stack([s[i * seq:i * seq + seq + 1] for i in range(n)])

def prepare(*args):
    r = run([P, *args])
    if r.returncode != 0:
        raise RuntimeError(f"prepare {args} failed: {r.stderr.strip()}")
    return r

def write(name, data):
    with open(path(name), "wb") as f:
        f.write(data)
    return path(name)

def megatron_by_hand(prefix, docs, code, np_dtype):
    """The documented layout, field by field: .bin raw tokens, .idx header + sizes + pointers + doc_idx."""
    es = np.dtype(np_dtype).itemsize
    with open(prefix + ".bin", "wb") as f:
        for d in docs:
            f.write(np.asarray(d, dtype=np_dtype).tobytes())
    sizes = [len(d) for d in docs]
    pointers = np.concatenate([[0], np.cumsum(sizes)[:-1] * es]).astype(np.int64) if docs else []
    with open(prefix + ".idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, code, len(docs), len(docs) + 1))
        f.write(struct.pack(f"<{len(docs)}i", *sizes))
        f.write(struct.pack(f"<{len(docs)}q", *pointers))
        f.write(struct.pack(f"<{len(docs) + 1}q", *range(len(docs) + 1)))

def shard_by_hand(p, version, tokens):
    header = np.zeros(256, dtype=np.int32)
    header[:3] = [20240520, version, len(tokens)]
    with open(p, "wb") as f:
        f.write(header.tobytes() + np.asarray(tokens, dtype=np.uint16 if version == 1 else np.uint32).tobytes())

# ---------------------------------------------------------------------------------------------
# Documents: UTF-8 text, one document per file; the byte-level tokenizer's ids are the bytes.
texts = ["First document: the quick brown fox.\n",
         "Zweites Dokument – größer, mit Umlauten. ",
         "third\n\nwith a blank line and an emoji \U0001F600 and tabs\t\t.",
         "x" * 300,
         "the end."]
files = []
for i, t in enumerate(texts):
    files.append(write(f"doc{i}.txt", t.encode("utf-8")))
doc_bytes = [list(t.encode("utf-8")) for t in texts]

# Megatron: prepare's output equals the layout written by hand, byte for byte, and reads back.
prepare("--tokenizer", "bytes", "--format", "megatron", "--val-docs", "1", "--out", path("m"), *files)
megatron_by_hand(path("hand_train"), doc_bytes[1:], 8, np.uint16)
megatron_by_hand(path("hand_val"), doc_bytes[:1], 8, np.uint16)
for split in ["train", "val"]:
    for ext in ["idx", "bin"]:
        a, b = open(path(f"m_{split}.{ext}"), "rb").read(), open(path(f"hand_{split}.{ext}"), "rb").read()
        check(f"megatron_prepare_equals_hand_layout_{split}_{ext}", a == b, f"{len(a)} vs {len(b)} bytes differ")
expect_train = np.array(sum(doc_bytes[1:], []), dtype=np.int32)
for p in [path("m_train"), path("m_train.bin"), path("m_train.idx"), path("hand_train.bin")]:
    s = stream(p)
    check(f"megatron_reads_back_{os.path.basename(p)}", np.array_equal(s, expect_train), f"{s[:8]} vs {expect_train[:8]}")
check("megatron_val_reads_back", np.array_equal(stream(path("m_val.idx")), np.array(doc_bytes[0], dtype=np.int32)), "val split differs")

# Every integer dtype code reads back (hand-written; PaddleNLP's 9 and 10 included).
rng = np.random.default_rng(0)
toks = [rng.integers(0, 120, size=n).tolist() for n in (7, 1, 30)]
for code, dt in [(1, np.uint8), (2, np.int8), (3, np.int16), (4, np.int32), (5, np.int64), (8, np.uint16), (9, np.uint32), (10, np.uint64)]:
    megatron_by_hand(path(f"code{code}"), toks, code, dt)
    s = stream(path(f"code{code}"))
    check(f"megatron_dtype_code_{code}_{np.dtype(dt).name}", np.array_equal(s, sum(toks, [])), "tokens differ")

# llm.c shards from prepare (uint16, small shards): names, headers, tokens.
prepare("--tokenizer", "bytes", "--format", "llmc", "--shard-size", "64", "--val-docs", "2", "--out", path("l"), *files)
train_shards = sorted(glob.glob(path("l_train_*.bin")))
n_train = sum(len(d) for d in doc_bytes[2:])
check("llmc_prepare_shard_names", [os.path.basename(f) for f in train_shards] == [f"l_train_{i:06d}.bin" for i in range((n_train + 63) // 64)]
      and os.path.exists(path("l_val_000000.bin")), str(train_shards))
hdr = np.fromfile(train_shards[0], dtype=np.int32, count=3)
check("llmc_prepare_header", list(hdr) == [20240520, 1, 64], str(hdr))
check("llmc_prepare_reads_back", np.array_equal(stream(path("l_train_*.bin")), sum(doc_bytes[2:], [])), "train tokens differ")
check("llmc_prepare_val_reads_back", np.array_equal(stream(path("l_val_*.bin")), sum(doc_bytes[:2], [])), "val tokens differ")

# llm.c shards written by numpy, versions 1 and 2, read back alone and as one glob.
big = rng.integers(0, 2**31 - 1, size=500)
shard_by_hand(path("sh_000.bin"), 1, expect_train[:100])
shard_by_hand(path("sh_001.bin"), 2, big)
check("llmc_v1_reads_back", np.array_equal(stream(path("sh_000.bin")), expect_train[:100]), "v1 shard differs")
check("llmc_v2_reads_back", np.array_equal(stream(path("sh_001.bin")), big), "v2 shard differs")
both = np.concatenate([expect_train[:100], big])
check("llmc_glob_v1_v2_reads_back", np.array_equal(stream(path("sh_*.bin")), both), "glob of v1+v2 differs")
rows, summary = dump(path("sh_*.bin"), 5)
check("llmc_max_token", int(summary[summary.index("max") + 1]) == both.max(), f"{summary} vs {both.max()}")

# PaddleNLP pair written by numpy.
ids = rng.integers(0, 50000, size=2000).astype(np.uint16)
lens = np.array([500, 700, 300, 500], dtype=np.int32)
np.save(path("pd_ids.npy"), ids)
np.savez(path("pd_idx.npz"), lens=lens, docs=np.array([0, 2, 4], dtype=np.int64))
for p in [path("pd"), path("pd_ids.npy"), path("pd_idx.npz")]:
    check(f"paddle_reads_back_{os.path.basename(p)}", np.array_equal(stream(p), ids), "tokens differ")
ids64 = rng.integers(0, 2**31 - 1, size=333).astype(np.int64)
with open(path("pd2_ids.npy"), "wb") as f:
    np.lib.format.write_array(f, ids64, version=(2, 0))
np.savez(path("pd2_idx.npz"), lens=np.array([333], dtype=np.uint64), docs=np.array([0, 1], dtype=np.int32))
check("paddle_npy_v2_int64_reads_back", np.array_equal(stream(path("pd2")), ids64), "tokens differ")
# zip64: Python's zipfile writes zip64 extra fields and end records past ZIP64_LIMIT; lower it.
import zipfile
zip64_limit, zipfile.ZIP64_LIMIT = zipfile.ZIP64_LIMIT, 10
np.savez(path("z64_idx.npz"), lens=lens, docs=np.array([0, 2, 4]))
zipfile.ZIP64_LIMIT = zip64_limit
write("z64_ids.npy", open(path("pd_ids.npy"), "rb").read())
check("paddle_npz_zip64_fields_read_back", np.array_equal(stream(path("z64")), ids), "tokens differ")
z = bytearray(open(path("z64_idx.npz"), "rb").read())
struct.pack_into("<HHII", z, len(z) - 22 + 8, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF)  # defer to the zip64 end record
write("z64_idx.npz", bytes(z))
check("paddle_npz_zip64_end_record_read_back", np.array_equal(stream(path("z64")), ids) and len(zipfile.ZipFile(path("z64_idx.npz")).namelist()) == 2,
      "tokens differ")

# Sample windows: sample i is tokens [i*seq, i*seq + seq + 1), (T-1)//seq samples.
for seq in [1, 3, 16, 100, 1999]:
    rows, summary = dump(path("pd"), seq)
    check(f"windows_direct_seq{seq}", rows.shape == ((len(ids) - 1) // seq, seq + 1) and np.array_equal(rows, windows(ids.astype(np.int32), seq)),
          f"shape {rows.shape}")

# Shuffle: the same windows in another order, fixed by the seed.
plain, _ = dump(path("pd"), 16)
a, _ = dump(path("pd"), 16, seed=1, shuffle=1)
b, _ = dump(path("pd"), 16, seed=1, shuffle=1)
c, _ = dump(path("pd"), 16, seed=2, shuffle=1)
def sort_rows(x):
    return x[np.lexsort(x.T[::-1])]
check("shuffle_is_permutation_of_windows", np.array_equal(sort_rows(a), sort_rows(plain)), "shuffled rows are not the windows")
check("shuffle_changes_order", not np.array_equal(a, plain), "order unchanged")
check("shuffle_same_seed", np.array_equal(a, b), "same seed, different order")
check("shuffle_other_seed", not np.array_equal(a, c), "seeds 1 and 2 agree")

# ---------------------------------------------------------------------------------------------
# JSONL: escapes (\n \t \" \\ \/ \uXXXX, surrogate pairs) decode to the string Python's json reads.
objs = [{"id": 1, "text": "caf\u00e9 \U0001F600 \u4e2d\u6587\n\t\"quoted\" back\\slash \u0001 end", "meta": {"a": [1, 2, {"b": None}]}},
        {"text": "plain ascii", "n": -1.5e3, "ok": True},
        {"meta": "first", "text": "\U0001F680 rocket / slash"}]
lines = [json.dumps(objs[0]), "", json.dumps(objs[1], ensure_ascii=False), json.dumps(objs[2]).replace("/", "\\/")]
write("docs.jsonl", ("\n".join(lines) + "\n").encode("utf-8"))
prepare("--tokenizer", "bytes", "--format", "megatron", "--out", path("j"), path("docs.jsonl"))
want = [list(json.loads(l)["text"].encode("utf-8")) for l in lines if l]
check("jsonl_escapes_decoded", np.array_equal(stream(path("j_train")), sum(want, [])), "tokens are not the UTF-8 of the decoded strings")
sizes = np.fromfile(path("j_train.idx"), dtype=np.int32, count=3, offset=34)
check("jsonl_one_document_per_line", list(sizes) == [len(w) for w in want], str(sizes))
write("key.jsonl", b'{"content": "abc", "text": "zzz"}\n')
prepare("--tokenizer", "bytes", "--format", "megatron", "--json-key", "content", "--out", path("k"), path("key.jsonl"))
check("jsonl_json_key", np.array_equal(stream(path("k_train")), list(b"abc")), "--json-key content not used")

# --split-paragraphs: blocks of lines between blank lines; --val-frac: the first round(f*n) go to val.
write("paras.txt", b"one a\none b\n\n\ntwo\n  \t\nthree a\r\nthree b\r\n\r\nfour")
paras = [b"one a\none b", b"two", b"three a\r\nthree b", b"four"]
prepare("--tokenizer", "bytes", "--format", "megatron", "--split-paragraphs", "--val-frac", "0.5", "--out", path("pp"), path("paras.txt"))
vs = np.fromfile(path("pp_val.idx"), dtype=np.int32, count=2, offset=34)
ts = np.fromfile(path("pp_train.idx"), dtype=np.int32, count=2, offset=34)
check("split_paragraphs_sizes", list(vs) + list(ts) == [len(p) for p in paras], f"{vs} {ts}")
check("split_paragraphs_tokens", np.array_equal(stream(path("pp_train")), list(b"".join(paras[2:]))), "train tokens differ")

# BPE tokenizers: the end-of-text token before each document (llm.c) or after it (Megatron),
# uint16 for GPT-2's 50257 ids, uint32 / int32 for Llama 3's 128256.
for name, eot, version, code in [("gpt2", 50256, 1, 8), ("llama3", 128001, 2, 4)]:
    rank_file = {"gpt2": "data/tokenizers/r50k_base.tiktoken", "llama3": "data/tokenizers/llama3.tiktoken"}[name]
    if not os.path.exists(rank_file):
        check(f"bpe_{name}", False, f"{rank_file} missing; run 'bash dev/data/fetch_tokenizers.sh'")
        continue
    prepare("--tokenizer", name, "--format", "llmc", "--out", path(f"{name}_l"), *files)
    prepare("--tokenizer", name, "--format", "megatron", "--out", path(f"{name}_m"), *files)
    l = stream(path(f"{name}_l_train_*.bin"))
    m = stream(path(f"{name}_m_train"))
    msizes = np.fromfile(path(f"{name}_m_train.idx"), dtype=np.int32, count=len(files), offset=34)
    starts = np.concatenate([[0], np.cumsum(msizes)[:-1]])
    hdr = np.fromfile(path(f"{name}_l_train_000000.bin"), dtype=np.int32, count=2)
    code_read = open(path(f"{name}_m_train.idx"), "rb").read()[17]
    check(f"bpe_{name}_llmc_eot_before_each_document", np.array_equal(np.flatnonzero(l == eot), starts) and hdr[1] == version, f"header {hdr}")
    check(f"bpe_{name}_megatron_eot_after_each_document", np.array_equal(np.flatnonzero(m == eot), starts + msizes - 1) and code_read == code,
          f"dtype code {code_read}")
    check(f"bpe_{name}_same_tokens_both_formats", np.array_equal(np.roll(l, -1), m), "the documents' tokens differ between formats")

# ---------------------------------------------------------------------------------------------
# Corrupt inputs: exit status 1 (die, not a crash) and a message naming the file and the problem.
def expect_fail(name, target, bad_file, words, seq=4):
    r = run([T, "dump", target, seq, 0, 0, path("dump.i32")])
    ok = r.returncode == 1 and os.path.basename(bad_file) in r.stderr and all(w in r.stderr for w in words)
    check(f"rejects_{name}", ok, f"rc {r.returncode}, stderr: {r.stderr.strip()[:300]}")

good_idx = open(path("m_train.idx"), "rb").read()
good_bin = open(path("m_train.bin"), "rb").read()
n = struct.unpack_from("<Q", good_idx, 18)[0]

def bad_megatron(name, idx=good_idx, bin=good_bin):
    write(f"{name}.idx", idx)
    write(f"{name}.bin", bin)
    return path(name)

def patched(buf, offset, fmt, *values):
    b = bytearray(buf)
    struct.pack_into(fmt, b, offset, *values)
    return bytes(b)

ptr0, doc0 = 34 + 4 * n, 34 + 12 * n
cases = [
    ("idx_truncated_header", good_idx[:20], good_bin, ["truncated"]),
    ("idx_truncated_arrays", good_idx[:-8], good_bin, ["truncated"]),
    ("idx_wrong_magic", b"MMIDIDY" + good_idx[7:], good_bin, ["bad magic"]),
    ("idx_unknown_version", patched(good_idx, 9, "<Q", 2), good_bin, ["unsupported version 2"]),
    ("idx_unknown_dtype", patched(good_idx, 17, "<B", 11), good_bin, ["unknown dtype code 11"]),
    ("idx_float_dtype", patched(good_idx, 17, "<B", 7), good_bin, ["floating point"]),
    ("idx_negative_size", patched(good_idx, 34, "<i", -1), good_bin, ["negative size"]),
    ("idx_pointer_past_bin", patched(good_idx, ptr0 + 8, "<q", len(good_bin) - 2), good_bin, ["past the end of the .bin"]),
    ("bin_truncated", good_idx, good_bin[:-3], ["past the end of the .bin"]),
    ("idx_doc_idx_not_monotone", patched(good_idx, doc0 + 8, "<q", 5), good_bin, ["not monotone"]),
    ("idx_doc_idx_not_ending_at_n", patched(good_idx, doc0 + 8 * n, "<q", n - 1), good_bin, ["ends at", "expected N"]),
    ("idx_doc_idx_not_starting_at_0", patched(good_idx, doc0, "<q", 1), good_bin, ["starts at 1"]),
    ("idx_trailing_bytes", good_idx + b"\0" * 4, good_bin, ["unexpected bytes"]),
]
for name, idx, bin, words in cases:
    prefix = bad_megatron(name, idx, bin)
    expect_fail(f"megatron_{name}", prefix, prefix + (".bin" if name.startswith("bin") else ".idx"), words)
megatron_by_hand(path("negtok"), [[1, 2, 3], [4, -5, 6]], 4, np.int32)
expect_fail("megatron_negative_token", path("negtok"), path("negtok.bin"), ["value -5", "outside [0, 2^31)"])
os.remove(path("idx_truncated_header.bin"))
expect_fail("megatron_missing_bin", path("idx_truncated_header.idx"), path("idx_truncated_header.bin"), ["not found"])

good_npy = open(path("pd_ids.npy"), "rb").read()
good_npz = open(path("pd_idx.npz"), "rb").read()
def bad_paddle(name, npy=good_npy, npz=good_npz):
    write(f"{name}_ids.npy", npy)
    write(f"{name}_idx.npz", npz)
    return path(name)
def npz_of(**arrays):
    np.savez(path("tmp.npz"), **arrays)
    return open(path("tmp.npz"), "rb").read()
def npy_of(a):
    np.save(path("tmp.npy"), a)
    return open(path("tmp.npy"), "rb").read()
crc_bad = bytearray(good_npz)
crc_bad[good_npz.index(b"\x93NUMPY") + 130] ^= 1  # a byte of the lens data (its header is 128 bytes)
cases = [
    ("npy_wrong_magic", b"\x93NUMPX" + good_npy[6:], good_npz, "ids", ["bad magic"]),
    ("npy_header_malformed", good_npy.replace(b"'shape'", b"'shope'"), good_npz, "ids", ["malformed header"]),
    ("npy_header_unterminated", good_npy.replace(b"}", b" "), good_npz, "ids", ["malformed header"]),
    ("npy_header_too_long", good_npy[:8] + b"\xff\xff" + good_npy[10:], good_npz, "ids", ["truncated header"]),
    ("npy_truncated_data", good_npy[:-10], good_npz, "ids", ["truncated data"]),
    ("npy_float_dtype", npy_of(ids.astype(np.float32)), good_npz, "ids", ["floating point"]),
    ("npy_big_endian", npy_of(ids.astype(">i4")), good_npz, "ids", ["big-endian"]),
    ("npy_2d", npy_of(ids.reshape(40, 50)), good_npz, "ids", ["1-D"]),
    ("npy_negative_token", npy_of(np.array([1, 2, -3, 4, 5, 6], dtype=np.int32)), npz_of(lens=np.array([6]), docs=np.array([0, 1])), "ids", ["value -3"]),
    ("npz_compressed", good_npy, None, "idx", ["compressed", "np.savez"]),
    ("npz_truncated", good_npy, good_npz[:-30], "idx", ["end-of-central-directory"]),
    ("npz_crc", good_npy, bytes(crc_bad), "idx", ["CRC-32"]),
    ("npz_missing_lens", good_npy, npz_of(docs=np.array([0, 1])), "idx", ["no array 'lens'"]),
    ("npz_lens_sum", good_npy, npz_of(lens=np.array([500, 600]), docs=np.array([0, 2])), "idx", ["add up to 1100"]),
    ("npz_negative_lens", good_npy, npz_of(lens=np.array([-500, 2500]), docs=np.array([0, 2])), "idx", ["negative"]),
    ("npz_docs_not_monotone", good_npy, npz_of(lens=lens, docs=np.array([0, 3, 2, 4])), "idx", ["not monotone"]),
    ("npz_docs_not_ending", good_npy, npz_of(lens=lens, docs=np.array([0, 2, 3])), "idx", ["ends at 3"]),
    ("npz_float_lens", good_npy, npz_of(lens=lens.astype(np.float64), docs=np.array([0, 4])), "idx", ["floating point"]),
]
for name, npy, npz, which, words in cases:
    if npz is None:
        np.savez_compressed(path("tmp.npz"), lens=lens, docs=np.array([0, 4]))
        npz = open(path("tmp.npz"), "rb").read()
    prefix = bad_paddle(name, npy, npz)
    expect_fail(f"paddle_{name}", prefix, prefix + ("_ids.npy" if which == "ids" else "_idx.npz"), words)

good_shard = open(path("sh_000.bin"), "rb").read()
cases = [
    ("short_header", good_shard[:1000], ["truncated", "1024-byte header"]),
    ("wrong_magic", patched(good_shard, 0, "<i", 20240521), ["bad magic 20240521"]),
    ("unknown_version", patched(good_shard, 4, "<i", 3), ["unsupported version 3"]),
    ("truncated_tokens", good_shard[:-2], ["truncated", "declares 100 tokens"]),
    ("trailing_bytes", good_shard + b"\0\0", ["unexpected bytes"]),
    ("negative_count", patched(good_shard, 8, "<i", -1), ["negative token count"]),
]
for name, data, words in cases:
    write(f"shard_{name}.bin", data)
    expect_fail(f"llmc_{name}", path(f"shard_{name}.bin"), path(f"shard_{name}.bin"), words)
write("mix_000.bin", good_shard)
write("mix_001.bin", patched(good_shard, 0, "<i", 7))
expect_fail("llmc_bad_shard_in_glob", path("mix_*.bin"), path("mix_001.bin"), ["bad magic 7"])
expect_fail("llmc_glob_no_match", path("nothing_*.bin"), path("nothing_*.bin"), ["no llm.c shard matches"])
expect_fail("too_few_tokens", path("sh_000.bin"), path("sh_000.bin"), ["fewer than one sample"], seq=100)
expect_fail("unknown_path", path("no_such_data"), path("no_such_data"), ["cannot find a data set"])

# prepare: bad input exits with status 1 and a message naming the file or flag at fault.
write("bad.jsonl", b'{"text": "ok"}\n{"text": "unterminated}\n')
write("nofield.jsonl", b'{"text": "ok"}\n{"body": "x"}\n')
write("notstr.jsonl", b'{"text": 5}\n')
for name, args, words in [
    ("invalid_json", [path("bad.jsonl")], ["bad.jsonl:2", "invalid JSON"]),
    ("missing_field", [path("nofield.jsonl")], ["nofield.jsonl:2", 'no "text" field']),
    ("field_not_string", [path("notstr.jsonl")], ["notstr.jsonl:1", "not a string"]),
    ("missing_input", [path("nope.txt")], ["nope.txt"]),
    ("unknown_flag", ["--frobnicate", "1", files[0]], ["unknown flag '--frobnicate'"]),
    ("bad_format", ["--format", "parquet", files[0]], ["--format 'parquet'"]),
    ("bad_shard_size", ["--shard-size", "0", files[0]], ["--shard-size"]),
    ("too_many_val_docs", ["--val-docs", "9", *files], ["--val-docs", "fewer than the 9 asked"]),
    ("unknown_tokenizer", ["--tokenizer", path("no_ranks"), files[0]], ["no_ranks"]),
]:
    r = run([P, "--tokenizer", "bytes", "--out", path("fail"), *args])
    ok = r.returncode == 1 and all(w in r.stderr for w in words)
    check(f"prepare_rejects_{name}", ok, f"rc {r.returncode}, stderr: {r.stderr.strip()[:300]}")

sys.exit(1 if failed else 0)
EOF
