//! Property test over hostile shard folders (issue 41): a small two-shard bake merged as a
//! split atlas, then random changes to `OUT.shards/` (stray part names with random
//! numbers, a FIFO, links leading in and out of the atlas' folder, a missing, truncated
//! or flipped part, a user's file). Opening the atlas, `status`, both merges and the
//! clean-up after a one-file merge must never panic, hang or allocate absurdly; each
//! succeeds or fails with a one-line error naming a file; the user's file always stays.

#![allow(clippy::unwrap_used)] // Test code fails loudly by design.

use std::alloc::{GlobalAlloc, Layout, System};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use proptest::prelude::*;
use tessera_core::NoProgress;
use tessera_core::bake::shard::{MergeForm, Shard, merge_shards, part_path, remove_parts, shard_dir};
use tessera_core::bake::shard_plan::status;
use tessera_core::bake::source::Generated;
use tessera_core::bake::{BakeInput, BakeOptions, bake};
use tessera_core::format::atlas::Atlas;
use tessera_core::format::codec::Codec;

/// The system allocator, remembering the largest single allocation.
struct Largest;

static LARGEST: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is forwarded unchanged to the system allocator.
unsafe impl GlobalAlloc for Largest {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LARGEST.fetch_max(layout.size(), Ordering::Relaxed);
        // SAFETY: the caller's contract is passed on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LARGEST.fetch_max(new_size, Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Largest = Largest;

/// No single allocation of any operation here may exceed this (the atlas is ~1 MiB).
const ALLOCATION_LIMIT: usize = 64 << 20;
/// Size of the file outside the atlas' folder that parts may link to: no error may show it.
const SECRET_BYTES: usize = 31_337;

fn options(shard: Option<Shard>) -> BakeOptions {
    BakeOptions { tile_size: 32, border: 2, codec: Codec::Lz4, threads: 1, shard, ..BakeOptions::default() }
}

/// The template: `root/atlas/s.tsa` merged as a split atlas from 3 parts, and
/// `root/secret.bin` outside its folder. Baked once; each case copies it.
fn template() -> &'static Path {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("atlas/s.tsa");
        std::fs::create_dir_all(out.parent().unwrap()).unwrap();
        for i in 0..3 {
            let input = BakeInput::new("g", Generated::with_cell(300, 200, 32));
            bake(vec![input], &out, &options(Shard::new(i, 3)), &NoProgress).unwrap();
        }
        merge_shards(&out, MergeForm::Split, &NoProgress).unwrap();
        std::fs::write(dir.path().join("secret.bin"), vec![1u8; SECRET_BYTES]).unwrap();
        dir
    })
    .path()
}

/// One hostile change to the shard folder.
#[derive(Clone, Debug)]
enum Change {
    /// A file `I-of-N.part` with random numbers (a real part's bytes, or junk).
    Stray { index: u32, count: u32, real: bool },
    /// Part `k` replaced by a FIFO.
    Fifo(u32),
    /// Part `k` replaced by a link to the file outside the atlas' folder.
    LinkOut(u32),
    /// Part `k` moved beside the atlas and linked to from its place (inside: allowed).
    LinkIn(u32),
    /// Part `k` deleted.
    Missing(u32),
    /// Part `k` cut to `fraction` of its length.
    Truncated(u32, f64),
    /// A byte of part `k` flipped at `fraction` of its length.
    Flipped(u32, f64),
    /// Another of the user's files in the folder.
    UserFile(String),
}

fn change() -> impl Strategy<Value = Change> {
    let count = prop_oneof![Just(u32::MAX), Just(65_536u32), Just(65_537u32), 1u32..8, any::<u32>()];
    prop_oneof![
        (any::<u32>(), count, any::<bool>()).prop_map(|(i, n, real)| Change::Stray {
            index: i % n.max(1),
            count: n,
            real
        }),
        (0u32..3).prop_map(Change::Fifo),
        (0u32..3).prop_map(Change::LinkOut),
        (0u32..3).prop_map(Change::LinkIn),
        (0u32..3).prop_map(Change::Missing),
        ((0u32..3), 0.0f64..1.0).prop_map(|(k, f)| Change::Truncated(k, f)),
        ((0u32..3), 0.0f64..1.0).prop_map(|(k, f)| Change::Flipped(k, f)),
        "[a-z]{1,8}\\.(txt|part|tmp)".prop_map(Change::UserFile),
    ]
}

