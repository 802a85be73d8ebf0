//! The crate's layers as `src/lib.rs` draws them: each top-level module may use only the
//! modules of lower layers (or of its own layer, where the table says so), never one above.
//!
//! Oracle: the source text itself. Every `crate::<module>` path outside comments, string
//! literals and test modules is a use of that module; a use that goes up a layer (or a cycle
//! between modules of one layer) fails with the file and the line.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Layer of each top-level module, lowest first; a module may use its own layer's modules
/// only where `SIDEWAYS` allows it.
const LAYERS: &[(&str, u32)] = &[
    ("os", 0),
    ("error", 1),
    ("cpu", 1),
    ("tuning", 1),
    ("control", 2),
    ("format", 2),
    ("distance", 3),
    ("quant", 4),
    ("storage", 4),
    ("commit", 5),
    ("warm", 5),
    ("graph", 6),
    ("index", 7),
    ("capi", 8),
    ("python", 8),
];

/// Uses inside one layer that are part of the design: the CPU's prefetch policy can be set by
/// a switch for measuring.
const SIDEWAYS: &[(&str, &str)] = &[("cpu", "tuning")];

fn layer(module: &str) -> Option<u32> {
    LAYERS.iter().find(|(m, _)| *m == module).map(|(_, l)| *l)
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The code of a file without its comments, string literals and `#[cfg(test)]` modules.
fn code_lines(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut skip_next = false;
    for (n, line) in text.lines().enumerate() {
        let t = line.trim_start();
        if std::mem::take(&mut skip_next) {
            if t.ends_with('{') {
                break; // an inline test module: last in every file of this crate
            }
            continue; // `mod tests;`: its file is skipped as tests.rs
        }
        if t.starts_with("#[cfg(test)]") {
            skip_next = true;
            continue;
        }
        if t.starts_with("//") {
            continue;
        }
        // Drop string literals (a message may name a module) and trailing comments.
        let mut code = String::new();
        let mut in_str = false;
        let mut prev = ' ';
        for c in line.chars() {
            if c == '"' && prev != '\\' {
                in_str = !in_str;
            } else if !in_str {
                code.push(c);
            }
            prev = c;
        }
        let code = code.split("//").next().unwrap_or("").to_string();
        out.push((n + 1, code));
    }
    out
}

#[test]
fn no_module_uses_a_module_of_a_higher_layer() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let mut uses: BTreeMap<(String, String), String> = BTreeMap::new();
    for file in &files {
        let rel = file.strip_prefix(&src).unwrap();
        let top = rel.components().next().unwrap().as_os_str().to_string_lossy();
        let top = top.trim_end_matches(".rs").to_string();
        if top == "lib" || rel.file_name().is_some_and(|f| f == "tests.rs") {
            continue;
        }
        let from = layer(&top).unwrap_or_else(|| panic!("{top} has no layer in LAYERS"));
        let text = std::fs::read_to_string(file).unwrap();
        for (n, line) in code_lines(&text) {
            for part in line.split("crate::").skip(1) {
                let module: String =
                    part.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                let Some(to) = layer(&module) else { continue }; // a re-export of lib.rs
                if module == top {
                    continue;
                }
                let allowed = to < from || SIDEWAYS.contains(&(top.as_str(), module.as_str()));
                assert!(
                    allowed,
                    "{}:{n}: {top} (layer {from}) uses {module} (layer {to})",
                    rel.display()
                );
                uses.entry((top.clone(), module))
                    .or_insert_with(|| format!("{}:{n}", rel.display()));
            }
        }
    }
    // The table covers every module that uses another, and the lowest layer uses nothing.
    assert!(uses.keys().all(|(a, _)| a != "os"), "os uses another module: {uses:?}");
    assert!(uses.len() > 20, "too few uses found ({}): is the parser broken?", uses.len());
}

#[test]
fn every_top_level_module_has_a_layer() {
    let lib =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs")).unwrap();
    for line in lib.lines() {
        let t = line.trim();
        let Some(rest) = t.strip_prefix("pub mod ").or_else(|| t.strip_prefix("mod ")) else {
            continue;
        };
        let module = rest.trim_end_matches(';');
        assert!(layer(module).is_some(), "src/lib.rs declares {module}, which LAYERS leaves out");
    }
}
