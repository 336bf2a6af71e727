#!/usr/bin/python3
"""Loopback servers for the remote-reading tests: nginx (http and https, a
self-signed certificate made at start), s3rver (SigV4 signatures checked, one
bucket) and the fault proxy (faultproxy.py) in front of both.

    with Servers(files="dir") as s:      # any of want=("nginx", "s3rver", "proxy")
        s.upload("fixtures/", "train/")  # boto3 into the bucket
        s.env()                          # the FERRY_TEST_* variables
        s.proxy.configure(faults={"slowdown": 0.2}, seed=1)
        s.proxy.counters()

Every process is a child of this one (and told to die with it: with the thread
that started it, so start them from one that outlives them), listens on
127.0.0.1 only, and lives in a temporary directory removed at stop. missing()
says which servers cannot run here. Standard library only, plus boto3 for
upload() and client().

    servers.py upload LOCAL [PREFIX]   uploads a file or a directory tree into the
                                       bucket named by the FERRY_TEST_S3_*
                                       variables (for tests run by with_servers.py)
"""
import ctypes
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
S3RVER_LIB = os.path.join(HERE, "node_modules", "@20minutes", "s3rver", "lib", "s3rver.js")
BUCKET = "ferry-test"
ACCESS_KEY = "FERRYTESTACCESSKEY01"
SECRET_KEY = "ferry/test+secret/key/0123456789abcdefghij"
REGION = "us-east-1"
KINDS = ("nginx", "s3rver", "proxy")
START_TIMEOUT = 20.0


class ServerError(RuntimeError):
    """A server that should run here did not start; the message says why."""


def _nginx():
    return shutil.which("nginx") or next(
        (p for p in ("/usr/sbin/nginx", "/sbin/nginx") if os.access(p, os.X_OK)), None)


def missing(want=KINDS):
    """What keeps the servers in want from running here: a list of sentences, empty
    when they all can."""
    out = []
    want = set(want)
    if "proxy" in want:
        want.add("nginx")  # what it forwards to
    if "nginx" in want:
        if not _nginx():
            out.append("nginx not found (Debian: nginx-light)")
        if not shutil.which("openssl"):
            out.append("openssl not found (Debian: openssl)")
    if "s3rver" in want:
        if not shutil.which("node"):
            out.append("node not found (Debian: nodejs)")
        if not os.path.exists(S3RVER_LIB):
            out.append("s3rver not installed (npm ci --prefix %s)" % os.path.relpath(HERE))
        try:
            import boto3  # noqa: F401  (fixtures are uploaded with it)
        except ImportError:
            out.append("boto3 not importable by %s (Debian: python3-boto3)" % sys.executable)
    return out


def _die_with_parent():
    # the child gets SIGTERM when this process dies, however it dies
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _spawn(args, **kw):
    return subprocess.Popen(args, stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent,
                            **kw)


