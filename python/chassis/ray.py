"""One index over a Ray cluster: `ShardedIndex`, the same API shape as `VectorIndex`.

Each shard is an ordinary Chassis index file owned by one Ray actor (new shards go round the
cluster's alive nodes in turn, and each stays on its node), on that node's local disk under
the root folder the user gives, or on a shared path (``shared=True``). Ray is the engine: its actors,
object store and restarts; nothing here schedules, serialises or manages a cluster.

* Writes route each row by a fixed hash of its id (`shard_of`), so an id always lives in one
  shard and `IdInUseError` works across shards. A batch is checked on the driver first
  (shape, dtype, values, ids), then travels once through the object store; each shard's
  actor gets a read-only view of its rows. `flush()` is one commit across shards: every
  shard commits as the next epoch (kept in its file's `user_version`), then the manifest
  (`chassis-shards.json`: shards, paths, nodes, the epoch, each shard's commit) records it,
  and that is the commit point. A shard ahead of the manifest (the driver or another shard
  failed in between) is taken back to it (`_Shard._settle`), so the index always opens, and
  after an error stays, as one flush.
* Searches fan out to every shard (each runs its own GIL-free `search_batch`); the driver
  merges each query's top k exactly, ties by id. ``replicas=R`` adds R read-only actors per
  shard (`IndexReader`s on the same file, on the same node), which see each flush.
* Faults: a shard actor that dies is restarted by Ray (``max_restarts``) and reopens its
  file as of its last flush. Searches and other reads are retried and go on. A write or
  flush in flight raises `ShardFailedError` naming the shard; every shard goes back to the
  last sharded flush, so the whole index is as of its last flush, as a killed writer leaves
  one file. A shard whose node left the cluster raises `ShardUnavailableError` until
  the node returns (with ``shared=True``, Ray restarts it on another node).
* Placement survives restarts: Ray gives a node a new id each time it starts, so `open` finds
  a shard whose recorded node is gone by its file, asking every alive node whether it has the
  shard's path (the same host name first), and starts the shard there.

Why a flush is taken back by a new commit, and how replicas' copies are fed: the
sharded-commit record (docs/design/sharded-commit.md).

Measured here (benchmarks/bench_ray.py; docs/distributed.md has the figures and the scaling
on paper).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import pickle
import socket
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

try:
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
except ModuleNotFoundError:  # pragma: no cover - tested in a child without Ray
    raise ModuleNotFoundError(
        "chassis.ray needs Ray, which is not installed\nhelp: pip install 'chassis-index[ray]'",
        name="ray",
    ) from None

import chassis
from chassis import ChassisError, IndexOptions, IndexReader, SearchResult, VectorIndex
from chassis._copies import write_changes

__all__ = [
    "ShardedIndex",
    "ShardedSearcher",
    "PartialSearch",
    "ShardFailedError",
    "ShardUnavailableError",
    "StaleWriteError",
    "shard_of",
    "MANIFEST",
]

#: The manifest's name in the root folder.
MANIFEST = "chassis-shards.json"
#: The Ray namespace of the shards' actors, which are named after the index's root
#: (`_actor_name`), so that another driver finds them.
NAMESPACE = "chassis"
# Seconds a shard actor's name may stay taken after its actor ended (longer on a loaded node).
_NAME_WAIT = 30.0
# The first pause, and the longest, before a read asks again an actor Ray is restarting.
_RESTART_PAUSE = 0.1
_RESTART_PAUSE_MAX = 2.0
# Seconds a read waits for an actor Ray is restarting when the handle has no `timeout`.
_RESTART_WAIT = 120.0
# Seconds the start of a handle's shard actors is waited for at least, whatever its `timeout`:
# each is a new process, which a loaded node can take longer than a call to start.
_START_WAIT = 120.0
_NO_ID = np.uint64(2**64 - 1)
# The column of `add_dataset`'s output that carries a batch's error (dropped before returning).
_ERROR = "chassis_error"


class ShardFailedError(ChassisError, OSError):
    """A shard's actor died during a write or a flush, or failed its flush. The index is as
    of its last flush on every shard (the others were rolled back, and taken back from a
    flush they had committed); a dead shard restarts by itself."""


class StaleWriteError(ChassisError, OSError):
    """A write that reached its shard after the index was rolled back since it was sent (it
    timed out, or a shard failed): refused, so that it cannot land in the next flush."""


class ShardUnavailableError(ChassisError, OSError):
    """A shard cannot be reached: its node left the cluster (its file is on that node's
    disk), or Ray gave up restarting it."""


def shard_of(ids: Any, shards: int) -> np.ndarray:
    """The shard of each id: splitmix64's finaliser of the id, modulo the number of shards.

    Fixed for good: an index's ids were placed with it.
    """
    x = np.array(ids, dtype=np.uint64, copy=True, ndmin=1)
    with np.errstate(over="ignore"):
        x ^= x >> np.uint64(30)
        x *= np.uint64(0xBF58476D1CE4E5B9)
        x ^= x >> np.uint64(27)
        x *= np.uint64(0x94D049BB133111EB)
        x ^= x >> np.uint64(31)
    return (x % np.uint64(shards)).astype(np.intp)


# ---------------------------------------------------------------- the actors


class _Shard:
    """One shard: a `VectorIndex` (or, for a replica, an `IndexReader`) on one file. A replica
    given its `writer` keeps its own copy of the writer's file at `path` (on another node's
    disk), brought to each flush by `sync`."""

    def __init__(
        self,
        path: str,
        dimensions: int,
        options: dict[str, Any] | None,
        replica: bool,
        writer: Any = None,
    ) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        _fault("shard-start")  # a slow (re)start: reads must wait for it
        opts = IndexOptions(**options) if options else None
        self._open = (path, dimensions, opts)
        # A copy's state: which file of the writer, and its commit (None: no copy yet).
        self.copy: tuple[int, int] | None = None
        self.index: Any = None
        if writer is not None:
            try:
                self._sync_from(writer)
            except Exception:
                # The writer cannot be reached (its node is down): serve the copy this node
                # has, an earlier flush, until the next flush brings it on (whole).
                if not os.path.exists(path):
                    raise
        self.index = IndexReader(path, opts) if replica else VectorIndex(path, dimensions, opts)
        if not replica:
            # A rewind (below) brings rows back from their slots: none may be reused.
            self.index._keep_slots()
        # This incarnation: a restarted actor has another, so the driver can tell that the
        # writes it made since the last flush are gone (writes and searches return it).
        self.life = uuid.uuid4().hex
        # Fencing: every write carries the driver's fence, which each rollback raises. The
        # actor runs tasks on several threads in no set order, so a write the driver gave up
        # on (a timeout) may start after the rollback that undid its batch: its older fence is
        # refused instead of landing in the next flush. And a write may start before the
        # rollback the driver sent ahead of it: its newer fence runs that rollback first (the
        # rollback task then finds it done). Writes and rollbacks take turns.
        self.fence = 0
        self._writing = threading.Lock()
        # Searches this incarnation answered (`stats`): how the reads spread over replicas.
        self.searches = 0
        # Digests of the dataset batches added since the last flush or rollback (`add_batch`).
        self.applied: set[str] = set()

    def _fenced(self, fence: int, what: str) -> None:
        """Refuse a write sent before the last rollback; run a rollback sent before this
        write that has not run yet (the caller holds `_writing`)."""
        if fence > self.fence:
            self.index.rollback()
            self.applied.clear()
        elif fence >> 32 < self.fence >> 32:
            raise StaleWriteError(
                f"{what} refused: another driver took this sharded index over "
                "(ShardedIndex.open of a detached index), so this handle no longer writes\n"
                "help: write through the handle of the driver that opened it last, or open it "
                "again here (which takes it over in turn)"
            )
        elif fence < self.fence:
            raise StaleWriteError(
                f"{what} sent with fence {fence} reached the shard after a rollback raised "
                f"its fence to {self.fence}: refused\nhelp: nothing to do: the driver gave up "
                "on this write (it timed out or another shard failed) and rolled the index back"
            )
        self.fence = fence

    def where(self) -> dict[str, Any]:
        ctx = ray.get_runtime_context()
        return {
            "node_id": ctx.get_node_id(),
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "life": self.life,
            **({} if isinstance(self.index, IndexReader) else self.state()),
        }

    def state(self) -> dict[str, int]:
        """The shard's last commit: the sharded index's epoch it belongs to (kept in the
        file's `user_version`), its sequence and its slot count (what `_rewind` takes)."""
        seq, slots, epoch = self.index._committed()
        return {"epoch": epoch, "seq": seq, "slots": slots}

    def _settle(self, to: dict[str, int] | None) -> None:
        """Take the shard back to the sharded index's last flush `to` (epoch, seq, slots) if
        it committed a later epoch (the caller holds `_writing`; nothing is pending)."""
        if to is None:
            return
        now = self.state()
        if now["epoch"] < to["epoch"]:
            raise ShardFailedError(
                f"shard file {self._open[0]} holds epoch {now['epoch']} of the sharded index, "
                f"older than its last flush (epoch {to['epoch']}): the file was replaced by an "
                "older copy, or its disk lost a flush\nhelp: restore every shard and the "
                "manifest from the same backup"
            )
        if now["epoch"] > to["epoch"]:
            for attempt in (1, 2):
                try:
                    self.index._rewind(to["slots"], to["seq"])
                    self.index.user_version = to["epoch"]
                    self.index.flush()
                    break
                except ChassisError as e:
                    self._reopen()  # what it wrote is gone; the file is as last flushed
                    if attempt == 2:
                        raise ShardFailedError(
                            f"shard file {self._open[0]} holds a flush the sharded index gave "
                            f"up (epoch {now['epoch']}), and taking it back failed: {e}\nhelp: "
                            "fix the cause (free disk space), then open the index again, "
                            "which takes it back"
                        ) from e
            self.applied.clear()

    def add_batch(
        self, vectors: np.ndarray, ids: np.ndarray, fence: int, token: str | None = None
    ) -> tuple[bool, str]:
        """Add rows; with a `token` (the dataset path's digest of the rows), a batch whose
        token this shard applied since its last flush is a retry of it (a Ray Data task run
        again) and is skipped. Returns whether the rows went in."""
        _fault("shard-add")
        with self._writing:
            self._fenced(fence, "add_batch")
            if token is not None and token in self.applied:
                return False, self.life
            self.index.add_batch(vectors, ids=ids)
            if token is not None:
                self.applied.add(token)
        return True, self.life

    def present(self, ids: np.ndarray, fence: int) -> list[int]:
        # Fenced as a write: a rollback sent before it, not run yet, must not leave rows of a
        # write the driver gave up on to be found in use.
        with self._writing:
            self._fenced(fence, "present")
            return [int(i) for i in ids if int(i) in self.index]

    def delete_many(self, ids: Iterable[int], fence: int) -> tuple[int, str]:
        with self._writing:
            self._fenced(fence, "delete")
            count = int(self.index.delete_batch(np.asarray(list(ids), dtype=np.uint64)))
        return count, self.life

    def upsert(self, vectors: np.ndarray, ids: np.ndarray, fence: int) -> tuple[np.ndarray, str]:
        """Upsert; returns the rows' vectors before it (NaN rows: the id was not there), so
        that the driver can put them back if another shard fails."""
        before = np.full(vectors.shape, np.nan, dtype=np.float32)
        with self._writing:
            self._fenced(fence, "upsert")
            for r, i in enumerate(ids):
                v = self.index.get(int(i))
                if v is not None:
                    before[r] = v
            self.index.upsert(vectors, ids)
        return before, self.life

    def flush(self, fence: int, epoch: int) -> tuple[dict[str, int], str]:
        """Commit the shard's writes as part of the sharded index's flush `epoch`."""
        with self._writing:
            self._fenced(fence, "flush")
            _fault("shard-flush")
            self.index.user_version = epoch
            self.index.flush()
            self.applied.clear()
            _fault("shard-flushed")
            return self.state(), self.life

    def rollback(
        self, fence: int, to: dict[str, int] | None = None
    ) -> tuple[dict[str, int] | None, str]:
        """Discard the changes since the last flush, and refuse writes sent before `fence`;
        with `to`, the sharded index's last flush, also take back a later flush of this shard
        (a sharded flush that other shards did not finish)."""
        with self._writing:
            if fence < self.fence:
                # From a driver another one took over from: it must not take back (or roll
                # back) what the newer driver wrote.
                self._fenced(fence, "rollback")
            if fence > self.fence:  # else a write carrying this fence ran it already
                try:
                    self.index.rollback()
                except ChassisError:
                    self._reopen()
                self.applied.clear()
                self.fence = fence
            self._settle(to)
            return (self.state() if to is not None else None), self.life

    def _reopen(self) -> None:
        """A writer whose commit failed writes nothing more (a full disk, a failed sync):
        open the file again, which finds the last commit that landed."""
        self.index.close()
        self.index = VectorIndex(*self._open)
        self.index._keep_slots()

    def compact(self, fence: int, threads: int | None) -> tuple[dict[str, int], str]:
        with self._writing:
            self._fenced(fence, "compact")
            self.index.compact(threads=threads)
            return self.state(), self.life

    def backup(self, path: str, overwrite: bool, fence: int) -> tuple[None, str]:
        with self._writing:
            self._fenced(fence, "backup")
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            self.index.backup(path, overwrite=overwrite)
        return None, self.life

    def search_batch(self, queries: np.ndarray, k: int, kw: dict[str, Any]):
        ids, dist = self.index.search_batch(queries, k, **kw)
        self.searches += 1
        return ids, dist, self.life

    def fence_now(self) -> int:
        return self.fence

    def changes_since(self, copy: tuple[int, int] | None) -> tuple[str, Any]:
        """For a replica's copy at `copy` (lineage, seq): the changes since (`"changes"`,
        (lineage, seq, length, pieces)), or the whole last flush (`"file"`, (lineage, seq,
        bytes)) when they are not all known. Taken between writes (`_writing`)."""
        with self._writing:
            lineage, seq = self.index._lineage()
            if copy is not None:
                try:
                    got = self.index._changes_since(*copy)
                except ChassisError:
                    got = None  # writes pending (a replica restarted meanwhile): a whole copy
                if got is not None:
                    return "changes", (lineage, *got)
            # The last flush, copied as a reader copies it: the writer's own backup would
            # flush its pending writes, outside the sharded flush that must commit them.
            with tempfile.TemporaryDirectory() as tmp, IndexReader(self._open[0]) as r:
                dest = Path(tmp) / "copy.chassis"
                r.backup(str(dest))
                return "file", (lineage, int(r.snapshot().seq), dest.read_bytes())

    def _sync_from(self, writer: Any) -> None:
        kind, got = ray.get(writer.changes_since.remote(self.copy))
        path = self._open[0]
        if kind == "file":
            lineage, seq, data = got
            tmp = path + ".receiving"
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
            self.copy = (lineage, seq)
            if self.index is not None:
                # Searches under way keep the old file (mapped) until they end.
                old, self.index = self.index, IndexReader(path, self._open[2])
                old.close()
            return
        lineage, seq, length, pieces = got
        write_changes(path, length, pieces)
        self.copy = (lineage, seq)

    def sync(self, writer: Any) -> int:
        """Bring this replica's copy to the writer's last flush; returns its commit."""
        with self._writing:
            self._sync_from(writer)
            return self.copy[1] if self.copy else -1

    def stats(self) -> dict[str, int]:
        ids = self.index.ids()
        return {
            "len": len(self.index),
            "max_id": int(ids.max()) if len(ids) else -1,
            "seq": int(self.index.snapshot().seq),
            "searches": self.searches,
        }

    def length(self) -> int:
        return len(self.index)

    def contains(self, id: int) -> bool:
        return id in self.index

    def get(self, id: int):
        return self.index.get(id)

    def ids(self) -> np.ndarray:
        return self.index.ids()

    def close(self) -> None:
        self.index.close()


# Reads are retried on a restarted actor (they are idempotent); writes never are: a write in
# flight when a shard dies is reported (ShardFailedError), not run twice.
_READS = (
    "where",
    "state",
    "fence_now",
    "present",
    "search_batch",
    "stats",
    "length",
    "contains",
    "get",
    "ids",
)
for _name in _READS:
    setattr(_Shard, _name, ray.method(max_task_retries=3)(getattr(_Shard, _name)))
_ShardActor = ray.remote(_Shard)


def _actor_name(root: Path, shard: int, replica: int | None = None) -> str:
    """The name of a shard's writer (or replica) actor, in `NAMESPACE`."""
    key = hashlib.sha256(str(root).encode()).hexdigest()[:20]
    return f"shard-{key}-{shard}" + ("" if replica is None else f"-replica-{replica}")


def _find_actor(root: Path, shard: int, replica: int | None = None) -> Any:
    """The running actor of that name, or None."""
    try:
        return ray.get_actor(_actor_name(root, shard, replica), namespace=NAMESPACE)
    except ValueError:
        return None


def _manifest_epoch(root: Path) -> int | None:
    """The epoch the manifest in `root` names, or None if it cannot be read."""
    try:
        return int(json.loads((root / MANIFEST).read_text()).get("epoch", 0))
    except (OSError, ValueError):
        return None


def _answers(actor: Any) -> bool:
    """Whether `actor` answers within a few seconds (it runs, not only keeps its name)."""
    try:
        ray.get(actor.where.remote(), timeout=5)
        return True
    except Exception:
        return False


def _find_replicas(root: Path, shard: int) -> list[Any]:
    found = []
    while (a := _find_actor(root, shard, len(found))) is not None:
        found.append(a)
    return found


@ray.remote(num_cpus=0)
def _has_files(paths: list[str]) -> tuple[str, list[bool]]:
    """On the node it runs on: its host name, and which of `paths` are files there."""
    return socket.gethostname(), [os.path.isfile(p) for p in paths]


@dataclasses.dataclass
class _ShardInfo:
    number: int
    path: str
    node_id: str
    #: Its last commit in the sharded index's last flush: sequence and slot count (where a
    #: flush that other shards did not finish is taken back to; `_Shard._settle`).
    seq: int = 0
    slots: int = 0
    #: The host name of the node it last ran on: preferred when several nodes have its file.
    host: str = ""
    actor: Any = None
    replicas: list[Any] = dataclasses.field(default_factory=list)
    #: The writer actor's incarnation as last seen, whether it holds writes since its last
    #: flush, and whether a search saw it restarted while it did (they are gone).
    life: str = ""
    dirty: bool = False
    lost: bool = False
    #: Its rollback to the last flush did not answer: it may hold a later flush; it is taken
    #: back before the next read or write (`ShardedIndex._settle`).
    unsure: bool = False


# ---------------------------------------------------------------- the index


class _Reads:
    """The reads of a sharded index, shared by `ShardedIndex` (the writer's handle) and
    `ShardedSearcher` (read-only, picklable): the shards, how to reach them, and how their
    errors are reported."""

    root: Path
    dimensions: int
    timeout: float | None
    shared: bool
    _shards: list[_ShardInfo]
    _round: int

    def _point_reader(self, s: _ShardInfo) -> Any:
        """The actor that answers `len`, `in`, `get` and `ids` for shard `s`."""
        return self._reader(s, self._next_round())

    def _saw(self, s: _ShardInfo, life: str) -> None:
        """A search's answer from the writer of `s` in incarnation `life`."""

    def _before_read(self, what: str, shards: list[_ShardInfo], partial: bool = False) -> set[int]:
        """Called before a read of `shards`: the numbers of those to leave out (`partial`
        only). Nothing here; `ShardedIndex` takes back a shard that may hold a flush it gave
        up."""
        return set()

    def _next_round(self) -> int:
        self._round += 1
        return self._round

    def _reader(self, s: _ShardInfo, turn: int) -> Any:
        """The actor that searches shard `s` in this round: its writer, or one of its replicas
        in turn. Shards start from different replicas, so that every replica serves whatever
        the number of shards and replicas."""
        if not s.replicas:
            return s.actor
        return s.replicas[(turn + s.number) % len(s.replicas)]

    def _check_rows(self, vectors: Any) -> np.ndarray:
        return _checked_rows(vectors, self.dimensions)

    def _get(
        self, refs: list[Any], what: str, shards: list[int] | None, *, start: bool = False
    ) -> list[Any]:
        """`ray.get` of calls to `shards` (None: all, in order), their errors made plain: a
        shard's own exception re-raised with the shard named, an unreachable shard reported.
        `start`: the first calls to new actors, waited for `_START_WAIT` at least."""
        if shards is None:
            shards = list(range(len(self._shards)))
        wait = self.timeout
        if start and wait is not None:
            wait = max(wait, _START_WAIT)
        try:
            return ray.get(refs, timeout=wait)
        except ray.exceptions.GetTimeoutError as e:
            raise self._unavailable(shards[0], what, e) from None
        except ray.exceptions.RayTaskError as e:
            raise self._shard_error(e, self._which(refs, shards), what) from None
        except ray.exceptions.RayError as e:  # died, unschedulable (its node left), ...
            i = self._which(refs, shards)
            raise self._unavailable(i, what, e) from None

    def _shard_error(self, e: Any, i: int, what: str) -> BaseException:
        """A shard's own exception (what a Ray task error wraps), with the shard named."""
        cause = e.cause if isinstance(e.cause, BaseException) else e
        if isinstance(cause, Exception):
            cause.add_note(f"(in shard {i} of {self.root}, {what})")
        return cause

    def _which(self, refs: list[Any], shards: list[int]) -> int:
        """The first shard whose call failed."""
        for ref, i in zip(refs, shards):
            try:
                ray.get(ref, timeout=self.timeout)
            except Exception:
                return i
        return shards[0] if shards else -1

    def _unavailable(self, i: int, what: str, e: Exception) -> Exception:
        s = self._shards[i]
        alive = {n["NodeID"]: n["Alive"] for n in ray.nodes()}
        if not alive.get(s.node_id, False) and not self.shared:
            return ShardUnavailableError(
                f"shard {i} ({s.path}) is on node {s.node_id[:12]}, which left the cluster; "
                f"{what} cannot reach it\nhelp: bring that machine back and open the index "
                "again (ShardedIndex.open finds each shard's file on whichever node has it), or "
                "keep shards on a shared path (shared=True)"
            )
        return ShardUnavailableError(
            f"shard {i} ({s.path}) could not be reached for {what}: {type(e).__name__}\n"
            "help: retry; Ray restarts a shard that died (max_restarts)"
        )

    def search_batch(
        self,
        queries: Any,
        k: int = 10,
        allowed: Any = None,
        excluded: Any = None,
        *,
        ef: int | None = None,
        rerank: int | None = None,
        threads: int | None = None,
        allow_partial: bool = False,
    ) -> Any:
        """Search every shard and merge each query's top k exactly (ties by id).

        Returns ids and distances of shape (nq, k), padded with 2**64-1 and infinity. A shard
        whose replica cannot be reached is asked through its other replicas, then its writer.
        With ``allow_partial=True``, a shard none of whose actors answers (within `timeout`)
        is left out instead of raising `ShardUnavailableError`, and the result is a
        `PartialSearch` (ids, distances, missing): the numbers of the shards left out. When
        no shard answers, `ShardUnavailableError` is raised all the same.
        """
        q = self._check_rows(queries)
        if not isinstance(k, int) or k < 1:
            raise chassis.InvalidArgumentError(f"k={k!r}\nhelp: pass k >= 1")
        kw: dict[str, Any] = {"ef": ef, "rerank": rerank, "threads": threads}
        n = len(self._shards)
        allow = None if allowed is None else _filter_ids(allowed)
        allow_at = None if allow is None else shard_of(allow, n)
        excl = None if excluded is None else _filter_ids(excluded)
        excl_at = None if excl is None else shard_of(excl, n)
        # Large batches go once through the object store (every shard reads the same copy);
        # small ones travel inline with each call, which saves the store's round trip.
        qref = ray.put(q) if q.nbytes > 64 * 1024 else q
        calls: list[tuple[_ShardInfo, dict[str, Any]]] = []
        for s in self._shards:
            skw = dict(kw)
            if allow is not None:
                mine = allow[allow_at == s.number]
                if len(mine) == 0:
                    continue  # nothing it holds is allowed
                skw["allowed"] = mine
            if excl is not None:
                skw["excluded"] = excl[excl_at == s.number]
            calls.append((s, skw))
        left_out = self._before_read("search_batch", [s for s, _ in calls], allow_partial)
        missing = sorted(left_out)
        calls = [(s, skw) for s, skw in calls if s.number not in left_out]
        turn, until = self._next_round(), self._until()
        firsts = [self._reader(s, turn) for s, _ in calls]
        refs = [a.search_batch.remote(qref, k, skw) for a, (_, skw) in zip(firsts, calls)]
        parts = []
        for (s, skw), first, ref in zip(calls, firsts, refs):
            others = [a for a in [*s.replicas, s.actor] if a is not first]
            got = self._answer(
                s,
                [first, *others],
                ref,
                lambda a, skw=skw: a.search_batch.remote(qref, k, skw),
                allow_partial,
                "search_batch",
                until,
            )
            if got is None:
                missing.append(s.number)
                continue
            ids, dist, life = got
            self._saw(s, life)
            parts.append((ids, dist))
        if missing and not parts:
            raise ShardUnavailableError(
                f"no shard of {self.root} could be reached for search_batch (shards {missing})"
                "\nhelp: retry; Ray restarts shards that died, and a node that left must come back"
            )
        if parts:
            ids, dist = _merge(parts, k)
        else:
            ids, dist = np.full((len(q), k), _NO_ID), np.full((len(q), k), np.inf, np.float32)
        return PartialSearch(ids, dist, sorted(missing)) if allow_partial else (ids, dist)

    def _answer(
        self,
        s: _ShardInfo,
        actors: list[Any],
        ref: Any,
        call: Callable[[Any], Any],
        partial: bool,
        what: str,
        until: float,
    ) -> Any:
        """What `ref` (a call to `actors[0]`, one of shard `s`'s actors) returns; if that
        actor cannot be reached, `call(actor)` on the next of `actors` in turn. Where one of
        them was restarting (Ray's own retries of the call spent while the restart ran), all
        are asked again after a pause, until the monotonic time `until` (`_until`). None when
        none can be reached and `partial`; a shard's own error is raised with the shard
        named."""
        pause, at, wait, restarting = _RESTART_PAUSE, 0, self.timeout, False
        while True:
            try:
                return ray.get(ref, timeout=wait)
            except ray.exceptions.RayTaskError as e:
                raise self._shard_error(e, s.number, what) from None
            except ray.exceptions.RayError as e:  # died, timed out, its node left, restarting
                last = e
                restarting |= isinstance(e, ray.exceptions.ActorUnavailableError)
            at += 1
            left = until - time.monotonic()
            if at == len(actors) and restarting and left > 0:
                time.sleep(min(pause, left))
                pause, at, restarting = min(2 * pause, _RESTART_PAUSE_MAX), 0, False
                # Asked again within what is left, not a whole `timeout` more.
                if self.timeout is not None:
                    wait = max(0.0, until - time.monotonic())
            if at == len(actors):
                if partial:
                    return None
                raise self._unavailable(s.number, what, last) from None
            ref = call(actors[at])

    def _ask(
        self,
        shards: list[_ShardInfo],
        method: str,
        args: Callable[[_ShardInfo], tuple],
        what: str,
        until: float | None = None,
    ) -> list[Any]:
        """`method(*args(s))` of each shard's writer: the answers in order, a shard Ray is
        restarting waited for as searches wait (`_answer`), until `until` (default: `_until`)."""
        until = self._until() if until is None else until
        refs = [getattr(s.actor, method).remote(*args(s)) for s in shards]
        return [
            self._answer(
                s,
                [s.actor],
                ref,
                lambda a, s=s: getattr(a, method).remote(*args(s)),
                False,
                what,
                until,
            )
            for s, ref in zip(shards, refs)
        ]

    def _until(self) -> float:
        """Until when a call's reads ask again the actors Ray is restarting: its `timeout`
        from now, or `_RESTART_WAIT` without one (an actor that fails at every start would
        be waited for without end)."""
        return time.monotonic() + (_RESTART_WAIT if self.timeout is None else self.timeout)

    def search(
        self,
        query: Any,
        k: int = 10,
        allowed: Any = None,
        excluded: Any = None,
        *,
        ef: int | None = None,
        rerank: int | None = None,
    ) -> list[SearchResult]:
        """The k nearest to one query, as `SearchResult`s (nearest first)."""
        ids, dist = self.search_batch(
            np.asarray(query)[None, :], k, allowed, excluded, ef=ef, rerank=rerank
        )
        return [SearchResult(int(i), float(d)) for i, d in zip(ids[0], dist[0]) if i != _NO_ID]

    def _read(self, shards: list[_ShardInfo], what: str, method: str, *args: Any) -> list[Any]:
        """`method(*args)` of each of `shards` (from `_point_reader`), in order; one that
        Ray is restarting is asked again (`_answer`, `_until`). `what`: the call, as
        an error names it."""
        self._before_read(what, shards)
        actors, until = [self._point_reader(s) for s in shards], self._until()
        refs = [getattr(a, method).remote(*args) for a in actors]

        def again(actor: Any) -> Any:
            return getattr(actor, method).remote(*args)

        return [
            self._answer(s, [a], ref, again, False, what, until)
            for s, a, ref in zip(shards, actors, refs)
        ]

    def __len__(self) -> int:
        return int(sum(self._read(self._shards, "len", "length")))

    def __contains__(self, id: object) -> bool:
        # What is not an id (a bool among them) is not in it, as for `VectorIndex`.
        if (
            isinstance(id, bool | np.bool_)
            or not isinstance(id, int | np.integer)
            or id < 0
            or id >= 2**64 - 1
        ):
            return False
        s = self._shards[int(shard_of([id], len(self._shards))[0])]
        return bool(self._read([s], "contains", "contains", int(id))[0])

    def get(self, id: int) -> np.ndarray | None:
        """The stored vector of `id`, or None."""
        s = self._shards[int(shard_of([id], len(self._shards))[0])]
        return self._read([s], "get", "get", int(id))[0]

    def ids(self) -> np.ndarray:
        """Every live id, ascending."""
        return np.sort(np.concatenate(self._read(self._shards, "ids", "ids")))


class ShardedIndex(_Reads):
    """An index sharded over a Ray cluster: N ordinary Chassis files, one per actor.

    ``ShardedIndex(root, dimensions, options, shards=N)`` creates one (or opens the one the
    manifest in `root` describes, as `VectorIndex` opens a file); `ShardedIndex.open(root)`
    only opens. Ray must be initialised (``ray.init``) first.

    Parameters
    ----------
    root : str or os.PathLike
        The folder of the manifest (on the driver) and of the shard files (on each node's
        own disk, or on a shared path with ``shared=True``).
    dimensions : int, optional
        Needed to create; checked against the manifest when opening.
    options : IndexOptions or dict, optional
        As for `VectorIndex`; every shard is created with them.
    shards : int, default 2
        How many shards to create (fixed at creation).
    replicas : int, default 0
        Read-only actors per shard (`IndexReader` on the same file): searches go to them, so
        they see what was flushed; without replicas the shards' writers answer, and see
        unflushed adds too.
    shared : bool, default False
        The root is a path every node sees (NFS, a cluster file system): a shard whose node
        leaves is restarted on another node instead of waiting for it.
    max_restarts : int, default -1
        Ray restarts of a shard actor that dies (-1: without limit).
    timeout : float, optional
        Seconds to wait for a shard's answer before reporting it unavailable (None: wait;
        for a shard Ray is restarting, two minutes at most). The first start of the shards'
        actors, new processes, is waited for two minutes at least.
    spread : bool, default False
        On local disks, each replica runs on another node than its shard's writer and keeps
        its own copy of the shard's file there, sent whole when it starts and then the
        changes of each flush (the byte ranges the commit wrote): reads go on from it while
        the writer's node is down. ``flush()`` returns once the replicas have the flush.
        (With ``shared=True`` replicas are on other nodes anyway.)
    detached : bool, default False
        The shards' actors outlive this driver (Ray's detached actors, named after the root),
        until `close()`: another driver's `ShardedIndex.open(root)` takes them over as the
        writer, and `ShardedSearcher.connect(root)` searches them from any driver. Without
        it they end with this driver, and another driver can only connect a searcher while
        this one runs. Fixed at creation.

    With ``shared=True``, replicas are placed on other nodes than their shard's writer (the
    file is on a path every node sees), so reads go on while a writer's node is down.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        dimensions: int | None = None,
        options: IndexOptions | dict[str, Any] | None = None,
        *,
        shards: int = 2,
        replicas: int = 0,
        shared: bool = False,
        max_restarts: int = -1,
        timeout: float | None = None,
        detached: bool = False,
        spread: bool = False,
    ) -> None:
        if not ray.is_initialized():
            raise chassis.InvalidArgumentError(
                "Ray is not initialised\nhelp: call ray.init() (or ray.init(address=...)) first"
            )
        self.root = Path(root).resolve()
        self.spread = bool(spread)
        self._lock = threading.Lock()
        self._max_restarts = max_restarts
        self.timeout = timeout
        # Raised by each rollback; every write carries it (see `_Shard.fence`).
        self._fence = 0
        self._round = 0
        manifest = self.root / MANIFEST
        if manifest.exists():
            m = json.loads(manifest.read_text())
            if dimensions is not None and dimensions != m["dimensions"]:
                raise chassis.DimensionMismatchError(
                    f"{self.root} holds a sharded index of {m['dimensions']} dimensions, "
                    f"not {dimensions}\nhelp: pass dimensions={m['dimensions']} or None"
                )
            self.dimensions = int(m["dimensions"])
            self.options = IndexOptions(**m["options"])
            if options is not None:
                want = options if isinstance(options, IndexOptions) else IndexOptions(**options)
                for f in ("metric", "precision", "max_connections", "quantization"):
                    if getattr(want, f) != getattr(self.options, f):
                        raise chassis.OptionsMismatchError(
                            f"{self.root} was created with {f}={getattr(self.options, f)!r}, "
                            f"not {getattr(want, f)!r}\nhelp: open it with options=None"
                        )
            self.shared = bool(m["shared"])
            self.detached = bool(m.get("detached", False))
            self._shards = [
                _ShardInfo(
                    s["number"],
                    s["path"],
                    s["node_id"],
                    s["seq"],
                    s.get("slots", 0),
                    s.get("host", ""),
                )
                for s in m["shards"]
            ]
            self._next_id = int(m["next_id"])
            # The sharded flush the manifest records (older manifests: 0, as their files).
            self._epoch = int(m.get("epoch", 0))
            self._start(replicas, create=False)
            self._open_at_epoch()
            stats = self._each("stats")
            self._next_id = max(self._next_id, 1 + max(s["max_id"] for s in stats))
        else:
            if dimensions is None:
                raise chassis.IndexNotFoundError(
                    f"no sharded index at {self.root} (no {MANIFEST})\n"
                    "help: pass dimensions (and shards=) to create one"
                )
            if not isinstance(shards, int) or shards < 1:
                raise chassis.InvalidArgumentError(
                    f"shards={shards!r}\nhelp: pass a positive number of shards"
                )
            opts = options if isinstance(options, IndexOptions) else IndexOptions(**(options or {}))
            self.dimensions = int(dimensions)
            self.options = opts
            self.shared = shared
            self.detached = bool(detached)
            self._shards = [
                _ShardInfo(i, str(self.root / f"shard-{i:04d}.chassis"), "") for i in range(shards)
            ]
            self._next_id = 0
            self._epoch = 0
            self.root.mkdir(parents=True, exist_ok=True)
            self._start(replicas, create=True)
            self._record(self._each("state", start=True))
            self._write_manifest()

    @classmethod
    def open(
        cls,
        root: str | os.PathLike[str],
        *,
        replicas: int = 0,
        timeout: float | None = None,
        spread: bool = False,
    ) -> ShardedIndex:
        """Open the sharded index whose manifest is in `root` (after a driver restart).

        An index created with ``detached=True`` whose actors still run (another driver
        opened it) is taken over: this handle becomes its writer, the previous one's
        unflushed writes are discarded and its later writes refused (`StaleWriteError`)."""
        if not (Path(root) / MANIFEST).exists():
            raise chassis.IndexNotFoundError(
                f"no sharded index at {root} (no {MANIFEST})\n"
                "help: check the path, or create one with ShardedIndex(root, dimensions)"
            )
        return cls(root, replicas=replicas, timeout=timeout, spread=spread)

    # ---- actors

    def _actor_options(self, node_id: str, name: str, soft: bool) -> dict[str, Any]:
        opts: dict[str, Any] = {
            "max_restarts": self._max_restarts,
            "num_cpus": 0,
            "max_concurrency": 8,
            "name": name,
            "namespace": NAMESPACE,
        }
        if self.detached:
            opts["lifetime"] = "detached"
        opts["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node_id, soft=soft)
        return opts

    def _copies(self) -> bool:
        """Whether replicas keep their own copies (on other nodes' disks)."""
        return self.spread and not self.shared

    def _new_actor(self, s: _ShardInfo, node_id: str, replica: int | None) -> Any:
        name = _actor_name(self.root, s.number, replica)
        # A writer's file is on its node's disk: back there (soft with a shared path, so that
        # a shard whose node is gone comes up elsewhere). A replica stays on the node it was
        # given, where Ray's soft affinity would gather them: with a shared path, one apart
        # from its writer, whose searches go to the others while its node is down.
        opts = self._actor_options(node_id, name, soft=self.shared and replica is None)
        # An actor that just ended (its driver exited, or closed the index) keeps its name
        # for a moment: a name still taken after that is another driver's.
        deadline = time.monotonic() + _NAME_WAIT
        path, writer = s.path, None
        if replica is not None and self._copies():
            path = str(Path(s.path).with_name(f"replica-{s.number:04d}-{replica}.chassis"))
            writer = s.actor
        while True:
            try:
                return _ShardActor.options(**opts).remote(
                    path,
                    self.dimensions,
                    dataclasses.asdict(self.options),
                    replica is not None,
                    writer,
                )
            except ValueError as e:
                if time.monotonic() < deadline:
                    time.sleep(0.2)
                    continue
                error = e
                break
        # The name is taken: another driver has the index open.
        raise self._locked(name) from error

    def _locked(self, name: str) -> chassis.IndexLockedError:
        return chassis.IndexLockedError(
            f"the sharded index at {self.root} is open in another driver of this cluster "
            f"(its actor {name!r} runs)\nhelp: search it from here with "
            "ShardedSearcher.connect(root); to write from several drivers in turn, create "
            "it with detached=True (ShardedIndex.open then takes it over), or close it "
            "in the other driver first"
        )

    def _start(self, replicas: int, *, create: bool) -> None:
        running = [] if create else [_find_actor(self.root, s.number) for s in self._shards]
        if self.detached and any(a is not None for a in running):
            self._take_over(running, replicas)
            return
        for a in running:
            # Another driver's actor that answers is running: say so now, rather than wait for
            # its name to be given back (`_new_actor`).
            if a is not None and _answers(a):
                raise self._locked(_actor_name(self.root, running.index(a)))
        nodes = sorted(n["NodeID"] for n in ray.nodes() if n["Alive"])
        if create:
            # New shards go round the alive nodes in turn (Ray's SPREAD strategy leaves
            # actors that reserve no CPU on one node); each stays on its node from then on.
            for s in self._shards:
                s.node_id = nodes[s.number % len(nodes)]
        elif not self.shared:
            self._find_shards()
        for s in self._shards:
            s.actor = self._new_actor(s, s.node_id, None)
        wheres = self._each("where", start=True)
        for s, w in zip(self._shards, wheres):
            s.node_id, s.host, s.life = w["node_id"], w["host"], w["life"]
        # The writers created the files; the readers follow them from their first flush.
        if replicas and create:
            self._each("flush", self._fence, self._epoch)
        self._add_replicas(replicas, nodes)

    def _add_replicas(self, replicas: int, nodes: list[str]) -> None:
        """Up to `replicas` read-only actors per shard: on their writer's node (its file is on
        that node's disk), or, with a shared path, on the other nodes in turn."""
        self.replicas = int(replicas)
        for s in self._shards:
            apart = self.shared or self._copies()
            others = [n for n in nodes if n != s.node_id] if apart else []
            for j in range(len(s.replicas), replicas):
                node = others[(s.number + j) % len(others)] if others else s.node_id
                s.replicas.append(self._new_actor(s, node, j))
        ray.get([r.where.remote() for s in self._shards for r in s.replicas])

    def _take_over(self, running: list[Any], replicas: int) -> None:
        """Become the writer of a detached index whose actors run (another driver opened
        it): a fence above every shard's, and each shard rolled back to its last flush, so
        the previous driver's unflushed writes are gone and its later ones refused."""
        nodes = sorted(n["NodeID"] for n in ray.nodes() if n["Alive"])
        for s, a in zip(self._shards, running):
            s.actor = a if a is not None else self._new_actor(s, s.node_id, None)
        # A fence of the next generation: above anything the driver taken over from can
        # reach by its own rollbacks, so that its writes and rollbacks stay refused.
        self._fence = ((max(self._each("fence_now", start=True)) >> 32) + 1) << 32
        for s, w in zip(self._shards, self._each("where")):
            s.node_id, s.host, s.life = w["node_id"], w["host"], w["life"]
            s.replicas = _find_replicas(self.root, s.number)
        self._each("rollback", self._fence)
        self._add_replicas(max(replicas, max(len(s.replicas) for s in self._shards)), nodes)

    def _find_shards(self) -> None:
        """Each shard goes to an alive node that has its file: its recorded node, else (Ray
        gives a restarted node a new id) one on the same host name, else any. Every shard is
        looked for, so that a file gone from an alive node is named, not created empty."""
        alive = sorted(n["NodeID"] for n in ray.nodes() if n["Alive"])
        lost = list(self._shards)
        paths = [s.path for s in lost]
        probes = [
            _has_files.options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(n, soft=False)
            ).remote(paths)
            for n in alive
        ]
        # A node that just left may still be listed alive for a moment: its probe never runs,
        # so the nodes that answer in time are the ones asked. A probe may need a new worker
        # process: given 30 s at least, as a start is (`_START_WAIT`).
        wait = max(self.timeout or 0.0, 30.0)
        ready, _ = ray.wait(probes, num_returns=len(probes), timeout=wait)
        answers: list[tuple[str, str, list[bool]]] = []
        for n, ref in zip(alive, probes):
            if ref in ready:
                try:
                    host, has = ray.get(ref)
                except ray.exceptions.RayError:
                    continue
                answers.append((n, host, has))
        for i, s in enumerate(lost):
            holders = [(host, n) for n, host, has in answers if has[i]]
            if not holders:
                silent = len(alive) - len(answers)
                raise ShardUnavailableError(
                    f"shard {s.number} ({s.path}): no node of the cluster has its file (it was "
                    f"last on host {s.host or '?'}, node {s.node_id[:12]}; "
                    f"{len(answers)} nodes answered"
                    + (f", {silent} did not within {wait:g} s" if silent else "")
                    + ")\nhelp: start the machine whose disk holds it and open the index again "
                    "(a shard is found by its file, whatever its node's id), or keep shards on a "
                    "shared path (shared=True)"
                )
            same = [n for host, n in holders if host == s.host]
            there = [n for _, n in holders if n == s.node_id]
            s.node_id = (there or same or [n for _, n in holders])[0]

    def _open_at_epoch(self) -> None:
        """At open: a shard that committed a flush the manifest does not record (the driver or
        another shard failed in the middle of a sharded flush) goes back to the manifest's, so
        the index opens as one flush; then each shard's state is recorded."""
        self._note_states(self._each("where"))
        if any(s.unsure for s in self._shards):
            self._settle("open")
            self._feed_replicas()
        self._write_manifest()

    def _note_states(self, wheres: list[dict[str, Any]]) -> None:
        """From each shard's last commit (`_Shard.where`): a shard at another epoch than the
        manifest's is unsure (it is taken back before anything else is read or written); one
        at the same epoch under another commit (a compaction, or a taking back) is recorded,
        as the state a later flush is taken back to."""
        for s, w in zip(self._shards, wheres):
            if w["epoch"] != self._epoch:
                s.unsure = True
            elif not s.unsure:
                s.seq, s.slots = w["seq"], w["slots"]

    def _record(self, states: list[dict[str, int]]) -> None:
        for s, st in zip(self._shards, states):
            s.seq, s.slots = int(st["seq"]), int(st["slots"])

    def _to(self, s: _ShardInfo) -> dict[str, int]:
        """What `s` goes back to: its state in the last sharded flush."""
        return {"epoch": self._epoch, "seq": s.seq, "slots": s.slots}

    def _settle(self, what: str, shards: Iterable[_ShardInfo] | None = None) -> None:
        """Take every unsure shard (of `shards`; None: all) back to the last sharded flush (a
        restarted shard may hold a flush the others did not finish), before anything else is
        written to it or read from it through this handle. A shard Ray is still restarting
        is waited for as a read waits (`_answer`); its own `ChassisError` (it was taken over,
        its taking back failed) is raised as itself, anything else as unavailable."""
        until = self._until()
        for s in self._shards if shards is None else shards:
            if not s.unsure:
                continue
            try:
                ((_, s.life),) = self._ask(
                    [s], "rollback", lambda s: (self._fence, self._to(s)), what, until
                )
            except ChassisError:
                raise
            except Exception as e:
                raise self._unavailable(s.number, what, e) from None
            s.unsure = s.lost = s.dirty = False

    def _before_read(self, what: str, shards: list[_ShardInfo], partial: bool = False) -> set[int]:
        # Reads see the last flush: a shard whose taking back after a failed flush did not
        # answer (it was restarting) may hold the flush given up, so it is taken back first.
        # With `partial`, one that cannot be is left out (its number returned).
        left_out: set[int] = set()
        for s in shards:
            if not s.unsure:
                continue
            with self._lock:
                try:
                    self._settle(what, [s])
                except ShardUnavailableError:
                    if not partial:
                        raise
                    left_out.add(s.number)
        return left_out

    def _each(self, method: str, *args: Any, start: bool = False) -> list[Any]:
        """Call `method` on every shard's writer; results in shard order (`start`: see
        `_get`)."""
        refs = [getattr(s.actor, method).remote(*args) for s in self._shards]
        return self._get(refs, method, None, start=start)

    # ---- writes

    def _point_reader(self, s: _ShardInfo) -> Any:
        # The writer: `len`, `in`, `get` and `ids` see unflushed writes, as a VectorIndex's do.
        return s.actor

    def _saw(self, s: _ShardInfo, life: str) -> None:
        if not s.replicas and life != s.life:
            # A restarted writer: its unflushed writes are gone; the next write says so.
            s.lost, s.life = s.lost or s.dirty, life

    def _check_ids(self, ids: Any, n: int, distinct: bool = True) -> np.ndarray:
        return _checked_ids(ids, n, distinct)

    def add(self, vector: Any, id: int | None = None) -> int:
        """Add one vector; returns its id."""
        ids = None if id is None else [id]
        return int(self.add_batch(np.asarray(vector)[None, :], ids)[0])

    def add_batch(self, vectors: Any, ids: Any = None) -> np.ndarray:
        """Add rows, each to the shard of its id; all or nothing. Returns the ids."""
        v = self._check_rows(vectors)
        with self._lock:
            n = len(v)
            if ids is None:
                arr = np.arange(self._next_id, self._next_id + n, dtype=np.uint64)
            else:
                arr = self._check_ids(ids, n)
            parts = self._by_shard(arr)
            if ids is not None:
                # Ids in use anywhere: each shard asked about its own, once it holds the last
                # flush (a shard left unsure may hold rows of a flush given up).
                self._before_write("add_batch")
                rows_of = dict(parts)
                answers = self._ask(
                    [self._shards[i] for i, _ in parts],
                    "present",
                    lambda s: (arr[rows_of[s.number]], self._fence),
                    "add_batch",
                )
                used = [u for found in answers for u in found]
                if used:
                    raise chassis.IdInUseError(
                        f"id {used[0]} is already in the index\nhelp: pass ids not in use "
                        "(delete the old vector first to replace it)"
                    )
            self._write(
                "add_batch",
                [(i, "add_batch", (v[rows], arr[rows], self._fence)) for i, rows in parts],
                undo={i: arr[rows] for i, rows in parts},
            )
            for i, _ in parts:
                self._shards[i].dirty = True
            if len(arr):
                self._next_id = max(self._next_id, int(arr.max()) + 1)
            return arr

    def _by_shard(self, ids: np.ndarray) -> list[tuple[int, np.ndarray]]:
        """(shard, positions in `ids` of the ids it holds) for each shard that holds some."""
        where = shard_of(ids, len(self._shards))
        parts = [(i, np.flatnonzero(where == i)) for i in range(len(self._shards))]
        return [(i, rows) for i, rows in parts if len(rows)]

    def delete(self, id: int) -> bool:
        """Delete `id` (from its shard); False if it is not there."""
        return self.delete_batch([id]) == 1

    def delete_batch(self, ids: Any) -> int:
        """Delete every id of `ids`, each from its shard; returns how many were present.

        One call per shard; repeated and absent ids are skipped.
        """
        arr = np.unique(self._check_ids(ids, len(np.asarray(ids).reshape(-1)), distinct=False))
        with self._lock:
            parts = [(i, arr[rows]) for i, rows in self._by_shard(arr)]
            counts = self._write(
                "delete_batch",
                [(i, "delete_many", (p.tolist(), self._fence)) for i, p in parts],
            )
            for (i, _), c in zip(parts, counts):
                self._shards[i].dirty |= bool(c)
            return int(sum(counts))

    def upsert(self, vectors: Any, ids: Any) -> None:
        """Replace the vectors of the `ids` present and add the others, each in its shard.

        All or nothing: an error in one shard puts the other shards' rows back as they were.
        """
        v = self._check_rows(vectors)
        arr = self._check_ids(ids, len(v))
        with self._lock:
            parts = self._by_shard(arr)
            self._write(
                "upsert",
                [(i, "upsert", (v[rows], arr[rows], self._fence)) for i, rows in parts],
                restore={i: arr[rows] for i, rows in parts},
            )
            for i, _ in parts:
                self._shards[i].dirty = True

    def _write(
        self,
        what: str,
        calls: Sequence[tuple[int, str, tuple[Any, ...]]],
        undo: dict[int, np.ndarray] | None = None,
        restore: dict[int, np.ndarray] | None = None,
    ) -> list[Any]:
        """Run writes on shards (the caller holds the lock). On a failure the index is left as
        it was before the call, or, when a shard died, as of its last flush (see the module):
        `undo` names rows to delete again (an add), `restore` the ids of an upsert, whose
        results are the vectors to put back.
        """
        self._before_write(what)
        refs = [getattr(self._shards[i].actor, m).remote(*a) for i, m, a in calls]
        results: list[Any] = []
        failed: list[tuple[int, BaseException]] = []
        restarted: list[_ShardInfo] = []
        for (i, _, _), ref in zip(calls, refs):
            s = self._shards[i]
            try:
                value, life = self._wait(ref)
            except ray.exceptions.RayError as e:
                failed.append((i, e))
                results.append(None)
                continue
            results.append(value)
            if life != s.life:
                # Restarted since the last call: what it held unflushed is gone.
                if s.dirty:
                    restarted.append(s)
                s.life = life
        # Anything but the shard's own exception: it died, or cannot be reached.
        dead = [
            self._shards[i] for i, e in failed if not isinstance(e, ray.exceptions.RayTaskError)
        ]
        if dead or restarted:
            raise self._back_to_last_flush((dead or restarted)[0], what)
        if not failed:
            return results
        # An ordinary error in a shard (disk full, ...): the batch's rows out of the others.
        i, e = failed[0]
        failed_at = {j for j, _ in failed}

        def undo_on(j: int, ref: Any) -> None:
            # An undo that times out may still land later: the rollback raises the fence first,
            # so that it is refused then, and leaves every shard as of its last flush.
            try:
                self._wait(ref)
            except ray.exceptions.RayError:
                raise self._back_to_last_flush(self._shards[j], what) from None

        for j, rows in (undo or {}).items():
            if j not in failed_at:
                undo_on(j, self._shards[j].actor.delete_many.remote(rows.tolist(), self._fence))
        for (j, _, _), before in zip(calls, results):
            if restore is None or j in failed_at:
                continue
            back = restore[j]
            absent = np.isnan(before).any(axis=1)
            actor = self._shards[j].actor
            if absent.any():
                undo_on(j, actor.delete_many.remote(back[absent].tolist(), self._fence))
            if (~absent).any():
                undo_on(j, actor.upsert.remote(before[~absent], back[~absent], self._fence))
        cause = e.cause if isinstance(e, ray.exceptions.RayTaskError) else e
        if isinstance(cause, Exception):
            cause.add_note(f"(in shard {i} of {self.root}, {what})")
        raise cause from None

    def _before_write(self, what: str) -> None:
        """A shard that lost its unflushed writes fails the write (every shard taken back to
        the last flush); unsure shards are taken back before anything reaches them."""
        lost = [s for s in self._shards if s.lost]
        if lost:
            raise self._back_to_last_flush(lost[0], what)
        self._settle(what)

    def _wait(self, ref: Any) -> Any:
        try:
            return ray.get(ref, timeout=self.timeout)
        except ray.exceptions.GetTimeoutError as e:
            raise ray.exceptions.RayActorError() from e

    def _back_to_last_flush(
        self, s: _ShardInfo, what: str, cause: BaseException | None = None
    ) -> ChassisError:
        """Every shard back at the last sharded flush, after `s` lost its unflushed writes
        (or, with `cause`, failed to flush): rolled back, and a shard that committed a flush
        the others did not finish taken back (`_Shard._settle`).

        The fence goes up first: a write still on its way (one that timed out) is refused
        when it arrives (see `_Shard.fence`)."""
        self._fence += 1
        refs = [t.actor.rollback.remote(self._fence, self._to(t)) for t in self._shards]
        for t, ref in zip(self._shards, refs):
            try:
                _, t.life = self._wait(ref)
                t.unsure = False
            except Exception:
                # It died too, or cannot be reached: its restart reopens as of its own last
                # flush, which may be the one given up; it is taken back before the next read
                # or write.
                t.unsure = True
            t.dirty = t.lost = False
        if cause is not None:
            who = "writing the manifest" if what == "manifest" else f"shard {s.number} ({s.path})"
            error = ShardFailedError(
                f"{who} failed during flush: "
                f"{type(cause).__name__}: {cause}\nevery shard is back at the last flush, as "
                "if this flush had not been called (shards that had committed it were taken "
                "back)\nhelp: fix the cause, then redo the writes made since the last flush()"
            )
            error.__cause__ = cause
            return error
        alive = {n["NodeID"]: n["Alive"] for n in ray.nodes()}
        if not alive.get(s.node_id, False) and not self.shared:
            return ShardUnavailableError(
                f"shard {s.number} ({s.path}) is on node {s.node_id[:12]}, which left the "
                f"cluster during {what}; every other shard was rolled back to its last flush\n"
                "help: bring that machine back and open the index again (ShardedIndex.open "
                "finds each shard's file on whichever node has it), or keep shards on a shared "
                "path (shared=True)"
            )
        return ShardFailedError(
            f"shard {s.number} ({s.path}) died, or restarted, during or before {what}: its "
            "writes since its last flush are lost, so every other shard was rolled back to "
            "its last flush too, and the index is as of its last flush\n"
            "help: redo the writes made since the last flush(); the shard restarted by itself"
        )

    def flush(self) -> None:
        """Flush every shard (each durable when this returns), then write the manifest."""
        with self._lock:
            self._flush_locked()

    def _flush_locked(self) -> None:
        # A shard that restarted while holding unflushed writes is found before anything
        # is committed, so that no shard commits a batch another one lost.
        wheres = self._ask(self._shards, "where", lambda s: (), "flush")
        for s, w in zip(self._shards, wheres):
            if w["life"] != s.life:
                s.lost = s.lost or s.dirty
                s.life = w["life"]
        self._note_states(wheres)
        # One commit across shards: each shard commits this flush as the next epoch, then the
        # manifest records it, which is the commit point. Whatever fails before the manifest
        # is written leaves the index at the last epoch: shards that committed this one are
        # taken back, now or, after a crash of the driver, when the index is opened.
        epoch = self._epoch + 1
        calls = [(s.number, "flush", (self._fence, epoch)) for s in self._shards]
        try:
            states = self._write("flush", calls)
        except (ShardFailedError, ShardUnavailableError, StaleWriteError):
            raise  # every shard is back at the last flush already, or another driver writes
        except Exception as e:
            # A shard's own error (`_write` notes which shard).
            notes = " ".join(getattr(e, "__notes__", []))
            failed = next((s for s in self._shards if f"in shard {s.number} " in notes), None)
            raise self._back_to_last_flush(failed or self._shards[0], "flush", e) from None
        before = [(s.seq, s.slots) for s in self._shards]
        self._record(states)
        self._epoch = epoch
        try:
            _fault("driver-flushed")
            self._write_manifest()
        except BaseException as e:
            if _manifest_epoch(self.root) == epoch:
                raise  # it landed (its folder's sync failed, say): the flush is committed
            self._epoch -= 1
            for s, (q, n) in zip(self._shards, before):
                s.seq, s.slots = q, n
            error = self._back_to_last_flush(self._shards[0], "manifest", e)
            if not isinstance(e, Exception):
                raise  # Ctrl-C: the shards are back at the last flush; stop as asked
            raise error from None
        for s in self._shards:
            s.dirty = False
        self._feed_replicas()

    def _feed_replicas(self) -> None:
        """Replicas that keep copies brought to the last flush (a replica that cannot be
        reached catches up when it restarts, from a whole copy)."""
        if not self._copies():
            return
        pairs = [(s, r) for s in self._shards for r in s.replicas]
        refs = [r.sync.remote(s.actor) for s, r in pairs]
        until = self._until()
        for (s, r), ref in zip(pairs, refs):
            try:
                # A replica Ray is restarting is waited for, as reads wait.
                fed = self._answer(
                    s, [r], ref, lambda a, s=s: a.sync.remote(s.actor), True, "flush", until
                )
            except Exception:
                fed = None
            if fed is None:
                # Not left serving an old flush: Ray starts it again, from a whole copy.
                ray.kill(r, no_restart=False)

    def rollback(self) -> None:
        """Discard every shard's changes since the last flush."""
        with self._lock:
            for s in self._shards:
                s.lost = False
            self._fence += 1
            self._write("rollback", [(s.number, "rollback", (self._fence,)) for s in self._shards])
            for s in self._shards:
                s.dirty = False

    def _write_manifest(self) -> None:
        _write_json(self.root / MANIFEST, self._manifest(self.root))

    def _manifest(self, root: Path) -> dict[str, Any]:
        """The manifest of this index, or of a copy of its shards under `root`."""
        return {
            "format": 1,
            "dimensions": self.dimensions,
            "options": dataclasses.asdict(self.options),
            "shared": self.shared,
            "detached": self.detached,
            "next_id": self._next_id,
            "epoch": self._epoch,
            "shards": [
                {
                    "number": s.number,
                    "path": str(root / Path(s.path).name),
                    "node_id": s.node_id,
                    "host": s.host,
                    "seq": s.seq,
                    "slots": s.slots,
                }
                for s in self._shards
            ],
        }

    # ---- maintenance

    def compact(self, *, threads: int | None = None) -> None:
        """Flush, then rewrite every shard's file without its deleted vectors, the shards in
        parallel (`VectorIndex.compact` on each). Ids and vectors stay as they are, so a
        shard that fails leaves the index whole: the others are compacted, it is not."""
        with self._lock:
            self._flush_locked()
            calls = [(s.number, "compact", (self._fence, threads)) for s in self._shards]
            try:
                self._write("compact", calls)
            finally:
                # A compacted shard is another file, whose sequences start again: what a later
                # flush is taken back to is recorded from it, compacted or not.
                try:
                    self._record(
                        self._get([s.actor.state.remote() for s in self._shards], "compact", None)
                    )
                finally:
                    self._write_manifest()
                    self._feed_replicas()

    def backup(self, path: str | os.PathLike[str], *, overwrite: bool = False) -> None:
        """Flush, then copy every shard's last flush into the folder `path`, each shard on its
        own node (as the shards are under `root`), and write the copy's manifest last:
        `ShardedIndex.open(path)` opens it, with the rows of this flush on every shard.

        A manifest already at `path` is removed first, so a backup cut short is never opened
        as a whole one. Shard files there are replaced as `VectorIndex.backup` replaces a file
        (``overwrite=True`` for a file that is not an index).
        """
        dest = Path(path).resolve()
        if dest == self.root:
            raise chassis.InvalidArgumentError(
                f"backup({str(path)!r}) is the index's own folder\nhelp: pass another folder"
            )
        with self._lock:
            self._flush_locked()
            dest.mkdir(parents=True, exist_ok=True)
            (dest / MANIFEST).unlink(missing_ok=True)
            calls = [
                (s.number, "backup", (str(dest / Path(s.path).name), overwrite, self._fence))
                for s in self._shards
            ]
            self._write("backup", calls)
            _write_json(dest / MANIFEST, self._manifest(dest))

    # ---- handles for tasks and services

    def searcher(self) -> ShardedSearcher:
        """A read-only handle on this index's shards, for Ray tasks, actors and Serve
        replicas: it pickles (Ray passes it as an argument) and searches like this index,
        through the replicas if there are any (each search goes round them), else through the
        writers. Any number may search at once. It lives as long as the shards' actors: after
        `close()`, its calls raise `ShardUnavailableError`."""
        return ShardedSearcher(self)

    def __reduce__(self) -> Any:
        raise TypeError(
            "a ShardedIndex is its shards' one writer and cannot be pickled (a copy in a task "
            "would write beside it)\nhelp: pass index.searcher() to Ray tasks and Serve "
            "replicas: a read-only handle that pickles"
        )

    @property
    def shards(self) -> list[dict[str, Any]]:
        """Each shard's number, path, node and committed sequence number (as of the last
        flush of this driver)."""
        return [
            {"number": s.number, "path": s.path, "node_id": s.node_id, "host": s.host, "seq": s.seq}
            for s in self._shards
        ]

    def shard_actors(self) -> list[Any]:
        """The shards' writer actors (for Ray's own tools: placement, metrics, faults)."""
        return [s.actor for s in self._shards]

    # ---- the pipeline path

    @classmethod
    def from_dataset(
        cls,
        ds: Any,
        root: str | os.PathLike[str],
        *,
        vector_column: str,
        id_column: str | None = None,
        dimensions: int | None = None,
        options: IndexOptions | dict[str, Any] | None = None,
        shards: int = 2,
        shared: bool = False,
        batch_size: int = 4096,
    ) -> ShardedIndex:
        """Build a sharded index from a Ray Dataset: its `map_batches` workers send each
        batch's rows straight to their shards, in parallel, then every shard is flushed.

        Without `id_column`, ids are given in blocks by a small counter actor (unique, not in
        the dataset's order).
        """
        if dimensions is None:
            first = ds.take(1)
            if not first:
                raise chassis.InvalidArgumentError(
                    "the dataset is empty\nhelp: pass dimensions= to create an empty index"
                )
            dimensions = len(np.asarray(first[0][vector_column]))
        index = cls(root, dimensions, options, shards=shards, shared=shared)
        try:
            index.add_dataset(
                ds, vector_column=vector_column, id_column=id_column, batch_size=batch_size
            )
            index.flush()
        except BaseException:
            index.close()
            raise
        return index

    def add_dataset(
        self,
        ds: Any,
        *,
        vector_column: str,
        id_column: str | None = None,
        batch_size: int = 4096,
    ) -> Any:
        """Add a Ray Dataset's rows: its `map_batches` workers send each batch's rows straight
        to their shards, in parallel, checked as `add_batch` checks them. Durable at the next
        `flush()`, like any write; a shard that restarts before then fails that flush
        (`ShardFailedError`), so no row is committed in some shards and lost in others.

        Returns a materialized Dataset of the rows' other columns and their ids (``id``), one
        row per row added.

        Without `id_column`, ids are given in blocks by a small counter actor (unique, not in
        the dataset's order). A task that Ray Data runs again (its worker died) adds nothing
        twice: each shard knows the batches it took since its last flush by a digest of their
        rows, and a batch asks the counter for the block it had. So a batch identical in every
        column to another of the same call, without `id_column`, is taken for a retry of it.

        A batch's error (NaN, an id in use, a shard's refusal) is raised as itself
        (`InvalidArgumentError`, `IdInUseError`, ...) after every shard went back to its last
        flush: the batches before it had gone in, and writes since the last flush are
        discarded with them.
        """
        with self._lock:
            # A shard that may hold a flush given up is taken back before rows reach it.
            self._settle("add_dataset")
            counter = (
                _Counter.options(num_cpus=0).remote(self._next_id) if id_column is None else None
            )
            for s in self._shards:
                # Every shard may take rows: a restart from here on loses them (see flush).
                s.dirty = True
            try:
                done = ds.map_batches(
                    _route_batch,
                    fn_kwargs={
                        "actors": self.shard_actors(),
                        "vector_column": vector_column,
                        "id_column": id_column,
                        "counter": counter,
                        "fence": self._fence,
                        "dimensions": self.dimensions,
                    },
                    batch_size=batch_size,
                    batch_format="numpy",
                    zero_copy_batch=True,
                ).materialize()
            except Exception as e:
                cause = _chassis_cause(e)
                if cause is None:
                    raise
                raise cause from None
            # A batch's own error (a check, an id in use, a shard's refusal) comes back as
            # data, not as a failed task, which Ray Data would retry and then wrap: the
            # batches before it went in, so every shard goes back to its last flush.
            errors = [
                e
                for b in done.select_columns([_ERROR]).iter_batches(batch_format="numpy")
                for e in b[_ERROR][b[_ERROR] != ""][:1]
            ]
            if errors:
                self._fence += 1
                self._write(
                    "add_dataset", [(s.number, "rollback", (self._fence,)) for s in self._shards]
                )
                for s in self._shards:
                    s.dirty = False
                name, _, message = errors[0].partition("\n")
                cls = getattr(chassis, name, None)
                if not (isinstance(cls, type) and issubclass(cls, ChassisError)):
                    cls = ChassisError
                error = cls(message)
                error.add_note(
                    f"(in add_dataset of {self.root}: every shard is back at its last flush)"
                )
                raise error
            stats = self._each("stats")
            self._next_id = max(self._next_id, 1 + max(st["max_id"] for st in stats))
            # Materialized: a lazy dataset whose blocks were lost would run the batches again.
            return done.drop_columns([_ERROR]).materialize()

    # ---- life cycle

    def close(self) -> None:
        """Close every shard (unflushed changes are discarded, as `VectorIndex.close` does)
        and end their actors."""
        for s in self._shards:
            for a in [s.actor, *s.replicas]:
                if a is None:
                    continue
                try:
                    ray.get(a.close.remote())
                except Exception:
                    pass
                ray.kill(a, no_restart=True)
            names = [_actor_name(self.root, s.number, j) for j in [None, *range(len(s.replicas))]]
            s.actor, s.replicas = None, []
            # Their names free, so that the index opens again at once.
            deadline = time.monotonic() + _NAME_WAIT
            for name in names:
                while time.monotonic() < deadline:
                    try:
                        ray.get_actor(name, namespace=NAMESPACE)
                    except ValueError:
                        break
                    time.sleep(0.05)

    def __enter__(self) -> ShardedIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"ShardedIndex({str(self.root)!r}, dimensions={self.dimensions}, "
            f"shards={len(self._shards)}, replicas={self.replicas})"
        )


