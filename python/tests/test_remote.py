"""Remote locations against real servers on loopback (tests/servers): nginx over
http and https, s3rver checking SigV4 signatures, and the fault proxy in front of
both. The same datasets are read from local files, from S3 and over HTTP(S), and
every batch's bytes must match. Each read runs in a fresh process (the ferry
command, or a Python snippet): the AWS settings are read once per process."""
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time

import numpy as np
import pytest

import ferry

from conftest import SHARED

BACKOFF = {"FERRY_REMOTE_BACKOFF_MS": "1"}  # retries without the production waits


def ferry_exe():
    return os.path.join(os.path.dirname(sys.executable), "ferry")


def base_env(servers, cache, **extra):
    e = dict(os.environ)
    for k in list(e):
        if k.startswith("AWS_") or k.startswith("FERRY_REMOTE") or k == "FERRY_CACHE":
            del e[k]
    t = servers.env()
    e.update(AWS_ACCESS_KEY_ID=t["FERRY_TEST_S3_ACCESS_KEY"],
             AWS_SECRET_ACCESS_KEY=t["FERRY_TEST_S3_SECRET_KEY"],
             AWS_REGION=t["FERRY_TEST_S3_REGION"], AWS_ENDPOINT_URL=t["FERRY_TEST_S3_ENDPOINT"],
             AWS_CA_BUNDLE=t["FERRY_TEST_CA_FILE"], HOME=str(cache) + "-home",
             FERRY_CACHE=str(cache))
    e.update(extra)
    return e


def bench(source, env, *args, check=True):
    """ferry bench --digest --json: the JSON, or (check=False) the process."""
    p = subprocess.run([ferry_exe(), "bench", source, "--digest", "--json", "--no-progress",
                        "--batch", "4", *map(str, args)], capture_output=True, text=True,
                       env=env, timeout=300)
    if not check:
        return p
    assert p.returncode == 0, "%s: %s" % (source, p.stderr)
    r = json.loads(p.stdout.strip().splitlines()[-1])
    assert r["errors"] == 0, r
    return r


# ---- the datasets, local and uploaded ----

def make_tars(d, n=6, per=5):
    """WebDataset shards train-000000.tar ...: per samples each (.txt, .cls)."""
    os.makedirs(d)
    for s in range(n):
        with tarfile.open(os.path.join(d, "train-%06d.tar" % s), "w", format=tarfile.USTAR_FORMAT) as t:
            for k in range(per):
                key = "%06d" % (s * per + k)
                for ext, data in (("txt", ("sample %s " % key * (k + 1)).encode()),
                                  ("cls", str((s + k) % 10).encode())):
                    info = tarfile.TarInfo("%s.%s" % (key, ext))
                    info.size = len(data)
                    info.mtime = 0
                    import io
                    t.addfile(info, io.BytesIO(data))


@pytest.fixture(scope="session")
def remote_data(servers, tmp_path_factory):
    """The datasets in a local folder, uploaded under "data/" and served by nginx
    under /data/. Returns (local folder, the sources to compare)."""
    root = tmp_path_factory.mktemp("remote_data")
    local = root / "data"
    local.mkdir()
    subprocess.run([ferry_exe(), "pack", "synthetic:300,bytes=64", str(local / "records"),
                    "--shard-records", "40", "--no-progress"], check=True, capture_output=True)
    make_tars(str(local / "wds"))
    arr = np.arange(120 * 6, dtype=np.float32).reshape(120, 6)
    (local / "npy").mkdir()
    np.save(str(local / "npy" / "x.npy"), arr)
    np.save(str(local / "npy" / "y.npy"), np.arange(120, dtype=np.int64))
    tf = os.path.join(SHARED, "tfrecord")
    have_tf = os.path.exists(os.path.join(tf, "ydf_toy_uncompressed-00000-of-00002.tfrecord"))
    if have_tf:
        (local / "tfrecord").mkdir()
        for k in range(2):
            shutil.copy(os.path.join(tf, "ydf_toy_uncompressed-%05d-of-00002.tfrecord" % k),
                        str(local / "tfrecord"))
    tok = os.path.join(SHARED, "llmc", "tiny_shakespeare_val.bin")
    have_tok = os.path.exists(tok)
    if have_tok:
        (local / "tokens").mkdir()
        shutil.copy(tok, str(local / "tokens" / "val_000000.bin"))
        shutil.copy(tok, str(local / "tokens" / "val_000001.bin"))
    mds = os.path.join(SHARED, "mds", "mosaic_mix_zstd")
    have_mds = os.path.exists(os.path.join(mds, "index.json"))
    if have_mds:
        shutil.copytree(mds, str(local / "mds"))
    servers.upload(str(local), "data/")
    shutil.copytree(str(local), os.path.join(servers.files, "data"), dirs_exist_ok=True)
    for d, _, fs in os.walk(servers.files):
        os.chmod(d, 0o755)
        for f in fs:
            os.chmod(os.path.join(d, f), 0o644)
    return str(local), have_tf, have_tok, have_mds


