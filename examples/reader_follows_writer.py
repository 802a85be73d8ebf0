"""A writer adds vectors in batches, flushing after each; a reader in another process follows.

One writer per file holds the lock; any number of readers open the same file without it and
each call sees the newest flush. This script is both programs: run plainly it is the writer,
and it starts itself with `--reader PATH COUNT` as the reader, which reports each new count
it sees and checks that the newest vector is found by a search.

    python examples/reader_follows_writer.py
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import chassis
import numpy as np

DIMS, BATCH, BATCHES = 32, 1_000, 5


def writer() -> int:
    vectors = np.random.default_rng(0).random((BATCH * BATCHES, DIMS), dtype=np.float32)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "growing.chassis"
        index = chassis.VectorIndex(path, DIMS)
        index.add_batch(vectors[:BATCH])
        index.flush()  # the file exists, with a first commit, before the reader opens it

        reader = subprocess.Popen(
            [sys.executable, __file__, "--reader", str(path), str(len(vectors))],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert reader.stdout is not None
        print(reader.stdout.readline().rstrip())  # the reader is open
        lines = reader.stdout
        echo = threading.Thread(target=lambda: [print(line, end="", flush=True) for line in lines])
        echo.start()  # the reader's lines as they come
        for start in range(BATCH, len(vectors), BATCH):
            time.sleep(0.1)  # a writer with other work between its flushes
            index.add_batch(vectors[start : start + BATCH])
            index.flush()
            print(f"writer: flushed {start + BATCH:,} vectors", flush=True)
        index.close()
        code = reader.wait(timeout=60)
        echo.join()
        return code


def reader(path: str, expect: int) -> int:
    with chassis.IndexReader(path) as index:
        print(f"reader: opened {path} with {len(index):,} vectors", flush=True)
        seen: list[int] = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            count = len(index)  # every call sees the newest flush
            if not seen or count != seen[-1]:
                seen.append(count)
                newest = index.get(count - 1)
                assert newest is not None
                (hit,) = index.search(newest, k=1)
                print(
                    f"reader: {count:,} vectors; the newest, id {count - 1:,}, finds id {hit.id:,}",
                    flush=True,
                )
                if hit.id != count - 1:
                    return 1
            if count >= expect:
                print(f"reader: followed {len(seen)} flushes up to {count:,} vectors")
                return 0
            time.sleep(0.005)
    print(f"reader: gave up at {seen[-1]:,} of {expect:,} vectors")
    return 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reader", nargs=2, metavar=("PATH", "COUNT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.reader:
        return reader(args.reader[0], int(args.reader[1]))
    return writer()


if __name__ == "__main__":
    raise SystemExit(main())
