"""Small pieces the benchmark scripts share: logging, verdicts, number
formatting, a process's anonymous memory, and warming the page cache."""

import os
import sys


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def pf(ok):
    return "PASS" if ok else "FAIL"


def fmt_rate(x):
    return "{:,.0f}".format(x)


def rss_anon_kb(pid):
    """RssAnon of pid in kB, or None when it is gone (or a zombie)."""
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


def warm(path):
    """Reads a file (or every file under a directory) once, so that it is in
    the page cache. Returns the bytes read."""
    if os.path.isdir(path):
        return sum(warm(os.path.join(d, f))
                   for d, _, fs in os.walk(path) for f in sorted(fs))
    buf = bytearray(8 << 20)
    n = 0
    with open(path, "rb", buffering=0) as f:
        while True:
            k = f.readinto(buf)
            if not k:
                break
            n += k
    return n
