"""The loopback servers the remote-reading tests rely on (tests/servers): s3rver
through boto3, nginx through plain clients, every fault of the proxy seen by a
plain client, and with_servers.py's start, export and cleanup."""
import email.utils
import hashlib
import http.client
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

from conftest import SERVERS_DIR, loopback

BUCKET = "ferry-test"
# the harness runs with Debian's Python (boto3), as ctest runs it
PY = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else sys.executable


def blob(n, seed):
    out = bytearray()
    i = 0
    while len(out) < n:
        out += hashlib.sha256(b"%d/%d" % (seed, i)).digest()
        i += 1
    return bytes(out[:n])


@pytest.fixture(scope="module")
def files(servers):
    """Files nginx serves (written into its directory) and the same under s3://ferry-test/h/."""
    names = {"small.bin": blob(1000, 1), "big.bin": blob(3 << 20, 2), "one.bin": b"x",
             "empty.bin": b""}
    for i in range(12):
        names["many/f%02d.bin" % i] = blob(5000 + i * 777, 10 + i)
    for name, data in names.items():
        path = os.path.join(servers.files, "h", name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
    keys = servers.upload(os.path.join(servers.files, "h"), "h/")
    assert keys == sorted("h/" + n for n in names)
    return names


def client_error(fn):
    import botocore.exceptions
    with pytest.raises(botocore.exceptions.ClientError) as e:
        fn()
    r = e.value.response
    return r["ResponseMetadata"]["HTTPStatusCode"], r["Error"]["Code"]


def get(url, headers=None, timeout=30, context=None):
    """(status, headers, body) of one GET with urllib, errors included."""
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=context) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


# ---- s3rver ----

def test_s3_signed_put_and_get(servers, files):
    c = servers.client()
    for name in ("small.bin", "big.bin", "one.bin", "empty.bin"):
        r = c.get_object(Bucket=BUCKET, Key="h/" + name)
        assert r["Body"].read() == files[name]
        assert r["ETag"] == '"%s"' % hashlib.md5(files[name]).hexdigest()
        assert r["ContentLength"] == len(files[name])
    odd = {"odd/with space/a+b=c.bin": b"1", "odd/utf8/\u00e9\u6f22\u5b57.bin": b"22",
           "odd/pct%2Fslash~*'().bin": b"333"}
    for k, v in odd.items():
        c.put_object(Bucket=BUCKET, Key=k, Body=v)
    for k, v in odd.items():
        assert c.get_object(Bucket=BUCKET, Key=k)["Body"].read() == v
    # the x-amz-security-token header is signed like any other and accepted
    t = servers.client(session_token="FQoGZXIvYXdzE//token+with/slash=")
    assert t.get_object(Bucket=BUCKET, Key="h/small.bin")["Body"].read() == files["small.bin"]


def test_s3_unsigned_get_is_served(servers, files):
    # s3rver has no bucket policies: a request without a signature is anonymous and
    # every bucket reads as public, like a public bucket on S3
    st, _, body = get("%s/%s/h/small.bin" % (servers.s3rver.endpoint, BUCKET))
    assert st == 200 and body == files["small.bin"]


def test_s3_wrong_secret_and_unknown_key_are_403(servers, files):
    bad = servers.client(secret_key="not-the-secret")
    assert client_error(lambda: bad.get_object(Bucket=BUCKET, Key="h/small.bin")) == \
        (403, "SignatureDoesNotMatch")
    assert client_error(lambda: bad.list_objects_v2(Bucket=BUCKET)) == \
        (403, "SignatureDoesNotMatch")
    # the built-in S3RVER/S3RVER pair is removed: only the configured one signs
    other = servers.client(access_key="S3RVER", secret_key="S3RVER")
    assert client_error(lambda: other.get_object(Bucket=BUCKET, Key="h/small.bin")) == \
        (403, "InvalidAccessKeyId")


