//! What went wrong, in one line: object_store's errors mapped to `RemoteError` with
//! their cause (unreachable, refused, credentials, missing bucket) and the server's own
//! words, URLs and credentials redacted.

use super::*;

/// Who answers at a location, for what a refusal (401, 403) means there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Access {
    /// A cloud store (`s3://`, `gs://`, `az://`): credentials from the environment.
    Cloud,
    /// A cloud store given credentials in the caller's settings
    /// ([`RemoteOptions::s3`](crate::format::atlas::RemoteOptions::s3)).
    CloudGiven,
    /// A web server (`http(s)://` without a query string): no credentials at all.
    Web,
    /// A presigned or signed `http(s)://` URL: its query string is the credential.
    Signed,
}

impl Access {
    /// Who answers at `location` reached with `settings`.
    pub(crate) fn with(location: &str, settings: &[(String, String)]) -> Self {
        const SECRETS: [&str; 5] = ["key", "secret", "token", "service_account", "sas"];
        let given = settings.iter().any(|(k, _)| {
            let k = k.to_ascii_lowercase();
            SECRETS.iter().any(|s| k.contains(s))
        });
        match Self::of(location) {
            Access::Cloud if given => Access::CloudGiven,
            other => other,
        }
    }

    /// Who answers at `location`.
    pub(crate) fn of(location: &str) -> Self {
        let lower = location.get(..8).unwrap_or(location).to_ascii_lowercase();
        if !lower.starts_with("http://") && !lower.starts_with("https://") {
            Access::Cloud
        } else if location.contains('?') {
            Access::Signed
        } else {
            Access::Web
        }
    }
}

/// [`map_error_at`] for a cloud store.
pub(crate) fn map_error(e: object_store::Error) -> RemoteError {
    map_error_at(e, Access::Cloud)
}

/// `e` as a [`RemoteError`] that says why, for a location answered by `access`.
pub(crate) fn map_error_at(e: object_store::Error, access: Access) -> RemoteError {
    match e {
        object_store::Error::NotFound { ref source, .. }
            if chain_text(source.as_ref()).contains("NoSuchBucket") =>
        {
            RemoteError::Config("the bucket does not exist (NoSuchBucket)".into())
        }
        object_store::Error::NotFound { ref source, .. }
            if chain_text(source.as_ref()).contains("ContainerNotFound") =>
        {
            RemoteError::Config("the container does not exist (ContainerNotFound)".into())
        }
        object_store::Error::NotFound { .. } => RemoteError::NotFound,
        object_store::Error::Precondition { .. } | object_store::Error::NotModified { .. } => {
            RemoteError::Replaced
        }
        object_store::Error::Unauthenticated { ref source, .. } => {
            refused("401 Unauthorized", &server_says(&chain_text(source.as_ref())), access)
        }
        object_store::Error::PermissionDenied { ref source, .. } => {
            refused("403 Forbidden", &server_says(&chain_text(source.as_ref())), access)
        }
        other => cause(&other).unwrap_or_else(|| {
            RemoteError::Unavailable(crate::error_text::redact(&other.to_string()).into())
        }),
    }
}

/// A refusal (`status`) with the server's own words and what to check at `access`.
fn refused(status: &str, says: &str, access: Access) -> RemoteError {
    let hint = match access {
        Access::Cloud => {
            format!("access denied: the server did not accept the credentials ({})", credential_source())
        }
        Access::CloudGiven => {
            "access denied: the server did not accept the credentials given in the settings".to_owned()
        }
        Access::Web => "the web server refused access (no credentials are sent to http(s):// URLs: \
                        a signed URL needs its query string)"
            .to_owned(),
        Access::Signed => "the server refused the presigned or signed URL: such URLs expire \
                           (X-Amz-Expires, X-Goog-Expires, se=) and are bound to their method and \
                           host; make a new one"
            .to_owned(),
    };
    RemoteError::Denied(format!("{status}{says}: {hint}"))
}

/// The server's own explanation in an error body, as ` ("Code: Message")`: S3, GCS and
/// Azure answer XML with `<Code>` and `<Message>`, GCS's JSON API `"message"`; empty
/// when there is none. Redacted and cut short, since the body is the server's.
pub(super) fn server_says(text: &str) -> String {
    let tag = |name: &str| {
        let open = format!("<{name}>");
        let start = text.find(&open)? + open.len();
        let len = text[start..].find("</")?;
        Some(text[start..start + len].trim().to_owned())
    };
    let json_message = || {
        let start = text.find("\"message\":\"")? + "\"message\":\"".len();
        let len = text[start..].find('"')?;
        Some(text[start..start + len].to_owned())
    };
    let said = match (tag("Code"), tag("Message").or_else(json_message)) {
        (Some(c), Some(m)) => format!("{c}: {m}"),
        (Some(only), None) | (None, Some(only)) => only,
        (None, None) => return String::new(),
    };
    // One line: bodies wrap their messages.
    let said = said.split_whitespace().collect::<Vec<_>>().join(" ");
    let said: String = crate::error_text::redact(&said).chars().take(200).collect();
    format!(" (\"{said}\")")
}

