//! A node's neighbor lists, read and written through the atomics of `access.rs`: a list is
//! `[head, crc, entries...]`; layer 0's head also holds the node's level and the locality bit.
//!
//! Lists are read without locks: a list being rewritten may be seen half old, half new, but
//! every entry is a slot that existed when it was written and is bounds-checked before use, so
//! a search can only route differently, never go out of bounds. Writers hold the stripe lock.

use super::Storage;
use crate::format::{self, list_crc, NO_UPPER};
use std::sync::atomic::{AtomicU32, Ordering::*};

/// Write a list: entries first, then its checksum, then the head word (count, and the level
/// and the locality bit, kept from the old head, for layer 0) with release ordering, so a
/// reader that sees the new count sees the entries.
pub fn write_list(list: &[AtomicU32], slot: u32, layer: usize, entries: &[u32], level: usize) {
    debug_assert!(entries.len() <= list.len() - 2);
    for (i, e) in entries.iter().enumerate() {
        list[2 + i].store(*e, Relaxed);
    }
    let head = if layer == 0 {
        format::l0_head(entries.len(), level) | (list[0].load(Relaxed) & format::L0_LOCALITY)
    } else {
        entries.len() as u32
    };
    list[1].store(list_crc(slot, layer, head, entries), Relaxed);
    list[0].store(head, Release);
}

/// Number of entries of a list, clamped to its capacity (a damaged count cannot overrun).
/// Its head is read as a reader may (`super::acquire_u32`), pairing with `write_list`'s release.
#[inline(always)]
pub fn list_len(list: &[AtomicU32]) -> usize {
    ((super::acquire_u32(&list[0]) & 0xffff) as usize).min(list.len() - 2)
}

/// The entries a list holds (`list_len` of them, after its head and checksum words).
#[inline(always)]
pub fn entries(list: &[AtomicU32]) -> &[AtomicU32] {
    &list[2..2 + list_len(list)]
}

/// The level stored in a slot's level-0 head.
#[inline(always)]
pub fn level_of(st: &Storage, slot: u32) -> usize {
    ((st.l0(slot)[0].load(Relaxed) >> 16) & 0xff) as usize
}

/// The list of `slot` at `layer`, or None when the node has no such layer (or its heap
/// reference is damaged).
#[inline(always)]
pub fn list_of(st: &Storage, slot: u32, layer: usize) -> Option<&[AtomicU32]> {
    if layer == 0 {
        return Some(st.l0(slot));
    }
    if level_of(st, slot) < layer {
        return None;
    }
    let r = st.header(slot)[1].load(Relaxed);
    if r == NO_UPPER {
        return None;
    }
    st.upper_checked(r, layer)
}

/// Every word of a node's lists (level 0, then layers 1..=level), for undo and savepoints.
pub fn snapshot_lists(st: &Storage, slot: u32) -> Vec<u32> {
    let mut out: Vec<u32> = st.l0(slot).iter().map(|w| w.load(Relaxed)).collect();
    for layer in 1..=level_of(st, slot) {
        if let Some(l) = list_of(st, slot, layer) {
            out.extend(l.iter().map(|w| w.load(Relaxed)));
        }
    }
    out
}

/// Put back what `snapshot_lists` took.
pub fn restore_lists(st: &Storage, slot: u32, words: &[u32]) {
    let l0 = st.l0(slot);
    let n0 = l0.len().min(words.len());
    for (w, v) in l0[1..n0].iter().zip(&words[1..n0]) {
        w.store(*v, Relaxed);
    }
    l0[0].store(words[0], Release);
    let mut rest = &words[n0..];
    let mut layer = 1;
    while !rest.is_empty() {
        let Some(l) = list_of(st, slot, layer) else { break };
        let n = l.len().min(rest.len());
        for (w, v) in l.iter().zip(&rest[..n]) {
            w.store(*v, Relaxed);
        }
        rest = &rest[n..];
        layer += 1;
    }
}

/// Mark in `seen` every node below `n` reachable on layer 0 from the nodes on `stack` (marked
/// already), through deleted nodes too; empties the stack. (`check` reports what stays
/// unmarked; the batch repair links it in.)
pub fn mark_reachable(st: &Storage, n: u32, stack: &mut Vec<u32>, seen: &mut [bool]) {
    while let Some(s) = stack.pop() {
        let l0 = st.l0(s);
        for e in entries(l0) {
            let nb = e.load(Relaxed);
            if nb < n && !seen[nb as usize] {
                seen[nb as usize] = true;
                stack.push(nb);
            }
        }
    }
}
