"""The tests' build cache: one documented, reused place for builds that take minutes.

``$MS_KVCACHE_TEST_CACHE`` if set, else ``${XDG_CACHE_HOME:-~/.cache}/ms_kvcache/tests``. Each build lives
in ``<cache>/<kind>/<key>`` where ``key`` names the checkout (a CMake build directory belongs to one
source tree); the checkout's path is written to ``<dir>/checkout``. Every call prunes entries of that
kind whose checkout no longer exists (a deleted CI clone) and keeps at most :data:`KEEP` of the others
(least recently used first out), so the cache does not grow with every fresh clone. Delete the folder to
start from scratch.
"""
import hashlib
import os
import shutil
import time
from pathlib import Path

KEEP = 2


def cache_root():
    env = os.environ.get("MS_KVCACHE_TEST_CACHE")
    if env:
        return Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ms_kvcache" / "tests"


def build_dir(kind, checkout):
    """``<cache>/<kind>/<key of checkout>``, created; stale entries of ``kind`` removed."""
    checkout = Path(checkout).resolve()
    base = cache_root() / kind
    base.mkdir(parents=True, exist_ok=True)
    key = hashlib.sha256(str(checkout).encode()).hexdigest()[:12]
    mine = base / key
    others = []
    for d in base.iterdir():
        if not d.is_dir() or d == mine:
            continue
        try:
            owner = Path((d / "checkout").read_text().strip())
        except OSError:
            owner = None
        if owner is None or not owner.exists():
            shutil.rmtree(d, ignore_errors=True)
        else:
            others.append(d)
    others.sort(key=lambda d: (d / "checkout").stat().st_mtime, reverse=True)
    for d in others[KEEP - 1:]:
        shutil.rmtree(d, ignore_errors=True)
    mine.mkdir(parents=True, exist_ok=True)
    (mine / "checkout").write_text(str(checkout) + "\n")  # also marks it most recently used
    os.utime(mine / "checkout", (time.time(), time.time()))
    return mine
