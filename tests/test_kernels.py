"""Distance kernels: every kernel level this CPU has (forced with CHASSIS_KERNEL in a fresh
process) gives the distances NumPy computes, for every metric and precision, at lengths that
are not multiples of any vector width. Also the ADR-0015 prefetch policy as cpu_info reports it."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import chassis

CHILD = r"""
import json, sys, tempfile, os
import numpy as np
import chassis
out = {"kernel": chassis.cpu_info()["kernel"], "cases": []}
rng = np.random.default_rng(7)
for dims in (1, 3, 7, 15, 17, 31, 33, 63, 65, 100, 383, 385):
    for metric in ("euclidean", "cosine", "inner_product"):
        for precision in ("full", "half"):
            data = rng.standard_normal((40, dims)).astype(np.float32)
            q = rng.standard_normal(dims).astype(np.float32)
            with tempfile.TemporaryDirectory() as d:
                ix = chassis.VectorIndex(os.path.join(d, "k.chassis"), dims,
                                         chassis.IndexOptions(metric=metric, precision=precision))
                ix.add_batch(data)
                stored = np.stack([ix.get(i) for i in range(40)])
                hits = ix.search(q, 40, ef=100)
                ix.close()
            out["cases"].append({"dims": dims, "metric": metric, "precision": precision,
                                 "stored": stored.tolist(), "q": q.tolist(),
                                 "ids": [h.id for h in hits], "d": [h.distance for h in hits]})
print(json.dumps(out))
"""


def _oracle(stored, q, metric):
    s = np.asarray(stored, np.float64)
    q = np.asarray(q, np.float64)
    if metric == "euclidean":
        return np.sqrt(((s - q) ** 2).sum(1))
    if metric == "cosine":
        return 1.0 - s @ (q / np.linalg.norm(q))
    return -(s @ q)


@pytest.mark.parametrize("level", chassis.cpu_info()["kernels_available"])
def test_every_kernel_level_matches_numpy(level):
    env = dict(os.environ, CHASSIS_KERNEL=level)
    r = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["kernel"] == level, "CHASSIS_KERNEL did not select the level"
    for c in out["cases"]:
        want = _oracle(c["stored"], c["q"], c["metric"])
        got = np.full(40, np.nan)
        got[c["ids"]] = c["d"]
        tol = 1e-4 * (1 + np.abs(want))
        assert np.all(np.abs(got - want) <= tol), (level, c["dims"], c["metric"], c["precision"])


def test_prefetch_policy_is_reported_per_adr_0015():
    info = chassis.cpu_info()
    assert info["kernel"] in info["kernels_available"]
    assert info["prefetch_cache"] in ("L1", "L2")
    expected = {"zen4": 32, "zen5": 8, "default": 8, "aarch64": 16, "apple": 256}
    assert info["prefetch_lines"] == expected[info["prefetch_policy"]]
    if info["arch"] == "x86_64" and info["vendor"] == "AuthenticAMD" and info["family"] == 0x19:
        zen4 = 0x10 <= info["model"] <= 0x1F or 0x60 <= info["model"] <= 0xAF
        assert info["prefetch_policy"] == ("zen4" if zen4 else "default")
    if info["vendor"] == "GenuineIntel":
        assert (info["prefetch_policy"], info["prefetch_lines"], info["prefetch_cache"]) == ("default", 8, "L2")