def test_s3_missing_bucket_and_key_are_404(servers, files):
    c = servers.client()
    assert client_error(lambda: c.get_object(Bucket="no-such-bucket", Key="x")) == \
        (404, "NoSuchBucket")
    assert client_error(lambda: c.get_object(Bucket=BUCKET, Key="h/no-such-key")) == \
        (404, "NoSuchKey")
    assert client_error(lambda: c.list_objects_v2(Bucket="no-such-bucket")) == \
        (404, "NoSuchBucket")
    st, _, body = get("%s/%s/h/no-such-key" % (servers.s3rver.endpoint, BUCKET))
    assert st == 404 and b"<Code>NoSuchKey</Code>" in body


def test_s3_list_objects_v2_pages(servers, files):
    c = servers.client()
    want = sorted("h/many/f%02d.bin" % i for i in range(12))
    keys, tokens, pages = [], [], 0
    kw = {"Bucket": BUCKET, "Prefix": "h/many/", "MaxKeys": 5}
    while True:
        r = c.list_objects_v2(**kw)
        pages += 1
        assert r["KeyCount"] == len(r["Contents"]) <= 5
        keys += [o["Key"] for o in r["Contents"]]
        for o in r["Contents"]:
            assert o["Size"] == len(files[o["Key"][2:]])
            assert o["ETag"] == '"%s"' % hashlib.md5(files[o["Key"][2:]]).hexdigest()
        if not r["IsTruncated"]:
            break
        tokens.append(r["NextContinuationToken"])
        kw["ContinuationToken"] = r["NextContinuationToken"]
    assert pages == 3 and keys == want
    assert len(set(tokens)) == 2
    # the paginator, StartAfter and a delimiter agree
    got = [o["Key"] for p in c.get_paginator("list_objects_v2").paginate(
        Bucket=BUCKET, Prefix="h/many/", PaginationConfig={"PageSize": 4}) for o in p["Contents"]]
    assert got == want
    r = c.list_objects_v2(Bucket=BUCKET, Prefix="h/many/", StartAfter=want[9])
    assert [o["Key"] for o in r["Contents"]] == want[10:]
    r = c.list_objects_v2(Bucket=BUCKET, Prefix="h/", Delimiter="/")
    assert [p["Prefix"] for p in r["CommonPrefixes"]] == ["h/many/"]
    assert [o["Key"] for o in r["Contents"]] == sorted(
        "h/" + n for n in files if "/" not in n)


def test_s3_range(servers, files):
    # as S3 answers (s3rver_main.js mends s3rver's reading of 0-0 and of suffixes)
    c = servers.client()
    big = files["big.bin"]
    n = len(big)
    for rng, a, b in (("0-0", 0, 0), ("10-19", 10, 19), ("%d-%d" % (1 << 20, (2 << 20) - 1),
                                                          1 << 20, (2 << 20) - 1),
                      ("%d-" % (n - 100), n - 100, n - 1), ("-7", n - 7, n - 1),
                      ("%d-%d" % (n - 3, n + 1000), n - 3, n - 1), ("-%d" % (n + 5), 0, n - 1)):
        r = c.get_object(Bucket=BUCKET, Key="h/big.bin", Range="bytes=" + rng)
        assert r["ResponseMetadata"]["HTTPStatusCode"] == 206, rng
        assert r["ContentRange"] == "bytes %d-%d/%d" % (a, b, n), rng
        assert r["Body"].read() == big[a:b + 1], rng
    for rng in ("5000-5001", "-0", "1000-"):
        assert client_error(lambda: c.get_object(Bucket=BUCKET, Key="h/small.bin",
                                                 Range="bytes=" + rng)) == (416, "InvalidRange")
    assert client_error(lambda: c.get_object(Bucket=BUCKET, Key="h/empty.bin",
                                             Range="bytes=0-0")) == (416, "InvalidRange")
    for rng in ("9-3", "0-1,5-6"):  # not one valid range: ignored, the whole object
        r = c.get_object(Bucket=BUCKET, Key="h/small.bin", Range="bytes=" + rng)
        assert r["ResponseMetadata"]["HTTPStatusCode"] == 200 and "ContentRange" not in r
        assert r["Body"].read() == files["small.bin"]


