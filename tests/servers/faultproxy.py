#!/usr/bin/python3
"""A fault-injecting HTTP proxy for the remote-reading tests (standard library only).

It listens on one loopback port per upstream (nginx, s3rver, ...) and forwards each
request unchanged -- method, target, headers in order, Host and Authorization
included, so a SigV4 signature made for the proxy's address still verifies
upstream -- and the response back, streaming its body. Before or while it
forwards it may inject a fault:

  slowdown  503 SlowDown with S3's XML error body, upstream not asked
  500 502 504 429
            that status with an S3-style XML error body, upstream not asked
  reset     the status line, the headers and part of the body, then a TCP reset
  short     the headers (Content-Length promised), part of the body, then a clean close
  stall     the headers and part of the body, a pause of stall_seconds, then the rest
  drop      the connection reset before any response

Faults are seeded and bounded. Whether the n-th request for one (listener, method,
target, Range) is faulted is a hash of (seed, those, n), so a run is the same for a
seed whatever the interleaving of other requests; after max_consecutive faults in
a row for one such key the next request goes through, so a client that retries
always finishes. A key pattern can answer 404 NoSuchKey for good (not_found), or
403 AccessDenied to every request that is not signed (deny_unsigned: no
Authorization header and no X-Amz-Signature in the query, as S3 answers a private
bucket's anonymous readers; s3rver itself serves every bucket publicly), and
an object can "change" after a number of requests (etag_change: its ETag and
Last-Modified become new ones, and conditional requests see it so: If-Match with
the old ETag gets 412, If-Range with the old ETag gets the whole object; with
"bytes": true its bytes change too, each XOR 0x5A, the size staying).

Configuration (JSON), all fields optional:
  {"seed": 0,
   "faults": {"slowdown": 0.15, "reset": 0.1, "short": 0.1, ...},  probabilities
   "max_consecutive": 2,           faults in a row per key, at most
   "stall_seconds": 2.0,
   "methods": ["GET", "HEAD"],     methods that may be faulted
   "match": null,                  regex: only targets it finds may be faulted
   "not_found": ["regex", ...],    targets answered 404 NoSuchKey, always
   "deny_unsigned": null,          regex: targets answered 403 AccessDenied when unsigned
   "etag_change": [{"match": "regex", "after": 1, "bytes": false}, ...]}

Control endpoint (its own port; JSON in and out):
  GET  /config            the configuration in force
  PUT  /config  (or POST) replace it (fields left out take their defaults) and
                          forget the per-key history; counters are kept
  POST /reset             zero the counters, the history and the log
  GET  /counters          {"requests", "forwarded", "injected": {kind: n},
                           "not_found", "denied_unsigned", "etag_changed", "upstream_errors",
                           "listeners": {name: {"requests", "injected"}}}
  GET  /log               the last 10000 requests in the order they came:
                          listener, method, target, range, fault (or null),
                          status (null until the response has begun)

Run:  faultproxy.py --upstream s3=http://127.0.0.1:9000 --upstream http=http://... \
        [--config JSON] [--host 127.0.0.1]
It prints one line of JSON, {"control": PORT, "listen": {NAME: PORT}}, once it
listens, and runs until SIGTERM or SIGINT.
"""
import argparse
import collections
import email.utils
import hashlib
import http.client
import http.server
import json
import re
import signal
import socket
import socketserver
import struct
import sys
import threading
import time
import urllib.parse

STATUS_FAULTS = {
    "slowdown": (503, "Slow Down", "SlowDown", "Please reduce your request rate."),
    "500": (500, "Internal Server Error", "InternalError",
            "We encountered an internal error. Please try again."),
    "502": (502, "Bad Gateway", "BadGateway", "The proxy got no valid response."),
    "504": (504, "Gateway Timeout", "GatewayTimeout", "The proxy timed out."),
    "429": (429, "Too Many Requests", "TooManyRequests", "Please reduce your request rate."),
}
BODY_FAULTS = ("reset", "short", "stall")
KINDS = tuple(STATUS_FAULTS) + BODY_FAULTS + ("drop",)

