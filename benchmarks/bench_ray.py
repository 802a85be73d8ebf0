"""Ray benchmark: what a `chassis.ray.ShardedIndex` costs over the same shards searched in this
process, how its query throughput goes with shards and replicas, and a build from a Ray
Dataset against one local `add_batch`.

  fanout     per `search_batch` call with 1 and with 1,000 queries: the sharded call (the
             queries through the object store to every shard actor, each shard's
             search_batch, the merge) against the same shard files opened here as
             IndexReaders and searched one after another, merged the same way. Medians of
             --reps calls, alternating the two.
  throughput queries per second of search_batch (1,000 queries a call, one call at a time
             and --clients calls in flight from driver threads) with 1, 2 and 4 shards, and 2
             shards with 1 replica each.
  build      --build-n x --dims rows: ShardedIndex.from_dataset (2 shards, map_batches) against
             VectorIndex.add_batch of the same rows in this process.

Data: --n x --dims generated clustered float32 rows (chassis.datasets.clustered, seed 16),
M=16, ef_construction=200, searches at ef 64, k 10. A local Ray "cluster" of this machine
(ray.init(num_cpus=2)), in a network namespace with only the loopback device up when run as
root (`unshare --net`, as the tests do; Ray binds to every interface otherwise).

    python benchmarks/bench_ray.py                      # 100,000 x 64; build 1,000,000 x 32
    python benchmarks/bench_ray.py --quick              # smoke run
    python benchmarks/bench_ray.py --json               # raw JSON to benchmarks/results/
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from toolkit import add_json_option, machine_name, write_results  # noqa: E402


def _in_namespace() -> None:
    """Run this script again inside a loopback-only network namespace (root), once."""
    if os.environ.get("CHASSIS_BENCH_NETNS") or os.geteuid() != 0:
        return
    env = dict(os.environ, CHASSIS_BENCH_NETNS="1", RAY_AUTH_MODE="disabled")
    cmd = "ip link set lo up && exec " + " ".join([sys.executable, *(f"'{a}'" for a in sys.argv)])
    sys.exit(subprocess.run(["unshare", "--net", "--", "sh", "-c", cmd], env=env).returncode)


def median_time(fn, reps: int) -> float:
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def fanout(index, readers, queries_all: np.ndarray, reps: int) -> list[dict[str, Any]]:
    from chassis.ray import _merge

    out = []
    for nq in (1, 1000):
        q = queries_all[:nq]

        def sharded(q=q):
            return index.search_batch(q, 10, ef=64)

        def local(q=q):
            return _merge([r.search_batch(q, 10, ef=64) for r in readers], 10)

        assert np.array_equal(sharded()[0], local()[0]), "sharded and local results differ"
        s_times, l_times = [], []
        for _ in range(reps):  # alternating, so drift hits both
            s_times.append(median_time(sharded, 1))
            l_times.append(median_time(local, 1))
        s, lo = statistics.median(s_times), statistics.median(l_times)
        row = {
            "queries": nq,
            "sharded_ms": s * 1e3,
            "local_ms": lo * 1e3,
            "overhead_ms": (s - lo) * 1e3,
        }
        print(
            f"  fan-out, {nq:>4} queries: sharded {row['sharded_ms']:.2f} ms, "
            f"local {row['local_ms']:.2f} ms, overhead {row['overhead_ms']:.2f} ms"
        )
        out.append(row)
    return out


def throughput(index, queries: np.ndarray, clients: int, seconds: float) -> dict[str, float]:
    def qps(parallel: int) -> float:
        done = [0] * parallel
        stop = time.perf_counter() + seconds

        def loop(j: int) -> None:
            while time.perf_counter() < stop:
                index.search_batch(queries, 10, ef=64)
                done[j] += len(queries)

        t0 = time.perf_counter()
        threads = [threading.Thread(target=loop, args=(j,)) for j in range(parallel)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return sum(done) / (time.perf_counter() - t0)

    return {"qps_1_call": qps(1), f"qps_{clients}_calls": qps(clients)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--n", type=int, default=100_000)
    p.add_argument("--dims", type=int, default=64)
    p.add_argument("--build-n", type=int, default=1_000_000)
    p.add_argument("--build-dims", type=int, default=32)
    p.add_argument("--reps", type=int, default=21)
    p.add_argument("--clients", type=int, default=4)
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--only", default="fanout,throughput,build")
    p.add_argument("--quick", action="store_true")
    add_json_option(p)
    a = p.parse_args()
    if a.quick:
        a.n, a.build_n, a.reps, a.seconds = 5_000, 20_000, 5, 1.0
    _in_namespace()

    import chassis
    import ray
    from chassis.datasets import clustered
    from chassis.ray import ShardedIndex

    only = set(a.only.split(","))
    tmp = Path(tempfile.mkdtemp(prefix="bench_ray-"))
    os.environ.setdefault("RAY_TMPDIR", str(tmp / "ray"))
    ray.init(num_cpus=2, include_dashboard=False)
    data, queries = clustered(a.n, a.dims, 1000, seed=16)
    doc: dict[str, Any] = {
        "n": a.n,
        "dims": a.dims,
        "machine": machine_name(),
        "ray": ray.__version__,
    }

    if only & {"fanout", "throughput"}:
        doc["throughput"] = []
        for shards, replicas in ((1, 0), (2, 0), (4, 0), (2, 1)):
            root = tmp / f"s{shards}r{replicas}"
            index = ShardedIndex(root, a.dims, shards=shards)
            index.add_batch(data)
            index.flush()
            index.close()
            index = ShardedIndex.open(root, replicas=replicas)
            readers = [chassis.IndexReader(s["path"]) for s in index.shards]
            if "fanout" in only and (shards, replicas) == (2, 0):
                doc["fanout"] = fanout(index, readers, queries, a.reps)
            if "throughput" in only:
                row = {"shards": shards, "replicas": replicas}
                row.update(throughput(index, queries, a.clients, a.seconds))
                print(
                    f"  {shards} shard(s), {replicas} replica(s): "
                    + ", ".join(f"{k} {v:,.0f}" for k, v in row.items() if k.startswith("qps"))
                )
                doc["throughput"].append(row)
            index.close()

    if "build" in only:
        rows, _ = clustered(a.build_n, a.build_dims, 0, seed=17)
        t = time.perf_counter()
        local = chassis.VectorIndex(tmp / "local.chassis", a.build_dims)
        local.add_batch(rows)
        local.flush()
        local_s = time.perf_counter() - t
        local.close()
        ds = ray.data.from_numpy(rows)
        t = time.perf_counter()
        index = ShardedIndex.from_dataset(ds, tmp / "built", vector_column="data", shards=2)
        ray_s = time.perf_counter() - t
        assert len(index) == a.build_n
        index.close()
        doc["build"] = {
            "n": a.build_n,
            "dims": a.build_dims,
            "local_add_batch_s": local_s,
            "from_dataset_s": ray_s,
        }
        print(
            f"  build {a.build_n:,} x {a.build_dims}: local {local_s:.1f} s, from_dataset {ray_s:.1f} s"
        )
    ray.shutdown()
    write_results(a.json, "bench_ray", doc)


if __name__ == "__main__":
    main()
