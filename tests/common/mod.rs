//! Helpers shared by the Rust integration tests that open damaged or crafted files in a child
//! process: seeded data, header field access with a valid checksum, and the child runner
//! (this test binary run again on one file, with a time and an address-space bound).
#![allow(dead_code)]

use chassis::format::{self, HEADER_COPY_SIZE, HEADER_FIXED, REGION_ENTRY};
use chassis::index::{Control, Index, Mode};
use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub const CHILD_FILE: &str = "CHASSIS_CHILD_FILE";
pub const CHILD_MODE: &str = "CHASSIS_CHILD_MODE";
/// A child is killed (and its case failed) after this long: opening and searching a file of
/// a few hundred vectors takes milliseconds even in a debug build, so this only bounds a hang.
pub const TIME_BOUND: Duration = Duration::from_secs(20);
/// A child may map at most this much address space (mappings follow the region table, so a
/// crafted table must not make an open reserve more).
pub const ADDRESS_BOUND: u64 = 16 << 30;

pub fn rand_vecs(n: usize, d: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407) | 1;
    (0..n * d)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 40) as f32 / (1u64 << 24) as f32 - 0.5
        })
        .collect()
}

/// What a compaction cannot show under Wine: it renames the new file over the open index, which
/// Windows allows with POSIX rename semantics and Wine refuses ("Access denied").
pub const WINE_COMPACT: &str = "compact renames over the open index (no POSIX rename in Wine)";

/// Under Wine: print what the test cannot show there (`.ci/cross` counts these lines) and
/// answer true, so that the test leaves that part out (docs/platforms.md, "What Wine cannot
/// show"). False everywhere else, Windows included.
pub fn wine_cannot(what: &str) -> bool {
    chassis::os::wine_version().inspect(|v| println!("skipped under Wine {v}: {what}")).is_some()
}

pub fn get(b: &[u8], at: usize, width: usize) -> u64 {
    let mut v = [0u8; 8];
    v[..width].copy_from_slice(&b[at..at + width]);
    u64::from_le_bytes(v)
}

pub fn put(b: &mut [u8], at: usize, width: usize, value: u64) {
    b[at..at + width].copy_from_slice(&value.to_le_bytes()[..width]);
}

/// Recompute a header copy's checksum over its body (the body length kept in step with the
/// region count, so that the checksum covers what a reader decodes).
pub fn reseal(copy: &mut [u8]) {
    let n = get(copy, 88, 4) as usize;
    let body = (HEADER_FIXED + n.min(format::MAX_REGIONS) * REGION_ENTRY).min(HEADER_COPY_SIZE - 8);
    put(copy, 12, 4, body as u64);
    let crc = xxhash_rust::xxh3::xxh3_64(&copy[..body]);
    put(copy, body, 8, crc);
}

/// A flushed index of `n` x `d` seeded vectors (one thread: the same bytes every run) with a
/// few deletes, closed; returns its bytes.
pub fn base_file(path: &Path, n: usize, d: usize) -> Vec<u8> {
    let idx = Index::open(path, Some(d), None, Mode::Write).unwrap();
    idx.add_batch(&rand_vecs(n, d, 3), n, None, Some(1), &Control::default()).unwrap();
    idx.flush().unwrap();
    for id in [3, 5, 8] {
        idx.delete(id).unwrap();
    }
    idx.flush().unwrap();
    drop(idx);
    std::fs::read(path).unwrap()
}

/// Set `value` into field `(at, width)` of the given header copies of a file's bytes, each
/// copy resealed (its checksum valid).
pub fn craft(bytes: &mut [u8], copies: &[usize], at: usize, width: usize, value: u64) {
    for &c in copies {
        let copy = &mut bytes[c * HEADER_COPY_SIZE..(c + 1) * HEADER_COPY_SIZE];
        put(copy, at, width, value);
        reseal(copy);
    }
}

/// Run test `test_name` of this binary again, as a child on `file` (opened as "read" or
/// "write"): the test starts with `if common::child_main() { return; }`, so in the child it
/// only opens the file. Ok(its OUTCOME line) when it exits 0 having printed one; Err(why) for
/// a crash, a panic, a non-zero exit or a hang.
pub fn run_child(test_name: &str, file: &Path, mode: &str) -> Result<String, String> {
    let exe = std::env::current_exe().unwrap();
    let mut child = Command::new(exe)
        .args(["--exact", test_name, "--nocapture", "--test-threads", "1"])
        .env(CHILD_FILE, file)
        .env(CHILD_MODE, mode)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut out = String::new();
            child.stdout.take().unwrap().read_to_string(&mut out).unwrap();
            let mut err = String::new();
            child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
            // The harness prints "test <name> ... " before the child's own line.
            let outcome = out.lines().find_map(|l| l.find("OUTCOME ").map(|at| &l[at..]));
            return match (status.success(), outcome) {
                (true, Some(line)) => Ok(line.to_string()),
                _ => Err(format!("exit {status}; stdout: {out}; stderr: {err}")),
            };
        }
        if start.elapsed() > TIME_BOUND {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("no answer within {TIME_BOUND:?} (a hang)"));
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// The child's side: when this process is a child (`run_child`), open the file, use it as a
/// caller would (len, ids, searches, check, get; a writer also adds and flushes), print one
/// OUTCOME line and return true; in the parent, return false at once. A panic or a crash
/// ends the child without that line.
pub fn child_main() -> bool {
    let Ok(file) = std::env::var(CHILD_FILE) else { return false };
    // The address-space bound needs setrlimit: Unix only (on Windows the time bound remains).
    #[cfg(unix)]
    {
        let limit = libc::rlimit { rlim_cur: ADDRESS_BOUND, rlim_max: ADDRESS_BOUND };
        // SAFETY: setrlimit with a valid pointer to an initialised rlimit.
        unsafe { libc::setrlimit(libc::RLIMIT_AS, &limit) };
    }
    let mode = if std::env::var(CHILD_MODE).unwrap() == "write" { Mode::Write } else { Mode::Read };
    let outcome = (|| -> chassis::Result<String> {
        let idx = Index::open(Path::new(&file), None, None, mode)?;
        let d = idx.dims();
        let queries = rand_vecs(4, d, 11);
        let mut hits = 0;
        for q in queries.chunks_exact(d) {
            hits += idx.search(q, 10, Some(64))?.len();
        }
        let (found, _) =
            idx.search_batch(&queries, 4, 10, None, None, Some(1), &Control::default())?;
        let ids = idx.ids()?;
        for id in ids.iter().take(5) {
            idx.get(*id)?;
        }
        let report = idx.check(&Control::default())?;
        if mode == Mode::Write {
            idx.add(&queries[..d], None)?;
            idx.flush()?;
        }
        Ok(format!(
            "works: len {} ids {} hits {} batch {} corrupt {}",
            idx.len(),
            ids.len(),
            hits,
            found.len(),
            report.corrupt.len()
        ))
    })();
    match outcome {
        Ok(s) => println!("OUTCOME {s}"),
        Err(e) => println!("OUTCOME refused {:?}: {}", e.kind, e.message),
    }
    true
}