/// Copies the template into `to`, links as they are.
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_tree(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), target).unwrap();
        }
    }
}

/// Applies `c` to the atlas `out`; returns whether the atlas can still be read whole.
fn apply(out: &Path, root: &Path, c: &Change) -> bool {
    let part = |k: u32| part_path(out, Shard::new(k, 3).unwrap());
    let replace = |p: &Path| {
        let _ = std::fs::remove_file(p);
    };
    match c {
        Change::Stray { index, count, real } => {
            let name = shard_dir(out).join(format!("{index}-of-{count}.part"));
            if name.exists() || std::fs::symlink_metadata(&name).is_ok() {
                return true;
            }
            // A real part's bytes only while part 0 is still a regular file: reading a FIFO
            // that an earlier change put there would block the test itself.
            let regular = std::fs::symlink_metadata(part(0)).is_ok_and(|m| m.is_file());
            let bytes = if *real && regular { std::fs::read(part(0)).unwrap() } else { b"junk".to_vec() };
            std::fs::write(name, bytes).unwrap();
            true
        }
        Change::Fifo(k) => {
            replace(&part(*k));
            assert!(std::process::Command::new("mkfifo").arg(part(*k)).status().unwrap().success());
            false
        }
        Change::LinkOut(k) => {
            replace(&part(*k));
            std::os::unix::fs::symlink(root.join("secret.bin"), part(*k)).unwrap();
            false
        }
        Change::LinkIn(k) => {
            // Only a part still in place as a regular file; else nothing changes here.
            if std::fs::symlink_metadata(part(*k)).is_ok_and(|m| m.is_file()) {
                let kept = out.with_file_name(format!("kept-{k}.part"));
                std::fs::rename(part(*k), &kept).unwrap();
                std::os::unix::fs::symlink(&kept, part(*k)).unwrap();
            }
            true
        }
        Change::Missing(k) => {
            replace(&part(*k));
            false
        }
        // Only a part that is still a regular file (reading a FIFO here would block).
        Change::Truncated(k, f) if std::fs::symlink_metadata(part(*k)).is_ok_and(|m| m.is_file()) => {
            let b = std::fs::read(part(*k)).unwrap();
            std::fs::write(part(*k), &b[..(b.len() as f64 * f) as usize]).unwrap();
            false
        }
        Change::Flipped(k, f) if std::fs::symlink_metadata(part(*k)).is_ok_and(|m| m.is_file()) => {
            let mut b = std::fs::read(part(*k)).unwrap();
            if !b.is_empty() {
                let at = ((b.len() as f64 * f) as usize).min(b.len() - 1);
                b[at] ^= 0x5A;
                std::fs::write(part(*k), &b).unwrap();
            }
            false
        }
        Change::Truncated(..) | Change::Flipped(..) => false,
        Change::UserFile(name) => {
            let p = shard_dir(out).join(name);
            if std::fs::symlink_metadata(&p).is_err() {
                std::fs::write(p, b"the user's").unwrap();
            }
            true
        }
    }
}

/// An error as the user sees it: one line, naming a file of the atlas, never the file a
/// link leads to nor its size.
fn check_error(what: &str, e: &dyn std::fmt::Display) {
    let text = e.to_string();
    assert!(!text.is_empty() && !text.contains('\n'), "{what}: {text:?}");
    assert!(text.contains(".tsa") || text.contains(".part"), "{what}: names no file: {text}");
    assert!(!text.contains(&SECRET_BYTES.to_string()) && !text.contains("secret"), "{what}: {text}");
}

