"""Code in the docs is code: every ```python block of docs/python.md and the
README runs here as written."""
import os
import re

import pytest

from conftest import ROOT

DOCS = [os.path.join(ROOT, "docs", "python.md"), os.path.join(ROOT, "README.md")]


def blocks():
    out = []
    for path in DOCS:
        text = open(path).read()
        for i, m in enumerate(re.finditer(r"```python\n(.*?)```", text, re.S)):
            out.append(pytest.param(m.group(1), id="%s-%d" % (os.path.basename(path), i)))
    return out


@pytest.mark.parametrize("code", blocks())
def test_doc_block_runs(code, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "<doc>", "exec"), {"__name__": "__doc_example__"})


def test_docs_have_python_blocks():
    assert len(blocks()) >= 6
