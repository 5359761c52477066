//! The `tessera` binary against inputs, arguments and signals that must never crash it,
//! hang it or destroy data: a bake onto its own input, cut or vast images, a killed bake,
//! and numbers out of range. Every bad input is made here.

#![allow(clippy::unwrap_used)] // Test helpers fail loudly by design.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn tessera(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tessera")).args(args).output().expect("run tessera")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Asserts a clean failure: non-zero exit, one error line naming `name` and saying `what`, no panic.
fn assert_clean_failure(o: &Output, name: &str, what: &str) {
    let err = stderr(o);
    assert!(!o.status.success(), "expected failure, got success: {err}");
    assert!(!err.contains("panicked"), "panic: {err}");
    let lines: Vec<_> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "want one error line, got: {err}");
    assert!(lines[0].contains(name), "error does not name {name}: {err}");
    assert!(lines[0].to_lowercase().contains(what), "error does not say '{what}': {err}");
}

/// Asserts that clap refused an argument: exit 2, the value named, no panic.
fn assert_refused(o: &Output, value: &str, what: &str) {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(2), "expected a refused argument: {err}");
    assert!(!err.contains("panicked"), "panic: {err}");
    assert!(err.contains(value) && err.contains(what), "error does not name '{value}' / '{what}': {err}");
}

/// A noisy RGB image, so that its encodings are not trivially small.
fn noisy(w: u32, h: u32) -> image::RgbImage {
    let mut x = 0x9e37_79b9u32;
    image::RgbImage::from_fn(w, h, |_, _| {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        image::Rgb([x as u8, (x >> 8) as u8, (x >> 16) as u8])
    })
}

fn temp_files(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp"))
        .collect()
}

#[test]
fn a_bake_never_writes_over_its_input() {
    let dir = tempfile::tempdir().unwrap();
    let png = dir.path().join("x.png");
    let jpg = dir.path().join("y.jpg");
    noisy(96, 64).save(&png).unwrap();
    noisy(96, 64).save(&jpg).unwrap();
    let (png_bytes, jpg_bytes) = (std::fs::read(&png).unwrap(), std::fs::read(&jpg).unwrap());
    assert_clean_failure(&tessera(&["bake", s(&png), "-o", s(&png)]), "x.png", "refusing");
    assert_clean_failure(&tessera(&["bake", s(&jpg), "-o", s(&jpg)]), "y.jpg", "refusing");
    // The same file under another name: a path through another folder, a hard link, a symlink.
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    let roundabout = dir.path().join("sub/../x.png");
    assert_clean_failure(&tessera(&["bake", s(&jpg), s(&png), "-o", s(&roundabout)]), "x.png", "refusing");
    let hard = dir.path().join("hard.tsa");
    std::fs::hard_link(&png, &hard).unwrap();
    assert_clean_failure(&tessera(&["bake", s(&png), "-o", s(&hard)]), "hard.tsa", "same file");
    let sym = dir.path().join("sym.tsa");
    std::os::unix::fs::symlink(&jpg, &sym).unwrap();
    assert_clean_failure(&tessera(&["bake", s(&jpg), "-o", s(&sym)]), "sym.tsa", "same file");
    // The globe image of a scene bake.
    assert_clean_failure(&tessera(&["bake", "--globe", s(&jpg), "-o", s(&jpg)]), "y.jpg", "refusing");
    // A folder as the output.
    assert_clean_failure(
        &tessera(&["bake", s(&png), "-o", s(&dir.path().join("sub"))]),
        "sub",
        "is a directory",
    );
    assert_eq!(std::fs::read(&png).unwrap(), png_bytes, "the PNG was changed");
    assert_eq!(std::fs::read(&jpg).unwrap(), jpg_bytes, "the JPEG was changed");
    assert!(temp_files(dir.path()).is_empty());
    // A distinct output still bakes.
    let o = tessera(&["bake", s(&png), "-o", s(&dir.path().join("x.tsa"))]);
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn cut_images_are_errors_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let jpg = dir.path().join("photo.jpg");
    let mut out = std::io::BufWriter::new(std::fs::File::create(&jpg).unwrap());
    image::codecs::jpeg::JpegEncoder::new_with_quality(&mut out, 90).encode_image(&noisy(512, 384)).unwrap();
    drop(out);
    let png = dir.path().join("scan.png");
    noisy(512, 384).save(&png).unwrap();
    for (whole, cut_name) in [(&jpg, "half.jpg"), (&png, "half.png")] {
        let bytes = std::fs::read(whole).unwrap();
        let cut = dir.path().join(cut_name);
        std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
        let out = dir.path().join("cut.tsa");
        assert_clean_failure(&tessera(&["bake", s(&cut), "-o", s(&out)]), cut_name, "");
        let err = stderr(&tessera(&["bake", s(&cut), "-o", s(&out)]));
        assert!(err.contains("truncated") || err.contains("corrupt"), "{err}");
        assert!(!out.exists(), "a cut image baked into an atlas");
    }
}

