"""Code in the docs is code: every ```python block of docs/python.md,
docs/distributed.md and the README runs here as written; a block that is a
script ("# train.py: ...") runs under the commands of the page's first ```sh
block, as written."""
import os
import re
import shlex
import subprocess
import sys

import pytest

from conftest import ROOT, free_port

DOCS = [os.path.join(ROOT, "docs", "python.md"), os.path.join(ROOT, "README.md"),
        os.path.join(ROOT, "docs", "distributed.md")]
SCRIPT = re.compile(r"# (\w+\.py):")


def blocks():
    out = []
    for path in DOCS:
        text = open(path).read()
        for i, m in enumerate(re.finditer(r"```python\n(.*?)```", text, re.S)):
            if SCRIPT.match(m.group(1)):
                continue  # a script: its commands run it
            out.append(pytest.param(m.group(1), id="%s-%d" % (os.path.basename(path), i)))
    return out


@pytest.mark.parametrize("code", blocks())
def test_doc_block_runs(code, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "<doc>", "exec"), {"__name__": "__doc_example__"})


def test_docs_have_python_blocks():
    assert len(blocks()) >= 6


def test_distributed_example_runs_as_written(tmp_path):
    """docs/distributed.md's train.py under its torchrun commands: ten steps on
    two processes, then the rest of the epoch on three."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("torch.distributed")
    text = open(os.path.join(ROOT, "docs", "distributed.md")).read()
    script = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    name = SCRIPT.match(script).group(1)
    (tmp_path / name).write_text(script)
    commands = re.search(r"```sh\n(.*?)```", text, re.S).group(1)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
              "MASTER_PORT"):
        env.pop(k, None)
    states = []
    for line in commands.splitlines():
        argv = shlex.split(line, comments=True)
        if not argv:
            continue
        assert argv[0] == "torchrun"
        # torchrun is `python -m torch.distributed.run`; the address is this test's own
        # free port, and "--redirects 2 --tee 2" what torch 1.13's launcher needs
        # under Python 3.11 (the page says so)
        argv = [sys.executable, "-m", "torch.distributed.run", "--redirects", "2", "--tee", "2",
                "--master_addr", "127.0.0.1", "--master_port", str(free_port())] + argv[1:]
        p = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=300,
                           env=env)
        assert p.returncode == 0, p.stdout + p.stderr
        states.append(torch.load(tmp_path / "loader.pt"))
    assert [(s["epoch"], s["batches"], s["world_size"], s["global_batch_size"])
            for s in states] == [(0, 10, 2, 24), (1, 0, 3, 24)]
