//! Whole files put into object storage so that a failed or interrupted upload leaves
//! nothing behind, with progress counted in bytes the server has acknowledged.
//!
//! - **S3 and Azure**: one PUT up to [`PART_BYTES`], else a multipart upload (Azure: a
//!   block list) of [`PART_BYTES`] parts, [`PARTS_IN_FLIGHT`] at a time. The upload is
//!   aborted when it fails and, through [`abort_in_flight`], when the process is
//!   interrupted; before an S3 upload starts, unfinished multipart uploads to the same key
//!   (left by a process killed outright) are listed with a signed request and aborted.
//! - **GCS**: the JSON API's resumable upload, in [`PART_BYTES`] chunks, cancelled the
//!   same ways. object_store uploads through GCS's XML API, which fake-gcs-server does not
//!   implement for unsigned requests ("invalid uploadType").

use std::path::Path;
use std::sync::{Mutex, PoisonError};

use futures_util::StreamExt as _;
use object_store::multipart::{MultipartStore, PartId};
use object_store::{ObjectStoreExt as _, PutPayload};

use super::store::Built;
use super::*;

/// Bytes per part or chunk (S3 needs at least 5 MiB but for the last; GCS a multiple of
/// 256 KiB).
pub(crate) const PART_BYTES: u64 = 16 << 20;
/// Parts uploaded at once.
pub(crate) const PARTS_IN_FLIGHT: usize = 4;
/// How long one part's request may take (16 MiB at 56 KiB/s).
const PART_TIMEOUT: Duration = Duration::from_secs(300);

/// How an unfinished upload is cancelled.
#[derive(Clone)]
enum Cancel {
    /// A multipart upload (S3, Azure).
    Multipart(Arc<dyn MultipartStore>, ObjectPath, String),
    /// A GCS resumable upload session: its URL and the bearer token.
    Session(reqwest::Client, String, String),
}

impl Cancel {
    async fn run(&self) {
        let result = match self {
            Cancel::Multipart(store, path, id) => {
                store.abort_multipart(path, id).await.map_err(|e| e.to_string())
            }
            Cancel::Session(client, url, bearer) => {
                let mut request = client.delete(url.as_str());
                if !bearer.is_empty() {
                    request = request.bearer_auth(bearer);
                }
                request.send().await.map(|_| ()).map_err(|e| e.to_string())
            }
        };
        if let Err(e) = result {
            tracing::warn!("aborting an unfinished upload: {}", crate::error_text::redact(&e));
        }
    }
}

/// The unfinished uploads of this process, by a number, for [`abort_in_flight`]; `None`
/// once that ran (uploads started afterwards cancel themselves at once).
static IN_FLIGHT: Mutex<Option<Vec<(u64, Cancel)>>> = Mutex::new(Some(Vec::new()));
static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// An upload listed in [`IN_FLIGHT`] while it lives.
struct Listed(u64);

impl Listed {
    /// Lists `cancel`; `None` when the process is being interrupted.
    fn new(cancel: &Cancel) -> Option<Self> {
        let id = NEXT.fetch_add(1, Ordering::Relaxed);
        let mut live = IN_FLIGHT.lock().unwrap_or_else(PoisonError::into_inner);
        live.as_mut()?.push((id, cancel.clone()));
        Some(Self(id))
    }
}

impl Drop for Listed {
    fn drop(&mut self) {
        if let Some(live) = IN_FLIGHT.lock().unwrap_or_else(PoisonError::into_inner).as_mut() {
            live.retain(|(id, _)| *id != self.0);
        }
    }
}

/// Aborts every unfinished upload of this process (at most a few seconds each) and
/// stops new ones; returns how many there were. For a signal handler about to exit.
pub(crate) fn abort_in_flight() -> usize {
    let live = IN_FLIGHT.lock().unwrap_or_else(PoisonError::into_inner).take().unwrap_or_default();
    if live.is_empty() {
        return 0;
    }
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread().enable_all().build() else { return 0 };
    runtime.block_on(async {
        let each = live.iter().map(|(_, c)| tokio::time::timeout(Duration::from_secs(5), c.run()));
        futures_util::future::join_all(each).await
    });
    live.len()
}