/// A PNG signature, an IHDR of `w × h` RGBA8 (Adam7-interlaced when `adam7`), an empty
/// IDAT and IEND: enough for a decoder to say how large the image is, in 57 bytes.
fn png_header(path: &Path, w: u32, h: u32, adam7: bool) {
    let chunk = |b: &mut Vec<u8>, kind: &[u8], data: &[u8]| {
        b.extend_from_slice(&(data.len() as u32).to_be_bytes());
        let start = b.len();
        b.extend_from_slice(kind);
        b.extend_from_slice(data);
        let crc = crc32fast::hash(&b[start..]);
        b.extend_from_slice(&crc.to_be_bytes());
    };
    let mut b = vec![0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a];
    let mut ihdr = w.to_be_bytes().to_vec();
    ihdr.extend_from_slice(&h.to_be_bytes());
    ihdr.extend_from_slice(&[8, 6, 0, 0, u8::from(adam7)]);
    chunk(&mut b, b"IHDR", &ihdr);
    chunk(&mut b, b"IDAT", &[]);
    chunk(&mut b, b"IEND", &[]);
    std::fs::write(path, b).unwrap();
}

#[test]
fn max_memory_refuses_vast_images_before_decoding() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("vast.tsa");
    // Decoded whole: an interlaced PNG, and a JPEG (SOI, then a frame header of 20000²
    // with three components).
    let png = dir.path().join("vast.png");
    png_header(&png, 20000, 20000, true);
    let jpg = dir.path().join("vast.jpg");
    let sof = [0xFF, 0xC0, 0, 17, 8, 0x4E, 0x20, 0x4E, 0x20, 3, 1, 0x22, 0, 2, 0x11, 1, 3, 0x11, 1];
    std::fs::write(&jpg, [&[0xFF, 0xD8][..], &sof, &[0xFF, 0xD9]].concat()).unwrap();
    for (image, name) in [(&png, "vast.png"), (&jpg, "vast.jpg")] {
        let o = tessera(&["bake", s(image), "-o", s(&out), "--max-memory", "256MiB"]);
        assert_clean_failure(&o, name, "limit of 256 mib");
        assert!(stderr(&o).contains("20000x20000") && stderr(&o).contains("--max-memory"), "{}", stderr(&o));
        // With room enough the check passes, and the (missing) pixel data is what fails.
        let o = tessera(&["bake", s(image), "-o", s(&out), "--max-memory", "8GiB"]);
        assert!(!o.status.success());
        assert!(!stderr(&o).contains("memory"), "8 GiB is enough: {}", stderr(&o));
    }
    // A PNG read row by row needs a few hundred of its rows, well within the limit.
    png_header(&png, 20000, 20000, false);
    let o = tessera(&["bake", s(&png), "-o", s(&out), "--max-memory", "256MiB"]);
    assert!(!o.status.success());
    assert!(!stderr(&o).contains("memory") && stderr(&o).contains("corrupt"), "{}", stderr(&o));
    assert_refused(&tessera(&["bake", s(&png), "-o", s(&out), "--max-memory", "lots"]), "lots", "size");
}

