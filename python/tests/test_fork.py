"""fork: a loader stays its creator's (a child gets an error at once, and exits
without touching it); a source works in a child, and pickles by its text."""
import pickle

import numpy as np

import ferry

WAIT = """
import os, sys, time

def wait(pid, limit=20):
    deadline = time.monotonic() + limit
    while True:
        r, st = os.waitpid(pid, os.WNOHANG)
        if r:
            return os.waitstatus_to_exitcode(st)
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            sys.exit("the child hung")
        time.sleep(0.01)
"""


def test_a_child_gets_an_error_from_the_parents_loader(run_py):
    run_py(WAIT + """
import multiprocessing, ferry
src = sys.argv[1]
dl = ferry.DataLoader(src, batch_size=16, num_workers=2, output="numpy")
it = iter(dl)
next(it)  # the workers are busy at the fork

def use(how):
    t = time.monotonic()
    try:
        if how == "next":
            next(it)
        else:
            for b in dl:
                pass
    except ferry.StateError as e:
        if "created in another process: create one after fork" not in str(e):
            print(e)
            os._exit(4)
        os._exit(0 if time.monotonic() - t < 1 else 5)
    except BaseException as e:
        print(repr(e))
        os._exit(6)
    os._exit(3)

for how in ("next", "for"):
    pid = os.fork()
    if pid == 0:
        use(how)
    rc = wait(pid)
    assert rc == 0, (how, rc)
p = multiprocessing.get_context("fork").Process(target=use, args=("next",))
p.start()
p.join(20)
assert p.exitcode == 0, p.exitcode
assert next(it).number == 1  # the parent's goes on
dl.close()
""", "synthetic:100000,bytes=64")


def test_a_child_that_never_touches_the_loader_exits(run_py, tmp_path):
    run_py(WAIT + """
import ferry
dls = [ferry.DataLoader("synthetic:100000,bytes=64", batch_size=16, num_workers=2,
                        output="numpy"),
       ferry.DataLoader([{"x": np.zeros(4, np.int32)}] * 1000, batch_size=16, num_workers=2,
                        output="numpy")]
its = [iter(dl) for dl in dls]
for it in its:
    next(it)
pid = os.fork()
if pid == 0:
    sys.exit(7)  # SystemExit: atexit closes every live loader
assert wait(pid, 3) == 7  # at once: no wait for workers the child does not have
pid = os.fork()
if pid == 0:
    for dl in dls:
        dl.close()
    del its, dls
    sys.exit(0)
assert wait(pid, 3) == 0
assert next(its[0]).number == 1 and next(its[1]).number == 1
""".replace("import ferry", "import ferry\nimport numpy as np"))


def test_a_source_works_in_a_child(run_py, lines_file):
    run_py(WAIT + """
import ferry, numpy as np
ds = ferry.open("lines:" + sys.argv[1])
dl = ferry.DataLoader(ds, batch_size=10, num_workers=2, output="numpy")
it = iter(dl)
next(it)
first = ds[5]
pid = os.fork()
if pid == 0:
    ok = all(np.array_equal(ds[5][k], first[k]) for k in first)
    n = sum(len(b["line"]) if "line" in b else 10 for b in
            ferry.DataLoader(ds, batch_size=10, num_workers=2, output="numpy"))
    os._exit(0 if ok and n == 1000 else 8)
assert wait(pid) == 0
""", lines_file)


def test_a_source_pickles_by_its_text(run_py, lines_file):
    ds = ferry.open("lines:" + lines_file)
    again = pickle.loads(pickle.dumps(ds))
    assert isinstance(again, ferry.Dataset) and again.source == ds.source
    assert all(np.array_equal(again[7][k], ds[7][k]) for k in ds[7])
    p = run_py("""
import multiprocessing, sys, ferry

def read(ds, i):
    return len(ds), bytes(ds[i][ds.fields[0].name])

if __name__ == "__main__":
    ds = ferry.open("lines:" + sys.argv[1])
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        n, row = pool.apply(read, (ds, 7))
    assert n == len(ds) and row == bytes(ds[7][ds.fields[0].name]), (n, row)
    print("ok")
""", lines_file)
    assert "ok" in p.stdout