def sources(remote_data, servers):
    """(name, local source, [remote sources]) for every remote-capable kind."""
    local, have_tf, have_tok, have_mds = remote_data
    t = servers.env()
    s3 = "s3://%s/data" % t["FERRY_TEST_S3_BUCKET"]
    http, https = t["FERRY_TEST_HTTP_URL"] + "/data", t["FERRY_TEST_HTTPS_URL"] + "/data"
    manifest = [f for f in os.listdir(os.path.join(local, "records")) if f.endswith(".manifest")]
    out = [
        ("records", "records:%s/records" % local,
         ["records:%s/records" % s3, "records:%s/records/%s" % (http, manifest[0])]),
        ("records-stream", "records:%s/records,stream=1" % local,
         ["records:%s/records,stream=1" % s3]),
        ("wds", "wds:%s/wds" % local,
         ["wds:%s/wds" % s3, "wds:%s/wds/train-*.tar" % s3,
          "wds:%s/wds/train-{000000..000005}.tar" % s3,
          "wds:%s/wds/train-{000000..000005}.tar" % https]),
        ("wds-stream", "wds:%s/wds,stream=1" % local,
         ["wds:%s/wds,stream=1" % s3, "wds:%s/wds/train-{000000..000005}.tar,stream=1" % http]),
        ("npy", "npy:x=%s/npy/x.npy;y=%s/npy/y.npy" % (local, local),
         ["npy:x=%s/npy/x.npy;y=%s/npy/y.npy" % (s3, s3),
          "npy:x=%s/npy/x.npy;y=%s/npy/y.npy" % (http, http)]),
    ]
    if have_tf:
        out.append(("tfrecord", "tfrecord:%s/tfrecord" % local,
                    ["tfrecord:%s/tfrecord" % s3, "tfrecord:%s/tfrecord/*.tfrecord" % s3,
                     "tfrecord:%s/tfrecord/ydf_toy_uncompressed-{00000..00001}-of-00002.tfrecord"
                     % http]))
        out.append(("tfrecord-stream", "tfrecord:%s/tfrecord,stream=1" % local,
                    ["tfrecord:%s/tfrecord,stream=1" % s3]))
    if have_tok:
        out.append(("tokens", "tokens:%s/tokens/val_*.bin,seq=64" % local,
                     ["tokens:%s/tokens/val_*.bin,seq=64" % s3,
                      "tokens:%s/tokens/val_{000000..000001}.bin,seq=64" % http]))
    if have_mds:
        out.append(("mds", "mds:%s/mds" % local, ["mds:%s/mds" % s3]))
    return out


def test_same_batches_as_local_files(servers, remote_data, tmp_path):
    """Every remote-capable source gives the local files' batch bytes, for 0, 1 and 2
    workers and for each of two ranks; a second read is served by the cache."""
    checked = 0
    for name, local_src, remotes in sources(remote_data, servers):
        for args in (["--workers", 0], ["--workers", 1], ["--workers", 2],
                     ["--workers", 2, "--rank", 0, "--world-size", 2],
                     ["--workers", 1, "--rank", 1, "--world-size", 2]):
            want = bench(local_src, base_env(servers, tmp_path / "unused"), *args)
            for k, src in enumerate(remotes):
                cache = tmp_path / ("cache-%s-%d" % (name, k))
                env = base_env(servers, cache)
                got = bench(src, env, *args)
                assert got["digest"] == want["digest"], (src, args)
                # whatever was downloaded went through transfer buffers (bench --json)
                assert got["fetch_buffer_peak"] > 0 or got["downloaded_bytes"] == 0, got
                assert got["fetch_buffer_bytes"] <= got["fetch_buffer_peak"]
                assert got["ranged_reads"] >= 0
                assert got["samples"] == want["samples"]
                checked += 1
        # the second read of the last location: from the cache, nothing downloaded
        # but the headers a lazy open reads of a file it does not know yet (one
        # ranged GET of at most 4 KiB each, which tells the version too)
        again = bench(remotes[0], base_env(servers, tmp_path / ("cache-%s-0" % name)))
        headers = 4096 * again["ranged_reads"] if name in ("npy", "tokens") else 0
        assert again["cache_misses"] == 0 and again["downloaded_bytes"] <= headers, again
        assert again["cache_hits"] > 0
    assert checked >= 60