class PartialSearch(NamedTuple):
    """`search_batch(..., allow_partial=True)`: the merged results of the shards that
    answered, and the numbers of those that did not (empty: the result is whole)."""

    ids: np.ndarray
    distances: np.ndarray
    missing: list[int]


def _filter_ids(ids: Any) -> np.ndarray:
    """`allowed` / `excluded` as uint64 ids: a boolean mask is indexed by id, as for
    `VectorIndex`."""
    if isinstance(ids, (set, frozenset)):
        ids = list(ids)
    if isinstance(ids, list | tuple) and ids and isinstance(ids[0], bool | np.bool_):
        ids = np.asarray(ids)  # a mask, if every item is a boolean (else refused below)
        if ids.dtype != np.bool_:
            raise chassis.ArgumentTypeError(
                "ids mix booleans and integers\nhelp: pass integer ids, or a boolean mask"
            )
    else:
        _bool_among(ids)
    try:
        a = np.asarray(ids)
    except ValueError:
        a = np.asarray(ids, dtype=object)  # ragged: one list per query, refused below
    per_query = a.dtype == object and any(np.ndim(x) > 0 for x in a.ravel())
    if a.ndim != 1 or per_query:
        what = "one collection per query" if per_query or a.ndim > 1 else "a single value"
        raise chassis.InvalidArgumentError(
            f"allowed/excluded holds {what}; a sharded search takes one set of ids (or one "
            "boolean mask) for every query\nhelp: pass a 1-D array of ids, or search queries "
            "with different filters in separate calls"
        )
    if a.dtype == np.bool_:
        return np.flatnonzero(a).astype(np.uint64)
    return _checked_ids(a, len(a), distinct=False)


