"""The Python tests run against the installed package (make test installs it
into a throwaway venv), never against the source tree."""
import os
import shutil
import socket
import subprocess
import sys

import pytest

import ferry

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SHARED = os.path.join(os.path.dirname(ROOT), "shared", "testdata")


def pytest_configure(config):
    src = os.path.join(ROOT, "python")
    if os.path.realpath(ferry.__file__).startswith(os.path.realpath(src) + os.sep) and \
            not os.environ.get("FERRY_TEST_SOURCE_TREE"):
        raise pytest.UsageError("ferry was imported from the source tree (%s), not from an "
                                "install: run the tests from outside it" % ferry.__file__)


@pytest.fixture
def run_py(tmp_path):
    """Runs a Python snippet in a fresh interpreter (the same one as the tests)."""
    def run(code, *args, timeout=120, check=True):
        f = tmp_path / ("snippet_%d.py" % len(list(tmp_path.glob("snippet_*.py"))))
        f.write_text(code)
        p = subprocess.run([sys.executable, str(f), *map(str, args)], capture_output=True,
                           text=True, timeout=timeout, cwd=str(tmp_path))
        if check and p.returncode != 0:
            raise AssertionError("snippet failed (%d):\n%s\n%s" % (p.returncode, p.stdout, p.stderr))
        return p
    return run


@pytest.fixture
def lines_file(tmp_path):
    p = tmp_path / "text.txt"
    with open(p, "w") as f:
        for i in range(1000):
            f.write("%d line %s\n" % (i, "x" * (i % 37)))
    ferry.index(str(p))
    return str(p)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---- the loopback servers of the remote-reading tests (tests/servers/README.md) ----
SERVERS_DIR = os.path.join(ROOT, "tests", "servers")


def loopback():
    """The tests/servers/servers.py module."""
    if SERVERS_DIR not in sys.path:
        sys.path.insert(0, SERVERS_DIR)
    import servers
    return servers


@pytest.fixture(scope="session")
def servers():
    """nginx, s3rver and the fault proxy on loopback, for the whole session (a started
    servers.Servers); skips, saying what is missing, where they cannot run."""
    mod = loopback()
    miss = mod.missing()
    if miss:
        pytest.skip("the loopback servers cannot run here: " + "; ".join(miss))
    with mod.Servers() as s:
        yield s


@pytest.fixture
def proxy(servers):
    """The fault proxy, with no faults and zero counters, and so again after the test."""
    servers.proxy.reset()
    yield servers.proxy
    servers.proxy.reset()


@pytest.fixture
def s3_prefix(request):
    """A key prefix of this test's own in the shared bucket ("t/<test name>/")."""
    import re
    return "t/%s/" % re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.name)