def test_shard_window_shuffle_is_the_local_order(servers, remote_data, tmp_path):
    """--shuffle --window-shards W over remote shards gives the local files' batches
    for 0 and 2 workers and two ranks: the order is the same, local or remote."""
    for name, local_src, remotes in sources(remote_data, servers):
        if name not in ("records", "wds"):
            continue
        for args in (["--workers", 0], ["--workers", 2],
                     ["--workers", 2, "--rank", 1, "--world-size", 2]):
            args = ["--shuffle", "--window-shards", 2, "--seed", 7, *args]
            want = bench(local_src, base_env(servers, tmp_path / "unused"), *args)
            unshuffled = bench(local_src, base_env(servers, tmp_path / "unused"), *args[5:])
            assert want["digest"] != unshuffled["digest"]
            for k, src in enumerate(remotes):
                env = base_env(servers, tmp_path / ("cache-%s-%d" % (name, k)))
                assert bench(src, env, *args)["digest"] == want["digest"], (src, args)


def test_python_takes_remote_locations(servers, remote_data, tmp_path, run_py):
    """ferry.DataLoader and ferry.open take the same text."""
    local, *_ = remote_data
    bucket = servers.env()["FERRY_TEST_S3_BUCKET"]
    code = """
import sys, ferry, numpy as np
def batches(src):
    out = []
    for b in ferry.DataLoader(src, batch_size=16, shuffle=True, seed=3, num_workers=2,
                              output="numpy"):
        out.append(np.asarray(b["txt"]).tobytes() + np.asarray(b["cls"]).tobytes())
    return out
a = batches("wds:%s/wds")
loader = ferry.DataLoader("wds:s3://%s/data/wds", batch_size=16, shuffle=True, seed=3,
                          num_workers=2, output="numpy")
b = [np.asarray(x["txt"]).tobytes() + np.asarray(x["cls"]).tobytes() for x in loader]
assert a == b, "the batches differ"
s = loader.stats()
assert s["cache_misses"] == 6 and s["downloaded_bytes"] > 0, s
ds = ferry.open("records:s3://%s/data/records")
assert len(ds) == 300
print("ok", s["cache_misses"], s["downloaded_bytes"])
""" % (local, bucket, bucket)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env=base_env(servers, tmp_path / "cache"), timeout=300)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("ok 6 ")


def test_listing_many_pages(servers, tmp_path):
    """A prefix of 23 objects listed 4 keys a page: 6 pages with continuation
    tokens (base64: '+', '/', '='), every object once, in key order."""
    d = tmp_path / "many"
    make_tars(str(d), n=23, per=1)
    servers.upload(str(d), "pages/")
    env = base_env(servers, tmp_path / "cache", FERRY_REMOTE_LIST_PAGE="4")
    bucket = servers.env()["FERRY_TEST_S3_BUCKET"]
    got = bench("wds:s3://%s/pages" % bucket, env, "--workers", 0)
    want = bench("wds:%s" % d, env, "--workers", 0)
    assert got["digest"] == want["digest"] and got["samples"] == 23
    got = bench("wds:s3://%s/pages/train-00001?.tar" % bucket, env, "--workers", 0)
    assert got["samples"] == 10


def test_errors_say_what_to_check(servers, remote_data, tmp_path):
    bucket = servers.env()["FERRY_TEST_S3_BUCKET"]
    env = base_env(servers, tmp_path / "cache", AWS_SECRET_ACCESS_KEY="wrong")
    p = bench("wds:s3://%s/data/wds/train-000000.tar" % bucket, env, check=False)
    assert p.returncode != 0
    assert "403" in p.stderr and "SignatureDoesNotMatch" in p.stderr
    assert "check the credentials" in p.stderr and "1 attempt" in p.stderr
    env = base_env(servers, tmp_path / "cache")
    p = bench("wds:s3://%s/data/wds/no-such.tar" % bucket, env, check=False)
    assert "s3://%s/data/wds/no-such.tar: HTTP 404" % bucket in p.stderr
    assert "check the bucket and the key" in p.stderr
    p = bench("wds:s3://no-such-bucket/x.tar", env, check=False)
    assert "404" in p.stderr and "NoSuchBucket" in p.stderr
    p = bench("wds:s3://%s/data/nothing-*.tar" % bucket, env, check=False)
    assert "no object matches" in p.stderr
    p = bench("wds:%s/data/wds/*.tar" % servers.env()["FERRY_TEST_HTTP_URL"], env, check=False)
    assert "cannot be listed" in p.stderr
    # https without the CA that signed the server's certificate
    env = base_env(servers, tmp_path / "cache")
    del env["AWS_CA_BUNDLE"]
    p = bench("wds:%s/data/wds/train-000000.tar" % servers.env()["FERRY_TEST_HTTPS_URL"], env,
              check=False)
    assert p.returncode != 0 and "CA bundle" in p.stderr, p.stderr
    # unsigned: no credentials at all, and s3rver serves public reads
    env = base_env(servers, tmp_path / "cache2")
    del env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"]
    r = bench("wds:s3://%s/data/wds/train-000000.tar" % bucket, env)
    assert r["samples"] == 5


