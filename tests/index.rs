//! The index through its public Rust API: builds against brute-force k-NN, reopening, rollback,
//! deletes, backup and compaction, readers beside a writer. Oracles: exact k-NN computed here,
//! and the same file reopened by a fresh `Index`.

mod common;

use chassis::commit::undo::undo_path;
use chassis::error::ErrorKind;
use chassis::index::{Control, Index, Mode, Options, Placement};
use chassis::storage::{lists, SHADOW_MIN};
use common::rand_vecs;
use std::sync::atomic::Ordering::Relaxed;

fn brute(data: &[f32], d: usize, q: &[f32], k: usize) -> Vec<u64> {
    let mut v: Vec<(f32, u64)> = data
        .chunks_exact(d)
        .enumerate()
        .map(|(i, r)| (r.iter().zip(q).map(|(a, b)| (a - b) * (a - b)).sum::<f32>(), i as u64))
        .collect();
    v.sort_by(|a, b| a.0.total_cmp(&b.0));
    v.into_iter().take(k).map(|x| x.1).collect()
}

#[test]
fn batch_build_reaches_high_recall_and_reopens_identically() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("a.chassis");
    let (n, d) = (3000, 16);
    let data = rand_vecs(n, d, 1);
    let idx = Index::open(&p, Some(d), None, Mode::Write).unwrap();
    let ids = idx.add_batch(&data, n, None, Some(2), &Control::default()).unwrap();
    assert_eq!(ids, (0..n as u64).collect::<Vec<_>>());
    idx.flush().unwrap();
    let queries = rand_vecs(50, d, 2);
    let mut hit = 0;
    for q in queries.chunks_exact(d) {
        let got: Vec<u64> = idx.search(q, 10, Some(64)).unwrap().iter().map(|h| h.id).collect();
        let want = brute(&data, d, q, 10);
        hit += got.iter().filter(|g| want.contains(g)).count();
    }
    assert!(hit as f64 / 500.0 >= 0.95, "recall {}", hit as f64 / 500.0);
    drop(idx);
    let idx = Index::open(&p, None, None, Mode::Read).unwrap();
    assert_eq!(idx.len(), n as u64);
    assert_eq!(idx.get(17).unwrap().unwrap(), data[17 * d..18 * d].to_vec());
    let exact = idx.search(&queries[..d], 10, Some(n)).unwrap();
    assert_eq!(exact.iter().map(|h| h.id).collect::<Vec<_>>(), brute(&data, d, &queries[..d], 10));
}

#[test]
fn memory_index_saves_a_file_that_loads_back_with_the_same_bytes_and_results() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("m.chassis");
    // 20,000 rows: above BALANCED_MIN, so both the batch and the load take the balanced path.
    let (n, d) = (20_000, 8);
    let data = rand_vecs(n, d, 11);
    let queries = rand_vecs(5, d, 12);
    let mut results = Vec::new();
    for placement in [Placement::Balanced, Placement::Local] {
        let opts = Options { placement, ef_construction: 32, ..Default::default() };
        let mem = Index::memory(d, Some(&opts)).unwrap();
        assert!(mem.is_memory());
        mem.add_batch(&data, n, None, Some(2), &Control::default()).unwrap();
        assert!(mem.delete(5).unwrap());
        assert_eq!(mem.pending(), 0);
        mem.flush().unwrap(); // nothing to do, and no file appears
        mem.save(&p, false, &Control::default()).unwrap();
        let file = Index::open(&p, None, None, Mode::Read).unwrap();
        assert_eq!(file.len(), n as u64 - 1);
        assert!(!file.contains(5).unwrap());
        let loaded = Index::load(&p, Some(&opts), Some(2), &Control::default()).unwrap();
        for idx in [&mem, &file, &loaded] {
            assert_eq!(idx.get(17).unwrap().unwrap(), data[17 * d..18 * d].to_vec());
            assert_eq!(idx.get(5).unwrap(), None);
            assert!(idx.check(&Control::default()).unwrap().corrupt.is_empty());
        }
        for q in queries.chunks_exact(d) {
            let want: Vec<u64> =
                brute(&data, d, q, 11).into_iter().filter(|&i| i != 5).take(10).collect();
            let got: Vec<Vec<u64>> = [&mem, &file, &loaded]
                .iter()
                .map(|i| i.search(q, 10, Some(n)).unwrap().iter().map(|h| h.id).collect())
                .collect();
            assert!(got.iter().all(|g| *g == want), "{got:?} vs {want:?}");
            results.push(want);
        }
        // The loaded copy is a writer of its own: adds and compaction work in memory.
        let extra = loaded.add(&data[..d], None).unwrap();
        assert_eq!(extra, n as u64);
        loaded.compact(Some(2), &Control::default()).unwrap();
        assert_eq!(loaded.deleted_count().unwrap(), 0);
        assert_eq!(loaded.len(), n as u64);
        assert!(loaded.rollback().is_err());
        drop(file);
        std::fs::remove_file(&p).unwrap();
    }
}