/// Why an upload failed, in one line.
#[derive(Debug, thiserror::Error)]
pub(crate) enum UploadError {
    /// The local file could not be read.
    #[error("reading {path}: {source}")]
    Read {
        /// The file.
        path: std::path::PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The store refused or failed.
    #[error(transparent)]
    Remote(#[from] RemoteError),
    /// The process is being interrupted.
    #[error("interrupted")]
    Interrupted,
}

/// Puts the file `local` at `location` (`s3://`, `gs://`, `az://`) as described in the
/// module's documentation; `progress` advances as the server acknowledges bytes.
/// Returns the bytes sent.
pub(crate) fn upload_file(
    location: &str,
    settings: &[(String, String)],
    local: &Path,
    progress: &dyn crate::Progress,
) -> Result<u64, UploadError> {
    let read_err = |source| UploadError::Read { path: local.to_path_buf(), source };
    let file = std::fs::File::open(local).map_err(read_err)?;
    let len = file.metadata().map_err(read_err)?.len();
    // Parts take longer than range reads.
    let mut settings = settings.to_vec();
    settings.push(("timeout".into(), format!("{}s", PART_TIMEOUT.as_secs())));
    let (built, path) = built_for(location, &settings)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| RemoteError::Config(format!("starting the network runtime: {e}")))?;
    let part = |i: u64| -> Result<Vec<u8>, UploadError> {
        use std::os::unix::fs::FileExt as _;
        let start = i * PART_BYTES;
        let mut buf = vec![0u8; len.saturating_sub(start).min(PART_BYTES) as usize];
        file.read_exact_at(&mut buf, start).map_err(read_err)?;
        Ok(buf)
    };
    let done = runtime.block_on(async {
        match built {
            Built::Gcs(gcs, base) => {
                let bucket =
                    location.split_once("://").and_then(|(_, r)| r.split_once('/')).map_or("", |(b, _)| b);
                gcs_resumable(&gcs, &base, bucket, &path, len, &part, progress).await
            }
            Built::S3(s3) => {
                abort_stale_s3(&s3, &path).await;
                multipart(s3.clone(), s3, &path, len, &part, progress).await
            }
            Built::Azure(az) => multipart(az.clone(), az, &path, len, &part, progress).await,
            Built::Http(_) => Err(RemoteError::Config("plain web servers take no uploads".into()).into()),
        }
    });
    if done.is_err() && interrupted() {
        // The signal handler aborted this upload and is about to exit the process with
        // the signal's status: an upload error now would only race it to the exit.
        std::thread::sleep(Duration::from_secs(30));
    }
    done.map(|()| len)
}

/// Whether [`abort_in_flight`] ran: the process is being interrupted.
fn interrupted() -> bool {
    IN_FLIGHT.lock().unwrap_or_else(PoisonError::into_inner).is_none()
}

/// One PUT for a file of one part, else a multipart upload, aborted on failure.
async fn multipart(
    object: Arc<dyn ObjectStore>,
    store: Arc<dyn MultipartStore>,
    path: &ObjectPath,
    len: u64,
    part: &(dyn Fn(u64) -> Result<Vec<u8>, UploadError> + Sync),
    progress: &dyn crate::Progress,
) -> Result<(), UploadError> {
    if len <= PART_BYTES {
        // Replaced atomically: the object appears whole or not at all.
        object.put(path, PutPayload::from(part(0)?)).await.map_err(map_error)?;
        progress.inc(len);
        return Ok(());
    }
    let id = store.create_multipart(path).await.map_err(map_error)?;
    let cancel = Cancel::Multipart(store.clone(), path.clone(), id.clone());
    let Some(_listed) = Listed::new(&cancel) else {
        cancel.run().await;
        return Err(UploadError::Interrupted);
    };
    let parts = len.div_ceil(PART_BYTES);
    let sent = async {
        let mut ids: Vec<Option<PartId>> = vec![None; parts as usize];
        let mut uploads = futures_util::stream::iter(0..parts)
            .map(|i| {
                let (store, id) = (store.clone(), id.clone());
                async move {
                    let bytes = part(i)?;
                    let n = bytes.len() as u64;
                    let done = store.put_part(path, &id, i as usize, PutPayload::from(bytes)).await;
                    Ok::<_, UploadError>((i, n, done.map_err(map_error)?))
                }
            })
            .buffer_unordered(PARTS_IN_FLIGHT);
        while let Some(done) = uploads.next().await {
            let (i, n, part_id) = done?;
            ids[i as usize] = Some(part_id);
            progress.inc(n);
        }
        drop(uploads);
        let ids: Vec<PartId> = ids.into_iter().flatten().collect();
        store.complete_multipart(path, &id, ids).await.map_err(map_error)?;
        Ok::<_, UploadError>(())
    }
    .await;
    if sent.is_err() {
        cancel.run().await;
    }
    sent
}

/// Aborts the unfinished multipart uploads to `path` that an earlier, killed process
/// left (listed with a request signed like a presigned URL: object_store has no call
/// for it). Failing to list or abort is only logged: the upload goes on.
async fn abort_stale_s3(s3: &Arc<object_store::aws::AmazonS3>, path: &ObjectPath) {
    use object_store::signer::{Method, SignedUrlOptions, Signer as _};
    let options = SignedUrlOptions::new().with_query([("uploads", ""), ("prefix", path.as_ref())]);
    let listed = async {
        let url = s3
            .signed_url_opts(Method::GET, &ObjectPath::default(), Duration::from_secs(300), &options)
            .await
            .map_err(|e| e.to_string())?;
        let client =
            reqwest::Client::builder().timeout(REQUEST_TIMEOUT).build().map_err(|e| e.to_string())?;
        let response = client.get(url).send().await.map_err(|e| e.to_string())?;
        let status = response.status();
        let body = response.text().await.map_err(|e| e.to_string())?;
        if !status.is_success() {
            return Err(format!("{status}{}", server_says(&body)));
        }
        Ok(unfinished_uploads(&body, path.as_ref()))
    }
    .await;
    match listed {
        Ok(ids) => {
            for id in ids {
                match s3.abort_multipart(path, &id).await {
                    Ok(()) => tracing::info!("aborted an unfinished upload to {path} left by an earlier run"),
                    Err(e) => tracing::warn!("aborting an unfinished upload to {path}: {}", map_error(e)),
                }
            }
        }
        Err(e) => tracing::warn!(
            "listing unfinished uploads to {path}: {}; any left by an earlier run stay",
            crate::error_text::redact(&e)
        ),
    }
}

/// The upload ids of S3's `ListMultipartUploadsResult` `body` whose key is `key`.
fn unfinished_uploads(body: &str, key: &str) -> Vec<String> {
    let field = |text: &str, name: &str| {
        let open = format!("<{name}>");
        let start = text.find(&open)? + open.len();
        let len = text[start..].find(&format!("</{name}>"))?;
        Some(text[start..start + len].to_owned())
    };
    body.split("<Upload>")
        .skip(1)
        .filter_map(|upload| {
            let k = field(upload, "Key")?;
            (xml_unescape(&k) == key).then(|| field(upload, "UploadId")).flatten()
        })
        .map(|id| xml_unescape(&id))
        .collect()
}

/// `text` with XML's five predefined entities replaced.
fn xml_unescape(text: &str) -> String {
    text.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&amp;", "&")
}

/// Uploads through GCS's JSON API: a resumable session, then its chunks in order;
/// the session is cancelled on failure.
async fn gcs_resumable(
    gcs: &object_store::gcp::GoogleCloudStorage,
    base: &str,
    bucket: &str,
    path: &ObjectPath,
    len: u64,
    part: &(dyn Fn(u64) -> Result<Vec<u8>, UploadError> + Sync),
    progress: &dyn crate::Progress,
) -> Result<(), UploadError> {
    let fail = |what: &str, e: String| UploadError::from(RemoteError::Unavailable(format!("{what}: {e}")));
    let bearer = gcs.credentials().get_credential().await.map_err(map_error)?.bearer.clone();
    let client = reqwest::Client::builder()
        .timeout(PART_TIMEOUT)
        .connect_timeout(CONNECT_TIMEOUT)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| fail("HTTP client", e.to_string()))?;
    let auth = |r: reqwest::RequestBuilder| if bearer.is_empty() { r } else { r.bearer_auth(&bearer) };
    let mut start = reqwest::Url::parse(&format!("{base}/upload/storage/v1/b/{bucket}/o"))
        .map_err(|e| RemoteError::Config(format!("GCS base URL {base}: {e}")))?;
    start.query_pairs_mut().append_pair("uploadType", "resumable").append_pair("name", path.as_ref());
    let response = auth(client.post(start))
        .header("X-Upload-Content-Length", len.to_string())
        .header("Content-Length", "0")
        .send()
        .await
        .map_err(|e| fail("starting the upload", e.to_string()))?;
    let status = response.status();
    let session = response.headers().get("location").and_then(|v| v.to_str().ok()).map(str::to_owned);
    let body = response.text().await.unwrap_or_default();
    let session = match (status.as_u16(), session) {
        (200..=299, Some(s)) => s,
        (404, _) => {
            return Err(RemoteError::Config(format!(
                "the bucket {bucket} does not exist (404 Not Found{})",
                server_says(&body)
            ))
            .into());
        }
        (401 | 403, _) => {
            return Err(RemoteError::Denied(format!(
                "{status}{}: the server did not accept the credentials ({})",
                server_says(&body),
                credential_source()
            ))
            .into());
        }
        _ => return Err(fail("starting the upload", format!("{status}{}", server_says(&body)))),
    };
    let cancel = Cancel::Session(client.clone(), session.clone(), bearer.clone());
    let Some(_listed) = Listed::new(&cancel) else {
        cancel.run().await;
        return Err(UploadError::Interrupted);
    };
    let sent = async {
        let chunks = len.div_ceil(PART_BYTES).max(1);
        for i in 0..chunks {
            let bytes = part(i)?;
            let n = bytes.len() as u64;
            let from = i * PART_BYTES;
            let range = if len == 0 {
                "bytes */0".to_owned()
            } else {
                format!("bytes {from}-{}/{len}", from + n - 1)
            };
            let response = auth(client.put(session.as_str()))
                .header("Content-Range", range)
                .body(bytes)
                .send()
                .await
                .map_err(|e| fail("uploading", crate::error_text::redact(&e.to_string()).into()))?;
            let status = response.status();
            // 308 "Resume Incomplete" after every chunk but the last.
            let last = i + 1 == chunks;
            if !(status.is_success() || (!last && status.as_u16() == 308)) {
                let body = response.text().await.unwrap_or_default();
                return Err(fail("uploading", format!("{status}{}", server_says(&body))));
            }
            progress.inc(n);
        }
        Ok(())
    }
    .await;
    if sent.is_err() {
        cancel.run().await;
    }
    sent
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    #[test]
    fn unfinished_uploads_of_one_key_are_found() {
        let body = "<ListMultipartUploadsResult><Bucket>b</Bucket>\
            <Upload><Key>a/x.tsa</Key><UploadId>one</UploadId></Upload>\
            <Upload><Key>a/x.tsa.shards</Key><UploadId>other</UploadId></Upload>\
            <Upload><Key>a/x.tsa</Key><UploadId>two&amp;</UploadId></Upload></ListMultipartUploadsResult>";
        assert_eq!(unfinished_uploads(body, "a/x.tsa"), ["one", "two&"]);
        assert!(unfinished_uploads("<ListMultipartUploadsResult/>", "a").is_empty());
    }
}
