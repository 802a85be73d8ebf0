//! Switches read from the environment, in one place and once per process. They are for
//! measuring what a mechanism gives and for tests, not for users (`docs/api.md`, "Switches
//! for measuring", lists them); each default is what the design records decided.
//!
//! | variable                       | what it switches                                        |
//! |--------------------------------|---------------------------------------------------------|
//! | `CHASSIS_KERNEL`               | the SIMD level: `avx512`, `avx2`, `neon`, `scalar`       |
//! | `CHASSIS_HALF_COPY`            | `0` never links on a half-precision copy, `1` always     |
//! | `CHASSIS_PREFETCH_LINES`       | lines of a neighbor's vector a search asks for ahead    |
//! |                                | (ADR-0015's policy otherwise; `cpu_info()` shows it)     |
//! | `CHASSIS_FILTER_PLAN`          | `walk`, `two_hop` or `scan`: every filtered search so   |
//! |                                | (no budget), instead of the planner's choice            |
//! | `CHASSIS_GROUP_MIN_BYTES`      | vectors this long get distances four at a time          |
//! | `CHASSIS_CODE_GROUP_MIN_BYTES` | the same for codes (default 0: every code)              |
//! | `CHASSIS_BEAM`                 | candidates a search short of memory expands a round     |
//! | `CHASSIS_LINK_CODES`           | `0` / `1`: small batches never / always link on codes    |
//! | `CHASSIS_REPAIR_AROUND`        | `0`: small batches walk the whole graph every 1,000 rows |
//! | `CHASSIS_LIST_SHADOW`          | `0`: large batches write their lists in place            |
//! | `CHASSIS_DEFER_LINK`           | `0`: every add links before it returns (no tail)         |
//! | `CHASSIS_CONSOLIDATE`          | `0`: batches never consolidate deletes on their own      |
//! | `CHASSIS_REUSE_SLOTS`          | `0`: deleted rows' slots are never reused                |
//! | `CHASSIS_REUSE_LOCALITY`       | `0`: a batch takes free slots lowest first, not by where |
//! |                                | their old rows lay                                       |
//! | `CHASSIS_RELINK_KEEP`          | `0`: a consolidation weighs a list's live entries anew   |
//! |                                | with the candidates, instead of keeping them             |
//! | `CHASSIS_RELINK_FILL`          | `0`: a consolidated list keeps only what the heuristic  |
//! |                                | lets in, not as many entries as it had nor half its room |
//! | `CHASSIS_UPPER_CANDIDATES`     | `0`: a new node of level 1 or more chooses its layer-0   |
//! |                                | list from layer 0's candidates alone, not layer 1's too  |
//! | `CHASSIS_PREFETCH_PAGES`       | `0`: no `WILLNEED` advice short of memory (also read as |
//! |                                | `CHASSIS_NAME_PAGES`, its old name)                      |
//! | `CHASSIS_REDO`                 | `0`: commits go through the index file, no redo log      |
//! | `CHASSIS_BOOT_ID`              | stands in for the machine's boot id (tests of a restart) |

use std::sync::OnceLock;

/// The switches as this process read them.
#[derive(Debug, Clone, Default)]
pub struct Tuning {
    pub kernel: Option<String>,
    pub half_copy: Option<bool>,
    pub prefetch_lines: Option<usize>,
    pub filter_plan: Option<String>,
    pub group_min_bytes: Option<usize>,
    pub code_group_min_bytes: Option<usize>,
    pub beam: Option<usize>,
    pub link_codes: Option<bool>,
    pub repair_around: Option<bool>,
    pub list_shadow: Option<bool>,
    pub defer_link: Option<bool>,
    pub consolidate: Option<bool>,
    pub reuse_slots: Option<bool>,
    pub reuse_locality: Option<bool>,
    pub relink_keep: Option<bool>,
    pub relink_fill: Option<bool>,
    pub upper_candidates: Option<bool>,
    pub prefetch_pages: Option<bool>,
    pub redo: Option<bool>,
    pub boot_id: Option<Vec<u8>>,
}

/// The switches, read from the environment on the first call.
pub fn get() -> &'static Tuning {
    static T: OnceLock<Tuning> = OnceLock::new();
    T.get_or_init(|| Tuning::from(|name| std::env::var_os(name)))
}

