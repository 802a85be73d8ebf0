//! The C API from C: `tests/c/capi_test.c` and `examples/c/quickstart.c` compiled with the
//! system's `cc` against the `libchassis.so` this `cargo test` built, and run.
//!
//! Oracles: the C program's own brute-force k-NN, a second process, damaged copies and an
//! injected file size limit (see its header); here, the header against what the library
//! exports (`nm`) and the structs' layout as C lays them out against Rust's `offset_of!`.
//! The header must compile as C99 and C++11 with warnings as errors.
//!
//! Under valgrind (memcheck: no invalid access, no leak "definitely lost") when it is
//! installed; `CHASSIS_CAPI_VALGRIND=1` requires it (CI), `0` skips it.
//!
//! Linux only: the library's name, `nm -D` and the spawn test are Linux's (the GitHub macOS
//! and Windows jobs build the C API through `cargo check`).
#![cfg(all(target_os = "linux", feature = "capi"))]

use chassis::capi::{CCheckReport, CCpuInfo, CMemoryStats, COptions, CSearchParams};
use std::collections::BTreeSet;
use std::mem::{offset_of, size_of};
use std::path::PathBuf;
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The folder holding the `libchassis.so` this `cargo test` built: target/<profile>/deps/,
/// beside this test (`cargo build` copies it up to target/<profile>/; `cargo test` does not).
fn lib_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().to_path_buf();
    assert!(
        dir.join("libchassis.so").exists(),
        "no libchassis.so in {}: the lib's crate-type must keep cdylib",
        dir.display()
    );
    dir
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{text}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

/// Compile `source` (relative to the repository) against the header and the shared library,
/// into a program in a new temporary folder (returned with it, to keep it alive).
fn compiled(source: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let source = root().join(source);
    let out = dir.path().join(source.file_stem().unwrap());
    let lib = lib_dir();
    run(Command::new("cc")
        .args(["-std=c99", "-O1", "-g", "-Wall", "-Wextra", "-Werror", "-pedantic"])
        .arg("-I")
        .arg(root().join("include"))
        .arg(source)
        .arg("-L")
        .arg(&lib)
        // RPATH, not RUNPATH: cargo's LD_LIBRARY_PATH names target/<profile>/ first, where an
        // older library from `cargo build` may lie.
        .arg(format!("-Wl,--disable-new-dtags,-rpath,{}", lib.display()))
        .args(["-lchassis", "-lpthread", "-lm", "-o"])
        .arg(&out));
    (dir, out)
}

fn valgrind() -> bool {
    let found =
        Command::new("valgrind").arg("--version").output().is_ok_and(|o| o.status.success());
    match std::env::var("CHASSIS_CAPI_VALGRIND").as_deref() {
        Ok("1") => {
            assert!(
                found,
                "CHASSIS_CAPI_VALGRIND=1 but valgrind is not installed (apt install valgrind)"
            );
            true
        }
        Ok("0") => false,
        _ => found,
    }
}

/// Oracle: Cargo's version, against the header's version macros (the library's own calls
/// are checked against the macros by the C program).
#[test]
fn header_version_macros_are_cargos_version() {
    let h = std::fs::read_to_string(root().join("include/chassis.h")).unwrap();
    let v = env!("CARGO_PKG_VERSION");
    assert!(h.contains(&format!("#define CHASSIS_VERSION \"{v}\"")), "CHASSIS_VERSION is not {v}");
    let n: Vec<u32> = v.split('.').map(|p| p.parse().unwrap()).collect();
    let number = n[0] * 1_000_000 + n[1] * 1_000 + n[2];
    assert!(
        h.contains(&format!("#define CHASSIS_VERSION_NUMBER {number} ")),
        "CHASSIS_VERSION_NUMBER is not {number}"
    );
}

#[test]
fn header_compiles_as_c99_and_cxx11() {
    let h = root().join("include/chassis.h");
    run(Command::new("cc")
        .args(["-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-Wstrict-prototypes"])
        .args(["-fsyntax-only", "-x", "c"])
        .arg(&h));
    run(Command::new("c++")
        .args(["-std=c++11", "-Wall", "-Wextra", "-Werror", "-pedantic", "-fsyntax-only"])
        .args(["-x", "c++"])
        .arg(&h));
}

