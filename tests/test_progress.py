"""`progress=True` in Jupyter without ipywidgets: tqdm's text bar, and no warning.

The notebook kernel is imitated in a fresh interpreter the way tqdm recognises one
(`ipykernel.zmqshell` imported, `IPython.get_ipython()` answering), with ipywidgets made
unimportable. Oracle: `tqdm.auto` itself, which warns "IProgress not found" in that setting,
so the imitation is a notebook as far as tqdm can tell."""

from __future__ import annotations

import pytest
from conftest import run_python

pytest.importorskip("tqdm")

FAKE_NOTEBOOK = """
import sys, types, warnings
zmqshell = types.ModuleType("ipykernel.zmqshell")
ipython = types.ModuleType("IPython")
class ZMQInteractiveShell:
    config = {"IPKernelApp": {}}
ipython.get_ipython = lambda: ZMQInteractiveShell()
sys.modules.update({"ipykernel": types.ModuleType("ipykernel"), "ipykernel.zmqshell": zmqshell,
                    "IPython": ipython, "ipywidgets": None})
warnings.simplefilter("always")
"""


def test_tqdm_auto_warns_in_the_imitation():
    proc = run_python(
        FAKE_NOTEBOOK
        + """
import warnings
with warnings.catch_warnings(record=True) as caught:
    import tqdm.auto
print("warned:", [str(w.message)[:20] for w in caught])
"""
    )
    assert proc.returncode == 0, proc.stderr
    assert "IProgress not found" in proc.stdout, proc.stdout + proc.stderr


def test_progress_bar_is_the_text_bar_without_a_warning():
    """The bar chooser itself and `datasets.ground_truth` (Python)."""
    proc = run_python(
        FAKE_NOTEBOOK
        + """
import warnings
import numpy as np
from chassis import _progress, datasets
with warnings.catch_warnings(record=True) as caught:
    bar = _progress.progress_bar(10, desc="d", unit="vec")
    bar.update(10)
    bar.close()
    print("class:", type(bar).__module__, type(bar).__name__)
    base = np.random.default_rng(0).random((300, 4), dtype=np.float32)
    datasets.ground_truth(base, base[:5], 3, progress=True)
print("warnings:", [str(w.message) for w in caught])
"""
    )
    assert proc.returncode == 0, proc.stderr
    assert "class: tqdm.std tqdm" in proc.stdout, proc.stdout
    assert "warnings: []" in proc.stdout, proc.stdout
    assert "d: 100%" in proc.stderr and "ground truth" in proc.stderr  # text bars drawn


def test_index_calls_use_the_same_bar():
    """`add_batch` and `search_batch` (Rust) ask `chassis._progress.progress_bar` for their
    bar, so they do not warn either."""
    proc = run_python(
        FAKE_NOTEBOOK
        + """
import warnings
import numpy as np
import chassis
with warnings.catch_warnings(record=True) as caught:
    base = np.random.default_rng(0).random((300, 4), dtype=np.float32)
    with chassis.VectorIndex(None, 4) as index:
        index.add_batch(base, progress=True)
        index.search_batch(base, 3, progress=True)
print("warnings:", [str(w.message) for w in caught])
"""
    )
    assert proc.returncode == 0, proc.stderr
    assert "warnings: []" in proc.stdout, proc.stdout
    assert "IProgress" not in proc.stderr, proc.stderr
    assert "searching: 100%" in proc.stderr, proc.stderr


def test_without_tqdm_a_text_line():
    proc = run_python(
        """
import sys
sys.modules["tqdm"] = None
from chassis import _progress
bar = _progress.progress_bar(4, desc="vectors", unit="vec", unit_scale=True)
bar.update(4)
bar.close()
print(type(bar).__name__)
"""
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "TextProgress"
    assert "vectors: 4/4 vec (100%" in proc.stderr


def test_backup_and_save_show_their_bytes(tmp_path):
    """`backup` and `save` count the bytes they copy (the bar reaches its total: the oracle is
    the bar's own 100%), and the copies open with every vector."""
    proc = run_python(
        f"""
import numpy as np
import chassis
base = np.random.default_rng(0).random((3000, 32), dtype=np.float32)
with chassis.VectorIndex({str(tmp_path / "a.chassis")!r}, 32) as index:
    index.add_batch(base)
    index.backup({str(tmp_path / "b.chassis")!r}, progress=True)
with chassis.VectorIndex(None, 32) as mem:
    mem.add_batch(base)
    mem.save({str(tmp_path / "c.chassis")!r}, progress=True)
for name in "bc":
    print(name, len(chassis.IndexReader({str(tmp_path)!r} + "/" + name + ".chassis")))
"""
    )
    assert proc.returncode == 0, proc.stderr
    assert "b 3000" in proc.stdout and "c 3000" in proc.stdout, proc.stdout
    assert "backing up: 100%" in proc.stderr and "saving: 100%" in proc.stderr, proc.stderr


def test_train_counts_the_stored_vectors_it_encodes():
    """`train(progress=True)` counts the stored vectors it encodes (the oracle: its bar's total
    is the index's rows, and it reaches 100%), and the codes are walked afterwards."""
    proc = run_python(
        """
import sys
sys.modules["tqdm"] = None
import numpy as np
import chassis
base = np.random.default_rng(0).random((2500, 16), dtype=np.float32)
with chassis.VectorIndex(None, 16, chassis.IndexOptions(quantization="int8")) as index:
    index.add_batch(base[:700])
    assert not index.trained
    index.train(base[:300], progress=True)
    print("trained", index.trained)
"""
    )
    assert proc.returncode == 0, proc.stderr
    assert "trained True" in proc.stdout, proc.stdout
    assert "training: 700/700" in proc.stderr and "(100%" in proc.stderr, proc.stderr
