//! Remote atlases at their edges, against real servers on loopback (moto for S3,
//! fake-gcs-server, nginx): a presigned URL's credentials never reach an output, a log
//! line or a report; an interrupted publish leaves no multipart upload; `gs://` publishes
//! work on the emulator; the disk cache tells endpoints apart; refusals and bad
//! credentials say what is wrong; `verify --cache` tells a partial cache from a broken one.

#![allow(clippy::unwrap_used)] // Test helpers fail loudly by design.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use tessera::core::Atlas;
use tessera::core::format::atlas::RemoteOptions;
use tessera_tests::{Azurite, FakeGcs, Moto, Nginx};

fn tessera(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tessera"));
    c.args(args);
    c
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A baked atlas, once per test process: `--generate WxH` with `codec`.
fn baked(name: &str, size: &str, codec: &str) -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    let dir = DIR.get_or_init(|| tempfile::tempdir().unwrap().keep());
    static BAKING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one_at_a_time = BAKING.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let path = dir.join(format!("{name}.tsa"));
    if !path.exists() {
        let o = tessera(&["bake", "--generate", size, "--codec", codec, "-o", s(&path)]).output().unwrap();
        assert!(o.status.success(), "{}", text(&o));
    }
    path
}

/// An atlas of several 16 MiB upload parts (raw tiles do not compress).
fn big_atlas() -> PathBuf {
    static BIG: OnceLock<PathBuf> = OnceLock::new();
    BIG.get_or_init(|| {
        let p = baked("big", "4096x4096", "raw");
        assert!(std::fs::metadata(&p).unwrap().len() > 3 * (16 << 20), "the big atlas must take 4+ parts");
        p
    })
    .clone()
}