/// Oracle: the dynamic symbol table of the library (`nm -D`), against the header's prototypes.
#[test]
fn header_declares_exactly_what_the_library_exports() {
    let nm =
        run(Command::new("nm").args(["-D", "--defined-only"]).arg(lib_dir().join("libchassis.so")));
    let exported: BTreeSet<String> = nm
        .lines()
        .filter_map(|l| l.split_whitespace().last())
        .filter(|s| s.starts_with("chassis_"))
        .map(String::from)
        .collect();
    let header = std::fs::read_to_string(root().join("include/chassis.h")).unwrap();
    let mut declared = BTreeSet::new();
    for line in header.lines().filter(|l| !l.trim_start().starts_with(['*', '/', '#'])) {
        if let Some(i) = line.find("chassis_") {
            let rest = &line[i..];
            let name: String =
                rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
            if rest[name.len()..].starts_with('(') {
                declared.insert(name);
            }
        }
    }
    assert!(declared.len() >= 30, "only {} prototypes found in the header", declared.len());
    assert_eq!(declared, exported, "header prototypes vs. symbols of libchassis.so");
    let program = std::fs::read_to_string(root().join("tests/c/capi_test.c")).unwrap();
    let untested: Vec<_> =
        declared.iter().filter(|f| !program.contains(&format!("{f}("))).collect();
    assert!(untested.is_empty(), "calls tests/c/capi_test.c never makes: {untested:?}");
}

/// Oracle: `offsetof` and `sizeof` as the C compiler lays the header's structs out.
#[test]
fn structs_have_the_same_layout_in_c_and_rust() {
    let (_dir, exe) = compiled("tests/c/capi_test.c");
    let c = run(Command::new(&exe).arg("layout"));
    let mut rust = String::new();
    macro_rules! layout {
        ($c:literal, $t:ty, $($f:ident),*) => {
            rust += &format!("{} {}\n", $c, size_of::<$t>());
            $(rust += &format!("{}.{} {}\n", $c, stringify!($f), offset_of!($t, $f));)*
        };
    }
    layout!(
        "chassis_options",
        COptions,
        metric,
        precision,
        quantization,
        max_connections,
        ef_construction,
        ef_search,
        huge_pages,
        warm,
        placement,
        reserved
    );
    layout!(
        "chassis_search_params",
        CSearchParams,
        ef,
        rerank,
        threads,
        allowed,
        allowed_len,
        excluded,
        excluded_len
    );
    layout!(
        "chassis_check_report",
        CCheckReport,
        ok,
        reserved,
        unreachable,
        not_finite,
        corrupt,
        clipped
    );
    layout!(
        "chassis_memory_stats",
        CMemoryStats,
        mapped_bytes,
        huge_bytes,
        warm_total_bytes,
        huge_pages_asked,
        in_memory,
        populate,
        reserved
    );
    layout!(
        "chassis_cpu_info",
        CCpuInfo,
        arch,
        vendor,
        family,
        model,
        policy,
        prefetch_lines,
        prefetch_l1
    );
    assert_eq!(c, rust);
}

/// Every call and every status from C (see tests/c/capi_test.c), under valgrind when there.
#[test]
fn c_program_exercises_every_call() {
    let (dir, exe) = compiled("tests/c/capi_test.c");
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let mut cmd = if valgrind() {
        let mut c = Command::new("valgrind");
        c.args([
            "--quiet",
            "--error-exitcode=99",
            "--leak-check=full",
            "--errors-for-leak-kinds=definite",
            "--show-leak-kinds=definite",
            "--trace-children=yes",
        ]);
        c.arg(&exe);
        c
    } else {
        Command::new(&exe)
    };
    let out = run(cmd.arg(&data));
    assert!(out.contains("checks passed"), "{out}");
}

#[test]
fn c_example_runs() {
    let (dir, exe) = compiled("examples/c/quickstart.c");
    let path = dir.path().join("quickstart.chassis");
    let first = run(Command::new(&exe).arg(&path));
    assert!(first.starts_with("0 vectors before, 2000 added"), "{first}");
    assert!(first.contains("id 0 at distance 0.0000"), "{first}");
    // Run again: the file reopens with what the first run flushed.
    let second = run(Command::new(&exe).arg(&path));
    assert!(second.starts_with("2000 vectors before"), "{second}");
}
