#!/usr/bin/python3
"""Remote shards over HTTP vs curl and vs local files, on loopback.

Usage: remote_vs.py --ferry PATH [--out FILE] [--mb N]

Makes 512 MB (--mb) of 64 MB ferry record shards (`ferry pack
synthetic:...,bytes=65536 --shard-size 64M`) in a scratch directory under
$TMPDIR, serves them with nginx (Debian's nginx-light) on 127.0.0.1, and
measures in one run, best of 3 each:
  1. a cold epoch: `ferry bench records:http://.../data.manifest` with an empty
     cache (wall time, open included, every byte fetched and every record's CRC
     checked) vs downloading the same files with 4 parallel `curl -o FILE`
     (into the same file system as the cache): target >= 0.8x curl's rate.
     Beside it, the same cold epoch with FERRY_REMOTE_CHECK=0 (no format checks
     of the fetched copies before they enter the cache), runs interleaved: what
     the checks cost, in wall and CPU time (medians);
  2. the first batch: the same set in sequential order with an empty cache
     (a remote set opens its shards as they are first read): the process's
     time to its first batch (wall time less the epoch, plus first_batch_ms),
     vs `curl` fetching one shard: target <= 1.5x;
  3. a warm epoch: the same bench with the cache full vs `ferry bench` over
     the local files: target >= 0.9x.
Prints a table and writes the raw results as JSON. Exits 0 whether the
targets pass or fail; non-zero only when something breaks.
"""

import argparse
import json
import os
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

from common import log, pf

MB = 1e6
REPEATS = 3
TARGET_COLD = 0.8
TARGET_FIRST = 1.5
TARGET_WARM = 0.9


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def start_nginx(root, work):
    port = free_port()
    conf = os.path.join(work, "nginx.conf")
    with open(conf, "w") as f:
        f.write("""worker_processes 2;
pid {w}/nginx.pid;
error_log {w}/error.log;
daemon on;
events {{ worker_connections 256; }}
http {{
  access_log off;
  sendfile on;
  client_body_temp_path {w}/body; proxy_temp_path {w}/proxy;
  fastcgi_temp_path {w}/fcgi; uwsgi_temp_path {w}/uwsgi; scgi_temp_path {w}/scgi;
  server {{ listen 127.0.0.1:{p}; root {r}; }}
}}
""".format(w=work, p=port, r=root))
    subprocess.run(["nginx", "-c", conf, "-e", os.path.join(work, "error.log")], check=True)
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
            return port
        except OSError:
            time.sleep(0.05)
    raise SystemExit("nginx did not start")


def stop_nginx(work):
    try:
        pid = int(open(os.path.join(work, "nginx.pid")).read())
        os.kill(pid, 15)
    except (OSError, ValueError):
        pass


def bench(ferry, source, cache, extra=(), env_extra=None):
    env = dict(os.environ, FERRY_CACHE=cache, **(env_extra or {}))
    cmd = [ferry, "bench", source, "--json", "--no-progress", "--batch", "16"] + list(extra)
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    if p.returncode != 0:
        raise SystemExit("%s failed: %s" % (" ".join(cmd), p.stderr.strip()))
    r = json.loads(p.stdout.strip().splitlines()[-1])
    if r.get("errors"):
        raise SystemExit("%s: errors: %s" % (source, r))
    r["wall_s"] = wall
    r["cpu_s"] = cpu
    return r