/// Runs boto3 against `moto` with `script` (its `s3` client made first); its output.
fn boto3(moto: &Moto, script: &str, args: &[&str]) -> String {
    let full = format!(
        "import boto3, sys\ns = boto3.client('s3', endpoint_url=sys.argv[1], aws_access_key_id='testing', \
         aws_secret_access_key='testing', region_name='us-east-1')\n{script}"
    );
    let o = Command::new("python3").args(["-c", &full, &moto.endpoint()]).args(args).output().unwrap();
    assert!(o.status.success(), "boto3: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).unwrap()
}

/// The unfinished multipart uploads in `bucket`, as "key id" lines.
fn uploads(moto: &Moto, bucket: &str) -> Vec<String> {
    let script = "for u in s.list_multipart_uploads(Bucket=sys.argv[2]).get('Uploads', []):\n    \
                  print(u['Key'], u['UploadId'])";
    boto3(moto, script, &[bucket]).lines().map(str::to_owned).collect()
}

/// The environment that points the CLI at `moto`.
fn with_moto(c: &mut Command, moto: &Moto) {
    for (k, v) in moto.settings() {
        c.env(k.to_ascii_uppercase(), v);
    }
}

/// A capture of a presigned URL whose server is gone, and one whose server dies midway:
/// neither the signature nor the credential is in any line they print or log, nor in
/// `stats.json`; the URL is said once per line.
#[test]
fn a_failing_capture_never_shows_the_presigned_credentials() {
    let atlas = baked("wide", "8192x4096", "lz4");
    let moto = Moto::start();
    moto.put("textures", "wide.tsa", &atlas);
    let url = moto.presign("textures", "wide.tsa", 3600);
    let query = |name: &str| {
        let v = url.split(['?', '&']).find_map(|p| p.strip_prefix(&format!("{name}="))).unwrap();
        v.to_owned()
    };
    let (signature, credential) = (query("X-Amz-Signature"), query("X-Amz-Credential"));
    let decoded = credential.replace("%2F", "/");
    let secrets = [signature.as_str(), credential.as_str(), decoded.as_str()];
    let assert_clean = |what: &str, out: &str| {
        for secret in secrets {
            assert!(!out.contains(secret), "{what} shows {secret}:\n{out}");
        }
    };
    let out = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let capture = |frames: &str| {
        let mut c = tessera(&["capture", "--atlas", &url, "--camera", "flyover", "--size", "160x90"]);
        c.args(["--frames", frames, "--out", s(out.path())])
            .env("TESSERA_DISK_CACHE_DIR", cache.path())
            .env("XDG_RUNTIME_DIR", out.path());
        c
    };
    // The server dies once tiles are coming in: later reads fail (WARN lines).
    let mut child = capture("150").stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let start = Instant::now();
    let cached = || walk(cache.path()).len();
    while cached() < 12 {
        assert!(start.elapsed() < Duration::from_secs(120), "the capture fetched too little");
        assert!(child.try_wait().unwrap().is_none(), "the capture ended before its server died");
        std::thread::sleep(Duration::from_millis(5));
    }
    drop(moto);
    let o = child.wait_with_output().unwrap();
    let all = text(&o);
    assert!(all.contains("WARN") && all.contains("127.0.0.1"), "no warning of the failed reads:\n{all}");
    assert_clean("the capture whose server died", &all);
    let stats = std::fs::read_to_string(out.path().join("stats.json")).unwrap();
    assert_clean("stats.json", &stats);
    let json: serde_json::Value = serde_json::from_str(&stats).unwrap();
    let shown = json["atlas"].as_str().unwrap();
    assert!(shown.contains("wide.tsa?") && shown.contains("X-Amz-Signature=REDACTED"), "{shown}");
    // The server is gone from the start: one error line, the URL in it once.
    let o = capture("2").env("TESSERA_DISK_CACHE_MIB", "0").output().unwrap();
    let all = text(&o);
    assert!(!o.status.success(), "{all}");
    assert_clean("the capture error", &all);
    let error = all.lines().find(|l| l.contains("error")).unwrap();
    assert_eq!(error.matches("wide.tsa").count(), 1, "{error}");
}

/// Every file below `root`.
fn walk(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(root).into_iter().flatten().flatten() {
        if e.file_type().unwrap().is_dir() {
            out.extend(walk(&e.path()));
        } else {
            out.push(e.path());
        }
    }
    out
}

/// SIGINT once the first part is on the server: the upload is aborted, nothing is left
/// at the key. An unfinished upload a killed run left is aborted by the next publish.
#[test]
fn an_interrupted_publish_leaves_no_multipart_upload() {
    use tessera::core::format::atlas::publish::publish;
    let atlas = big_atlas();
    let moto = Moto::start();
    boto3(&moto, "s.create_bucket(Bucket='pub')", &[]);
    // Watches for the first uploaded part, then says so.
    let watch = "import time\nprint('ready', flush=True)\nwhile True:\n    \
                 for u in s.list_multipart_uploads(Bucket='pub').get('Uploads', []):\n        \
                 if s.list_parts(Bucket='pub', Key=u['Key'], UploadId=u['UploadId']).get('Parts'):\n            \
                 print('part', flush=True); sys.exit(0)\n    time.sleep(0.01)";
    let full = format!(
        "import boto3, sys\ns = boto3.client('s3', endpoint_url=sys.argv[1], aws_access_key_id='testing', \
         aws_secret_access_key='testing', region_name='us-east-1')\n{watch}"
    );
    let mut watcher =
        Command::new("python3").args(["-c", &full, &moto.endpoint()]).stdout(Stdio::piped()).spawn().unwrap();
    let mut said = BufReader::new(watcher.stdout.take().unwrap()).lines();
    assert_eq!(said.next().unwrap().unwrap(), "ready");
    let mut c = tessera(&["publish", s(&atlas), "s3://pub/big.tsa"]);
    with_moto(&mut c, &moto);
    let child = c.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    assert_eq!(said.next().unwrap().unwrap(), "part");
    let signalled = Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
    assert!(signalled.success());
    let o = child.wait_with_output().unwrap();
    let _ = watcher.wait();
    let all = text(&o);
    assert_eq!(o.status.code(), Some(130), "{all}");
    assert!(all.contains("aborted 1 unfinished upload"), "{all}");
    assert_eq!(uploads(&moto, "pub"), Vec::<String>::new(), "{all}");
    let head = "try:\n    s.head_object(Bucket='pub', Key='big.tsa'); print('there')\nexcept Exception:\n    print('none')";
    assert_eq!(boto3(&moto, head, &[]).trim(), "none");

    // A run killed outright (nothing could abort) left an upload: the next one aborts it.
    // (A small atlas: moto copies the whole object for every range the check reads.)
    boto3(&moto, "s.create_multipart_upload(Bucket='pub', Key='big.tsa')", &[]);
    assert_eq!(uploads(&moto, "pub").len(), 1);
    let small = baked("small", "1024x512", "lz4");
    let r = publish(&small, "s3://pub/big.tsa", false, &moto.settings(), &tessera::core::NoProgress).unwrap();
    assert_eq!(r.uploaded.len(), 1);
    assert_eq!(uploads(&moto, "pub"), Vec::<String>::new());
}

/// Records each step of a progress.
#[derive(Default)]
struct Parts(std::sync::Mutex<Vec<u64>>);

impl tessera::core::Progress for Parts {
    fn set_length(&self, _: u64) {}
    fn inc(&self, n: u64) {
        self.0.lock().unwrap().push(n);
    }
    fn set_message(&self, _: &str) {}
}

/// `gs://` publishing against fake-gcs-server (its XML API takes no unsigned uploads)
/// and `az://` against Azurite: a small atlas and one of several chunks, whose progress
/// counts chunks as the server acknowledges them; a missing bucket is named as such.
#[test]
fn gcs_and_azure_publish_work_on_the_emulators() {
    use tessera::core::format::atlas::publish::publish;
    let gcs = FakeGcs::start();
    let small = baked("small", "1024x512", "lz4");
    gcs.put("textures", "README", &small);
    let settings = gcs.settings();
    let none = tessera::core::NoProgress;
    let opts = RemoteOptions { s3: settings.clone(), ..RemoteOptions::without_disk_cache() };
    for (local, url) in
        [(small.clone(), "gs://textures/a/small.tsa"), (big_atlas(), "gs://textures/a/big.tsa")]
    {
        let progress = Parts::default();
        let r = publish(&local, url, false, &settings, &progress).unwrap_or_else(|e| panic!("{url}: {e}"));
        assert_eq!(r.uploaded.len(), 1, "{r:?}");
        let len = std::fs::metadata(&local).unwrap().len();
        let there = Atlas::open_with(url, &opts).unwrap();
        assert_eq!(there.file_size(), len);
        let steps = progress.0.lock().unwrap().clone();
        assert_eq!(steps.iter().sum::<u64>(), len, "{steps:?}");
        let whole = steps.iter().filter(|&&n| n == 16 << 20).count() as u64;
        assert_eq!(whole, len / (16 << 20), "one step per acknowledged chunk: {steps:?}");
    }
    let azure = Azurite::start();
    azure.create_container("textures");
    let settings = azure.settings();
    let opts = RemoteOptions { s3: settings.clone(), ..RemoteOptions::without_disk_cache() };
    for (local, url) in
        [(small.clone(), "az://textures/a/small.tsa"), (big_atlas(), "az://textures/a/big.tsa")]
    {
        let progress = Parts::default();
        let r = publish(&local, url, false, &settings, &progress).unwrap_or_else(|e| panic!("{url}: {e}"));
        assert_eq!(r.uploaded.len(), 1, "{r:?}");
        let len = std::fs::metadata(&local).unwrap().len();
        assert_eq!(Atlas::open_with(url, &opts).unwrap().file_size(), len);
        assert_eq!(progress.0.lock().unwrap().iter().sum::<u64>(), len);
    }
    let opts = RemoteOptions { s3: gcs.settings(), ..RemoteOptions::without_disk_cache() };
    let settings = gcs.settings();
    let e = Atlas::open_with("gs://no-such-bucket/a.tsa", &opts).unwrap_err().to_string();
    assert!(e.contains("bucket does not exist"), "{e}");
    let e = publish(&small, "gs://no-such-bucket/a.tsa", false, &settings, &none).unwrap_err().to_string();
    assert!(e.contains("no-such-bucket does not exist"), "{e}");
}

/// The same `s3://` URL on two servers is two objects in the disk cache: a warm cache of
/// one never answers for the other, nor for a mistyped endpoint.
#[test]
fn the_disk_cache_tells_endpoints_apart() {
    let (one, two) = (Moto::start(), Moto::start());
    let (a, b) = (baked("small", "1024x512", "lz4"), baked("other", "512x512", "lz4"));
    one.put("textures", "x.tsa", &a);
    two.put("textures", "x.tsa", &b);
    let cache = tempfile::tempdir().unwrap();
    let at = |settings: Vec<(String, String)>| RemoteOptions {
        s3: settings,
        ..RemoteOptions::with_disk_cache(cache.path(), 64)
    };
    let warm = Atlas::open_with("s3://textures/x.tsa", &at(one.settings())).unwrap();
    let tiles: Vec<_> = warm.layers()[0].layout.tiles(0).collect();
    assert!(warm.read_tiles(&tiles, &|_| true).iter().all(Result::is_ok));
    drop(warm);
    let other = Atlas::open_with("s3://textures/x.tsa", &at(two.settings())).unwrap();
    assert_eq!(other.layers(), Atlas::open(&b).unwrap().layers());
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let typo: Vec<_> = one
        .settings()
        .into_iter()
        .map(|(k, v)| if k == "aws_endpoint" { (k, format!("http://127.0.0.1:{port}")) } else { (k, v) })
        .collect();
    let e = Atlas::open_with("s3://textures/x.tsa", &at(typo)).unwrap_err().to_string();
    assert!(e.contains("connection refused"), "{e}");
    // The right endpoint still finds its cache with the server down.
    let settings = one.settings();
    drop(one);
    let offline = Atlas::open_with("s3://textures/x.tsa", &at(settings)).unwrap();
    assert!(offline.network_stats().unwrap().offline);
}

/// A refused presigned URL quotes the server and says that such URLs expire (not which
/// environment credentials to set); a bad Azure key and a bad GCS service-account file
/// are one line naming the variable or file.
#[test]
fn refusals_and_bad_credentials_say_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let expired = "'<Error><Code>AccessDenied</Code><Message>Request has expired</Message></Error>'";
    let server = Nginx::serve(dir.path(), &format!("location / {{ return 403 {expired}; }}"));
    let none = RemoteOptions::without_disk_cache();
    let signed = format!("{}?X-Amz-Credential=AKIAEXAMPLE%2F1&X-Amz-Signature=f00d", server.url("a.tsa"));
    let e = Atlas::open_with(&signed, &none).unwrap_err().to_string();
    assert!(e.contains("Request has expired") && e.contains("presigned"), "{e}");
    assert!(!e.contains("AKIAEXAMPLE") && !e.contains("f00d") && !e.contains("metadata"), "{e}");
    let e = Atlas::open_with(server.url("a.tsa"), &none).unwrap_err().to_string();
    assert!(e.contains("403") && !e.contains("AWS_") && !e.contains("metadata"), "{e}");

    let opts = |s: &[(&str, &str)]| RemoteOptions {
        s3: s.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect(),
        ..RemoteOptions::without_disk_cache()
    };
    let e = Atlas::open_with(
        "az://c/a.tsa",
        &opts(&[("azure_storage_account_name", "acct"), ("azure_storage_account_key", "not base64!")]),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("azure_storage_account_key is not base64"), "{e}");
    let key = dir.path().join("key.json");
    std::fs::write(&key, r#"{"type": "authorized_user"}"#).unwrap();
    let e = Atlas::open_with("gs://b/a.tsa", &opts(&[("google_service_account", s(&key))]))
        .unwrap_err()
        .to_string();
    assert!(e.contains(s(&key)) && e.contains("not a service-account key"), "{e}");
    let missing = dir.path().join("missing.json");
    let e = Atlas::open_with("gs://b/a.tsa", &opts(&[("google_service_account", s(&missing))]))
        .unwrap_err()
        .to_string();
    assert!(e.contains(s(&missing)) && e.contains("No such file") && !e.contains('\n'), "{e}");
}

/// `verify --cache` of a partly filled cache passes on what it holds; a damaged entry
/// fails it.
#[test]
fn verify_cache_tells_a_partial_cache_from_a_broken_one() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(baked("small", "1024x512", "lz4"), dir.path().join("p.tsa")).unwrap();
    let server = Nginx::serve(dir.path(), "");
    let url = server.url("p.tsa");
    let cache = tempfile::tempdir().unwrap();
    let a = Atlas::open_with(&url, &RemoteOptions::with_disk_cache(cache.path(), 64)).unwrap();
    let five: Vec<_> = a.layers()[0].layout.tiles(0).take(5).collect();
    assert!(a.read_tiles(&five, &|_| true).iter().all(Result::is_ok));
    let total = a.tile_count();
    drop(a);
    let verify = || {
        let o = tessera(&["verify", "--cache", &url])
            .env("TESSERA_DISK_CACHE_DIR", cache.path())
            .output()
            .unwrap();
        (o.status.success(), text(&o))
    };
    let (ok, said) = verify();
    assert!(ok, "{said}");
    assert!(said.contains("are not in it") && said.contains(&format!(" of {total} are not")), "{said}");
    // Damage one cached blob: now it fails.
    let offset = Atlas::open(dir.path().join("p.tsa")).unwrap().entry(five[0]).unwrap().offset;
    let name = format!("{offset:016x}");
    let blob = walk(cache.path()).into_iter().find(|p| p.file_name().is_some_and(|n| *n == *name)).unwrap();
    let mut bytes = std::fs::read(&blob).unwrap();
    bytes[0] ^= 0xFF;
    std::fs::write(&blob, bytes).unwrap();
    let (ok, said) = verify();
    assert!(!ok && said.contains("damaged"), "{said}");
}