# ---- nginx ----

def test_http_get_range_etag(servers, files):
    base = servers.nginx.http_url + "/h/"
    st, h, body = get(base + "big.bin")
    assert st == 200 and body == files["big.bin"]
    etag, lm = h["ETag"], h["Last-Modified"]
    assert etag and email.utils.parsedate_to_datetime(lm)
    assert int(h["Content-Length"]) == len(files["big.bin"])
    st, h, body = get(base + "big.bin", {"Range": "bytes=100-199"})
    assert st == 206 and body == files["big.bin"][100:200]
    assert h["Content-Range"] == "bytes 100-199/%d" % len(files["big.bin"])
    st, h, body = get(base + "big.bin", {"Range": "bytes=-10"})
    assert st == 206 and body == files["big.bin"][-10:]
    st, _, _ = get(base + "big.bin", {"If-None-Match": etag})
    assert st == 304
    st, _, body = get(base + "big.bin", {"Range": "bytes=0-9", "If-Range": etag})
    assert st == 206 and body == files["big.bin"][:10]
    st, _, body = get(base + "big.bin", {"Range": "bytes=0-9", "If-Range": '"other"'})
    assert st == 200 and body == files["big.bin"]
    assert get(base + "no-such-file")[0] == 404
    # keep-alive: two requests on one connection
    u = urllib.parse.urlsplit(servers.nginx.http_url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    for name in ("small.bin", "one.bin"):
        conn.request("GET", "/h/" + name)
        assert conn.getresponse().read() == files[name]
    sock = conn.sock
    conn.request("GET", "/h/empty.bin")
    assert conn.getresponse().read() == b"" and conn.sock is sock
    conn.close()


def test_https_with_the_ca_file(servers, files):
    ca = servers.env()["FERRY_TEST_CA_FILE"]
    ctx = ssl.create_default_context(cafile=ca)
    base = servers.nginx.https_url
    st, h, body = get(base + "/h/small.bin", context=ctx)
    assert st == 200 and body == files["small.bin"] and h["ETag"]
    st, _, body = get(base + "/h/big.bin", {"Range": "bytes=5-9"}, context=ctx)
    assert st == 206 and body == files["big.bin"][5:10]
    # the certificate names localhost too
    st, _, body = get(base.replace("127.0.0.1", "localhost") + "/h/one.bin", context=ctx)
    assert st == 200 and body == b"x"
    # and without the CA it is not trusted: the check is real
    with pytest.raises(urllib.error.URLError) as e:
        get(base + "/h/small.bin", context=ssl.create_default_context())
    assert isinstance(e.value.reason, ssl.SSLCertVerificationError)


def test_https_http2_with_curl(servers, files):
    curl = subprocess.run(["sh", "-c", "command -v curl"], capture_output=True, text=True)
    if curl.returncode != 0:
        pytest.skip("curl not found")
    p = subprocess.run(["curl", "-sS", "--http2", "--cacert", servers.env()["FERRY_TEST_CA_FILE"],
                        "-r", "0-99", "-o", "-", "-w", "\n%{http_version} %{http_code}",
                        servers.nginx.https_url + "/h/big.bin"], capture_output=True, timeout=60)
    assert p.returncode == 0, p.stderr
    body, _, tail = p.stdout.rpartition(b"\n")
    assert body == files["big.bin"][:100]
    version, code = tail.decode().split()
    assert code == "206"
    if "http2" in subprocess.run(["nginx", "-V"], capture_output=True, text=True).stderr and \
            b"HTTP2" in subprocess.run(["curl", "-V"], capture_output=True).stdout:
        assert version == "2"


# ---- the fault proxy ----

def proxied(servers, name):
    return servers.proxy.url("http") + "/h/" + name


def raw_get(url, headers=None, timeout=30):
    """GET with http.client on a fresh connection: (status, headers, body, error)
    where error is the exception that cut the body short, or None."""
    u = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    got = bytearray()
    try:
        conn.request("GET", u.path + ("?" + u.query if u.query else ""), headers=headers or {})
        r = conn.getresponse()
        try:
            while True:
                chunk = r.read1(65536) if hasattr(r, "read1") else r.read(65536)
                if not chunk:
                    break
                got += chunk
            if r.length:  # http.client leaves what was promised and not sent here
                raise http.client.IncompleteRead(bytes(got), r.length)
        except (OSError, http.client.HTTPException) as e:
            return r.status, r.headers, bytes(got), e
        return r.status, r.headers, bytes(got), None
    except (OSError, http.client.HTTPException) as e:
        return None, None, bytes(got), e
    finally:
        conn.close()


@pytest.mark.parametrize("kind,status,code", [
    ("slowdown", 503, "SlowDown"), ("500", 500, "InternalError"), ("502", 502, "BadGateway"),
    ("504", 504, "GatewayTimeout"), ("429", 429, "TooManyRequests")])
def test_proxy_status_faults(servers, files, proxy, kind, status, code):
    proxy.configure(faults={kind: 1.0}, max_consecutive=2)
    url = proxied(servers, "small.bin")
    for _ in range(2):  # bounded: two in a row, then one through
        st, h, body, err = raw_get(url)
        assert err is None and st == status
        assert "<Code>%s</Code>" % code in body.decode() and h["Content-Type"] == "application/xml"
    st, _, body, err = raw_get(url)
    assert err is None and st == 200 and body == files["small.bin"]
    n = proxy.counters()
    assert n["injected"][kind] == 2 and sum(n["injected"].values()) == 2
    assert n["requests"] == 3 and n["forwarded"] == 1
    assert [e["fault"] for e in proxy.log()] == [kind, kind, None]


def test_proxy_slowdown_is_s3s_error_to_boto3(servers, files, proxy):
    proxy.configure(faults={"slowdown": 1.0}, max_consecutive=1)
    c = servers.client(endpoint=proxy.url("s3"))
    assert client_error(lambda: c.get_object(Bucket=BUCKET, Key="h/small.bin")) == \
        (503, "SlowDown")
    assert c.get_object(Bucket=BUCKET, Key="h/small.bin")["Body"].read() == files["small.bin"]


def test_proxy_reset_mid_body(servers, files, proxy):
    proxy.configure(faults={"reset": 1.0}, max_consecutive=1)
    st, h, body, err = raw_get(proxied(servers, "big.bin"))
    assert st == 200 and int(h["Content-Length"]) == len(files["big.bin"])
    assert isinstance(err, (ConnectionResetError, http.client.IncompleteRead)), err
    assert 0 < len(body) < len(files["big.bin"]) and files["big.bin"].startswith(body)
    st, _, body, err = raw_get(proxied(servers, "big.bin"))
    assert err is None and body == files["big.bin"]
    assert proxy.counters()["injected"]["reset"] == 1


def test_proxy_short_body(servers, files, proxy):
    proxy.configure(faults={"short": 1.0}, max_consecutive=1, seed=5)
    st, h, body, err = raw_get(proxied(servers, "big.bin"))
    assert st == 200 and int(h["Content-Length"]) == len(files["big.bin"])
    assert isinstance(err, http.client.IncompleteRead), err
    assert 0 < len(body) < len(files["big.bin"]) and files["big.bin"].startswith(body)
    assert raw_get(proxied(servers, "big.bin"))[2] == files["big.bin"]
    assert proxy.counters()["injected"]["short"] == 1


def test_proxy_stall(servers, files, proxy):
    # a client with a read timeout shorter than the stall gives up part way...
    proxy.configure(faults={"stall": 1.0}, max_consecutive=1, stall_seconds=30)
    st, _, body, err = raw_get(proxied(servers, "big.bin"), timeout=1)
    assert st == 200 and isinstance(err, socket.timeout), err
    assert len(body) < len(files["big.bin"]) and files["big.bin"].startswith(body)
    # ...and a patient one gets every byte after the pause
    proxy.configure(faults={"stall": 1.0}, max_consecutive=1, stall_seconds=0.3)
    st, _, body, err = raw_get(proxied(servers, "big.bin"))
    assert err is None and body == files["big.bin"]
    assert proxy.log()[-1]["fault"] == "stall"


def test_proxy_drop(servers, files, proxy):
    proxy.configure(faults={"drop": 1.0}, max_consecutive=1)
    st, _, body, err = raw_get(proxied(servers, "small.bin"))
    assert st is None and body == b"" and isinstance(
        err, (ConnectionResetError, http.client.RemoteDisconnected)), err
    assert raw_get(proxied(servers, "small.bin"))[2] == files["small.bin"]
    assert proxy.counters()["injected"]["drop"] == 1


def test_proxy_not_found_is_permanent(servers, files, proxy):
    proxy.configure(not_found=[r"/many/f0[0-4]"])
    for _ in range(3):
        st, _, body, _ = raw_get(proxied(servers, "many/f03.bin"))
        assert st == 404 and b"<Code>NoSuchKey</Code>" in body
    assert raw_get(proxied(servers, "many/f05.bin"))[2] == files["many/f05.bin"]
    c = servers.client(endpoint=proxy.url("s3"))
    assert client_error(lambda: c.get_object(Bucket=BUCKET, Key="h/many/f01.bin")) == \
        (404, "NoSuchKey")
    assert proxy.counters()["not_found"] == 4


def test_proxy_etag_change(servers, files, proxy):
    proxy.configure(etag_change=[{"match": r"/small\.bin$", "after": 1}])
    url = proxied(servers, "small.bin")
    st, h, body, _ = raw_get(url)
    old, old_lm = h["ETag"], email.utils.parsedate_to_datetime(h["Last-Modified"])
    assert st == 200 and old == get(servers.nginx.http_url + "/h/small.bin")[1]["ETag"]
    st, h, body, _ = raw_get(url)
    new = h["ETag"]
    assert st == 200 and new != old and body == files["small.bin"]
    assert email.utils.parsedate_to_datetime(h["Last-Modified"]) > old_lm
    # conditional requests see the object as changed
    assert raw_get(url, {"If-Match": old})[0] == 412
    assert raw_get(url, {"If-Match": new})[2] == files["small.bin"]
    st, _, body, _ = raw_get(url, {"Range": "bytes=0-9", "If-Range": old})
    assert st == 200 and body == files["small.bin"]
    st, _, body, _ = raw_get(url, {"Range": "bytes=0-9", "If-Range": new})
    assert st == 206 and body == files["small.bin"][:10]
    # through S3: boto3's view of the same object changes too
    proxy.configure(etag_change=[{"match": r"/h/one\.bin$", "after": 1}])
    c = servers.client(endpoint=proxy.url("s3"))
    e1 = c.head_object(Bucket=BUCKET, Key="h/one.bin")["ETag"]
    e2 = c.get_object(Bucket=BUCKET, Key="h/one.bin")["ETag"]
    assert e1 == '"%s"' % hashlib.md5(b"x").hexdigest() and e2 != e1
    assert proxy.counters()["etag_changed"] == 5


def test_proxy_etag_change_with_new_bytes(servers, files, proxy):
    proxy.configure(etag_change=[{"match": r"/h/big\.bin$", "after": 1, "bytes": True}])
    c = servers.client(endpoint=proxy.url("s3"))
    big = files["big.bin"]
    flipped = bytes(b ^ 0x5A for b in big)
    r = c.get_object(Bucket=BUCKET, Key="h/big.bin", Range="bytes=0-99")
    old = r["ETag"]
    assert r["Body"].read() == big[:100]
    r = c.get_object(Bucket=BUCKET, Key="h/big.bin", Range="bytes=1000-1999")
    assert r["ETag"] != old and r["Body"].read() == flipped[1000:2000]
    r = c.get_object(Bucket=BUCKET, Key="h/big.bin")
    assert r["ContentLength"] == len(big) and r["Body"].read() == flipped
    with pytest.raises(ValueError, match="unknown fields"):
        proxy.configure(etag_change=[{"match": "x", "byte": True}])


def test_proxy_signed_requests_verify_through_it(servers, files, proxy):
    c = servers.client(endpoint=proxy.url("s3"))
    assert c.get_object(Bucket=BUCKET, Key="h/big.bin", Range="bytes=7-70")["Body"].read() == \
        files["big.bin"][7:71]
    keys = [o["Key"] for o in c.list_objects_v2(Bucket=BUCKET, Prefix="h/many/", MaxKeys=100)[
        "Contents"]]
    assert len(keys) == 12
    bad = servers.client(endpoint=proxy.url("s3"), secret_key="wrong")
    assert client_error(lambda: bad.get_object(Bucket=BUCKET, Key="h/small.bin")) == \
        (403, "SignatureDoesNotMatch")
    assert proxy.counters()["listeners"]["s3"]["requests"] == 3


def test_proxy_control_api(servers, proxy):
    base = servers.env()["FERRY_TEST_PROXY_CONTROL"]
    cfg = json.loads(get(base + "/config")[2])
    assert cfg["faults"] == {} and cfg["max_consecutive"] == 2
    req = urllib.request.Request(base + "/config", data=b'{"faults": {"nope": 0.5}}',
                                 method="PUT")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=30)
    assert e.value.code == 400 and "unknown fault 'nope'" in e.value.read().decode()
    with pytest.raises(ValueError, match="add up to more than 1"):
        proxy.configure(faults={"slowdown": 0.7, "reset": 0.7})
    assert proxy.configure(faults={"reset": 0.25}, seed=9)["faults"] == {"reset": 0.25}
    assert get(base + "/nothing")[0] == 404


