//! Readers' pins (`storage::pins`): a writer learns whether any reader may still search a
//! commit older than a given one. Oracles: readers opened beside the writer (other opens of
//! the file, as another process's are), and a reader in a child process, killed.

mod common;

use chassis::index::{Control, Index, Mode};
use chassis::storage::{Older, Pins};
use common::rand_vecs;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

const D: usize = 8;

fn flushed(idx: &Index, n: usize, seed: u64) -> u64 {
    idx.add_batch(&rand_vecs(n, D, seed), n, None, Some(1), &Control::default()).unwrap();
    idx.flush().unwrap();
    idx.committed_seq()
}

// The pins only answer for other processes where the system has open-file locks: elsewhere
// these tests are reported as ignored, not passed.
#[test]
#[cfg_attr(not(any(target_os = "linux", windows)), ignore = "no open-file locks here")]
fn a_reader_holds_the_commit_it_last_searched_and_its_snapshots() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("p.chassis");
    let w = Index::open(&p, Some(D), None, Mode::Write).unwrap();
    let s1 = flushed(&w, 100, 1);
    assert_eq!(w.readers_older_than(u64::MAX >> 8), Older::No, "no reader yet");

    let r = Index::open(&p, None, None, Mode::Read).unwrap();
    assert_eq!(w.readers_older_than(s1), Older::No);
    assert_eq!(w.readers_older_than(s1 + 1), Older::Yes, "the reader opened at s1");

    // An idle reader still holds the commit it last saw; a search moves it on.
    let s2 = flushed(&w, 100, 2);
    assert_eq!(w.readers_older_than(s2), Older::Yes);
    r.search(&rand_vecs(1, D, 9), 5, None).unwrap();
    assert_eq!(w.readers_older_than(s2), Older::No, "the reader moved to s2");
    assert_eq!(w.readers_older_than(s2 + 1), Older::Yes);

    // A snapshot keeps its commit while the reader moves on.
    let held = r.snapshot();
    assert_eq!(held.seq, s2);
    let s3 = flushed(&w, 100, 3);
    r.search(&rand_vecs(1, D, 9), 5, None).unwrap();
    assert_eq!(r.snap().seq, s3);
    assert_eq!(w.readers_older_than(s3), Older::Yes, "the snapshot holds s2");
    drop(held);
    assert_eq!(w.readers_older_than(s3), Older::No);

    drop(r);
    assert_eq!(w.readers_older_than(u64::MAX >> 8), Older::No, "the reader closed");
}

#[test]
fn a_writers_own_snapshot_holds_its_commit() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("w.chassis");
    let w = Index::open(&p, Some(D), None, Mode::Write).unwrap();
    let s1 = flushed(&w, 50, 1);
    let snap = w.snapshot();
    let s2 = flushed(&w, 50, 2);
    assert!(s2 > s1);
    assert_eq!(w.readers_older_than(s2), Older::Yes);
    let again = w.snapshot();
    drop(snap);
    assert_eq!(w.readers_older_than(s2), Older::No, "the second snapshot is of s2");
    assert_eq!(w.readers_older_than(s2 + 1), Older::Yes);
    drop(again);
    assert_eq!(w.readers_older_than(s2 + 1), Older::No);
    // Searches hold no pin past their own call.
    w.search(&rand_vecs(1, D, 9), 5, None).unwrap();
    assert_eq!(w.readers_older_than(s2 + 1), Older::No);
}

#[test]
#[cfg_attr(not(any(target_os = "linux", windows)), ignore = "no open-file locks here")]
fn a_reader_opening_counts_as_the_oldest() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("o.chassis");
    let w = Index::open(&p, Some(D), None, Mode::Write).unwrap();
    flushed(&w, 10, 1);
    let file = std::fs::File::open(&p).unwrap();
    let opening = Pins::opening(&file).expect("the system has the locks");
    assert_eq!(w.readers_older_than(0), Older::Yes);
    drop(opening);
    assert_eq!(w.readers_older_than(0), Older::No);
}

/// The child: open a reader, hold a snapshot, say its commit, wait to be killed (or for its
/// parent to go: stdin closes).
#[test]
fn child_reader_holding_a_snapshot() {
    let Ok(path) = std::env::var("CHASSIS_PIN_CHILD") else {
        return;
    };
    let r = Index::open(std::path::Path::new(&path), None, None, Mode::Read).unwrap();
    let snap = r.snapshot();
    println!("pinned {}", snap.seq);
    std::io::stdout().flush().unwrap();
    let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut Vec::new());
    drop(snap);
}

#[test]
#[cfg_attr(not(any(target_os = "linux", windows)), ignore = "no open-file locks here")]
fn a_reader_in_another_process_holds_its_commit_until_it_dies() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("x.chassis");
    let w = Index::open(&p, Some(D), None, Mode::Write).unwrap();
    let s1 = flushed(&w, 100, 1);
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["child_reader_holding_a_snapshot", "--exact", "--nocapture", "--test-threads=1"])
        .env("CHASSIS_PIN_CHILD", &p)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    // libtest prints the test's name, then what it prints, on one line.
    while !line.contains("pinned ") {
        line.clear();
        assert!(out.read_line(&mut line).unwrap() > 0, "the child ended before pinning");
    }
    assert!(line.trim_end().ends_with(&format!("pinned {s1}")), "{line}");
    let s2 = flushed(&w, 100, 2);
    assert_eq!(w.readers_older_than(s2), Older::Yes, "the child holds s1");
    assert_eq!(w.readers_older_than(s1), Older::No);
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(w.readers_older_than(s2), Older::No, "the lock went with the child");
}