/// A missing object told apart from a missing bucket (GCS says only "Not Found" for
/// both): a listing under the object's path fails when the bucket is missing (404, or
/// fake-gcs-server's 500 "no bucket named …") and succeeds, empty or not, when only the
/// object is.
pub(super) async fn not_found(store: &dyn ObjectStore, path: &ObjectPath) -> RemoteError {
    use futures_util::StreamExt as _;
    let missing = || RemoteError::Config("the bucket does not exist (listing it fails)".into());
    let mut listing = store.list(Some(path));
    match listing.next().await {
        Some(Err(object_store::Error::NotFound { .. })) => missing(),
        Some(Err(e)) => {
            let text = chain_text(&e);
            if text.contains("NoSuchBucket") || text.contains("no bucket named") {
                return missing();
            }
            match map_error(e) {
                config @ RemoteError::Config(_) => config,
                _ => RemoteError::NotFound,
            }
        }
        _ => RemoteError::NotFound,
    }
}

/// Whether `e` says the server could not be reached at all (no connection, no answer),
/// as opposed to an answer with an error status.
pub(super) fn unreachable(e: &object_store::Error) -> bool {
    use object_store::client::HttpErrorKind;
    let mut at: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = at {
        if let Some(h) = err.downcast_ref::<object_store::client::HttpError>() {
            return matches!(h.kind(), HttpErrorKind::Connect | HttpErrorKind::Timeout);
        }
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            use std::io::ErrorKind::{ConnectionRefused, HostUnreachable, NetworkUnreachable, TimedOut};
            return matches!(io.kind(), ConnectionRefused | HostUnreachable | NetworkUnreachable | TimedOut);
        }
        at = err.source();
    }
    false
}

/// Every message in `e`'s source chain, joined.
pub(super) fn chain_text(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = String::new();
    let mut at: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = at {
        text.push_str(&err.to_string());
        text.push_str(" | ");
        at = err.source();
    }
    text
}

/// Where credentials come from, as far as the environment says (the variables' names,
/// never their values).
pub(super) fn credential_source() -> String {
    const NAMED: [&str; 8] = [
        "AWS_ACCESS_KEY_ID",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
        "GOOGLE_SERVICE_ACCOUNT",
        "GOOGLE_SERVICE_ACCOUNT_KEY",
        "GOOGLE_APPLICATION_CREDENTIALS",
        "AZURE_STORAGE_ACCOUNT_KEY",
        "AZURE_STORAGE_SAS_KEY",
        "AZURE_STORAGE_USE_EMULATOR",
    ];
    let set: Vec<&str> = NAMED.into_iter().filter(|n| std::env::var_os(n).is_some()).collect();
    if set.is_empty() {
        "none in the environment: the instance metadata service's, if any".into()
    } else {
        format!("{} from the environment", set.join(", "))
    }
}

/// The cause of a failed request in one phrase a person can act on, from the error's
/// source chain: refused connection, unknown host, TLS failure, timeout, missing
/// credentials, a plain-HTTP endpoint not allowed. `None` when none of these.
pub(super) fn cause(e: &object_store::Error) -> Option<RemoteError> {
    let text = chain_text(e);
    let mut io_kind = None;
    let mut http_kind = None;
    let mut at: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = at {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            io_kind.get_or_insert(io.kind());
        }
        if let Some(h) = err.downcast_ref::<object_store::client::HttpError>() {
            http_kind.get_or_insert(h.kind());
        }
        at = err.source();
    }
    use object_store::client::HttpErrorKind;
    let lower = text.to_ascii_lowercase();
    let unavailable = |m: &str| Some(RemoteError::Unavailable(m.to_string()));
    // The credential chain's last resort, the instance metadata service, failed too.
    if lower.contains("169.254.169.254")
        || lower.contains("/latest/api/token")
        || lower.contains("/latest/meta-data")
    {
        return Some(RemoteError::Denied(
            "no credentials: for S3 set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN \
             for temporary ones); for GCS GOOGLE_SERVICE_ACCOUNT or GOOGLE_APPLICATION_CREDENTIALS; for \
             Azure AZURE_STORAGE_ACCOUNT_NAME and AZURE_STORAGE_ACCOUNT_KEY; or run where an instance or \
             pod role provides them"
                .into(),
        ));
    }
    if lower.contains("builder error") || lower.contains("url scheme is not allowed") {
        return Some(RemoteError::Config(
            "the client refused the URL: a plain-http endpoint needs AWS_ALLOW_HTTP=true (S3), \
             GOOGLE_ALLOW_HTTP=true (GCS) or AZURE_ALLOW_HTTP=true (Azure)"
                .into(),
        ));
    }
    if io_kind == Some(std::io::ErrorKind::ConnectionRefused) || lower.contains("connection refused") {
        return unavailable(
            "connection refused: nothing listens at that host and port (is the server running?)",
        );
    }
    if lower.contains("dns error")
        || lower.contains("failed to lookup address")
        || lower.contains("name or service not known")
    {
        return unavailable("host not found (DNS lookup failed): check the host name");
    }
    if lower.contains("invalid peer certificate") || lower.contains("certificate") {
        return unavailable("TLS: the server's certificate was not accepted");
    }
    if lower.contains("corrupt message") || lower.contains("invalidcontenttype") || lower.contains("tls") {
        return unavailable("TLS handshake failed: is this https:// to a plain-HTTP port?");
    }
    if http_kind == Some(HttpErrorKind::Timeout)
        || io_kind == Some(std::io::ErrorKind::TimedOut)
        || lower.contains("timed out")
    {
        return unavailable(&format!(
            "timed out: no answer within {} s (after retries)",
            REQUEST_TIMEOUT.as_secs()
        ));
    }
    if lower.contains("connection reset")
        || lower.contains("connection closed")
        || lower.contains("broken pipe")
    {
        return unavailable("the server closed the connection mid-request");
    }
    None
}
