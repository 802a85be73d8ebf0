"""Notebook display: VectorIndex/IndexReader have a useful repr and an HTML summary."""

import chassis
import numpy as np


def test_html_summary_shows_counts_and_state(tmp_path):
    path = tmp_path / "d.chassis"
    index = chassis.VectorIndex(path, 8, chassis.IndexOptions(metric="cosine"))
    index.add_batch(np.random.default_rng(0).random((1234, 8), dtype=np.float32))
    html = index._repr_html_()
    assert "1,234" in html and "pending" in html and "VectorIndex" in html and "cosine" in html
    assert "len=1234" in repr(index) and "pending=1234" in repr(index)
    index.flush()
    reader = chassis.IndexReader(path)
    rhtml = reader._repr_html_()
    assert "IndexReader" in rhtml and "1,234" in rhtml and "pending" not in rhtml
    reader.close()
    index.close()
    assert "closed" in index._repr_html_() and "closed" in repr(index)


def test_html_summary_of_an_in_memory_index_shows_its_memory():
    index = chassis.VectorIndex(None, 8)
    index.add_batch(np.random.default_rng(0).random((1234, 8), dtype=np.float32))
    html = index._repr_html_()
    assert (
        "in memory" in html
        and "1,234" in html
        and "file size" not in html
        and "pending" not in html
    )
    assert "path=None (in memory)" in repr(index)
    index.close()
    assert "closed" in index._repr_html_()