/// How many spilled mip levels (`.tessera-level-*`) process `pid` holds open: their
/// names are deleted as soon as they are open, so only `/proc` shows them.
fn open_scratch_levels(pid: u32) -> usize {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else { return 0 };
    fds.flatten()
        .filter_map(|fd| std::fs::read_link(fd.path()).ok())
        .filter(|target| target.to_string_lossy().contains(".tessera-level-"))
        .count()
}

/// Starts a bake of `side`² that spills a mip level to disk, and waits until its atlas's
/// temporary file exists and its spilled level is open.
fn start_big_bake(dir: &Path) -> std::process::Child {
    let out = dir.join("big.tsa");
    let child = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(["bake", "--generate", "16384x16384", "-o", s(&out)])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while temp_files(dir).is_empty() || open_scratch_levels(child.id()) == 0 {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no temporary files after 60 s: {:?}, {} spilled level(s) open",
            temp_files(dir),
            open_scratch_levels(child.id())
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

#[test]
fn a_signalled_bake_leaves_no_temporary_file() {
    for (signal, code) in [("TERM", 143), ("INT", 130), ("HUP", 129), ("QUIT", 131)] {
        let dir = tempfile::tempdir().unwrap();
        let child = start_big_bake(dir.path());
        // The spilled level has no name left to delete, whatever happens next.
        assert_eq!(temp_files(dir.path()).len(), 1, "{:?}", temp_files(dir.path()));
        let sent =
            Command::new("kill").args([&format!("-{signal}"), &child.id().to_string()]).status().unwrap();
        assert!(sent.success());
        let o = child.wait_with_output().unwrap();
        assert_eq!(o.status.code(), Some(code), "SIG{signal}: {}", stderr(&o));
        assert!(temp_files(dir.path()).is_empty(), "SIG{signal} left {:?}", temp_files(dir.path()));
        assert!(!dir.path().join("big.tsa").exists());
    }
}

#[test]
fn the_next_bake_sweeps_what_a_killed_one_left() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = start_big_bake(dir.path());
    child.kill().unwrap(); // SIGKILL: nothing can clean up.
    child.wait().unwrap();
    // Only the atlas's temporary file: the spilled level's name was deleted when it opened.
    let left = temp_files(dir.path());
    assert_eq!(left.len(), 1, "{left:?}");
    assert!(left[0].starts_with(".big.tsa."), "{left:?}");
    let out = dir.path().join("big.tsa");
    let o = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(["bake", "--generate", "256x256", "-o", s(&out)])
        .env("RUST_LOG", "info")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(temp_files(dir.path()).is_empty(), "left: {:?}", temp_files(dir.path()));
    // Log lines name what was removed, without colour codes when stderr is not a terminal.
    let err = stderr(&o);
    assert!(err.contains("removed") && err.contains(&left[0]), "{err}");
    assert!(!err.contains('\u{1b}'), "ANSI codes in a piped log: {err:?}");
}

/// Runs `tessera args` with stdin closed; fails the test if it runs 20 s (a hang).
fn tessera_within(args: &[&str]) -> (Output, Duration) {
    let start = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > Duration::from_secs(20) {
            child.kill().unwrap();
            let o = child.wait_with_output().unwrap();
            panic!("tessera {args:?} hung for 20 s; stderr: {}", stderr(&o));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    (child.wait_with_output().unwrap(), start.elapsed())
}

/// Asserts that `tessera args` failed cleanly at once, naming `name` and saying `what`.
fn assert_refused_at_once(args: &[&str], name: &str, what: &str) {
    let (o, took) = tessera_within(args);
    println!("tessera {args:?}: refused in {:.3} s", took.as_secs_f64());
    assert_clean_failure(&o, name, what);
    // Well under a second when idle; generous for a loaded CI machine.
    assert!(took < Duration::from_secs(5), "took {took:?}");
}

/// A FIFO made with `mkfifo`.
fn mkfifo(path: &Path) {
    assert!(Command::new("mkfifo").arg(path).status().unwrap().success(), "mkfifo {}", path.display());
}

/// The identity of a device node: what it is, its device number and its inode.
fn node(path: &str) -> (bool, u64, u64) {
    use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _};
    let m = std::fs::symlink_metadata(path).unwrap();
    (m.file_type().is_char_device(), m.rdev(), m.ino())
}

#[test]
fn inputs_that_are_not_regular_files_are_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("o.tsa");
    let fifo = dir.path().join("pipe.png");
    mkfifo(&fifo);
    let link = dir.path().join("zero.png");
    std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
    // Opened, the FIFO would block for a writer and /dev/zero would read without end.
    assert_refused_at_once(&["bake", s(&fifo), "-o", s(&out)], "pipe.png", "is a fifo (named pipe)");
    assert_refused_at_once(&["bake", "/dev/zero", "-o", s(&out)], "/dev/zero", "is a character device");
    assert_refused_at_once(&["bake", "/dev/null", "-o", s(&out)], "/dev/null", "is a character device");
    assert_refused_at_once(&["bake", s(&link), "-o", s(&out)], "zero.png", "is a character device");
    assert_refused_at_once(&["bake", s(dir.path()), "-o", s(&out)], s(dir.path()), "is a directory");
    assert_refused_at_once(&["bake", "--globe", s(&fifo), "-o", s(&out)], "pipe.png", "fifo");
    assert_refused_at_once(&["bake", "--gltf", "/dev/zero", "-o", s(&out)], "/dev/zero", "character device");
    assert!(!out.exists());
    assert!(temp_files(dir.path()).is_empty(), "{:?}", temp_files(dir.path()));
}