def test_an_exit_under_fetches_ahead_over_https(servers, tmp_path):
    """A brace range over https whose first tar is missing: the open fails at once,
    with the next four (64 MiB each) being fetched ahead, and the process exits
    under those transfers. Its exit handler stops them before the TLS library's
    own cleanup runs; the other way round, they crash the process (SIGSEGV)."""
    d = os.path.join(servers.files, "exit-ahead")
    os.makedirs(d, exist_ok=True)
    os.chmod(d, 0o755)
    for k in range(1, 6):
        path = os.path.join(d, "train-%06d.tar" % k)
        with open(path, "wb") as f:
            f.truncate(64 << 20)  # sparse: served as 64 MiB of zeros
        os.chmod(path, 0o644)
    src = "wds:%s/exit-ahead/train-{000000..000005}.tar" % servers.env()["FERRY_TEST_HTTPS_URL"]
    for k in range(5):
        cache = tmp_path / ("cache-%d" % k)
        p = subprocess.run([ferry_exe(), "head", src, "-n", "1"], capture_output=True, text=True,
                           env=base_env(servers, cache), timeout=120)
        assert p.returncode > 0, (k, p.returncode, p.stderr[-3000:])
        assert "train-000000.tar: HTTP 404" in p.stderr, p.stderr
        shutil.rmtree(str(cache), ignore_errors=True)


def test_unsigned_refusal_says_no_credentials_were_found(servers, remote_data, proxy, tmp_path):
    """No credentials: requests go unsigned. A bucket that refuses anonymous readers
    (the proxy answers 403 AccessDenied to unsigned requests, as S3 does for a
    private bucket) gets a message saying the request was unsigned, because no
    credentials were found, and where they were looked for."""
    t = servers.env()
    bucket = t["FERRY_TEST_S3_BUCKET"]
    proxy.configure(deny_unsigned="/data/")
    env = base_env(servers, tmp_path / "cache", AWS_ENDPOINT_URL=t["FERRY_TEST_PROXY_S3_ENDPOINT"])
    r = bench("wds:s3://%s/data/wds/train-000000.tar" % bucket, env)  # signed: let through
    assert r["samples"] == 5
    del env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"]
    p = bench("wds:s3://%s/data/wds/train-000000.tar" % bucket, env, check=False)
    assert p.returncode != 0
    err = p.stderr
    assert "s3://%s/data/wds/train-000000.tar: HTTP 403 AccessDenied" % bucket in err, err
    assert "the request was unsigned because no credentials were found" in err, err
    assert "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in the environment" in err, err
    home = env["HOME"]
    assert 'the profile "default" (AWS_PROFILE) in %s/.aws/credentials and %s/.aws/config' % (
        home, home) in err, err
    assert "1 attempt" in err
    assert proxy.counters()["denied_unsigned"] >= 1
    env["AWS_PROFILE"] = "nobody"  # a named profile found nowhere is its own error
    p = bench("wds:s3://%s/data/wds/train-000000.tar" % bucket, env, check=False)
    assert 'AWS profile "nobody" is in neither' in p.stderr, p.stderr


def flip(path, off):
    with open(path, "r+b") as f:
        f.seek(off)
        b = f.read(1)
        f.seek(off)
        f.write(bytes([b[0] ^ 0x5A]))


def cached_files(cache):
    """Every file in the cache's copies and temporaries."""
    out = []
    for sub in ("objects", "tmp"):
        for d, _, fs in os.walk(os.path.join(str(cache), "v1", sub)):
            out += [os.path.join(d, f) for f in fs]
    return out


