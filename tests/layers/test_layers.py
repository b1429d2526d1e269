"""The include check (tests/check_layers.py): the tree passes, and each kind
of violation planted in a copy of the tree fails with its exact report."""
import os
import shutil
import subprocess
import sys

import pytest

SRC = os.environ.get("DNSLB_SRC") or os.path.dirname(os.path.dirname(
    os.path.dirname(os.path.abspath(__file__))))
CHECK = os.path.join(SRC, "tests", "check_layers.py")


def run(root):
    p = subprocess.run([sys.executable, CHECK, root], capture_output=True, text=True)
    return p.returncode, p.stdout


def tree(tmp_path):
    """A copy of the three source folders."""
    for d in ("dnslb", "rules", "lua"):
        shutil.copytree(os.path.join(SRC, d), os.path.join(str(tmp_path), d),
                        ignore=shutil.ignore_patterns("*.o", "*.html"))
    return str(tmp_path)


def plant(root, rel, line):
    """Insert @line after the first line of @rel; returns its line number (2)."""
    path = os.path.join(root, rel)
    with open(path) as fh:
        lines = fh.readlines()
    lines.insert(1, line + "\n")
    with open(path, "w") as fh:
        fh.writelines(lines)
    return 2


def summary(out):
    return out.splitlines()[-1]


def test_tree_passes():
    rc, out = run(SRC)
    assert rc == 0, out
    assert out.startswith("layers: ") and "no upward include" in out
    assert len(out.splitlines()) == 1


def test_upward_include_fails(tmp_path):
    root = tree(tmp_path)
    _, clean = run(root)
    n = plant(root, "dnslb/core/wire.c", '#include "dnslb/pipeline/query.h"')
    rc, out = run(root)
    assert rc == 1
    files = clean.split()[1]
    assert out.splitlines()[0] == (
        'dnslb/core/wire.c:%d: core (layer 0) includes "dnslb/pipeline/query.h" '
        'of pipeline (layer 4)' % n)
    # wire now reaches the pipeline, which reaches wire: a new cycle too
    assert out.splitlines()[1].startswith("cycle: ")
    assert "dnslb/core/wire" in out.splitlines()[1]
    assert summary(out) == "layers: %s files, 2 problems" % files


def test_rules_above_pipeline_fails(tmp_path):
    root = tree(tmp_path)
    rel = sorted(f for f in os.listdir(os.path.join(root, "rules")) if f.endswith(".c"))[0]
    n = plant(root, "rules/" + rel, '#include "dnslb/upstream/backend.h"')
    rc, out = run(root)
    assert rc == 1
    assert out.splitlines()[0] == (
        'rules/%s:%d: rules (layer 2) includes "dnslb/upstream/backend.h" '
        'of upstream (layer 3)' % (rel, n))


@pytest.mark.parametrize("rel,line,report", [
    ("dnslb/pipeline/query.c", "#include <lauxlib.h>",
     "dnslb/pipeline/query.c:%d: Lua header <lauxlib.h> outside lua/"),
    ("dnslb/control/web.c", '#include "dnslb/core/nosuch.h"',
     'dnslb/control/web.c:%d: "dnslb/core/nosuch.h" does not exist'),
], ids=["lua-header-outside-lua", "missing-header"])
def test_one_bad_include_fails(tmp_path, rel, line, report):
    root = tree(tmp_path)
    n = plant(root, rel, line)
    rc, out = run(root)
    assert rc == 1
    assert out.splitlines()[0] == report % n
    assert summary(out).endswith(", 1 problems")


def test_new_cycle_within_a_layer_fails(tmp_path):
    root = tree(tmp_path)
    # cache and netmask are both core; make them include each other
    plant(root, "dnslb/core/netmask.c", '#include "dnslb/core/cache.h"')
    plant(root, "dnslb/core/cache.h", '#include "dnslb/core/netmask.h"')
    rc, out = run(root)
    assert rc == 1
    cyc = [l for l in out.splitlines() if l.startswith("cycle: ")]
    assert len(cyc) == 1 and "dnslb/core/cache" in cyc[0] and "dnslb/core/netmask" in cyc[0]