#[test]
fn unflushed_adds_and_list_changes_are_gone_after_close() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("a.chassis");
    let d = 8;
    let data = rand_vecs(600, d, 3);
    let idx = Index::open(&p, Some(d), None, Mode::Write).unwrap();
    idx.add_batch(&data[..300 * d], 300, None, None, &Control::default()).unwrap();
    idx.flush().unwrap();
    let before: Vec<Vec<u32>> =
        (0..300).map(|s| lists::snapshot_lists(&idx.snap().st, s)).collect();
    idx.add_batch(&data[300 * d..], 300, None, None, &Control::default()).unwrap();
    assert!(undo_path(&p).exists(), "committed lists changed, so the undo log holds them");
    idx.close().unwrap();
    drop(idx);
    let idx = Index::open(&p, None, None, Mode::Write).unwrap();
    assert_eq!(idx.len(), 300);
    let after: Vec<Vec<u32>> = (0..300).map(|s| lists::snapshot_lists(&idx.snap().st, s)).collect();
    assert_eq!(before, after);
    assert!(!undo_path(&p).exists());
}

#[test]
fn a_cancelled_batch_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("a.chassis");
    let d = 8;
    let data = rand_vecs(400, d, 4);
    let idx = Index::open(&p, Some(d), None, Mode::Write).unwrap();
    idx.add_batch(&data[..200 * d], 200, None, None, &Control::default()).unwrap();
    let before: Vec<Vec<u32>> =
        (0..200).map(|s| lists::snapshot_lists(&idx.snap().st, s)).collect();
    let ctl = Control::default();
    ctl.cancel.store(true, Relaxed);
    let e = idx.add_batch(&data[200 * d..], 200, None, None, &ctl).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Interrupted);
    assert_eq!(idx.len(), 200);
    let after: Vec<Vec<u32>> = (0..200).map(|s| lists::snapshot_lists(&idx.snap().st, s)).collect();
    assert_eq!(before, after);
    assert_eq!(idx.add(&data[..d], None).unwrap(), 200);
}

#[test]
fn lists_held_for_a_batch_that_never_finished_do_not_take_later_adds() {
    // A large batch builds its level-0 lists in memory of its own (storage/shadow.rs). If its
    // linking panics (a bug), the unwind must end that shadow: else the adds after it would
    // write their lists there, and the file would never get them. Oracle: every slot's lists
    // as a reader of the flushed file sees them.
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("a.chassis");
    let d = 8;
    let data = rand_vecs(1200, d, 6);
    let idx = Index::open(&p, Some(d), None, Mode::Write).unwrap();
    idx.add_batch(&data[..1000 * d], 1000, None, None, &Control::default()).unwrap();
    let st = idx.snap().st.clone();
    let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _lists = st.shadow_lists(1000, 1000 + SHADOW_MIN);
        panic!("a bug while linking (this test's own panic)");
    }));
    assert!(unwound.is_err());
    for i in 1000..1200 {
        idx.add(&data[i * d..(i + 1) * d], None).unwrap();
    }
    idx.flush().unwrap();
    let reader = Index::open(&p, None, None, Mode::Read).unwrap();
    assert_eq!(reader.len(), 1200);
    for s in 0..1200 {
        let (mine, filed) =
            (lists::snapshot_lists(&idx.snap().st, s), lists::snapshot_lists(&reader.snap().st, s));
        assert_eq!(mine, filed, "slot {s}: the writer's lists are not the file's");
    }
}

