"""Small pieces the benchmark scripts share: logging, verdicts, number
formatting, a process's anonymous memory, warming the page cache, running
commands and child processes, ferry pack's summary, the load average, the
scratch directory and the raw-results file."""

import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time


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


# ------------------------------------------------------------- commands --

def run_capture(cmd, poll_s=None, watch=None):
    """Runs cmd; returns (returncode, stdout, stderr, wall seconds). With
    poll_s, watch(pid) is called that often while it runs (once at least)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, stdout=out, stderr=err)
        if poll_s:
            while True:
                watch(p.pid)
                if p.poll() is not None:
                    break
                time.sleep(poll_s)
        p.wait()
        wall = time.perf_counter() - t0
        out.seek(0)
        err.seek(0)
        stdout = out.read().decode("utf-8", "replace")
        stderr = err.read().decode("utf-8", "replace")
    return p.returncode, stdout, stderr, wall


def run_checked(cmd, what, poll_s=None, watch=None):
    """run_capture, raising when cmd fails; returns (stdout, wall seconds)."""
    rc, stdout, stderr, wall = run_capture(cmd, poll_s, watch)
    if rc != 0:
        raise RuntimeError("%s exited %d:\n%s%s" % (what, rc, stdout, stderr))
    return stdout, wall


class PeakRssAnon:
    """A watch for run_capture: the largest RssAnon (kB) of one process (ferry
    is one process: its workers are threads)."""

    def __init__(self):
        self.kb = 0

    def __call__(self, pid):
        kb = rss_anon_kb(pid)
        if kb is not None and kb > self.kb:
            self.kb = kb


def last_json(stdout, what):
    """The last JSON object that a command printed, one to a line."""
    lines = [l for l in stdout.splitlines() if l.strip().startswith("{")]
    if not lines:
        raise RuntimeError("%s printed no JSON" % what)
    return json.loads(lines[-1])


def child_cmd(script, spec):
    """The command that runs script's child_main(spec) in a fresh Python:
    each script's main() answers `--child SPEC`."""
    return [sys.executable, os.path.abspath(script), "--child",
            json.dumps(spec)]


def shown_command(cmd, scrub):
    """A ferry command as the results show it: "ferry", then its arguments
    with this machine's paths scrubbed."""
    return ["ferry"] + [scrub(a) for a in cmd[1:]]


PACK_RE = re.compile(r": (\d+) records, ([0-9.]+) MB of fields, in "
                     r"([0-9.]+) s")


def pack_result(command, out, wall, outdir, scrub):
    """What `ferry pack` said (out, in wall seconds) and wrote in outdir, or
    None when out lacks its summary line."""
    m = PACK_RE.search(out)
    if not m:
        return None
    shards = sorted(f for f in os.listdir(outdir) if f.endswith(".ferry"))
    return {"command": command,
            "records": int(m.group(1)),
            "field_mb": float(m.group(2)),
            "reported_seconds": float(m.group(3)),
            "wall_seconds": wall,
            "shards": len(shards),
            "shard_bytes": sum(os.path.getsize(os.path.join(outdir, f))
                               for f in shards),
            "output": scrub(out.strip())}


# ---------------------------------------------------------------- a run --

def dd_read(path, nbytes):
    """`dd if=PATH of=/dev/null bs=8M`, checked to have read nbytes; returns
    its wall seconds."""
    cmd = ["dd", "if=" + path, "of=/dev/null", "bs=8M"]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise RuntimeError("dd exited %d: %s" % (p.returncode, p.stderr))
    m = re.search(r"^(\d+) bytes", p.stderr, re.M)
    if not m or int(m.group(1)) != nbytes:
        raise RuntimeError("dd: unexpected output %r" % p.stderr)
    return wall


def expect_end(it, nb):
    """Raises unless the anchor's iterator has nothing after its nb batches."""
    try:
        next(it)
    except StopIteration:
        return
    raise RuntimeError("anchor: more than %d batches" % nb)


def need_executable(path):
    if not os.access(os.path.abspath(path), os.X_OK):
        raise SystemExit("not an executable: %s" % path)


def load_average():
    """The 1, 5 and 15 minute load averages, with a note when the machine
    does not look idle."""
    load = os.getloadavg()
    if load[0] > 0.5:
        log("note: load average %.2f; the machine should be otherwise idle"
            % load[0])
    return load


def tmp_parent():
    return os.environ.get("TMPDIR") or "/tmp"


def in_scratch_dir(script, prefix, need, fn):
    """fn(tmpdir) in a fresh directory under $TMPDIR, removed afterwards,
    once there are about `need` bytes free there."""
    parent = tmp_parent()
    free = shutil.disk_usage(parent).free
    if free < need:
        raise SystemExit("%s: %.1f GB free under $TMPDIR, need about %.1f GB"
                         % (script, free / 1e9, need / 1e9))
    tmpdir = tempfile.mkdtemp(prefix=prefix, dir=parent)
    try:
        return fn(tmpdir)
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)


def print_report(lines, t_start, results):
    """Ends the report (a list of lines) with the total time since t_start
    and where the raw results go, prints it; returns the total seconds."""
    total = time.perf_counter() - t_start
    lines += ["", "total benchmark time: %.1f s; raw results: %s"
              % (total, results)]
    print("\n".join(lines), flush=True)
    return total


def shown_path(path, root):
    """path relative to root, or its bare name when it lies outside."""
    rel = os.path.relpath(os.path.abspath(path), root)
    return os.path.basename(path) if rel.startswith("..") else rel


def raw_header(name, **versions):
    """The opening of a raw-results object: the benchmark's name, when, and
    the host (versions, such as torch=..., between Python and the
    machine)."""
    host = {"cpus": os.cpu_count(), "python": platform.python_version()}
    host.update(versions)
    host["machine"] = platform.machine()
    return {"benchmark": name,
            "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "host": host}


def write_results(path, raw, private=()):
    """Writes raw as indented JSON at path (whole or not at all), refusing
    when one of the private strings (local paths) is in it."""
    text = json.dumps(raw, indent=2)
    if any(s in text for s in private):
        raise RuntimeError("a local path leaked into the results")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        fh.write(text + "\n")
    os.replace(tmp, path)