#[test]
fn outputs_that_are_not_regular_files_are_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    // An input whose header reads but whose body does not: were an output not refused
    // first, the bake would fail at decoding, before replacing anything.
    let png = dir.path().join("x.png");
    noisy(256, 256).save(&png).unwrap();
    let bytes = std::fs::read(&png).unwrap();
    let cut = dir.path().join("cut.png");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    let fifo = dir.path().join("pipe.tsa");
    mkfifo(&fifo);
    assert_refused_at_once(&["bake", s(&cut), "-o", s(&fifo)], "pipe.tsa", "it is a fifo (named pipe)");
    assert!(std::os::unix::fs::FileTypeExt::is_fifo(&std::fs::symlink_metadata(&fifo).unwrap().file_type()));
    let null = node("/dev/null");
    assert!(null.0, "/dev/null is not a character device here");
    assert_refused_at_once(&["bake", s(&cut), "-o", "/dev/null"], "/dev/null", "it is a character device");
    assert_eq!(node("/dev/null"), null, "/dev/null was replaced");
    // A stamp path that is not a file is refused as well.
    let stamp_fifo = dir.path().join("s.tsa.bake");
    mkfifo(&stamp_fifo);
    let atlas = dir.path().join("s.tsa");
    assert_refused_at_once(&["bake", "--generate", "64x64", "-o", s(&atlas)], "s.tsa.bake", "fifo");
    assert!(!atlas.exists());
    assert!(temp_files(dir.path()).is_empty(), "{:?}", temp_files(dir.path()));
}