#[test]
fn ids_after_a_rollback_name_the_new_vectors() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("a.chassis");
    let d = 4;
    let data = rand_vecs(20, d, 6);
    let idx = Index::open(&p, Some(d), None, Mode::Write).unwrap();
    idx.add_batch(&data[..5 * d], 5, None, None, &Control::default()).unwrap();
    idx.flush().unwrap();
    idx.add_batch(
        &data[5 * d..10 * d],
        5,
        Some(&[100, 101, 102, 103, 104]),
        None,
        &Control::default(),
    )
    .unwrap();
    assert!(idx.contains(102).unwrap());
    idx.rollback().unwrap();
    assert!(!idx.contains(102).unwrap());
    idx.add_batch(
        &data[10 * d..15 * d],
        5,
        Some(&[200, 201, 202, 203, 204]),
        None,
        &Control::default(),
    )
    .unwrap();
    assert!(!idx.contains(102).unwrap());
    assert_eq!(idx.get(202).unwrap().unwrap(), data[12 * d..13 * d].to_vec());
    assert_eq!(idx.ids().unwrap(), vec![0, 1, 2, 3, 4, 200, 201, 202, 203, 204]);
}

fn exact_ids(idx: &Index, q: &[f32], k: usize) -> Vec<u64> {
    idx.search(q, k, Some(100_000)).unwrap().iter().map(|h| h.id).collect()
}

#[test]
fn deletes_hide_at_once_commit_at_flush_and_roll_back() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("a.chassis");
    let d = 8;
    let data = rand_vecs(500, d, 7);
    let w = Index::open(&p, Some(d), None, Mode::Write).unwrap();
    w.add_batch(&data, 500, None, None, &Control::default()).unwrap();
    w.flush().unwrap();
    let r = Index::open(&p, None, None, Mode::Read).unwrap();
    let q = &data[42 * d..43 * d];
    assert_eq!(exact_ids(&w, q, 1), vec![42]);
    assert!(w.delete(42).unwrap());
    assert!(!w.delete(42).unwrap(), "deleting twice");
    assert_ne!(exact_ids(&w, q, 1), vec![42]);
    assert!(w.search(q, 10, Some(20)).unwrap().iter().all(|h| h.id != 42));
    assert_eq!((w.len(), w.deleted_count().unwrap()), (499, 1));
    assert_eq!(exact_ids(&r, q, 1), vec![42], "a reader sees the delete only after the flush");
    w.rollback().unwrap();
    assert_eq!(exact_ids(&w, q, 1), vec![42]);
    assert!(w.delete(42).unwrap());
    w.flush().unwrap();
    assert_ne!(exact_ids(&r, q, 1), vec![42]);
    assert_eq!(r.len(), 499);
    assert!(r.get(42).unwrap().is_none());
    // Replace: the id comes back with another vector.
    w.add(&data[7 * d..8 * d], Some(42)).unwrap();
    assert_eq!(w.get(42).unwrap().unwrap(), data[7 * d..8 * d].to_vec());
}

/// Oracle: the warm thread's own state after the wait, and mincore (`memory_stats`): a
/// cancelled wait stops the reading before the evicted file is in.
#[cfg(target_os = "linux")]
#[test]
fn waiting_for_warm_stops_it_when_cancelled() {
    use std::os::fd::AsRawFd;
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("a.chassis");
    // 24 MiB of vectors, quickly linked (a debug build links slowly): a few warm steps.
    let opts = Options { max_connections: 4, ef_construction: 8, ..Default::default() };
    let w = Index::open(&p, Some(1024), Some(&opts), Mode::Write).unwrap();
    w.add_batch(&rand_vecs(6000, 1024, 3), 6000, None, None, &Control::default()).unwrap();
    w.flush().unwrap();
    w.close().unwrap();
    drop(w);
    let f = std::fs::File::open(&p).unwrap();
    f.sync_all().unwrap();
    // SAFETY: advice about a file this test opened.
    unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    let r = Index::open(&p, None, None, Mode::Read).unwrap();
    r.warm(true);
    let cancelled = Control::default();
    cancelled.cancel.store(true, Relaxed);
    let e = r.wait_warm(&cancelled).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Interrupted);
    let ms = r.memory_stats().unwrap();
    assert!(!ms.warm_running && ms.resident_bytes < ms.written_bytes, "{ms:?}");
    r.warm(true);
    let ctl = Control::default();
    r.wait_warm(&ctl).unwrap();
    let ms = r.memory_stats().unwrap();
    assert_eq!(ms.resident_bytes, ms.written_bytes);
    assert_eq!(ctl.done.load(Relaxed), r.warm_progress().0, "the wait counted every byte");
}