/// Runs every reader and writer of the folder over the changed copy; panics on a broken
/// promise.
fn exercise(changes: &[Change]) {
    let case = tempfile::tempdir().unwrap();
    copy_tree(template(), case.path());
    let out = case.path().join("atlas/s.tsa");
    let mut whole = true;
    for c in changes {
        whole &= apply(&out, case.path(), c);
    }
    let users: Vec<PathBuf> = std::fs::read_dir(shard_dir(&out))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            Shard::from_part_name(&p.file_name().unwrap().to_string_lossy()).is_none_or(|s| s.count != 3)
        })
        .collect();

    // The split atlas as merged before the changes.
    match Atlas::open(&out) {
        Ok(a) => {
            assert!(
                whole || changes.iter().any(|c| matches!(c, Change::Flipped(..) | Change::Truncated(..))),
                "opened with a part replaced: {changes:?}"
            );
            for e in a.verify(&NoProgress) {
                check_error("verify", &e);
            }
        }
        Err(e) => {
            assert!(!whole, "a whole atlas failed to open: {e}");
            check_error("open", &e);
        }
    }
    // Status: bounded whatever counts the names claim.
    let names = std::fs::read_dir(shard_dir(&out)).unwrap().count();
    let st = status(&out, None, None, &[]).unwrap();
    assert!(st.parts.len() <= 3 * names + 1, "{} entries for {names} names", st.parts.len());
    for p in &st.parts {
        assert!(p.last >= p.shard.index && p.last < p.shard.count, "{p:?}");
    }
    // Both merges: a result or a clean error.
    match merge_shards(&out, MergeForm::Split, &NoProgress) {
        Ok(_) => {
            let a = Atlas::open(&out);
            assert!(a.is_ok() || !whole, "{:?}", a.err());
        }
        Err(e) => check_error("split merge", &e),
    }
    let one = case.path().join("atlas/one.tsa");
    // The one-file merge of `one.tsa` reads `one.tsa.shards`: the same folder, renamed.
    std::fs::rename(shard_dir(&out), shard_dir(&one)).unwrap();
    match merge_shards(&one, MergeForm::OneFile, &NoProgress) {
        Ok(report) => {
            assert!(Atlas::open(&one).unwrap().verify(&NoProgress).is_empty());
            let removed = remove_parts(&one, report.parts).unwrap();
            for u in &users {
                let moved = shard_dir(&one).join(u.file_name().unwrap());
                assert!(std::fs::symlink_metadata(&moved).is_ok(), "deleted the user's {}", moved.display());
            }
            assert_eq!(removed.folder_removed, users.is_empty(), "{removed:?}");
        }
        Err(e) => check_error("one-file merge", &e),
    }
    assert!(
        LARGEST.load(Ordering::Relaxed) <= ALLOCATION_LIMIT,
        "an allocation of {} bytes",
        LARGEST.load(Ordering::Relaxed)
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn hostile_shard_folders_never_panic_hang_or_lose_a_users_file(
        changes in proptest::collection::vec(change(), 1..4)
    ) {
        template();
        // Never hang: the case runs on a thread that must answer within 20 s.
        let (tx, rx) = std::sync::mpsc::channel();
        let c = changes.clone();
        std::thread::spawn(move || {
            let r = std::panic::catch_unwind(|| exercise(&c));
            let _ = tx.send(r.map_err(|p| {
                p.downcast_ref::<String>().cloned().or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default()
            }));
        });
        match rx.recv_timeout(Duration::from_secs(20)) {
            Ok(Ok(())) => {}
            Ok(Err(panic)) => prop_assert!(false, "{changes:?}: {panic}"),
            Err(_) => prop_assert!(false, "{changes:?}: hung for 20 s"),
        }
    }
}

/// The case CI's run found (a FIFO in place of part 0, then a stray name copying part 0):
/// it once hung the test's own setup, which read the FIFO.
#[test]
fn a_fifo_then_a_stray_copy_of_that_part() {
    exercise(&[Change::Fifo(0), Change::Stray { index: 0, count: u32::MAX, real: true }]);
}
