#!/usr/bin/python3
"""Runs a command with the loopback servers up, for ctest and by hand:

    with_servers.py [--files DIR] [--s3-prefix P] [--only nginx,s3rver,proxy]
                    [--proxy-config JSON] -- CMD ARGS...

Starts nginx (serving DIR, or an empty temporary directory, over http and https),
s3rver (with DIR's files uploaded under P when --files is given) and the fault
proxy on free 127.0.0.1 ports, runs CMD with the FERRY_TEST_* variables set (see
README.md), and stops everything when CMD ends, on an error, and on SIGTERM or
SIGINT (which CMD gets first). Exits with CMD's status; with 77 (ctest's
SKIP_RETURN_CODE) and the reason where a server cannot run here.
"""
import argparse
import json
import os
import signal
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import servers  # noqa: E402

SKIP = 77


def main(argv):
    ap = argparse.ArgumentParser(usage=__doc__.split("\n\n")[1])
    ap.add_argument("--files", help="the directory nginx serves and s3rver gets a copy of")
    ap.add_argument("--s3-prefix", default="", help="the key prefix of that copy")
    ap.add_argument("--only", default=",".join(servers.KINDS),
                    help="the servers to start (default: all)")
    ap.add_argument("--proxy-config", default="{}", help="the fault proxy's first configuration")
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    args = ap.parse_args(argv)
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        ap.error("no command after --")
    want = [w for w in args.only.split(",") if w]
    bad = set(want) - set(servers.KINDS)
    if bad:
        ap.error("--only: unknown server(s) %s" % ", ".join(sorted(bad)))
    if args.files and not os.path.isdir(args.files):
        ap.error("--files: %s is not a directory" % args.files)

    miss = servers.missing(want)
    if miss:
        print("skipped: the loopback servers cannot run here: %s" % "; ".join(miss),
              file=sys.stderr)
        return SKIP

    stopping = []
    child = []

    def on_signal(sig, _frame):
        stopping.append(sig)
        if child:
            try:
                child[0].send_signal(sig)
            except OSError:
                pass
        else:
            raise KeyboardInterrupt

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    srv = servers.Servers(files=args.files, want=want, proxy_config=json.loads(args.proxy_config))
    try:
        srv.start()
        if args.files and srv.s3rver:
            srv.upload(args.files, args.s3_prefix)
        env = dict(os.environ)
        env.update(srv.env())
        child.append(subprocess.Popen(cmd, env=env))
        while True:
            try:
                rc = child[0].wait()
                break
            except KeyboardInterrupt:
                continue
    except KeyboardInterrupt:
        rc = 128 + (stopping[0] if stopping else signal.SIGINT)
    except servers.ServerError as e:
        print("with_servers.py: %s" % e, file=sys.stderr)
        rc = 1
    except OSError as e:  # CMD cannot be run
        print("with_servers.py: %s: %s" % (cmd[0], e), file=sys.stderr)
        rc = 127
    finally:
        srv.stop()
        for s, h in old.items():
            signal.signal(s, h)
    if rc < 0:  # CMD killed by a signal: the shell's convention
        rc = 128 - rc
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