MIX = {"slowdown": 0.15, "reset": 0.1, "short": 0.1, "500": 0.05, "drop": 0.05, "429": 0.05}


def fetch_with_retries(url, want_len=None, attempts=20):
    """A plain client's retry loop: a fresh connection for each try, until the
    whole body comes. Returns (body, tries)."""
    for i in range(1, attempts + 1):
        st, h, body, err = raw_get(url)
        if err is None and st == 200:
            return body, i
        assert st in (None, 200, 429, 500, 503), (st, body[:200])
    raise AssertionError("%s: no whole body in %d tries" % (url, attempts))


def test_proxy_retry_loop_gets_exact_bytes_and_counts(servers, files, proxy):
    proxy.configure(faults=MIX, seed=1, max_consecutive=3)
    names = sorted(files)
    retries = 0
    for name in names:
        body, tries = fetch_with_retries(proxied(servers, name))
        assert body == files[name], name
        retries += tries - 1
    n = proxy.counters()
    assert retries == sum(n["injected"].values()) > 0
    assert n["requests"] == len(names) + retries
    log = proxy.log()
    # bounded: never more than max_consecutive faults in a row for one file
    run = {}
    for e in log:
        run[e["target"]] = run.get(e["target"], 0) + 1 if e["fault"] else 0
        assert run[e["target"]] <= 3
    first = [(e["target"], e["fault"]) for e in log]

    # the same seed and requests give the same faults; another seed, others
    proxy.reset()
    proxy.configure(faults=MIX, seed=1, max_consecutive=3)
    for name in names:
        fetch_with_retries(proxied(servers, name))
    assert [(e["target"], e["fault"]) for e in proxy.log()] == first
    proxy.reset()
    proxy.configure(faults=MIX, seed=2, max_consecutive=3)
    for name in names:
        fetch_with_retries(proxied(servers, name))
    assert [(e["target"], e["fault"]) for e in proxy.log()] != first


