"""The child program of tests/test_faults.py: one fixed life of an index (create, add_batch,
flush, delete, rollback, backup, save, compact, close), run under the fault shim. It writes,
to the JSON file named by argv[2], what the handle promised: the ids of the last successful
flush, the ids of a flush (or flushing call) that failed, every error it saw, and which
backups and saves returned. The parent then reopens the files without the shim and checks
them against that record.

    python fault_child.py INDEX_PATH STATE_JSON

Deterministic: one thread, seeded data, so that call number N is the same call in every run.
"""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path

import chassis
import numpy as np

DIMS = 8


def rows(seed: int, n: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, DIMS), dtype=np.float32)


def main() -> None:
    path = Path(sys.argv[1])
    state_path = Path(sys.argv[2])
    state: dict = {
        "committed": None,  # ids of the last flush that returned (None: none yet)
        "attempt": None,  # ids a failed flushing call was committing
        "errors": [],
        "backups": {},  # path -> ids at the backup, for calls that returned
        "created": False,
        "steps": [],
    }
    live: set[int] = set()

    def save_state() -> None:
        state_path.write_text(json.dumps(state))

    def record(step: str, error: BaseException) -> None:
        state["errors"].append(
            {
                "step": step,
                "type": type(error).__name__,
                "chassis": isinstance(error, chassis.ChassisError),
                "errno": getattr(error, "errno", None),
                "filename": getattr(error, "filename", None),
                "message": str(error),
            }
        )

    def flushing(step: str, call) -> bool:
        """A call that commits what the handle holds: on success the committed ids move."""
        state["steps"].append(step)
        state["attempt"] = sorted(live)  # in case the child is killed inside the call
        save_state()
        try:
            call()
        except Exception as e:  # noqa: BLE001 - every error is recorded and judged by the parent
            record(step, e)
            save_state()
            return False
        state["committed"] = sorted(live)
        state["attempt"] = None
        save_state()
        return True

    def writing(step: str, call) -> bool:
        state["steps"].append(step)
        try:
            call()
        except Exception as e:  # noqa: BLE001
            record(step, e)
            return False
        finally:
            save_state()  # a child killed later leaves what it knew so far
        return True

    save_state()
    try:
        index = chassis.VectorIndex(path, DIMS)
    except Exception as e:  # noqa: BLE001
        record("create", e)
        save_state()
        return
    state["created"] = True
    state["committed"] = []
    save_state()

    def add_batch(seed: int, n: int, ids=None) -> None:
        got = index.add_batch(rows(seed, n), ids=ids, threads=1)
        live.update(int(i) for i in got)

    def delete(ids) -> None:
        for i in ids:
            if index.delete(i):
                live.discard(i)

    def backup(name: str) -> None:
        dest = path.with_name(name)
        index.backup(dest)
        state["backups"][str(dest)] = sorted(live)

    def rollback() -> None:
        index.rollback()
        live.clear()
        live.update(state["committed"] or [])

    writing("add_batch 1", lambda: add_batch(1, 300))
    flushing("flush 1", index.flush)
    writing("delete 1", lambda: delete([5, 6, 7, 8, 9]))
    writing("add_batch 2", lambda: add_batch(2, 50, ids=list(range(1000, 1050))))
    flushing("flush 2", index.flush)
    writing("add_batch 3", lambda: add_batch(3, 30))
    writing("rollback", rollback)
    writing("add_batch 4", lambda: add_batch(4, 40))
    writing("delete 2", lambda: delete([1000, 1001, 20]))
    flushing("flush 3", index.flush)
    # backup flushes first: a flushing call; its copy is the commit it made.
    flushing("backup", lambda: backup("copy.chassis"))
    flushing("compact", lambda: index.compact(threads=1))
    writing("add_batch 5", lambda: add_batch(5, 10))
    writing("close", index.close)

    # An in-memory index saved beside it: written under a temporary name, renamed when whole.
    def save() -> None:
        memory = chassis.VectorIndex(None, DIMS)
        got = memory.add_batch(rows(6, 40), threads=1)
        dest = path.with_name("saved.chassis")
        memory.save(dest)
        state["backups"][str(dest)] = sorted(int(i) for i in got)

    writing("save", save)
    save_state()


if __name__ == "__main__":
    try:
        main()
    except BaseException:
        traceback.print_exc()
        sys.exit(3)