DEFAULTS = {
    "seed": 0,
    "faults": {},
    "max_consecutive": 2,
    "stall_seconds": 2.0,
    "methods": ["GET", "HEAD"],
    "match": None,
    "not_found": [],
    "deny_unsigned": None,
    "etag_change": [],
}

HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "proxy-authenticate",
              "proxy-authorization", "te", "trailer", "trailers", "transfer-encoding", "upgrade",
              "expect"}
LOG_LIMIT = 10000
FLIP = bytes(b ^ 0x5A for b in range(256))
CHUNK = 256 * 1024


def check_config(cfg):
    """Returns the configuration with defaults filled in; raises ValueError on a bad one."""
    if not isinstance(cfg, dict):
        raise ValueError("the configuration is a JSON object")
    unknown = set(cfg) - set(DEFAULTS)
    if unknown:
        raise ValueError("unknown configuration fields: %s" % ", ".join(sorted(unknown)))
    out = json.loads(json.dumps(DEFAULTS))
    out.update(json.loads(json.dumps(cfg)))
    faults = out["faults"]
    if not isinstance(faults, dict):
        raise ValueError("faults is an object of probabilities")
    for k, p in faults.items():
        if k not in KINDS:
            raise ValueError("unknown fault %r (known: %s)" % (k, ", ".join(KINDS)))
        if not isinstance(p, (int, float)) or p < 0 or p > 1:
            raise ValueError("fault %s: probability %r is not in [0, 1]" % (k, p))
    if sum(faults.values()) > 1 + 1e-9:
        raise ValueError("the fault probabilities add up to more than 1")
    if not isinstance(out["max_consecutive"], int) or out["max_consecutive"] < 0:
        raise ValueError("max_consecutive is an integer >= 0")
    out["stall_seconds"] = float(out["stall_seconds"])
    out["methods"] = [m.upper() for m in out["methods"]]
    if out["deny_unsigned"] is not None and not isinstance(out["deny_unsigned"], str):
        raise ValueError("deny_unsigned is a regex or null")
    for pat in ([out["match"]] if out["match"] else []) + list(out["not_found"]) + \
            ([out["deny_unsigned"]] if out["deny_unsigned"] is not None else []):
        re.compile(pat)
    for rule in out["etag_change"]:
        if not isinstance(rule, dict) or "match" not in rule:
            raise ValueError("etag_change entries are {\"match\": regex, \"after\": n}")
        re.compile(rule["match"])
        rule.setdefault("after", 0)
        unknown = set(rule) - {"match", "after", "bytes"}
        if unknown:
            raise ValueError("etag_change: unknown fields %s" % ", ".join(sorted(unknown)))
    return out


def uniform(*parts):
    """A number in [0, 1) that depends only on parts."""
    h = hashlib.sha256("\0".join(str(p) for p in parts).encode("utf-8", "surrogateescape"))
    return int.from_bytes(h.digest()[:8], "big") / 2.0 ** 64