def curl_parallel(urls, dest, n=4):
    os.makedirs(dest, exist_ok=True)
    t0 = time.perf_counter()
    procs, pending = [], list(urls)
    while pending or procs:
        while pending and len(procs) < n:
            u = pending.pop(0)
            procs.append(subprocess.Popen(["curl", "-sS", "-f", "-o",
                                           os.path.join(dest, os.path.basename(u)), u]))
        p = procs.pop(0)
        if p.wait() != 0:
            raise SystemExit("curl failed")
    wall = time.perf_counter() - t0
    shutil.rmtree(dest)
    return wall


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ferry", required=True)
    ap.add_argument("--out")
    ap.add_argument("--mb", type=int, default=512)
    a = ap.parse_args()
    ferry = os.path.abspath(a.ferry)
    if not shutil.which("nginx") and not os.path.exists("/usr/sbin/nginx"):
        raise SystemExit("remote_vs.py: nginx is missing (Debian: apt-get install nginx-light)")
    os.environ["PATH"] += ":/usr/sbin"
    work = tempfile.mkdtemp(prefix="ferry-remote-bench-")
    try:
        data = os.path.join(work, "www")
        os.makedirs(data)
        records = a.mb * (1 << 20) // 65536
        log("packing %d MB of 64 MB record shards" % a.mb)
        subprocess.run([ferry, "pack", "synthetic:%d,bytes=65536" % records,
                        os.path.join(data, "set"), "--shard-size", "64M", "--no-progress"],
                       check=True, capture_output=True)
        # nginx's workers run as another user: the files must be readable to all
        for d, _, fs in os.walk(work):
            os.chmod(d, 0o755)
            for f in fs:
                os.chmod(os.path.join(d, f), 0o644)
        shards = sorted(f for f in os.listdir(os.path.join(data, "set")) if f.endswith(".ferry"))
        total = sum(os.path.getsize(os.path.join(data, "set", f)) for f in shards)
        port = start_nginx(data, work)
        base = "http://127.0.0.1:%d/set/" % port
        urls = [base + f for f in shards]
        remote = "records:" + base + "data.manifest"
        local = "records:" + os.path.join(data, "set")
        cache = os.path.join(work, "cache")
        res = {"bytes": total, "shards": len(shards), "source": remote}

        def cold(source, extra=(), env_extra=None):
            shutil.rmtree(cache, ignore_errors=True)
            return bench(ferry, source, cache, extra, env_extra)

        log("1. cold epoch vs 4 parallel curl, and without the checks before the rename")
        curl4 = min(curl_parallel(urls, os.path.join(work, "curl")) for _ in range(REPEATS))
        colds, unchecked = [], []
        for _ in range(REPEATS):  # interleaved, so that a busy moment hits both
            colds.append(cold(remote, ["--workers", "2"]))
            unchecked.append(cold(remote, ["--workers", "2"], {"FERRY_REMOTE_CHECK": "0"}))
        best = min(colds, key=lambda r: r["wall_s"])
        med = lambda rs, k: statistics.median(r[k] for r in rs)  # noqa: E731
        check_cost = {"wall_s": med(colds, "wall_s") - med(unchecked, "wall_s"),
                      "cpu_s": med(colds, "cpu_s") - med(unchecked, "cpu_s"),
                      "unchecked_wall_s": med(unchecked, "wall_s"),
                      "checked_wall_s": med(colds, "wall_s"),
                      "unchecked_cpu_s": med(unchecked, "cpu_s"),
                      "checked_cpu_s": med(colds, "cpu_s")}
        res["check_cost"] = check_cost
        res["curl4_s"] = curl4
        res["cold"] = best
        cold_ratio = curl4 / best["wall_s"]

        log("2. first batch vs one shard by curl")
        one = min(curl_parallel(urls[:1], os.path.join(work, "curl"), 1) for _ in range(REPEATS))
        firsts = []
        for _ in range(REPEATS):
            firsts.append(cold(remote, ["--workers", "2"]))
        first = min(firsts, key=lambda r: r["wall_s"] - r["seconds"] + r["first_batch_ms"])
        # first_batch_ms counts from the loader's creation: the source's open
        # (which fetches what a map-style set or a stream's first file needs)
        # comes before it; the wall time less the epoch bounds it from above
        res["one_shard_curl_s"] = one
        res["first"] = first
        first_s = first["wall_s"] - first["seconds"] + first["first_batch_ms"] / 1000

        log("3. warm epoch vs local files")
        bench(ferry, remote, cache, ["--workers", "2"])  # fill the cache
        os.sync()  # the copies written back: no writeback under the timed runs
        warms, locs = [], []
        for _ in range(REPEATS + 2):  # interleaved, so that a busy moment hits both
            warms.append(bench(ferry, remote, cache, ["--workers", "2"]))
            locs.append(bench(ferry, local, cache, ["--workers", "2"]))
        warm = min(warms, key=lambda r: r["wall_s"])
        loc = min(locs, key=lambda r: r["wall_s"])
        res["warm"] = warm
        res["local"] = loc
        warm_ratio = loc["wall_s"] / warm["wall_s"]
        stop_nginx(work)

        rows = [
            ("cold epoch (%.0f MB)" % (total / MB), "%.0f MB/s" % (total / MB / best["wall_s"]),
             "4x curl %.0f MB/s" % (total / MB / curl4), "%.2fx" % cold_ratio,
             ">= %.1fx" % TARGET_COLD, pf(cold_ratio >= TARGET_COLD)),
            ("first batch", "%.3f s" % first_s, "1 shard by curl %.3f s" % one,
             "%.2fx" % (first_s / one), "<= %.1fx" % TARGET_FIRST,
             pf(first_s / one <= TARGET_FIRST)),
            ("warm epoch", "%.0f MB/s" % (total / MB / warm["wall_s"]),
             "local %.0f MB/s" % (total / MB / loc["wall_s"]), "%.2fx" % warm_ratio,
             ">= %.1fx" % TARGET_WARM, pf(warm_ratio >= TARGET_WARM)),
        ]
        print("%-24s %-14s %-26s %-7s %-8s %s" % ("", "ferry", "anchor", "ratio", "target", ""))
        for r in rows:
            print("%-24s %-14s %-26s %-7s %-8s %s" % r)
        print("cold epoch: %d bytes downloaded, %d fetched, %d retries" %
              (best["downloaded_bytes"], best["cache_misses"], best["retries"]))
        print("checks before the rename (median of %d, interleaved): %.3f s wall "
              "(%.3f s checked, %.3f s not), %.3f s CPU (%.3f s checked, %.3f s not)" %
              (REPEATS, check_cost["wall_s"], check_cost["checked_wall_s"],
               check_cost["unchecked_wall_s"], check_cost["cpu_s"], check_cost["checked_cpu_s"],
               check_cost["unchecked_cpu_s"]))
        res["ratios"] = {"cold": cold_ratio, "first": first_s / one, "warm": warm_ratio}
        if a.out:
            with open(a.out, "w") as f:
                json.dump(res, f, indent=1)
    finally:
        stop_nginx(work)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