impl Tuning {
    /// The switches as `var` gives the variables (the environment, or a test's table).
    pub fn from(var: impl Fn(&str) -> Option<std::ffi::OsString>) -> Tuning {
        let text = |name: &str| var(name).and_then(|v| v.into_string().ok());
        let count = |name: &str| text(name).and_then(|v| v.trim().parse().ok());
        // `0` and `1`; anything else leaves the default.
        let flag = |name: &str| match text(name).as_deref().map(str::trim) {
            Some("0") => Some(false),
            Some("1") => Some(true),
            _ => None,
        };
        // Off with `0`, on otherwise (these are on by default).
        let off = |name: &str| text(name).map(|v| v.trim() != "0");
        Tuning {
            kernel: text("CHASSIS_KERNEL").map(|v| v.trim().to_string()),
            half_copy: flag("CHASSIS_HALF_COPY"),
            prefetch_lines: count("CHASSIS_PREFETCH_LINES"),
            filter_plan: text("CHASSIS_FILTER_PLAN").map(|v| v.trim().to_string()),
            group_min_bytes: count("CHASSIS_GROUP_MIN_BYTES"),
            code_group_min_bytes: count("CHASSIS_CODE_GROUP_MIN_BYTES"),
            beam: count("CHASSIS_BEAM"),
            link_codes: flag("CHASSIS_LINK_CODES"),
            repair_around: off("CHASSIS_REPAIR_AROUND"),
            list_shadow: off("CHASSIS_LIST_SHADOW"),
            defer_link: off("CHASSIS_DEFER_LINK"),
            consolidate: off("CHASSIS_CONSOLIDATE"),
            reuse_slots: off("CHASSIS_REUSE_SLOTS"),
            reuse_locality: off("CHASSIS_REUSE_LOCALITY"),
            relink_keep: off("CHASSIS_RELINK_KEEP"),
            relink_fill: off("CHASSIS_RELINK_FILL"),
            upper_candidates: off("CHASSIS_UPPER_CANDIDATES"),
            prefetch_pages: off("CHASSIS_PREFETCH_PAGES").or_else(|| off("CHASSIS_NAME_PAGES")),
            redo: off("CHASSIS_REDO"),
            boot_id: var("CHASSIS_BOOT_ID").map(|v| v.into_encoded_bytes()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn read(vars: &[(&str, &str)]) -> Tuning {
        let map: HashMap<String, String> =
            vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Tuning::from(|name| map.get(name).map(Into::into))
    }

    #[test]
    fn unset_switches_leave_every_default() {
        let t = read(&[]);
        assert!(t.kernel.is_none() && t.half_copy.is_none() && t.beam.is_none());
        assert!(t.prefetch_pages.is_none() && t.redo.is_none() && t.boot_id.is_none());
    }

    #[test]
    fn switches_read_as_their_table_says() {
        let t = read(&[
            ("CHASSIS_KERNEL", " avx2 "),
            ("CHASSIS_HALF_COPY", "0"),
            ("CHASSIS_LINK_CODES", "yes"),
            ("CHASSIS_BEAM", "4"),
            ("CHASSIS_PREFETCH_LINES", "24"),
            ("CHASSIS_GROUP_MIN_BYTES", "x"),
            ("CHASSIS_DEFER_LINK", "0"),
            ("CHASSIS_REDO", "1"),
            ("CHASSIS_CONSOLIDATE", "0"),
            ("CHASSIS_REUSE_SLOTS", "0"),
            ("CHASSIS_REUSE_LOCALITY", "0"),
            ("CHASSIS_RELINK_KEEP", "0"),
            ("CHASSIS_RELINK_FILL", "0"),
            ("CHASSIS_UPPER_CANDIDATES", "0"),
        ]);
        assert_eq!(t.kernel.as_deref(), Some("avx2"));
        assert_eq!(t.half_copy, Some(false));
        assert_eq!(t.link_codes, None, "only 0 and 1 set a two-way switch");
        assert_eq!((t.beam, t.group_min_bytes), (Some(4), None));
        assert_eq!(t.prefetch_lines, Some(24));
        assert_eq!((t.defer_link, t.redo), (Some(false), Some(true)));
        assert_eq!((t.consolidate, t.reuse_slots), (Some(false), Some(false)));
        assert_eq!((t.reuse_locality, t.relink_keep), (Some(false), Some(false)));
        assert_eq!((t.relink_fill, t.upper_candidates), (Some(false), Some(false)));
    }

    #[test]
    fn the_old_name_of_the_prefetch_switch_still_counts() {
        assert_eq!(read(&[("CHASSIS_NAME_PAGES", "0")]).prefetch_pages, Some(false));
        let both = read(&[("CHASSIS_NAME_PAGES", "0"), ("CHASSIS_PREFETCH_PAGES", "1")]);
        assert_eq!(both.prefetch_pages, Some(true), "the new name wins");
    }
}