/// Oracle: the directory listing (nothing left at the destination or beside it) and the
/// bytes counted against the file that a finished copy writes.
#[test]
fn a_cancelled_backup_or_save_leaves_nothing_and_a_finished_one_counts_its_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("a.chassis");
    let data = rand_vecs(3000, 16, 5);
    let w = Index::open(&p, Some(16), None, Mode::Write).unwrap();
    w.add_batch(&data, 3000, None, None, &Control::default()).unwrap();
    let mem = Index::memory(16, None).unwrap();
    mem.add_batch(&data, 3000, None, None, &Control::default()).unwrap();
    let r = Index::open(&p, None, None, Mode::Read).unwrap();
    let listing = || {
        let mut v: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        v.sort();
        v
    };
    let cancelled = Control::default();
    cancelled.cancel.store(true, Relaxed);
    for (i, idx) in [&w, &r, &mem].into_iter().enumerate() {
        let before = listing();
        let dest = dir.path().join(format!("copy{i}.chassis"));
        let e = idx.backup(&dest, false, &cancelled).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Interrupted, "{e}");
        let e = idx.save(&dest, false, &cancelled).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Interrupted, "{e}");
        assert_eq!(listing(), before, "a cancelled copy left a file");
        let ctl = Control::default();
        idx.backup(&dest, false, &ctl).unwrap();
        assert_eq!(ctl.done.load(Relaxed), idx.copy_bytes(), "bytes counted");
        assert_eq!(Index::open(&dest, None, None, Mode::Read).unwrap().len(), 3000);
    }
}

#[test]
fn backup_and_compact_keep_exactly_the_live_vectors() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("a.chassis");
    let d = 8;
    let data = rand_vecs(2000, d, 8);
    let w = Index::open(&p, Some(d), None, Mode::Write).unwrap();
    w.add_batch(&data, 2000, None, None, &Control::default()).unwrap();
    for id in (0..2000).step_by(3) {
        assert!(w.delete(id).unwrap());
    }
    w.set_user_version(77).unwrap();
    let b = dir.path().join("b.chassis");
    w.backup(&b, false, &Control::default()).unwrap();
    let r = Index::open(&p, None, None, Mode::Read).unwrap();
    let live: Vec<u64> = (0..2000).filter(|i| i % 3 != 0).collect();
    if !common::wine_cannot(common::WINE_COMPACT) {
        w.compact(Some(2), &Control::default()).unwrap();
        assert_eq!(w.deleted_count().unwrap(), 0);
        assert_eq!(w.ids().unwrap(), live);
        assert_eq!(w.user_version(), 77);
        for &id in &live[..50] {
            assert_eq!(
                w.get(id).unwrap().unwrap(),
                data[id as usize * d..(id as usize + 1) * d].to_vec()
            );
        }
        assert_eq!(w.add(&data[..d], None).unwrap(), 2000, "default ids go on after the largest");
        w.flush().unwrap();
        let report = w.check(&Control::default()).unwrap();
        assert!(report.corrupt.is_empty() && report.not_finite.is_empty(), "{report:?}");
        std::thread::sleep(std::time::Duration::from_millis(60));
        assert_eq!(r.len(), 1334, "the reader moved to the compacted file");
    }
    let bk = Index::open(&b, None, None, Mode::Read).unwrap();
    assert_eq!(bk.ids().unwrap(), live);
    assert_eq!(bk.user_version(), 77);
    let q = &data[5 * d..6 * d];
    let want: Vec<u64> =
        brute(&data, d, q, 2000).into_iter().filter(|i| i % 3 != 0).take(10).collect();
    assert_eq!(exact_ids(&bk, q, 10), want);
}