def _stop(proc, sig=signal.SIGTERM, timeout=5.0):
    if proc is None or proc.poll() is not None:
        return
    try:
        proc.send_signal(sig)
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _listening(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def _read_line(proc, what, timeout=START_TIMEOUT):
    """The first line proc prints, or ServerError naming what went wrong."""
    deadline = time.monotonic() + timeout
    buf = b""
    fd = proc.stdout.fileno()
    while b"\n" not in buf:
        left = deadline - time.monotonic()
        if left <= 0:
            raise ServerError("%s did not start within %.0f s" % (what, timeout))
        r, _, _ = select.select([fd], [], [], min(left, 0.5))
        if r:
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            buf += chunk
        elif proc.poll() is not None:
            break
    if b"\n" not in buf:
        err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
        try:
            rc = proc.wait(5)
        except subprocess.TimeoutExpired:
            rc = "still running"
        raise ServerError("%s exited (%s) before it listened: %s" % (what, rc,
                                                                     err.strip()[-2000:]))
    return buf.split(b"\n", 1)[0].decode()


def make_certificate(directory):
    """A certificate authority and a server certificate it signs, for 127.0.0.1 and
    localhost. Returns (ca_file, cert_file, key_file)."""
    ca_key, ca = os.path.join(directory, "ca.key"), os.path.join(directory, "ca.pem")
    key, csr = os.path.join(directory, "server.key"), os.path.join(directory, "server.csr")
    cert, ext = os.path.join(directory, "server.pem"), os.path.join(directory, "server.ext")
    with open(ext, "w") as f:
        f.write("basicConstraints=critical,CA:FALSE\n"
                "keyUsage=critical,digitalSignature,keyEncipherment\n"
                "extendedKeyUsage=serverAuth\n"
                "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                "subjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid\n")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    cmds = [
        ["openssl", "req", "-x509", *ec, "-keyout", ca_key, "-out", ca, "-days", "3",
         "-subj", "/CN=ferry test CA", "-addext", "basicConstraints=critical,CA:TRUE",
         "-addext", "keyUsage=critical,keyCertSign,cRLSign"],
        ["openssl", "req", "-new", *ec, "-keyout", key, "-out", csr, "-subj", "/CN=127.0.0.1"],
        ["openssl", "x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial",
         "-out", cert, "-days", "3", "-extfile", ext],
    ]
    for c in cmds:
        p = subprocess.run(c, stdin=subprocess.DEVNULL, capture_output=True, text=True)
        if p.returncode != 0:
            raise ServerError("%s failed: %s" % (" ".join(c[:3]), p.stderr.strip()))
    return ca, cert, key


NGINX_CONF = """\
# made by servers.py
{user}
worker_processes 1;
daemon off;
master_process on;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log warn;
events {{ worker_connections 512; }}
http {{
  types {{ application/json json; text/plain txt; }}
  default_type application/octet-stream;
  access_log {prefix}/access.log;
  client_body_temp_path {prefix}/tmp/body;
  proxy_temp_path {prefix}/tmp/proxy;
  fastcgi_temp_path {prefix}/tmp/fastcgi;
  uwsgi_temp_path {prefix}/tmp/uwsgi;
  scgi_temp_path {prefix}/tmp/scgi;
  sendfile on;
  tcp_nopush on;
  keepalive_timeout 60;
  keepalive_requests 100000;
  server {{
    listen 127.0.0.1:{http_port};
    root {root};
    autoindex on;
    # the same files from a server that ignores Range (a 200 with the whole object)
    location /norange/ {{
      alias {root}/;
      max_ranges 0;
    }}
  }}
  server {{
    listen 127.0.0.1:{https_port} ssl{http2};
    ssl_certificate {cert};
    ssl_certificate_key {key};
    root {root};
    autoindex on;
  }}
}}
"""


class Nginx:
    """nginx serving root over http and https (Range, ETag and Last-Modified are
    nginx's own), unprivileged state in prefix."""

    def __init__(self, root, prefix, cert, key):
        self.root, self.prefix, self.cert, self.key = root, prefix, cert, key
        self.proc = None
        self.http_port = self.https_port = None

    @property
    def http_url(self):
        return "http://127.0.0.1:%d" % self.http_port

    @property
    def https_url(self):
        return "https://127.0.0.1:%d" % self.https_port

    def start(self):
        nginx = _nginx()
        for d in ("tmp/body", "tmp/proxy", "tmp/fastcgi", "tmp/uwsgi", "tmp/scgi"):
            os.makedirs(os.path.join(self.prefix, d), exist_ok=True)
        http2 = " http2" if "http_v2_module" in subprocess.run(
            [nginx, "-V"], capture_output=True, text=True).stderr else ""
        err = ""
        for _ in range(8):  # a port taken between choosing and binding: choose again
            self.http_port, self.https_port = _free_port(), _free_port()
            if self.http_port == self.https_port:
                continue
            conf = os.path.join(self.prefix, "nginx.conf")
            with open(conf, "w") as f:
                f.write(NGINX_CONF.format(
                    user="user root root;" if os.geteuid() == 0 else "",
                    prefix=self.prefix, root=os.path.abspath(self.root), cert=self.cert,
                    key=self.key, http_port=self.http_port, https_port=self.https_port,
                    http2=http2))
            errlog = os.path.join(self.prefix, "error.log")
            self.proc = _spawn([nginx, "-p", self.prefix, "-c", conf, "-e", errlog],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            deadline = time.monotonic() + START_TIMEOUT
            while time.monotonic() < deadline and self.proc.poll() is None:
                if _listening(self.http_port) and _listening(self.https_port):
                    return self
                time.sleep(0.05)
            _stop(self.proc)
            err = self.proc.stderr.read().decode(errors="replace")
            if os.path.exists(errlog):
                with open(errlog, errors="replace") as f:
                    err += f.read()
            self.proc = None
            if "in use" not in err:
                break
        raise ServerError("nginx did not start: %s" % err.strip()[-2000:])

    def stop(self):
        _stop(self.proc, signal.SIGQUIT)  # graceful: workers finish their requests
        self.proc = None


class S3rver:
    """s3rver on a free port, one bucket, one key pair, signatures checked."""

    def __init__(self, directory, bucket=BUCKET, access_key=ACCESS_KEY, secret_key=SECRET_KEY):
        self.directory, self.bucket = directory, bucket
        self.access_key, self.secret_key = access_key, secret_key
        self.proc = None
        self.port = None

    @property
    def endpoint(self):
        return "http://127.0.0.1:%d" % self.port

    def start(self):
        os.makedirs(self.directory, exist_ok=True)
        # s3rver makes ListObjectsV2 continuation tokens with DES, which OpenSSL 3
        # keeps in its legacy provider
        self.proc = _spawn(["node", "--openssl-legacy-provider",
                            os.path.join(HERE, "s3rver_main.js"), self.directory, "127.0.0.1",
                            "0", self.bucket, self.access_key, self.secret_key],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            self.port = json.loads(_read_line(self.proc, "s3rver"))["port"]
        except Exception:
            _stop(self.proc)
            raise
        return self

    def stop(self):
        _stop(self.proc)
        self.proc = None


class FaultProxy:
    """faultproxy.py in a process of its own (a test holding the GIL in C code
    never stalls it), one listener per upstream, and its control endpoint."""

    def __init__(self, upstreams, config=None):
        self.upstreams = dict(upstreams)
        self.initial = config or {}
        self.proc = None
        self.ports = {}
        self.control_port = None

    @property
    def control_url(self):
        return "http://127.0.0.1:%d" % self.control_port

    def url(self, name):
        return "http://127.0.0.1:%d" % self.ports[name]

    def start(self):
        args = [sys.executable, os.path.join(HERE, "faultproxy.py"),
                "--config", json.dumps(self.initial)]
        for name, url in self.upstreams.items():
            args += ["--upstream", "%s=%s" % (name, url)]
        self.proc = _spawn(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            info = json.loads(_read_line(self.proc, "the fault proxy"))
        except Exception:
            _stop(self.proc)
            raise
        self.ports, self.control_port = info["listen"], info["control"]
        return self

    def stop(self):
        _stop(self.proc)
        self.proc = None

    def _call(self, method, path, obj=None):
        data = None if obj is None else json.dumps(obj).encode()
        req = urllib.request.Request(self.control_url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as e:
            raise ValueError("fault proxy %s %s: %s" % (method, path, e.read().decode()))

    def configure(self, config=None, **fields):
        """Replaces the configuration (see faultproxy.py) and forgets the per-key
        history; returns the configuration in force."""
        cfg = dict(config or {})
        cfg.update(fields)
        return self._call("PUT", "/config", cfg)

    def config(self):
        return self._call("GET", "/config")

    def counters(self):
        return self._call("GET", "/counters")

    def log(self):
        return self._call("GET", "/log")

    def reset(self):
        """No faults, counters zeroed, history and log forgotten."""
        self.configure({})
        return self._call("POST", "/reset", {})


def s3_client(endpoint, access_key=ACCESS_KEY, secret_key=SECRET_KEY, region=REGION,
              session_token=None, attempts=1):
    """A boto3 S3 client for endpoint, path-style, with attempts tries per request
    (1: no retries, the tests count them)."""
    import boto3
    from botocore.config import Config
    return boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=access_key,
                        aws_secret_access_key=secret_key, aws_session_token=session_token,
                        region_name=region,
                        config=Config(s3={"addressing_style": "path"},
                                      retries={"total_max_attempts": attempts, "mode": "standard"}))


def upload(client, bucket, local, prefix=""):
    """Uploads a file, a directory tree, or a list of files into bucket under prefix
    (a directory's files keep their paths below it, '/'-separated; a file is
    prefix + its basename). Returns the keys, sorted."""
    items = []
    for path in ([local] if isinstance(local, (str, os.PathLike)) else list(local)):
        path = os.fspath(path)
        if os.path.isdir(path):
            for d, dirs, files in os.walk(path):
                dirs.sort()
                for name in sorted(files):
                    full = os.path.join(d, name)
                    rel = os.path.relpath(full, path).replace(os.sep, "/")
                    items.append((full, prefix + rel))
        else:
            items.append((path, prefix + os.path.basename(path)))
    for full, key in items:
        with open(full, "rb") as f:
            client.put_object(Bucket=bucket, Key=key, Body=f)
    return sorted(k for _, k in items)


class Servers:
    """The servers in want, started together; a context manager."""

    def __init__(self, files=None, want=KINDS, proxy_config=None):
        self.want = set(want)
        if "proxy" in self.want:
            self.want.add("nginx")
        self.files_arg = files
        self.proxy_config = proxy_config
        self.tmp = None
        self.nginx = self.s3rver = self.proxy = None
        self.ca_file = None

    def start(self):
        miss = missing(self.want)
        if miss:
            raise ServerError("cannot start: " + "; ".join(miss))
        self.tmp = tempfile.mkdtemp(prefix="ferry-servers-")
        try:
            self.files = os.path.abspath(self.files_arg or os.path.join(self.tmp, "files"))
            os.makedirs(self.files, exist_ok=True)
            upstreams = {}
            if "nginx" in self.want:
                self.ca_file, cert, key = make_certificate(self.tmp)
                self.nginx = Nginx(self.files, os.path.join(self.tmp, "nginx"), cert,
                                   key).start()
                upstreams["http"] = self.nginx.http_url
            if "s3rver" in self.want:
                self.s3rver = S3rver(os.path.join(self.tmp, "s3")).start()
                upstreams["s3"] = self.s3rver.endpoint
            if "proxy" in self.want:
                self.proxy = FaultProxy(upstreams, self.proxy_config).start()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self):
        for s in (self.proxy, self.s3rver, self.nginx):
            if s is not None:
                s.stop()
        self.proxy = self.s3rver = self.nginx = None
        if self.tmp:
            shutil.rmtree(self.tmp, ignore_errors=True)
            self.tmp = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def client(self, secret_key=SECRET_KEY, endpoint=None, **kw):
        return s3_client(endpoint or self.s3rver.endpoint, secret_key=secret_key, **kw)

    def upload(self, local, prefix=""):
        return upload(self.client(), BUCKET, local, prefix)

    def env(self):
        """The FERRY_TEST_* variables for a command that uses these servers."""
        e = {"FERRY_TEST_SERVERS": HERE, "FERRY_TEST_SERVERS_PYTHON": sys.executable}
        if self.nginx:
            e.update(FERRY_TEST_HTTP_URL=self.nginx.http_url,
                     FERRY_TEST_HTTPS_URL=self.nginx.https_url,
                     FERRY_TEST_CA_FILE=self.ca_file, FERRY_TEST_FILES=self.files)
        if self.s3rver:
            e.update(FERRY_TEST_S3_ENDPOINT=self.s3rver.endpoint, FERRY_TEST_S3_BUCKET=BUCKET,
                     FERRY_TEST_S3_ACCESS_KEY=ACCESS_KEY, FERRY_TEST_S3_SECRET_KEY=SECRET_KEY,
                     FERRY_TEST_S3_REGION=REGION)
        if self.proxy:
            e["FERRY_TEST_PROXY_CONTROL"] = self.proxy.control_url
            if "http" in self.proxy.ports:
                e["FERRY_TEST_PROXY_HTTP_URL"] = self.proxy.url("http")
            if "s3" in self.proxy.ports:
                e["FERRY_TEST_PROXY_S3_ENDPOINT"] = self.proxy.url("s3")
        return e


def main(argv):
    if len(argv) >= 2 and argv[0] == "upload":
        need = ("FERRY_TEST_S3_ENDPOINT", "FERRY_TEST_S3_BUCKET")
        if any(v not in os.environ for v in need):
            print("servers.py upload: run under with_servers.py (no FERRY_TEST_S3_ENDPOINT)",
                  file=sys.stderr)
            return 2
        c = s3_client(os.environ["FERRY_TEST_S3_ENDPOINT"],
                      os.environ.get("FERRY_TEST_S3_ACCESS_KEY", ACCESS_KEY),
                      os.environ.get("FERRY_TEST_S3_SECRET_KEY", SECRET_KEY),
                      os.environ.get("FERRY_TEST_S3_REGION", REGION))
        for k in upload(c, os.environ["FERRY_TEST_S3_BUCKET"], argv[1],
                        argv[2] if len(argv) > 2 else ""):
            print(k)
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