#[test]
fn numbers_out_of_range_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let atlas = dir.path().join("a.tsa");
    let o = tessera(&["bake", "--generate", "256x256", "-o", s(&atlas)]);
    assert!(o.status.success(), "{}", stderr(&o));
    let a = s(&atlas);
    for cmd in [&["capture", "--atlas", a][..], &["bench", "--atlas", a], &["demo"]] {
        let run = |extra: &[&str]| tessera(&[cmd, extra].concat());
        assert_refused(&run(&["--mip-bias", "NaN"]), "NaN", "finite");
        assert_refused(&run(&["--mip-bias", "inf"]), "inf", "finite");
        assert_refused(&run(&["--target-frame-ms", "0"]), "'0'", "greater than 0");
        assert_refused(&run(&["--target-frame-ms", "NaN"]), "NaN", "greater than 0");
        assert_refused(&run(&["--loader-threads", "5000"]), "5000", "at most 256");
        assert_refused(&run(&["--size", "0x720"]), "0x720", "from 1 to 16384");
    }
    assert_refused(
        &tessera(&["bake", "--generate", "64x64", "-o", a, "--uastc-rdo", "NaN"]),
        "NaN",
        "finite",
    );
    assert_refused(&tessera(&["bake", "--generate", "64x64", "-o", a, "--uastc-rdo=-1"]), "-1", "negative");
}

#[test]
fn a_folder_given_as_an_atlas_says_so_once() {
    let dir = tempfile::tempdir().unwrap();
    let d = s(dir.path());
    assert_clean_failure(&tessera(&["inspect", d]), d, "is a directory");
    assert_clean_failure(&tessera(&["verify", d]), d, "is a directory");
    assert_clean_failure(&tessera(&["capture", "--atlas", d]), d, "is a directory");
    assert_clean_failure(&tessera(&["bench", "--atlas", d]), d, "is a directory");
    assert_clean_failure(&tessera(&["bake", d, "-o", s(&dir.path().join("o.tsa"))]), d, "is a directory");
    // An OS error is said once, not once per layer of context.
    let file = dir.path().join("file");
    std::fs::write(&file, b"x").unwrap();
    let inside = file.join("out.tsa");
    let o = tessera(&["bake", "--generate", "64x64", "-o", s(&inside)]);
    assert_clean_failure(&o, "out.tsa", "not a directory");
    assert_eq!(stderr(&o).matches("os error").count(), 1, "{}", stderr(&o));
}