#[test]
fn a_reader_backup_is_the_last_flush_although_the_writer_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("a.chassis");
    let d = 8;
    let data = rand_vecs(3000, d, 9);
    let w = Index::open(&p, Some(d), None, Mode::Write).unwrap();
    w.add_batch(&data[..1000 * d], 1000, None, None, &Control::default()).unwrap();
    w.flush().unwrap();
    let before: Vec<Vec<u32>> = (0..1000).map(|s| lists::snapshot_lists(&w.snap().st, s)).collect();
    w.add_batch(&data[1000 * d..], 2000, None, None, &Control::default()).unwrap(); // changes committed lists
    w.delete(5).unwrap();
    let r = Index::open(&p, None, None, Mode::Read).unwrap();
    let b = dir.path().join("b.chassis");
    r.backup(&b, false, &Control::default()).unwrap();
    let bk = Index::open(&b, None, None, Mode::Write).unwrap();
    assert_eq!(bk.len(), 1000);
    assert!(bk.contains(5).unwrap());
    let after: Vec<Vec<u32>> = (0..1000).map(|s| lists::snapshot_lists(&bk.snap().st, s)).collect();
    assert_eq!(before, after, "the copy has the committed lists, not the writer's newer ones");
    assert!(bk.check(&Control::default()).unwrap().corrupt.is_empty());
}

#[test]
fn check_names_damaged_slots() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("a.chassis");
    let d = 8;
    let data = rand_vecs(300, d, 10);
    let w = Index::open(&p, Some(d), None, Mode::Write).unwrap();
    w.add_batch(&data, 300, None, None, &Control::default()).unwrap();
    w.flush().unwrap();
    let clean = w.check(&Control::default()).unwrap();
    assert!(clean.corrupt.is_empty() && clean.not_finite.is_empty());
    let st = w.snap().st.clone();
    // Flip a vector byte of slot 10 and a neighbor entry of slot 20, behind the index's back.
    // SAFETY: slot 10 is in a mapped, writable segment, and no search runs meanwhile.
    unsafe { *(st.vector_ptr(10) as *mut u8) ^= 0x40 };
    st.l0(20)[2].fetch_xor(1 << 20, Relaxed);
    let report = w.check(&Control::default()).unwrap();
    assert_eq!(report.corrupt, vec![10, 20]);
    assert!(w.get(10).is_err(), "get refuses a vector that fails its checksum");
    assert_eq!(w.search(&data[..d], 5, Some(10)).unwrap().len(), 5, "searches go on");
}

#[test]
fn second_writer_is_refused_and_reader_is_not() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("a.chassis");
    let _w = Index::open(&p, Some(4), None, Mode::Write).unwrap();
    let e = Index::open(&p, Some(4), None, Mode::Write).err().unwrap();
    assert_eq!(e.kind, ErrorKind::IndexLocked);
    assert!(Index::open(&p, None, None, Mode::Read).is_ok());
}

#[test]
fn reader_follows_flushes() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("a.chassis");
    let d = 8;
    let data = rand_vecs(5000, d, 5);
    let w = Index::open(&p, Some(d), None, Mode::Write).unwrap();
    w.add_batch(&data[..10 * d], 10, None, None, &Control::default()).unwrap();
    w.flush().unwrap();
    let r = Index::open(&p, None, None, Mode::Read).unwrap();
    assert_eq!(r.len(), 10);
    w.add_batch(&data[10 * d..], 4990, None, None, &Control::default()).unwrap();
    assert_eq!(r.len(), 10, "a reader never sees unflushed adds");
    assert_eq!(w.len(), 5000, "the writer sees its own adds at once");
    let pinned = r.snap();
    w.flush().unwrap();
    assert_eq!(r.len(), 5000);
    assert_eq!(pinned.slots, 10, "a pinned snapshot keeps its state");
    assert_eq!(
        r.search_in(&pinned, &data[4000 * d..4001 * d], 3, Some(10), None, None).unwrap().len(),
        3
    );
    assert!(r
        .search_in(&pinned, &data[4000 * d..4001 * d], 3, Some(10), None, None)
        .unwrap()
        .iter()
        .all(|h| h.id < 10));
    assert_eq!(r.get(4999).unwrap().unwrap(), data[4999 * d..].to_vec());
}