def test_proxy_s3_ranged_parts_with_retries(servers, files, proxy):
    # signed ranged GETs through the faults, reassembled: the bytes come out exact
    import botocore.exceptions
    import urllib3.exceptions
    proxy.configure(faults=MIX, seed=3, max_consecutive=2)
    c = servers.client(endpoint=proxy.url("s3"))
    big = files["big.bin"]
    part = 256 * 1024
    out = bytearray()
    tries = 0
    for a in range(0, len(big), part):
        b = min(a + part, len(big)) - 1
        for _ in range(10):
            tries += 1
            try:
                r = c.get_object(Bucket=BUCKET, Key="h/big.bin", Range="bytes=%d-%d" % (a, b))
                data = r["Body"].read()
            except (botocore.exceptions.ClientError, botocore.exceptions.BotoCoreError,
                    urllib3.exceptions.HTTPError, OSError):
                continue
            if len(data) == b - a + 1:
                out += data
                break
        else:
            raise AssertionError("part %d-%d never came whole" % (a, b))
    assert bytes(out) == big
    n = proxy.counters()
    assert n["listeners"]["s3"]["requests"] == tries
    assert sum(n["injected"].values()) == tries - len(range(0, len(big), part)) > 0


# ---- the SigV4 reference ----

def raw_signed(endpoint, method, path, params=(), headers=(), token=None, secret=None):
    """Signs with tests/servers/sigv4_reference.py and sends with http.client:
    (status, body)."""
    loopback()
    import sigv4_reference
    mod = loopback()
    out = sigv4_reference.sign({
        "method": method, "url": endpoint + path, "params": [list(p) for p in params],
        "headers": [list(h) for h in headers], "time": time.strftime("%Y%m%dT%H%M%SZ",
                                                                     time.gmtime()),
        "region": mod.REGION, "service": "s3", "access_key": mod.ACCESS_KEY,
        "secret_key": secret or mod.SECRET_KEY, "session_token": token})
    u = urllib.parse.urlsplit(out["url"])
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    try:
        conn.request(method, u.path + ("?" + u.query if u.query else ""),
                     headers=dict(out["headers"]))
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def test_sigv4_reference_is_what_s3rver_accepts(servers, files):
    import xml.etree.ElementTree as ET

    def texts(x, tag):  # with or without S3's namespace
        return [e.text for e in x.iter() if e.tag.rsplit("}", 1)[-1] == tag]
    c = servers.client()
    c.put_object(Bucket=BUCKET, Key="sig/a b+c=d/\u00e9~x.bin", Body=b"odd key")
    for endpoint in (servers.s3rver.endpoint, servers.proxy.url("s3")):
        keys, token = [], None
        while True:
            params = [("list-type", "2"), ("prefix", "h/many/"), ("max-keys", "5")]
            if token:  # base64: '+', '/' and '=' to encode
                params.append(("continuation-token", token))
            st, body = raw_signed(endpoint, "GET", "/" + BUCKET, params)
            assert st == 200, body
            x = ET.fromstring(body)
            keys += texts(x, "Key")
            token = (texts(x, "NextContinuationToken") or [None])[0]
            if not token:
                break
        assert keys == sorted("h/many/f%02d.bin" % i for i in range(12))
        st, body = raw_signed(endpoint, "GET", "/" + BUCKET + "/" + urllib.parse.quote(
            "sig/a b+c=d/\u00e9~x.bin", safe="/~"), headers=[("Range", "bytes=2-4")],
            token="FQoGZXIvYXdzE//token+with/slash=")
        assert (st, body) == (206, b"d k")
        st, body = raw_signed(endpoint, "GET", "/" + BUCKET, [("list-type", "2"), (
            "prefix", "sig/a b+c=d/")])
        assert st == 200 and "sig/a b+c=d/\u00e9~x.bin".encode() in body
        st, body = raw_signed(endpoint, "GET", "/" + BUCKET + "/h/small.bin", secret="wrong")
        assert st == 403 and b"SignatureDoesNotMatch" in body


