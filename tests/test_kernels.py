"""Distance kernels: every kernel level this CPU has (forced with CHASSIS_KERNEL in a fresh
process) gives the distances NumPy computes, for every metric and precision, at lengths that
are not multiples of any vector width. Also the ADR-0015 prefetch policy as cpu_info reports it."""

import json
import os
import subprocess
import sys

import chassis
import numpy as np
import pytest

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
    r = subprocess.run(
        [sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=120
    )
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
        assert (info["prefetch_policy"], info["prefetch_lines"], info["prefetch_cache"]) == (
            "default",
            8,
            "L2",
        )


GROUP_CHILD = r"""
import json, sys
import numpy as np
import chassis
r = chassis.IndexReader(sys.argv[1])
q = np.load(sys.argv[2])
ids, d = r.search_batch(q, 10, ef=40, threads=1)
loop = [[(h.id, h.distance) for h in r.search(x, 10, ef=40)] for x in q[:20]]
print(json.dumps({"kernel": chassis.cpu_info()["kernel"], "ids": ids.tolist(),
                  "bits": d.view(np.uint32).tolist(), "loop": loop}))
"""


@pytest.fixture(scope="module")
def grouped_index(tmp_path_factory):
    """One index per shape, built once and searched at every kernel level: the levels are
    compared on the same file, and under emulation (.ci/cross) the build, most of the time,
    is not repeated per level."""
    built = {}

    def get(dims, precision, metric):
        if (dims, precision, metric) not in built:
            rng = np.random.default_rng(dims)
            centres = rng.standard_normal((25, dims)).astype(np.float32)
            data = centres[rng.integers(0, 25, 2500)] + 0.3 * rng.standard_normal((2500, dims))
            queries = centres[rng.integers(0, 25, 60)] + 0.3 * rng.standard_normal((60, dims))
            folder = tmp_path_factory.mktemp(f"grouped-{dims}-{precision}-{metric}")
            path = folder / "g.chassis"
            opts = chassis.IndexOptions(metric=metric, precision=precision, ef_construction=80)
            with chassis.VectorIndex(path, dims, opts) as ix:
                ix.add_batch(data.astype(np.float32))
                ix.flush()
            np.save(folder / "q.npy", queries.astype(np.float32))
            built[dims, precision, metric] = (
                path,
                folder / "q.npy",
                data.astype(np.float32),
                queries.astype(np.float32),
            )
        return built[dims, precision, metric]

    return get


@pytest.mark.parametrize("level", chassis.cpu_info()["kernels_available"])
@pytest.mark.parametrize(
    "dims,precision,metric",
    [
        (385, "full", "euclidean"),
        pytest.param(600, "half", "cosine", marks=pytest.mark.slow),
        pytest.param(300, "full", "inner_product", marks=pytest.mark.slow),
        (24, "full", "euclidean"),
    ],
)
def test_grouped_distances_give_the_same_search_bit_for_bit(
    grouped_index, level, dims, precision, metric
):
    # Searches over long vectors compute a node's neighbors' distances four at a time; forced on
    # for every length and off for all (CHASSIS_GROUP_MIN_BYTES in fresh processes), the same
    # graph must give the same ids and the same distance bits, and good answers.
    path, queries_file, data, queries = grouped_index(dims, precision, metric)
    outs = {}
    for group in ("0", str(1 << 30)):
        env = dict(os.environ, CHASSIS_KERNEL=level, CHASSIS_GROUP_MIN_BYTES=group)
        r = subprocess.run(
            [sys.executable, "-c", GROUP_CHILD, str(path), str(queries_file)],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert r.returncode == 0, r.stderr
        outs[group] = json.loads(r.stdout)
        assert outs[group]["kernel"] == level
    grouped, single = outs["0"], outs[str(1 << 30)]
    assert grouped["ids"] == single["ids"]
    assert grouped["bits"] == single["bits"]
    assert grouped["loop"] == single["loop"]
    # and the answers are near neighbours: recall@10 against brute force on the stored vectors
    stored = data.astype(np.float16).astype(np.float32) if precision == "half" else data
    if metric == "cosine":
        stored = stored / np.linalg.norm(stored, axis=1, keepdims=True)
        scores = -(queries / np.linalg.norm(queries, axis=1, keepdims=True)) @ stored.T
    elif metric == "inner_product":
        scores = -(queries @ stored.T)
    else:
        scores = ((queries[:, None, :] - stored[None]) ** 2).sum(-1)
    truth = np.argsort(scores, axis=1)[:, :10]
    recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(grouped["ids"], truth.tolist())])
    assert recall >= 0.9, recall