#[test]
fn offsets_and_references_past_the_end_are_refused_not_wrapped() {
    // A file offset near u64::MAX, whose sum with a length wraps, and a heap reference asked
    // for layer 0 (whose layer - 1 wraps): each is outside everything mapped. Oracle: an
    // error or `None`, never bytes from somewhere else (the checks are sums that do not wrap).
    let d = 8;
    let data = rand_vecs(64, d, 3);
    let dir = tempfile::tempdir().unwrap();
    let file = Index::open(&dir.path().join("a.chassis"), Some(d), None, Mode::Write).unwrap();
    let mem = Index::memory(d, None).unwrap();
    for idx in [&file, &mem] {
        idx.add_batch(&data, 64, None, None, &Control::default()).unwrap();
        let st = idx.snap().st.clone();
        let mut buf = [0u8; 16];
        for off in [u64::MAX - 7, u64::MAX - 15, u64::MAX] {
            assert!(st.read_written(&mut buf, off).is_err(), "offset {off}");
            assert!(st.read_at(&mut buf, off).is_err(), "offset {off}");
        }
        assert!(st.upper_checked(chassis::format::heap_ref(0, 0), 0).is_none());
        assert!(st.upper_checked(u64::MAX, 1).is_none());
    }
}

/// A thread's minor page faults so far (Linux's per-thread count).
#[cfg(target_os = "linux")]
fn thread_faults() -> i64 {
    // SAFETY: getrusage fills the zeroed struct it is given.
    unsafe {
        let mut u: libc::rusage = std::mem::zeroed();
        assert_eq!(libc::getrusage(libc::RUSAGE_THREAD, &mut u), 0);
        u.ru_minflt
    }
}

/// After a full commit wrote the header pages back, a batch of deletes takes their write
/// faults ahead, on another thread: the pages with 4 given slots or more, and only those.
/// Oracle: this thread's fault count while it writes each header word back unchanged, with a
/// page given one slot as the control (a filesystem that does not write-protect pages after
/// writeback makes the control write take no fault: nothing to see there, the test says so).
#[cfg(target_os = "linux")]
#[test]
fn header_pages_a_batch_delete_writes_take_their_faults_ahead() {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    let v: Vec<u32> = release.split(['.', '-']).take(2).map(|x| x.parse().unwrap_or(0)).collect();
    if (v[0], v[1]) < (5, 14) {
        println!("skipped: Linux {release} has no MADV_POPULATE_WRITE (5.14)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("a.chassis");
    let (n, d) = (4096, 8);
    let idx = Index::open(&p, Some(d), None, Mode::Write).unwrap();
    idx.add_batch(&rand_vecs(n, d, 7), n, None, Some(2), &Control::default()).unwrap();
    idx.flush().unwrap();
    let st = std::sync::Arc::clone(&idx.snap().st);
    // SAFETY: sysconf only reads a system value.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
    if size != 4096 {
        println!("skipped: the slots below are chosen for 4 KiB pages, not {size}");
        return;
    }
    let page = |s: u32| st.header(s).as_ptr() as usize / size;
    // 8 slots on each page of slots 0..1024 (given), one slot on each page of 2048..3072.
    let given: Vec<u32> = (0..1024).step_by(16).collect();
    let control: Vec<u32> = (2048..3072).step_by(128).collect();
    assert!(given.iter().all(|&s| control.iter().all(|&c| page(c) != page(s))));
    // The file read, not the mapping: a read through the mapping would leave read-only
    // translations in this CPU's TLB, and an Intel CPU faults on them at the first write
    // even once the page is writable (a spurious fault, counted as the others).
    let before = std::fs::read(&p).unwrap();
    let mut slots = given.clone();
    slots.extend(&control);
    // Dropped: joined.
    drop(std::sync::Arc::clone(&st).prefault_headers_beside(slots).expect("a thread"));
    assert!(before == std::fs::read(&p).unwrap(), "taking faults changed no byte");
    let rewrite = |slots: &[u32]| {
        let f = thread_faults();
        for &s in slots {
            let w = &st.header(s)[2];
            w.store(w.load(Relaxed), Relaxed);
        }
        thread_faults() - f
    };
    let control_faults = rewrite(&control);
    if control_faults == 0 {
        println!("skipped: this filesystem leaves written-back pages writable");
        return;
    }
    assert!(control_faults >= control.len() as i64 / 2, "{control_faults} faults");
    assert_eq!(rewrite(&given), 0, "the given pages were made writable ahead");
}