# ---- with_servers.py ----

WITH = os.path.join(SERVERS_DIR, "with_servers.py")


def children(pid):
    out = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open("/proc/%s/stat" % p) as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                out.append(int(p))
    return out


def cmdline(pid):
    with open("/proc/%d/cmdline" % pid, "rb") as f:
        return f.read().replace(b"\0", b" ").decode(errors="replace")


def alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_gone(pids, timeout=20):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.05)
    return [p for p in pids if alive(p)]


def start_wrapped(tmp_path, *extra):
    envfile = tmp_path / "env.json"
    code = ("import json, os, sys, time; json.dump({k: v for k, v in os.environ.items() "
            "if k.startswith('FERRY_TEST_')}, open(sys.argv[1], 'w')); time.sleep(120)")
    p = subprocess.Popen([PY, WITH, *extra, "--", sys.executable, "-c",
                          code, str(envfile)])
    deadline = time.monotonic() + 60
    while not (envfile.exists() and envfile.stat().st_size) and p.poll() is None:
        assert time.monotonic() < deadline, "with_servers.py did not start its command"
        time.sleep(0.05)
    time.sleep(0.1)
    return p, json.loads(envfile.read_text())


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_with_servers_stops_everything_on_a_signal(servers, tmp_path, sig):
    p, env = start_wrapped(tmp_path)
    kids = children(p.pid)
    assert len(kids) == 4  # nginx, s3rver, the proxy, the command
    tmp = os.path.dirname(env["FERRY_TEST_CA_FILE"])
    assert os.path.isdir(tmp)
    p.send_signal(sig)
    assert p.wait(60) == 128 + sig
    assert wait_gone(kids) == [] and not os.path.exists(tmp)


