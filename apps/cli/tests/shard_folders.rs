//! The `tessera` binary against hostile shard folders and split atlases (issue 41, hostile
//! cases 4 to 8): a FIFO in place of a part, stray part names with vast counts, a user's
//! file in `OUT.shards/`, parts linked out of the atlas' folder, and the staging folders
//! of shards killed while baking into `s3://`. Every case is built here.

#![allow(clippy::unwrap_used)] // Test helpers fail loudly by design.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Runs `tessera args` with `envs`, killed after 30 s: returns its output and whether it
/// finished in time.
fn run(args: &[&str], envs: &[(&str, &str)]) -> (Output, bool) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(args)
        .envs(envs.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let mut finished = true;
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > Duration::from_secs(30) {
            child.kill().unwrap();
            finished = false;
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    (child.wait_with_output().unwrap(), finished)
}

fn tessera(args: &[&str]) -> Output {
    let (o, finished) = run(args, &[]);
    assert!(finished, "tessera {args:?} hung (killed after 30 s)");
    o
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// A two-shard bake of a generated image at `dir/s.tsa`, merged as a split atlas.
fn split_atlas(dir: &Path) -> PathBuf {
    let out = dir.join("s.tsa");
    for i in 0..2 {
        let shard = format!("{i}/2");
        let o = tessera(&[
            "bake",
            "--generate",
            "600x400",
            "--tile-size",
            "64",
            "--shard",
            &shard,
            "-o",
            s(&out),
        ]);
        assert!(o.status.success(), "{}", text(&o));
    }
    let o = tessera(&["bake", "--generate", "600x400", "--tile-size", "64", "--merge", "-o", s(&out)]);
    assert!(o.status.success(), "{}", text(&o));
    out
}

fn part(out: &Path, i: u32) -> PathBuf {
    out.with_file_name(format!("{}.shards/{i}-of-2.part", out.file_name().unwrap().to_string_lossy()))
}

/// Asserts a prompt, clean failure whose text names `name` and says `what`, without a panic.
fn assert_refused(o: &Output, name: &str, what: &str) {
    let t = text(o);
    assert!(!o.status.success(), "expected a failure: {t}");
    assert!(!t.contains("panicked"), "panic: {t}");
    assert!(t.contains(name) && t.contains(what), "the error does not name {name} / say {what}: {t}");
}

#[test]
fn a_fifo_in_place_of_a_part_is_refused_at_once_everywhere() {
    let dir = tempfile::tempdir().unwrap();
    let out = split_atlas(dir.path());
    let p = part(&out, 1);
    std::fs::remove_file(&p).unwrap();
    assert!(Command::new("mkfifo").arg(&p).status().unwrap().success());
    let capture = dir.path().join("capture");
    let start = Instant::now();
    for args in [
        vec!["inspect", s(&out)],
        vec!["verify", s(&out)],
        vec!["capture", "--atlas", s(&out), "--frames", "2", "--size", "64x64", "--out", s(&capture)],
        vec!["bake", "--generate", "600x400", "--tile-size", "64", "--merge", "-o", s(&out)],
        vec!["bake", "--generate", "600x400", "--tile-size", "64", "--merge", "--one-file", "-o", s(&out)],
    ] {
        assert_refused(&tessera(&args), "1-of-2.part", "FIFO");
    }
    // --status lists it as damaged, by name, and says to rerun it.
    let o = tessera(&["bake", "-o", s(&out), "--status"]);
    let t = text(&o);
    assert!(!o.status.success() && t.contains("FIFO") && t.contains("--shard 1/2"), "{t}");
    assert!(start.elapsed() < Duration::from_secs(60), "took {:?}", start.elapsed());
    // An atlas that is itself a FIFO, too.
    let fifo = dir.path().join("pipe.tsa");
    assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    assert_refused(&tessera(&["inspect", s(&fifo)]), "pipe.tsa", "FIFO");
}

#[test]
fn stray_part_names_with_vast_counts_cost_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let out = split_atlas(dir.path());
    let shards = part(&out, 0).parent().unwrap().to_path_buf();
    for stray in ["0-of-4294967295.part", "0-of-50000000.part", "07-of-9.part", "3-of-3.part"] {
        std::fs::write(shards.join(stray), b"not a part").unwrap();
    }
    let o = tessera(&["bake", "-o", s(&out), "--status"]);
    let t = text(&o);
    assert!(o.status.success(), "the two parts are done: {t}");
    assert!(t.contains("ignored  4 file(s)") && t.len() < 2000, "{t}");
    // A real-looking part of a 65536-shard bake: its 65535 missing parts are one line.
    std::fs::write(shards.join("0-of-65536.part"), b"damaged").unwrap();
    let o = tessera(&["bake", "-o", s(&out), "--status"]);
    let t = text(&o);
    assert!(!o.status.success() && t.contains("1-65535/65536  missing  (65535 parts)"), "{t}");
    assert!(t.contains("--shard 0/65536 … --shard 65535/65536") && t.len() < 4000, "{} bytes: {t}", t.len());
    // The merge says the counts are mixed, in one line, without listing 65535 names.
    let o = tessera(&["bake", "--generate", "600x400", "--tile-size", "64", "--merge", "-o", s(&out)]);
    assert_refused(&o, "s.tsa.shards", "2 and 65536 shards are mixed");
    std::fs::remove_file(part(&out, 0)).unwrap();
    std::fs::remove_file(part(&out, 1)).unwrap();
    let o = tessera(&["bake", "--generate", "600x400", "--tile-size", "64", "--merge", "-o", s(&out)]);
    assert_refused(&o, "s.tsa.shards", "65535 of 65536 parts missing: 1-of-65536.part … 65535-of-65536.part");
    assert!(text(&o).len() < 1000, "{}", text(&o));
    // Counts past the cap are refused where they are given.
    let o = tessera(&["bake", "--generate", "64x64", "--shard", "0/4294967295", "-o", s(&out)]);
    assert!(!o.status.success() && text(&o).contains("65536"), "{}", text(&o));
}

#[test]
fn a_one_file_merge_deletes_only_what_the_bake_wrote() {
    let dir = tempfile::tempdir().unwrap();
    let out = split_atlas(dir.path());
    let shards = part(&out, 0).parent().unwrap().to_path_buf();
    let notes = shards.join("notes.txt");
    std::fs::write(&notes, b"the user's own file").unwrap();
    std::fs::write(shards.join(format!(".0-of-2.{}-spool.tmp", dead_pid())), b"a killed shard's").unwrap();
    let o = tessera(&[
        "bake",
        "--generate",
        "600x400",
        "--tile-size",
        "64",
        "--merge",
        "--one-file",
        "-o",
        s(&out),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("notes.txt"), "the merge says what it kept: {}", text(&o));
    assert_eq!(std::fs::read(&notes).unwrap(), b"the user's own file");
    let left: Vec<_> = std::fs::read_dir(&shards).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(left, ["notes.txt"], "parts and the dead shard's spool removed, nothing else");
    // Without a foreign file, the folder goes.
    let out2 = split_atlas(&dir.path().join("again").tap_mkdir());
    let o = tessera(&[
        "bake",
        "--generate",
        "600x400",
        "--tile-size",
        "64",
        "--merge",
        "--one-file",
        "-o",
        s(&out2),
    ]);
    assert!(o.status.success() && !part(&out2, 0).parent().unwrap().exists(), "{}", text(&o));
}

trait Mkdir {
    fn tap_mkdir(self) -> Self;
}

impl Mkdir for PathBuf {
    fn tap_mkdir(self) -> Self {
        std::fs::create_dir_all(&self).unwrap();
        self
    }
}

#[test]
fn parts_linked_out_of_the_atlas_folder_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let atlas_dir = dir.path().join("atlas").tap_mkdir();
    let out = split_atlas(&atlas_dir);
    // A file outside the folder, of a size the error must not show.
    let secret = dir.path().join("secret.bin");
    std::fs::write(&secret, vec![7u8; 12_345]).unwrap();
    let p = part(&out, 1);
    let kept = atlas_dir.join("kept.part");
    std::fs::rename(&p, &kept).unwrap();
    std::os::unix::fs::symlink(&secret, &p).unwrap();
    for args in [
        vec!["inspect", s(&out)],
        vec!["verify", s(&out)],
        vec!["bake", "--generate", "600x400", "--tile-size", "64", "--merge", "-o", s(&out)],
    ] {
        let o = tessera(&args);
        assert_refused(&o, "1-of-2.part", "symbolic link");
        assert!(!text(&o).contains("12345") && !text(&o).contains("secret"), "{}", text(&o));
    }
    // A link that stays inside the atlas' folder is followed.
    std::fs::remove_file(&p).unwrap();
    std::os::unix::fs::symlink("../kept.part", &p).unwrap();
    let o = tessera(&["verify", s(&out)]);
    assert!(o.status.success(), "{}", text(&o));
}

/// A process id that no live process has.
fn dead_pid() -> u32 {
    let mut child = Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    pid
}

/// The staging folders of shards baking into `s3://` in `scratch`.
fn stages(scratch: &Path) -> Vec<String> {
    std::fs::read_dir(scratch)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("tessera-shard-"))
        .collect()
}

