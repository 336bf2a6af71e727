#!/usr/bin/python3
"""Run by with_servers.py in the suite: the FERRY_TEST_* variables it exports lead to
servers that answer, as a test run the same way finds them."""
import json
import os
import ssl
import subprocess
import sys
import tempfile
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
e = os.environ
for v in ("FERRY_TEST_HTTP_URL", "FERRY_TEST_HTTPS_URL", "FERRY_TEST_CA_FILE", "FERRY_TEST_FILES",
          "FERRY_TEST_S3_ENDPOINT", "FERRY_TEST_S3_BUCKET", "FERRY_TEST_S3_ACCESS_KEY",
          "FERRY_TEST_S3_SECRET_KEY", "FERRY_TEST_S3_REGION", "FERRY_TEST_PROXY_HTTP_URL",
          "FERRY_TEST_PROXY_S3_ENDPOINT", "FERRY_TEST_PROXY_CONTROL", "FERRY_TEST_SERVERS",
          "FERRY_TEST_SERVERS_PYTHON"):
    assert e.get(v), "%s is not set" % v

data = os.urandom(100000)
with open(os.path.join(e["FERRY_TEST_FILES"], "blob.bin"), "wb") as f:
    f.write(data)
ctx = ssl.create_default_context(cafile=e["FERRY_TEST_CA_FILE"])
for base in (e["FERRY_TEST_HTTP_URL"], e["FERRY_TEST_HTTPS_URL"], e["FERRY_TEST_PROXY_HTTP_URL"]):
    with urllib.request.urlopen(base + "/blob.bin", context=ctx, timeout=30) as r:
        assert r.read() == data, base

# the upload command the C tests use, then a signed read through the proxy
with tempfile.TemporaryDirectory() as d:
    with open(os.path.join(d, "o.bin"), "wb") as f:
        f.write(data)
    out = subprocess.run([e["FERRY_TEST_SERVERS_PYTHON"],
                          os.path.join(e["FERRY_TEST_SERVERS"], "servers.py"),
                          "upload", d, "check/"], check=True, capture_output=True, text=True)
    assert out.stdout.split() == ["check/o.bin"], out.stdout
sys.path.insert(0, HERE)
import servers  # noqa: E402
c = servers.s3_client(e["FERRY_TEST_PROXY_S3_ENDPOINT"], e["FERRY_TEST_S3_ACCESS_KEY"],
                      e["FERRY_TEST_S3_SECRET_KEY"], e["FERRY_TEST_S3_REGION"])
assert c.get_object(Bucket=e["FERRY_TEST_S3_BUCKET"], Key="check/o.bin")["Body"].read() == data
with urllib.request.urlopen(e["FERRY_TEST_PROXY_CONTROL"] + "/counters", timeout=30) as r:
    n = json.loads(r.read())
assert n["listeners"]["s3"]["requests"] == 1 and n["listeners"]["http"]["requests"] == 1, n
print("servers answer at the addresses exported")
