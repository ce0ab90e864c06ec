#!/usr/bin/env python3
"""tests/plot_checks.py, for tests/t_plot.sh:
  png FILE     FILE is a PNG of at least 100x100 pixels that is not blank; prints its size
  memory LOG   scripts/plot.py's log has three "memory" rows whose measured MiB equal the plan's within 0.001"""
import re, sys
if sys.argv[1] == "png":
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    p = sys.argv[2]
    if open(p, "rb").read(8) != b"\x89PNG\r\n\x1a\n": sys.exit("not a PNG")
    a = plt.imread(p)
    if a.shape[0] < 100 or a.shape[1] < 100 or a[..., :3].std() == 0: sys.exit("blank or tiny image %s" % (a.shape,))
    print("%dx%d" % (a.shape[1], a.shape[0]))
elif sys.argv[1] == "memory":
    rows = [re.search(r"measured ([\d.]+) MiB, plan ([\d.]+) MiB", l) for l in open(sys.argv[2]) if l.startswith("memory ")]
    ok = len(rows) == 3 and all(r and abs(float(r.group(1)) - float(r.group(2))) <= 0.001 and float(r.group(1)) > 0 for r in rows)
    sys.exit(0 if ok else 1)
else:
    sys.exit("usage: plot_checks.py png FILE | memory LOG")