def _write_json(path: Path, value: dict[str, Any]) -> None:
    """Write `value` to `path` atomically and durably: a synced file renamed into place, then
    the folder synced."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        json.dump(value, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class ShardedSearcher(_Reads):
    """A read-only handle on a `ShardedIndex`'s shards (`ShardedIndex.searcher()`): picklable,
    for Ray tasks, actors and Serve replicas. `search`, `search_batch`, `len`, `in`, `get` and
    `ids`, as the index answers them, from the replicas (the last flush) if it has any, else
    from the writers (unflushed writes too)."""

    def __init__(self, index: ShardedIndex) -> None:
        self.root = index.root
        self.dimensions = index.dimensions
        self.timeout = index.timeout
        self.shared = index.shared
        self._shards = [
            _ShardInfo(
                s.number, s.path, s.node_id, host=s.host, actor=s.actor, replicas=list(s.replicas)
            )
            for s in index._shards
        ]
        if any(s.actor is None for s in self._shards):
            raise chassis.IndexClosedError(
                f"the sharded index at {self.root} is closed\nhelp: open it again "
                "(ShardedIndex.open) and ask it for a searcher"
            )
        self._round = 0

    @classmethod
    def connect(
        cls, root: str | os.PathLike[str], *, timeout: float | None = None
    ) -> ShardedSearcher:
        """A searcher on the sharded index at `root` that a driver of this cluster has open
        (any job; its actors are found by name): for another driver, a notebook beside a
        pipeline, or a service started on its own."""
        root_path = Path(root).resolve()
        manifest = root_path / MANIFEST
        if not manifest.exists():
            raise chassis.IndexNotFoundError(
                f"no sharded index at {root_path} (no {MANIFEST})\nhelp: check the path"
            )
        m = json.loads(manifest.read_text())
        self = cls.__new__(cls)
        self.root, self.dimensions, self.timeout = root_path, int(m["dimensions"]), timeout
        self.shared = bool(m["shared"])
        self._shards = []
        for sh in m["shards"]:
            actor = _find_actor(root_path, sh["number"])
            if actor is None:
                raise ShardUnavailableError(
                    f"shard {sh['number']} of the sharded index at {root_path} has no running "
                    "actor: no driver of this cluster has the index open\nhelp: open it with "
                    "ShardedIndex.open(root) (created with detached=True, it stays open after "
                    "that driver exits)"
                )
            self._shards.append(
                _ShardInfo(
                    sh["number"],
                    sh["path"],
                    sh["node_id"],
                    host=sh.get("host", ""),
                    actor=actor,
                    replicas=_find_replicas(root_path, sh["number"]),
                )
            )
        self._round = int.from_bytes(os.urandom(4), "little")
        return self

    def __setstate__(self, state: dict[str, Any]) -> None:
        # Each copy starts at its own place in the replicas' round.
        self.__dict__.update(state)
        self._round = int.from_bytes(os.urandom(4), "little")

    def __repr__(self) -> str:
        replicas = len(self._shards[0].replicas) if self._shards else 0
        return (
            f"ShardedSearcher({str(self.root)!r}, dimensions={self.dimensions}, "
            f"shards={len(self._shards)}, replicas={replicas})"
        )


@ray.remote
class _Counter:
    """Blocks of fresh ids for `add_dataset` without an id column: a batch asked for again
    (its task retried) gets the block it had."""

    def __init__(self, start: int) -> None:
        self.next = start
        self.given: dict[str, int] = {}

    def take(self, n: int, token: str) -> int:
        if token not in self.given:
            self.given[token], self.next = self.next, self.next + n
        return self.given[token]


def _chassis_cause(e: BaseException) -> ChassisError | None:
    """The innermost Chassis error an exception from Ray wraps, if any."""
    found, seen = None, 0
    while e is not None and seen < 16:
        if isinstance(e, ChassisError):
            found = e
        e = getattr(e, "cause", None) or e.__cause__ or e.__context__
        seen += 1
    return found


def _checked_rows(vectors: Any, dimensions: int) -> np.ndarray:
    """`vectors` as a C-contiguous float32 (n, dimensions) array of finite values, or the
    error a `VectorIndex` gives."""
    v = np.asarray(vectors)
    if v.ndim == 1:
        v = v[None, :]
    if v.ndim != 2 or v.shape[1] != dimensions:
        raise chassis.DimensionMismatchError(
            f"got an array of shape {np.shape(vectors)}; the index has {dimensions} "
            f"dimensions\nhelp: pass an array of shape (n, {dimensions})"
        )
    v = np.ascontiguousarray(v, dtype=np.float32)  # one conversion, when not float32
    if not np.isfinite(v).all():
        row = int(np.argwhere(~np.isfinite(v))[0][0])
        raise chassis.InvalidArgumentError(
            f"row {row} holds NaN or infinity\nhelp: remove or fix that row"
        )
    return v


def _bool_among(ids: Any) -> None:
    """Refuse a list or tuple holding a boolean among ints, as `VectorIndex` does: NumPy
    would read `[True, 3]` as `[1, 3]`."""
    if isinstance(ids, list | tuple):
        for i, x in enumerate(ids):
            if type(x) is not int and isinstance(x, bool | np.bool_):
                raise chassis.ArgumentTypeError(
                    f"ids include {x!r} (position {i}), a boolean\nhelp: pass integer ids only"
                )


def _checked_ids(ids: Any, n: int, distinct: bool = True) -> np.ndarray:
    """`ids` as n uint64 ids (distinct ones unless told), or the error a `VectorIndex` gives."""
    _bool_among(ids)
    arr = np.asarray(ids)
    if arr.shape != (n,) or not (
        np.issubdtype(arr.dtype, np.integer) and (len(arr) == 0 or arr.min() >= 0)
    ):
        raise chassis.InvalidArgumentError(
            f"ids must be {n} non-negative integers, got shape {arr.shape} of {arr.dtype}\n"
            "help: pass one id per row"
        )
    arr = arr.astype(np.uint64)
    if (arr == _NO_ID).any():
        raise chassis.InvalidArgumentError("id 2**64-1 is reserved\nhelp: use ids below 2**64-1")
    uniq, counts = np.unique(arr, return_counts=True)
    if distinct and (counts > 1).any():
        raise chassis.IdInUseError(
            f"id {int(uniq[counts > 1][0])} appears twice in the batch\nhelp: pass distinct ids"
        )
    return arr


def _digest(*arrays: np.ndarray) -> str:
    """A digest of arrays' shapes, types and contents (an array of objects, such as strings,
    by its items pickled): the identity of a dataset batch."""
    h = hashlib.blake2b(digest_size=20)
    for a in arrays:
        h.update(f"{a.shape}{a.dtype.str}".encode())
        if a.dtype == object:
            h.update(pickle.dumps(a.tolist(), protocol=5))
        else:
            h.update(np.ascontiguousarray(a).data)
    return h.hexdigest()


def _route_batch(
    batch: dict[str, np.ndarray],
    *,
    actors: list[Any],
    vector_column: str,
    id_column: str | None,
    counter: Any,
    fence: int,
    dimensions: int,
) -> dict[str, np.ndarray]:
    """One dataset batch to its shards: checked, given ids, each shard's rows sent with a
    digest of them, so that a retry of this task (Ray Data runs a task again when its worker
    dies) is recognised by the shards that took its rows, and adds nothing twice. Returns the
    batch's columns but the vectors, with an `id` column (and `error`: the batch's own error)."""
    rest = {k: v for k, v in batch.items() if k != vector_column}
    n = len(batch[vector_column])

    def out(ids: np.ndarray, error: str = "") -> dict[str, np.ndarray]:
        return {**rest, "id": ids, _ERROR: np.full(n, error, dtype=object)}

    try:
        # The driver's checks, here where the rows are (NaN, shape, negative or repeated ids).
        vectors = _checked_rows(np.stack(list(batch[vector_column])), dimensions)
        if id_column is None:
            # Every column is the batch's identity: a retry asks for the same block.
            token = _digest(*(batch[k] for k in sorted(batch)), vectors)
            start = ray.get(counter.take.remote(len(vectors), token))
            ids = np.arange(start, start + len(vectors), dtype=np.uint64)
        else:
            ids = _checked_ids(batch[id_column], len(vectors))
    except ChassisError as e:
        return out(np.full(n, _NO_ID), f"{type(e).__name__}\n{e}")
    where = shard_of(ids, len(actors))
    refs = []
    for i, actor in enumerate(actors):
        rows = np.flatnonzero(where == i)
        if len(rows):
            part = (vectors[rows], ids[rows])
            refs.append(actor.add_batch.remote(*part, fence, _digest(*part)))
    try:
        ray.get(refs)
    except ray.exceptions.RayTaskError as e:
        cause = _chassis_cause(e)
        if cause is None:
            raise
        return out(np.full(n, _NO_ID), f"{type(cause).__name__}\n{cause}")
    _fault("after-write")
    return out(ids)


def _fault(point: str) -> None:
    """A fault injected by the tests: with `CHASSIS_RAY_FAULTS` naming a folder that holds a
    file named `point`, the first process to reach `point` takes the file, and dies, or, if
    the file holds a number, sleeps that many seconds (a write that times out), or, if it
    holds `raise`, raises `OSError` (a shard's own error, a full disk say)."""
    folder = os.environ.get("CHASSIS_RAY_FAULTS")
    if folder:
        fired = os.path.join(folder, point + ".fired")
        try:
            os.rename(os.path.join(folder, point), fired)
        except OSError:
            return
        with open(fired) as f:
            seconds = f.read().strip()
        if seconds == "raise":
            raise OSError(28, f"injected fault at {point} in process {os.getpid()}")
        if seconds:
            time.sleep(float(seconds))
            return
        os._exit(1)


def _merge(parts: list[tuple[np.ndarray, np.ndarray]], k: int) -> tuple[np.ndarray, np.ndarray]:
    """Each query's k best over the shards' results: by distance, then id."""
    ids = np.concatenate([p[0] for p in parts], axis=1)
    dist = np.concatenate([p[1] for p in parts], axis=1)
    order = np.lexsort((ids, dist), axis=-1)[:, :k]
    out_ids = np.take_along_axis(ids, order, axis=1)
    out_d = np.take_along_axis(dist, order, axis=1)
    if out_ids.shape[1] < k:  # fewer candidates than k over all shards
        pad = k - out_ids.shape[1]
        out_ids = np.pad(out_ids, ((0, 0), (0, pad)), constant_values=_NO_ID)
        out_d = np.pad(out_d, ((0, 0), (0, pad)), constant_values=np.inf)
    return out_ids, out_d