/// A capture of a remote atlas killed (SIGKILL) while it fills the disk cache leaves no
/// entry that would be served wrong: every entry left holds exactly the blob the atlas
/// index describes (length and CRC-32), what a killed write left behind is deleted when
/// the cache opens again, and that cache serves the tiles.
#[test]
fn a_killed_capture_leaves_a_disk_cache_whose_entries_all_check() {
    use tessera::core::Atlas;
    use tessera::core::format::atlas::RemoteOptions;
    use tessera::core::format::atlas::disk_cache::DiskCache;
    let dir = tempfile::tempdir().unwrap();
    let atlas = dir.path().join("a.tsa");
    let o = tessera(&["bake", "--generate", "8192x4096", "--codec", "lz4", "-o", s(&atlas)]);
    assert!(o.status.success(), "{}", stderr(&o));
    let server = tessera_tests::Nginx::serve(dir.path(), "");
    let url = server.url("a.tsa");
    let cache = tempfile::tempdir().unwrap();
    let runtime = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(["capture", "--atlas", &url, "--camera", "flyover", "--frames", "2000", "--size", "160x90"])
        .arg("--out")
        .arg(dir.path().join("out"))
        .env("TESSERA_DISK_CACHE_DIR", cache.path())
        .env("XDG_RUNTIME_DIR", runtime.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let entries = |root: &Path| -> Vec<std::path::PathBuf> {
        let mut out = Vec::new();
        for url_dir in std::fs::read_dir(root).into_iter().flatten().flatten() {
            for id_dir in std::fs::read_dir(url_dir.path()).into_iter().flatten().flatten() {
                out.extend(
                    std::fs::read_dir(id_dir.path()).into_iter().flatten().flatten().map(|e| e.path()),
                );
            }
        }
        out
    };
    let start = Instant::now();
    while entries(cache.path()).len() < 24 {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "the capture cached too little: {:?}",
            entries(cache.path())
        );
        assert!(child.try_wait().unwrap().is_none(), "the capture ended before it was killed");
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().unwrap();
    child.wait().unwrap();

    let local = Atlas::open(&atlas).unwrap();
    let mut blobs = std::collections::HashMap::new();
    for (li, layer) in local.layers().iter().enumerate() {
        for t in layer.layout.tiles(li as u16) {
            let e = local.entry(t).unwrap();
            blobs.insert(e.offset, (e.length, e.crc32));
        }
    }
    let mut checked = 0;
    for path in entries(cache.path()) {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let Ok(offset) = u64::from_str_radix(&name, 16) else { continue };
        let data = std::fs::read(&path).unwrap();
        let Some(&(len, crc)) = blobs.get(&offset) else {
            // An index page (format v2): it lies before every blob; the cache checked
            // it against the root directory's CRC when it served it.
            assert!(offset < blobs.keys().copied().min().unwrap(), "entry {name} is neither blob nor page");
            continue;
        };
        assert_eq!((data.len(), crc32fast::hash(&data)), (len as usize, crc), "entry {name} is torn");
        checked += 1;
    }
    assert!(checked >= 16, "{checked} entries");
    // Reopened: leftovers of the killed writes are gone, and the entries are served.
    let remote = Atlas::open_with(&url, &RemoteOptions::with_disk_cache(cache.path(), 1024)).unwrap();
    assert!(entries(cache.path()).iter().all(|p| !p.to_string_lossy().ends_with(".tmp")));
    let id = DiskCache::current_identity(cache.path(), &url).unwrap();
    assert!(id.contains(&local.file_size().to_string()), "{id}");
    for (li, layer) in local.layers().iter().enumerate() {
        for t in layer.layout.tiles(li as u16) {
            assert_eq!(remote.read_tile(t).unwrap(), local.read_tile(t).unwrap(), "{t}");
        }
    }
    let disk = remote.network_stats().unwrap().disk_cache.unwrap();
    assert!(disk.hits >= 16 && disk.rejected == 0, "{disk:?}");
}

/// `tessera inspect` and `verify` read atlases of both format versions from a URL like
/// from a file, and `verify` names a damaged tile served by the web server.
#[test]
fn inspect_and_verify_read_both_versions_from_a_url() {
    let dir = tempfile::tempdir().unwrap();
    for version in ["1", "2"] {
        let atlas = dir.path().join(format!("v{version}.tsa"));
        let o = tessera(&["bake", "--generate", "1000x600", "--format-version", version, "-o", s(&atlas)]);
        assert!(o.status.success(), "{}", stderr(&o));
    }
    let server = tessera_tests::Nginx::serve(dir.path(), "");
    let runtime = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_tessera"))
            .args(args)
            .env("TESSERA_DISK_CACHE_DIR", cache.path())
            .env("XDG_RUNTIME_DIR", runtime.path())
            .output()
            .unwrap()
    };
    for version in [1, 2] {
        let url = server.url(&format!("v{version}.tsa"));
        let o = run(&["inspect", &url, "--json"]);
        assert!(o.status.success(), "{}", stderr(&o));
        let json: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(json["version"], version, "{json}");
        assert_eq!(json["tiles"], 57, "{json}");
        let o = run(&["verify", &url]);
        assert!(o.status.success(), "{}{}", String::from_utf8_lossy(&o.stdout), stderr(&o));
        assert!(String::from_utf8_lossy(&o.stdout).contains("all 57 tiles good"));
    }
    // One flipped byte in a blob on the server: named, exit 1.
    let path = dir.path().join("v2.tsa");
    let e = tessera::core::Atlas::open(&path)
        .unwrap()
        .entry(tessera::core::format::tile::TileId::new(0, 0, 5, 1))
        .unwrap();
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[e.offset as usize + e.length as usize / 2] ^= 1;
    std::fs::write(dir.path().join("bad.tsa"), &bytes).unwrap();
    let o = run(&["verify", &server.url("bad.tsa")]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("layer 0 mip 0 x 5 y 1"),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
}