def test_with_servers_sigkill_leaves_no_server(servers, tmp_path):
    p, env = start_wrapped(tmp_path, "--only", "nginx,s3rver")
    kids = children(p.pid)
    assert len(kids) == 3
    servers_only = [k for k in kids if "env.json" not in cmdline(k)]
    assert len(servers_only) == 2
    p.kill()
    p.wait(60)
    # the servers were told to die with it; the command is left to its own devices
    try:
        assert wait_gone(servers_only) == []
    finally:
        for k in kids:
            if alive(k):
                os.kill(k, signal.SIGKILL)
        import shutil
        shutil.rmtree(os.path.dirname(env["FERRY_TEST_CA_FILE"]), ignore_errors=True)


def test_with_servers_files_uploaded_and_status_passed(servers, tmp_path):
    d = tmp_path / "fx"
    (d / "sub").mkdir(parents=True)
    (d / "sub" / "a.bin").write_bytes(b"abc")
    code = ("import os, sys, urllib.request; sys.path.insert(0, os.environ['FERRY_TEST_SERVERS']);"
            "import servers; e = os.environ;"
            "c = servers.s3_client(e['FERRY_TEST_S3_ENDPOINT']);"
            "assert c.get_object(Bucket=e['FERRY_TEST_S3_BUCKET'], Key='p/sub/a.bin')"
            "['Body'].read() == b'abc';"
            "assert urllib.request.urlopen(e['FERRY_TEST_HTTP_URL'] + '/sub/a.bin').read()"
            " == b'abc';"
            "sys.exit(5)")
    p = subprocess.run([PY, WITH, "--files", str(d), "--s3-prefix", "p/",
                        "--", sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 5, p.stderr


def test_with_servers_skips_where_a_server_is_missing(tmp_path):
    env = dict(os.environ, PATH=str(tmp_path))
    p = subprocess.run([PY, WITH, "--only", "s3rver", "--", "true"],
                       capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 77
    assert "node not found" in p.stderr and p.stderr.startswith("skipped:")