def test_a_corrupt_object_is_never_cached(servers, remote_data, proxy, s3_prefix, tmp_path):
    """An object whose bytes fail its format's checks (a record's CRC, a tar header's
    checksum, a TFRecord frame's CRC) is fetched into a temporary, checked, and
    removed: never renamed into the cache, so never read. It is fetched twice (a
    transfer may damage a copy; a stored object stays damaged), then the open fails
    naming the URL, the offset and why; under --on-error skip its samples are
    skipped, each named."""
    local, have_tf = remote_data[0], remote_data[1]
    t = servers.env()
    bucket = t["FERRY_TEST_S3_BUCKET"]
    bad = tmp_path / "bad"
    shutil.copytree(os.path.join(local, "records"), str(bad / "records"))
    shutil.copytree(os.path.join(local, "wds"), str(bad / "wds"))
    shard = sorted(f for f in os.listdir(str(bad / "records")) if f.endswith(".ferry"))[1]
    flip(str(bad / "records" / shard), os.path.getsize(str(bad / "records" / shard)) // 3)
    flip(str(bad / "wds" / "train-000001.tar"), 1024 + 10)  # the second member's header
    cases = [("records:s3://%s/%srecords" % (bucket, s3_prefix), shard, "records", 40),
             # infer=5: the stream's schema comes from the first tar alone
             ("wds:s3://%s/%swds,stream=1,infer=5" % (bucket, s3_prefix), "train-000001.tar",
              "wds", 1)]
    if have_tf:
        shutil.copytree(os.path.join(local, "tfrecord"), str(bad / "tfrecord"))
        name = "ydf_toy_uncompressed-00001-of-00002.tfrecord"
        flip(str(bad / "tfrecord" / name), os.path.getsize(str(bad / "tfrecord" / name)) // 2)
        cases.append(("tfrecord:s3://%s/%stfrecord" % (bucket, s3_prefix), name, "tfrecord",
                      None))
    servers.upload(str(bad), s3_prefix)
    for src, name, sub, skipped in cases:
        url = "s3://%s/%s%s/%s" % (bucket, s3_prefix, sub, name)
        with open(str(bad / sub / name), "rb") as f:
            corrupt = f.read()
        proxy.reset()
        cache = tmp_path / ("cache-" + sub)
        env = base_env(servers, cache, AWS_ENDPOINT_URL=t["FERRY_TEST_PROXY_S3_ENDPOINT"])
        p = bench(src, env, check=False)
        assert p.returncode != 0, src
        assert url + ": " in p.stderr and "offset" in p.stderr, p.stderr
        assert "fetched 2 times, failing its check each time: not cached" in p.stderr, p.stderr
        files = cached_files(cache)
        assert os.listdir(str(cache / "v1" / "tmp")) == []  # no temporary left behind
        for f in files:
            with open(f, "rb") as fh:
                assert fh.read() != corrupt, f
        gets = [e for e in proxy.log() if e["method"] == "GET" and e["target"].endswith(
            "/" + name)]
        assert len(gets) == 2, gets
        if skipped is None:
            continue  # a map-style TFRecord source indexes every file at open: no skipping
        p = bench(src, env, "--on-error", "skip", check=False)
        assert p.returncode == 0, p.stderr
        r = json.loads(p.stdout.strip().splitlines()[-1])
        assert r["skipped"] == skipped, r
        assert all(url in e["error"] for e in r["skipped_samples"]), r["skipped_samples"]
        for f in cached_files(cache):
            with open(f, "rb") as fh:
                assert fh.read() != corrupt, f


def test_faults_give_the_exact_bytes(servers, remote_data, proxy, tmp_path):
    """Through the proxy: 15% 503 SlowDown, 10% resets mid-body, 10% short bodies.
    The bytes are the local files', and every injected fault is a retry counted."""
    local = remote_data[0]
    t = servers.env()
    for seed in (1, 2):
        proxy.reset()
        proxy.configure(seed=seed, faults={"slowdown": 0.15, "reset": 0.1, "short": 0.1})
        env = base_env(servers, tmp_path / ("cache-%d" % seed),
                       AWS_ENDPOINT_URL=t["FERRY_TEST_PROXY_S3_ENDPOINT"], **BACKOFF)
        want = bench("wds:%s/wds" % local, env)
        got = bench("wds:s3://%s/data/wds" % t["FERRY_TEST_S3_BUCKET"], env)
        assert got["digest"] == want["digest"]
        injected = sum(proxy.counters()["injected"].values())
        assert injected > 0
        assert got["retries"] == injected, (got["retries"], proxy.counters())
        got = bench("records:%s/data/records/%s" % (
            t["FERRY_TEST_PROXY_HTTP_URL"],
            [f for f in os.listdir(os.path.join(local, "records")) if f.endswith(".manifest")][0]),
            base_env(servers, tmp_path / ("cache-h%d" % seed), **BACKOFF))
        assert got["digest"] == bench("records:%s/records" % local, env)["digest"]


def test_a_stalled_body_is_tried_again(servers, remote_data, proxy, tmp_path):
    """A body that stops mid-way for longer than FERRY_REMOTE_STALL seconds (the
    per-request stall timeout, far below the total deadline) is tried again on a
    fresh connection: the bytes are the local files', each stall one retry."""
    local = remote_data[0]
    t = servers.env()
    proxy.configure(faults={"stall": 1.0}, max_consecutive=1, stall_seconds=60,
                    match="train-000003", methods=["GET"])
    env = base_env(servers, tmp_path / "cache", AWS_ENDPOINT_URL=t["FERRY_TEST_PROXY_S3_ENDPOINT"],
                   FERRY_REMOTE_STALL="1", **BACKOFF)
    got = bench("wds:s3://%s/data/wds/train-{000000..000005}.tar" % t["FERRY_TEST_S3_BUCKET"],
                env)
    assert got["digest"] == bench("wds:%s/wds" % local, env)["digest"]
    # every request for the shard stalls once (a resumed body's Range is a new
    # request to the proxy, stalled in its turn): each stall is one retry; without
    # the stall timeout the read would wait out the pause, retrying nothing
    injected = proxy.counters()["injected"]
    assert injected["stall"] >= 1 and sum(injected.values()) == injected["stall"], injected
    assert got["retries"] == injected["stall"], (got, injected)


def test_retries_run_out_naming_the_url(servers, remote_data, proxy, tmp_path):
    t = servers.env()
    proxy.configure(faults={"slowdown": 1.0}, max_consecutive=100)
    env = base_env(servers, tmp_path / "cache", AWS_ENDPOINT_URL=t["FERRY_TEST_PROXY_S3_ENDPOINT"],
                   FERRY_REMOTE_ATTEMPTS="3", **BACKOFF)
    p = bench("wds:s3://%s/data/wds/train-000001.tar" % t["FERRY_TEST_S3_BUCKET"], env,
              check=False)
    assert p.returncode != 0
    assert "train-000001.tar: HTTP 503" in p.stderr
    assert "after 3 attempts" in p.stderr and "retries exhausted" in p.stderr


def test_a_changed_object_is_fetched_again(servers, remote_data, proxy, tmp_path):
    """The object's ETag changes between the HEAD and the GET: the GET's If-Match gets
    412, and ferry learns the new version and fetches it."""
    local = remote_data[0]
    t = servers.env()
    proxy.configure(faults={}, etag_change=[{"match": "train-000002", "after": 1}])
    env = base_env(servers, tmp_path / "cache", AWS_ENDPOINT_URL=t["FERRY_TEST_PROXY_S3_ENDPOINT"])
    got = bench("wds:s3://%s/data/wds/train-00000{0..5}.tar" % t["FERRY_TEST_S3_BUCKET"], env)
    assert got["digest"] == bench("wds:%s/wds" % local, env)["digest"]
    statuses = [e.get("status") for e in proxy.log() if "train-000002" in e["target"]]
    assert 412 in statuses, statuses


def test_two_processes_fetch_each_shard_once(servers, remote_data, proxy, tmp_path):
    t = servers.env()
    env = base_env(servers, tmp_path / "cache", AWS_ENDPOINT_URL=t["FERRY_TEST_PROXY_S3_ENDPOINT"])
    src = "wds:s3://%s/data/wds,stream=1" % t["FERRY_TEST_S3_BUCKET"]
    cmd = [ferry_exe(), "bench", src, "--digest", "--json", "--no-progress", "--workers", "2"]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=env) for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    digests = {json.loads(o[0].strip().splitlines()[-1])["digest"] for o in outs}
    assert len(digests) == 1
    gets = {}
    for e in proxy.log():
        if e["method"] == "GET" and e["target"].endswith(".tar"):
            gets[e["target"]] = gets.get(e["target"], 0) + 1
    assert len(gets) == 6 and set(gets.values()) == {1}, gets


def test_a_killed_fetch_leaves_nothing_read_later(servers, remote_data, proxy, tmp_path):
    local = remote_data[0]
    t = servers.env()
    cache = tmp_path / "cache"
    env = base_env(servers, cache, AWS_ENDPOINT_URL=t["FERRY_TEST_PROXY_S3_ENDPOINT"])
    proxy.configure(faults={"stall": 1.0}, max_consecutive=1, stall_seconds=60,
                    match="train-000003", methods=["GET"])
    src = "wds:s3://%s/data/wds/train-{000000..000005}.tar" % t["FERRY_TEST_S3_BUCKET"]
    p = subprocess.Popen([ferry_exe(), "bench", src, "--no-progress", "--workers", "0"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    deadline = time.time() + 60
    while time.time() < deadline:
        if any(e["method"] == "GET" and "train-000003" in e["target"] for e in proxy.log()):
            break
        time.sleep(0.05)
    time.sleep(0.3)  # part of the body is in the temporary
    p.send_signal(signal.SIGKILL)
    p.wait()
    tmp = os.path.join(str(cache), "v1", "tmp")
    assert len(os.listdir(tmp)) >= 1  # the killed fetch's temporary
    proxy.configure(faults={})
    got = bench(src, env)
    assert got["digest"] == bench("wds:%s/wds" % local, env)["digest"]
    assert os.listdir(tmp) == []


def test_eviction_under_a_small_limit(servers, remote_data, tmp_path):
    """A stream over 6 tars with room for 3: the least recently used go, the
    bytes are right, the cache stays within its limit; a map-style source that
    needs all 6 at once is refused at open with the numbers."""
    local = remote_data[0]
    t = servers.env()
    sizes = sorted(os.path.getsize(os.path.join(local, "wds", f))
                   for f in os.listdir(os.path.join(local, "wds")))
    limit = sizes[-1] * 3 + 100
    cache = tmp_path / "cache"
    env = base_env(servers, cache, FERRY_REMOTE_AHEAD="1")
    src = "wds:s3://%s/data/wds,stream=1,cache_limit=%d" % (t["FERRY_TEST_S3_BUCKET"], limit)
    one = ["--workers", 1, "--stream-shards", 1]  # one file read at a time, one ahead
    for _ in range(2):
        got = bench(src, env, *one)
        assert got["digest"] == bench("wds:%s/wds,stream=1" % local, env, *one)["digest"]
        held = sum(os.path.getsize(os.path.join(d, f))
                   for d, _, fs in os.walk(os.path.join(str(cache), "v1", "objects")) for f in fs)
        assert held <= limit
    assert got["cache_misses"] > 0  # the second pass fetched again what was evicted
    p = bench("wds:s3://%s/data/wds,cache_limit=%d" % (t["FERRY_TEST_S3_BUCKET"], limit), env,
              check=False)
    assert p.returncode != 0
    assert "cannot hold" in p.stderr and "the limit is %d bytes" % limit in p.stderr, p.stderr


def test_resume_with_a_cold_cache(servers, remote_data, tmp_path):
    """A loader's state saved mid-epoch resumes in another process whose cache is
    empty: the rest of the epoch is what an uninterrupted run gives."""
    bucket = servers.env()["FERRY_TEST_S3_BUCKET"]
    code = """
import pickle, sys, ferry, numpy as np
src, mode, path = sys.argv[1], sys.argv[2], sys.argv[3]
def take(loader, n=None):
    out = []
    for b in loader:
        out.append(np.asarray(b["txt"]).tobytes())
        if n is not None and len(out) == n:
            break
    return out
mk = lambda: ferry.DataLoader(src, batch_size=4, num_workers=2, output="numpy", seed=5)
if mode == "whole":
    pickle.dump(take(mk()), open(path, "wb"))
elif mode == "first":
    l = mk()
    take(l, 3)
    pickle.dump(l.state_dict(), open(path, "wb"))
else:
    l = mk()
    l.load_state_dict(pickle.load(open(path, "rb")))
    pickle.dump(take(l), open(path + ".rest", "wb"))
"""
    f = tmp_path / "snippet.py"
    f.write_text(code)
    src = "wds:s3://%s/data/wds,stream=1,shuffle=8,seed=2" % bucket

    def run(mode, path, cache):
        p = subprocess.run([sys.executable, str(f), src, mode, str(path)], capture_output=True,
                           text=True, env=base_env(servers, cache), timeout=300)
        assert p.returncode == 0, p.stderr

    import pickle
    run("whole", tmp_path / "whole", tmp_path / "c1")
    run("first", tmp_path / "state", tmp_path / "c2")
    run("resume", tmp_path / "state", tmp_path / "c3")  # an empty cache
    whole = pickle.load(open(tmp_path / "whole", "rb"))
    rest = pickle.load(open(str(tmp_path / "state") + ".rest", "rb"))
    assert rest == whole[3:]


def test_the_command_takes_remote_sets(servers, remote_data, tmp_path):
    """ferry verify, stat and ls over a set in S3 and over HTTP by its manifest."""
    local = remote_data[0]
    t = servers.env()
    manifest = [f for f in os.listdir(os.path.join(local, "records")) if f.endswith(".manifest")]
    env = base_env(servers, tmp_path / "cache")
    for loc in ("s3://%s/data/records" % t["FERRY_TEST_S3_BUCKET"],
                "%s/data/records/%s" % (t["FERRY_TEST_HTTP_URL"], manifest[0])):
        for cmd in (["verify", loc, "--json"], ["stat", loc, "--json"], ["ls", loc, "--json"]):
            p = subprocess.run([ferry_exe(), *cmd], capture_output=True, text=True, env=env,
                               timeout=120)
            assert p.returncode == 0, (cmd, p.stderr)
            r = json.loads(p.stdout)
            if cmd[0] == "verify":
                assert r["ok"] and r["records"] == 300, r
            elif cmd[0] == "stat":
                assert r["records"] == 300 and r["shards"] == 8, r
            else:
                assert sum(s["records"] for s in r["shards"]) == 300


def write_token_shards(d, n, tokens):
    """n llm.c shards (uint16) of `tokens` tokens each: train_000000.bin ..."""
    os.makedirs(d)
    for s in range(n):
        hdr = np.zeros(256, dtype=np.int32)
        hdr[:3] = (20240520, 1, tokens)
        toks = ((np.arange(tokens) * 31 + s * 7919) % 65536).astype(np.uint16)
        with open(os.path.join(d, "train_%06d.bin" % s), "wb") as f:
            f.write(hdr.tobytes() + toks.tobytes())


def test_first_batch_fetches_one_shard(servers, proxy, s3_prefix, tmp_path):
    """A map-style set of 40 token shards: the open reads each shard's 1 KiB header
    (a ranged GET), the first batch fetches the one shard it reads (the batches the
    loader prefetches lie in it too: 1562 windows a shard), and `ferry head`
    fetches none whole: its samples are ranged GETs of their windows. Counted at the
    server side (the proxy's log)."""
    TOK = 100000
    write_token_shards(str(tmp_path / "tok"), 40, TOK)
    servers.upload(str(tmp_path / "tok"), s3_prefix + "tok/")
    t = servers.env()
    src = "tokens:s3://%s/%stok/train_*.bin,seq=64" % (t["FERRY_TEST_S3_BUCKET"], s3_prefix)
    env = base_env(servers, tmp_path / "cache", AWS_ENDPOINT_URL=t["FERRY_TEST_PROXY_S3_ENDPOINT"],
                   FERRY_REMOTE_AHEAD="0")

    def gets():
        whole, ranged = {}, []
        for e in proxy.log():
            if e["method"] != "GET" or not e["target"].split("?")[0].endswith(".bin"):
                continue
            a, b = map(int, e["range"].split("=")[1].split("-"))
            name = e["target"].split("/")[-1]
            if b - a + 1 == 1024 + 2 * TOK:
                whole[name] = whole.get(name, 0) + 1
            else:
                ranged.append((name, a, b))
        return whole, ranged

    code = """
import ferry, numpy as np
loader = ferry.DataLoader(%r, batch_size=8, num_workers=0, output="numpy")
b = next(iter(loader))
want = ((np.arange(65) * 31) %% 65536).astype(np.uint16)
assert (np.asarray(b["input"])[0] == want[:64]).all()
assert (np.asarray(b["target"])[0] == want[1:]).all()
s = loader.stats()
print(s["cache_misses"], s["downloaded_bytes"], s["ranged_reads"], s["fetch_buffer_peak"],
      s["fetch_buffer_bytes"])
""" % src
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       timeout=300)
    assert p.returncode == 0, p.stderr
    whole, ranged = gets()
    assert whole == {"train_000000.bin": 1}, whole
    assert sorted(r[0] for r in ranged) == ["train_%06d.bin" % s for s in range(40)]
    assert all(a == 0 and b == 1023 for _, a, b in ranged), ranged
    misses, downloaded, nranged, peak, held = map(int, p.stdout.split())
    assert misses == 1 and downloaded == 40 * 1024 + 1024 + 2 * TOK
    # stats() counts the headers' ranged GETs the server saw, and the buffers
    # the whole fetch held
    assert nranged == len(ranged) == 40
    assert 0 < peak <= 16 * (512 + 1024) * 1024 and held <= peak

    # ferry head on a cold cache: three windows, each one ranged GET of 65 tokens
    proxy.reset()
    env["FERRY_CACHE"] = str(tmp_path / "cache2")
    src7 = src.replace("train_*", "train_00000[7-9]")
    h = subprocess.run([ferry_exe(), "head", src7, "-n", "3"], capture_output=True,
                       text=True, env=env, timeout=300)
    assert h.returncode == 0, h.stderr
    whole, ranged = gets()
    assert whole == {}, whole
    windows = [r for r in ranged if r[2] != 1023]
    assert [(r[0], r[1], r[2]) for r in windows] == [
        ("train_000007.bin", 1024 + 2 * 64 * k, 1024 + 2 * 64 * k + 2 * 65 - 1) for k in range(3)]