/// An S3 setting that fails at upload: nothing listens on port 9 of loopback.
const NO_SERVER: [(&str, &str); 5] = [
    ("AWS_ENDPOINT", "http://127.0.0.1:9"),
    ("AWS_ALLOW_HTTP", "true"),
    ("AWS_ACCESS_KEY_ID", "test"),
    ("AWS_SECRET_ACCESS_KEY", "test"),
    ("AWS_REGION", "us-east-1"),
];

fn wait_for_stage(scratch: &Path, child: &mut std::process::Child) {
    let start = Instant::now();
    // The spool inside the staging folder, once tiles are being written.
    while !stages(scratch).iter().any(|st| {
        let shards = scratch.join(st).join("big.tsa.shards");
        std::fs::read_dir(shards).is_ok_and(|mut d| d.any(|e| e.is_ok()))
    }) {
        assert!(child.try_wait().unwrap().is_none(), "the shard ended before staging anything");
        assert!(start.elapsed() < Duration::from_secs(60), "no staging folder in {}", scratch.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn start_s3_shard(scratch: &Path) -> std::process::Child {
    start_shard(scratch, "16384x16384", "s3://bucket/big.tsa", &NO_SERVER)
}

fn start_shard(scratch: &Path, size: &str, url: &str, envs: &[(&str, &str)]) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(["bake", "--generate", size, "--codec", "lz4", "--shard", "0/2", "-o", url])
        .args(["--scratch-dir", s(scratch)])
        .envs(envs.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

#[test]
fn staging_folders_of_killed_s3_shards_are_removed() {
    let dir = tempfile::tempdir().unwrap();
    let scratch = dir.path();
    // SIGTERM: the handler removes the staging folder, spool included.
    let mut child = start_s3_shard(scratch);
    wait_for_stage(scratch, &mut child);
    assert!(Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap().success());
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(143), "{status:?}");
    assert!(stages(scratch).is_empty(), "left after SIGTERM: {:?}", stages(scratch));
    // SIGKILL cannot be caught: its folder stays until the next shard (or merge) runs.
    let mut child = start_s3_shard(scratch);
    wait_for_stage(scratch, &mut child);
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(stages(scratch).len(), 1, "the killed shard's staging folder");
    // A folder of a live process stays (this test's own pid stands for one).
    let live = scratch.join(format!("tessera-shard-{}-1-of-2.tmp", std::process::id()));
    std::fs::create_dir(&live).unwrap();
    let (o, finished) = run(
        &[
            "bake",
            "--generate",
            "64x64",
            "--shard",
            "1/2",
            "-o",
            "s3://bucket/big.tsa",
            "--scratch-dir",
            s(scratch),
        ],
        &NO_SERVER,
    );
    assert!(finished && !o.status.success(), "the upload cannot succeed: {}", text(&o));
    assert_eq!(stages(scratch), [live.file_name().unwrap().to_string_lossy()], "{}", text(&o));
    // The merge sweeps the scratch folder it is given, too.
    std::fs::remove_dir(&live).unwrap();
    let stale = scratch.join(format!("tessera-shard-{}-0-of-2.tmp", dead_pid()));
    std::fs::create_dir_all(stale.join("big.tsa.shards")).unwrap();
    std::fs::write(stale.join("big.tsa.shards/.0-of-2.1-spool.tmp"), vec![0u8; 1 << 20]).unwrap();
    let (o, finished) =
        run(&["bake", "--merge", "-o", "s3://bucket/big.tsa", "--scratch-dir", s(scratch)], &NO_SERVER);
    assert!(finished && !o.status.success(), "no server to list: {}", text(&o));
    assert!(!stale.exists(), "{}", text(&o));
}

/// Against a real S3 server (moto): a shard killed while baking into `s3://` leaves its
/// staging folder; rerunning the shards removes it, and they merge into an atlas that
/// verifies over S3.
#[test]
fn a_killed_s3_shard_leaks_nothing_once_the_farm_reruns_it() {
    let dir = tempfile::tempdir().unwrap();
    let scratch = dir.path().join("scratch").tap_mkdir();
    let moto = tessera_tests::Moto::start();
    let readme = dir.path().join("README");
    std::fs::write(&readme, b"the bucket").unwrap();
    moto.put("farm", "README", &readme);
    let endpoint = moto.endpoint();
    let envs = [
        ("AWS_ENDPOINT", endpoint.as_str()),
        ("AWS_ALLOW_HTTP", "true"),
        ("AWS_ACCESS_KEY_ID", "testing"),
        ("AWS_SECRET_ACCESS_KEY", "testing"),
        ("AWS_REGION", "us-east-1"),
    ];
    let url = "s3://farm/big.tsa";
    let mut child = start_shard(&scratch, "2048x2048", url, &envs);
    wait_for_stage(&scratch, &mut child);
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(stages(&scratch).len(), 1, "the killed shard's staging folder");
    for shard in ["0/2", "1/2"] {
        let args = [
            "bake",
            "--generate",
            "2048x2048",
            "--codec",
            "lz4",
            "--shard",
            shard,
            "-o",
            url,
            "--scratch-dir",
            s(&scratch),
        ];
        let (o, finished) = run(&args, &envs);
        assert!(finished && o.status.success(), "{}", text(&o));
    }
    assert!(stages(&scratch).is_empty(), "left: {:?}", stages(&scratch));
    let (o, finished) =
        run(&["bake", "--generate", "2048x2048", "--codec", "lz4", "--merge", "-o", url], &envs);
    assert!(finished && o.status.success(), "{}", text(&o));
    let (o, finished) = run(&["verify", url], &envs);
    assert!(finished && o.status.success(), "{}", text(&o));
}