class State:
    """What the listeners share: configuration, per-key history, counters and log."""

    def __init__(self, cfg):
        self.lock = threading.Lock()
        self.cfg = check_config(cfg)
        self._forget()
        self._zero()

    def _forget(self):
        self.attempts = collections.Counter()
        self.consecutive = collections.Counter()
        self.seen = collections.Counter()

    def _zero(self):
        self.counters = {"requests": 0, "forwarded": 0, "injected": {k: 0 for k in KINDS},
                         "not_found": 0, "denied_unsigned": 0, "etag_changed": 0,
                         "upstream_errors": 0,
                         "listeners": {}}
        self.log = collections.deque(maxlen=LOG_LIMIT)

    def configure(self, cfg):
        cfg = check_config(cfg)
        with self.lock:
            self.cfg = cfg
            self._forget()

    def reset(self):
        with self.lock:
            self._forget()
            self._zero()

    def snapshot(self):
        with self.lock:
            return json.loads(json.dumps(self.counters))

    def decide(self, listener, method, target, rng, signed=True):
        """Returns (fault or None, etag change rule in force or None, log entry). The
        entry is logged here, in the order of decisions, and completed later."""
        with self.lock:
            entry = {"listener": listener, "method": method, "target": target, "range": rng,
                     "fault": None, "status": None}
            self.log.append(entry)
            fault, changed = self._decide(listener, method, target, rng, signed)
            entry["fault"] = fault
            return fault, changed, entry

    def _decide(self, listener, method, target, rng, signed):
        cfg = self.cfg
        c = self.counters
        c["requests"] += 1
        per = c["listeners"].setdefault(listener, {"requests": 0, "injected": 0})
        per["requests"] += 1
        path = target.split("?", 1)[0]
        if any(re.search(p, path) for p in cfg["not_found"]):
            c["not_found"] += 1
            return "not_found", None
        if cfg["deny_unsigned"] is not None and not signed and re.search(cfg["deny_unsigned"],
                                                                          path):
            c["denied_unsigned"] += 1
            return "denied_unsigned", None
        changed = None
        for rule in cfg["etag_change"]:
            if re.search(rule["match"], path):
                self.seen[(listener, path)] += 1
                if self.seen[(listener, path)] > rule["after"]:
                    changed = rule
                break
        if method not in cfg["methods"] or (cfg["match"] and
                                            not re.search(cfg["match"], target)):
            return None, changed
        key = (listener, method, target, rng or "")
        n = self.attempts[key]
        self.attempts[key] = n + 1
        if self.consecutive[key] >= cfg["max_consecutive"]:
            self.consecutive[key] = 0
            return None, changed
        u = uniform(cfg["seed"], listener, method, target, rng or "", n)
        acc = 0.0
        for kind in KINDS:
            acc += cfg["faults"].get(kind, 0)
            if u < acc:
                self.consecutive[key] += 1
                return kind, changed
        self.consecutive[key] = 0
        return None, changed

    def count(self, listener, kind):
        with self.lock:
            if kind in KINDS:
                self.counters["injected"][kind] += 1
                self.counters["listeners"][listener]["injected"] += 1
            else:
                self.counters[kind] += 1


def changed_etag(etag, seed):
    return '"%s"' % hashlib.md5(("%s/%s/changed" % (etag, seed)).encode()).hexdigest()


def error_xml(code, message, resource):
    return ('<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>%s</Code><Message>%s</Message>'
            '<Resource>%s</Resource><RequestId>FAULTPROXY</RequestId></Error>' % (
                code, message, resource.replace("&", "&amp;").replace("<", "&lt;"))).encode()


class ProxyHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "faultproxy"

    def log_message(self, fmt, *args):
        pass

    def do_GET(self):
        self.proxy()

    do_HEAD = do_PUT = do_POST = do_DELETE = do_OPTIONS = do_PATCH = do_GET

    def read_request_body(self):
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            data = bytearray()
            while True:
                size = int(self.rfile.readline().split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return bytes(data)
                data += self.rfile.read(size)
                self.rfile.readline()
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def send_simple(self, status, reason, body, headers=()):
        self.send_response_only(status, reason)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Date", email.utils.formatdate(usegmt=True))
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def hard_close(self):
        """Closes the connection with a TCP reset."""
        self.close_connection = True
        try:
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
        except OSError:
            pass

    def proxy(self):
        srv = self.server
        state = srv.state
        target = self.path
        rng = self.headers.get("Range")
        try:
            body = self.read_request_body()
        except (OSError, ValueError):
            self.close_connection = True
            return
        signed = self.headers.get("Authorization") is not None or \
            "x-amz-signature=" in urllib.parse.urlsplit(target).query.lower()
        fault, changed, entry = state.decide(srv.name, self.command, target, rng, signed)
        try:
            self._proxy(srv, state, target, body, fault, changed, entry)
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError):
            self.close_connection = True

    def _proxy(self, srv, state, target, body, fault, changed, entry):
        path = urllib.parse.unquote(target.split("?", 1)[0])
        if fault == "not_found":
            entry["status"] = 404
            self.send_simple(404, "Not Found", error_xml(
                "NoSuchKey", "The specified key does not exist.", path))
            return
        if fault == "denied_unsigned":
            entry["status"] = 403
            self.send_simple(403, "Forbidden", error_xml("AccessDenied", "Access Denied", path))
            return
        if fault in STATUS_FAULTS:
            status, reason, code, message = STATUS_FAULTS[fault]
            state.count(srv.name, fault)
            entry["status"] = status
            self.send_simple(status, reason, error_xml(code, message, path))
            return
        if fault == "drop":
            state.count(srv.name, fault)
            self.hard_close()
            return

        headers = [(k, v) for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP]
        seed = state.cfg["seed"]
        if changed is not None and srv.etags.get(path):
            # Upstream knows the real ETag; the client may hold the real one (the
            # object as it was) or the made-up one (the object as it is now).
            real = srv.etags[path]
            fresh = changed_etag(real, seed)
            drop_range = False
            out = []
            for k, v in headers:
                lk = k.lower()
                if lk in ("if-match", "if-range", "if-none-match"):
                    if v.strip() == real:
                        if lk == "if-match":
                            entry["status"] = 412
                            self.send_simple(412, "Precondition Failed", error_xml(
                                "PreconditionFailed", "At least one of the pre-conditions "
                                "you specified did not hold", path))
                            return
                        drop_range = drop_range or lk == "if-range"
                        continue
                    if v.strip() == fresh:
                        v = real
                out.append((k, v))
            headers = [(k, v) for k, v in out if not (drop_range and k.lower() == "range")]

        conn = http.client.HTTPConnection(srv.upstream[0], srv.upstream[1], timeout=120)
        try:
            conn.putrequest(self.command, target, skip_host=True, skip_accept_encoding=True)
            for k, v in headers:
                conn.putheader(k, v)
            if body and not any(k.lower() == "content-length" for k, _ in headers):
                conn.putheader("Content-Length", str(len(body)))
            conn.endheaders(body or None)
            resp = conn.getresponse()
        except OSError as e:
            conn.close()
            state.count(srv.name, "upstream_errors")
            entry["status"] = 502
            self.send_simple(502, "Bad Gateway", error_xml(
                "BadGateway", "faultproxy: upstream %s:%d: %s" % (srv.upstream + (e,)), path))
            return
        try:
            self._respond(srv, state, resp, fault, changed, entry, path, seed)
        finally:
            conn.close()

    def _respond(self, srv, state, resp, fault, changed, entry, path, seed):
        state.count(srv.name, "forwarded")
        rheaders = [(k, v) for k, v in resp.getheaders() if k.lower() not in HOP_BY_HOP]
        length = resp.getheader("Content-Length")
        has_body = self.command != "HEAD" and resp.status not in (204, 304) and \
            resp.status >= 200
        data = None
        if has_body and length is None:
            data = resp.read()
            rheaders.append(("Content-Length", str(len(data))))
            length = len(data)
        length = int(length) if length is not None else 0
        etag = resp.getheader("ETag")
        if etag:
            srv.etags[path] = etag
        if changed is not None and etag:
            state.count(srv.name, "etag_changed")
            fresh = changed_etag(etag, seed)
            new = []
            for k, v in rheaders:
                if k.lower() == "etag":
                    v = fresh
                elif k.lower() == "last-modified":
                    t = email.utils.parsedate_to_datetime(v).timestamp() + 3600
                    v = email.utils.formatdate(t, usegmt=True)
                new.append((k, v))
            rheaders = new

        if fault in BODY_FAULTS and not has_body:
            if fault == "reset":
                state.count(srv.name, fault)
                self.hard_close()
                return
            fault = None
            entry["fault"] = None
        cut = 0
        if fault in BODY_FAULTS:
            cut = 1 + int(uniform(seed, "cut", path, length) * (length - 1)) if length > 1 else 0

        entry["status"] = resp.status
        self.send_response_only(resp.status, resp.reason)
        for k, v in rheaders:
            self.send_header(k, v)
        self.end_headers()
        if not has_body:
            return
        if fault is not None:
            state.count(srv.name, fault)
        sent = 0
        if data is not None:
            src = iter([data])
        else:
            src = iter(lambda: resp.read(CHUNK), b"")
        if changed is not None and changed.get("bytes") and etag and resp.status in (200, 206):
            src = (c.translate(FLIP) for c in src)  # the new version's bytes
        stalled = False
        for chunk in src:
            if fault in BODY_FAULTS and not stalled and sent + len(chunk) >= cut:
                head = chunk[:cut - sent]
                if head:
                    self.wfile.write(head)
                sent += len(head)
                chunk = chunk[len(head):]
                if fault == "reset":
                    self.hard_close()
                    return
                if fault == "short":
                    self.close_connection = True
                    return
                stalled = True
                deadline = time.monotonic() + state.cfg["stall_seconds"]
                while time.monotonic() < deadline:
                    time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))
            if chunk:
                self.wfile.write(chunk)
                sent += len(chunk)
        if sent != length:
            self.close_connection = True


class ControlHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def reply(self, status, obj):
        body = (json.dumps(obj, indent=1) + "\n").encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        state = self.server.state
        if self.path == "/config":
            with state.lock:
                self.reply(200, state.cfg)
        elif self.path == "/counters":
            self.reply(200, state.snapshot())
        elif self.path == "/log":
            with state.lock:
                self.reply(200, list(state.log))
        else:
            self.reply(404, {"error": "unknown path %s (try /config, /counters, /log, /reset)"
                             % self.path})

    def do_PUT(self):
        state = self.server.state
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b""
        if self.path == "/config":
            try:
                state.configure(json.loads(raw or b"{}"))
            except (ValueError, re.error) as e:
                self.reply(400, {"error": str(e)})
                return
            with state.lock:
                self.reply(200, state.cfg)
        elif self.path == "/reset":
            state.reset()
            self.reply(200, state.snapshot())
        else:
            self.reply(404, {"error": "unknown path %s" % self.path})

    do_POST = do_PUT


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128


def start(upstreams, cfg=None, host="127.0.0.1"):
    """Starts the listeners and the control endpoint in threads of this process.
    upstreams: {name: "http://host:port"}. Returns (state, {name: port}, control
    port, servers)."""
    state = State(cfg or {})
    servers = []
    ports = {}
    for name, url in upstreams.items():
        u = urllib.parse.urlsplit(url)
        if u.scheme != "http" or not u.hostname:
            raise ValueError("upstream %s: %r is not an http:// URL" % (name, url))
        s = Server((host, 0), ProxyHandler)
        s.name = name
        s.state = state
        s.upstream = (u.hostname, u.port or 80)
        s.etags = {}
        servers.append(s)
        ports[name] = s.server_address[1]
    c = Server((host, 0), ControlHandler)
    c.state = state
    servers.append(c)
    for s in servers:
        threading.Thread(target=s.serve_forever, kwargs={"poll_interval": 0.2},
                         daemon=True).start()
    return state, ports, c.server_address[1], servers


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--upstream", action="append", default=[], metavar="NAME=URL",
                    help="a listener forwarding to URL (repeatable)")
    ap.add_argument("--config", default="{}", help="the initial configuration, JSON")
    ap.add_argument("--host", default="127.0.0.1")
    args = ap.parse_args(argv)
    ups = {}
    for spec in args.upstream:
        name, sep, url = spec.partition("=")
        if not sep:
            ap.error("--upstream takes NAME=URL, not %r" % spec)
        ups[name] = url
    try:
        _, ports, control, servers = start(ups, json.loads(args.config), args.host)
    except (ValueError, re.error) as e:
        print("faultproxy: %s" % e, file=sys.stderr)
        return 2
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    print(json.dumps({"control": control, "listen": ports}), flush=True)
    while not stop.wait(3600):
        pass
    for s in servers:  # the threads serving them are daemons: they end with the process
        s.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
