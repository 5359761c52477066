//! The object store behind a URL: S3, Google Cloud Storage, Azure Blob or plain HTTP,
//! configured from each store's environment variables or the caller's options.

use super::*;

/// A store behind a URL, with its concrete type where uploads need more than
/// [`ObjectStore`] (S3's multipart API and signer, GCS's credentials).
#[derive(Clone, Debug)]
pub(crate) enum Built {
    /// `s3://`.
    S3(Arc<object_store::aws::AmazonS3>),
    /// `gs://`, and the base URL its requests go to.
    Gcs(Arc<object_store::gcp::GoogleCloudStorage>, String),
    /// `az://`.
    Azure(Arc<object_store::azure::MicrosoftAzure>),
    /// `http(s)://`.
    Http(Arc<object_store::http::HttpStore>),
}

impl Built {
    /// The store, for reads and simple writes.
    pub(crate) fn object(&self) -> Arc<dyn ObjectStore> {
        match self {
            Built::S3(s) => s.clone(),
            Built::Gcs(s, _) => s.clone(),
            Built::Azure(s) => s.clone(),
            Built::Http(s) => s.clone(),
        }
    }
}

/// The store and object path of `location`.
pub(crate) fn store_for(
    location: &str,
    settings: &[(String, String)],
) -> Result<(Arc<dyn ObjectStore>, ObjectPath), RemoteError> {
    built_for(location, settings).map(|(b, p)| (b.object(), p))
}

/// The store (its concrete type) and object path of `location`.
pub(crate) fn built_for(
    location: &str,
    settings: &[(String, String)],
) -> Result<(Built, ObjectPath), RemoteError> {
    install_crypto();
    // The caller names the location.
    let bad = |what: &str| RemoteError::Config(what.to_owned());
    let (scheme, rest) = location.split_once("://").ok_or_else(|| bad("not a URL"))?;
    let (authority, key) =
        rest.split_once('/').ok_or_else(|| bad("no object path after the host or bucket"))?;
    if authority.is_empty() || key.is_empty() {
        return Err(bad("expected scheme://host-or-bucket/path"));
    }
    let scheme_lower = scheme.to_ascii_lowercase();
    // A query string (a presigned S3 URL, a signed CDN URL) is sent as it is: the store's
    // base URL is then the whole URL, and the object path empty.
    let (base_path, query) = match key.split_once('?') {
        Some((k, q)) if matches!(scheme_lower.as_str(), "http" | "https") => (k, Some(q)),
        _ => (key, None),
    };
    let path = if query.is_some() {
        ObjectPath::default()
    } else {
        ObjectPath::from_url_path(base_path).map_err(|e| bad(&format!("object path: {e}")))?
    };
    if scheme_lower == "s3" {
        check_s3_endpoint(Cloud::S3.env().iter().chain(settings)).map_err(RemoteError::Config)?;
    }
    let retry = RetryConfig {
        backoff: BackoffConfig {
            init_backoff: Duration::from_millis(50),
            max_backoff: Duration::from_secs(2),
            base: 2.0,
        },
        max_retries: MAX_RETRIES,
        retry_timeout: RETRY_WINDOW,
    };
    let client = ClientOptions::new().with_timeout(REQUEST_TIMEOUT).with_connect_timeout(CONNECT_TIMEOUT);
    let store = match scheme_lower.as_str() {
        "s3" => Built::S3(Arc::new(
            // Our client options first, then the `AWS_*` environment, then `settings`:
            // later settings win (`aws_allow_http` and friends change client options).
            configure(
                Cloud::S3,
                object_store::aws::AmazonS3Builder::new().with_client_options(client),
                settings,
                |b, k: object_store::aws::AmazonS3ConfigKey, v| b.with_config(k, v),
            )?
            .with_bucket_name(authority)
            .with_retry(retry)
            .build()
            .map_err(|e| RemoteError::Config(format!("S3 store for bucket {authority}: {e}")))?,
        )),
        "gs" => {
            let base = check_gcs_credentials(settings)?;
            Built::Gcs(
                Arc::new(
                    configure(
                        Cloud::Gcs,
                        object_store::gcp::GoogleCloudStorageBuilder::new().with_client_options(client),
                        settings,
                        |b, k: object_store::gcp::GoogleConfigKey, v| b.with_config(k, v),
                    )?
                    .with_bucket_name(authority)
                    .with_retry(retry)
                    .build()
                    .map_err(|e| RemoteError::Config(format!("GCS store for bucket {authority}: {e}")))?,
                ),
                base,
            )
        }
        "az" | "azure" => {
            check_azure_key(settings)?;
            Built::Azure(Arc::new(
                configure(
                    Cloud::Azure,
                    object_store::azure::MicrosoftAzureBuilder::new().with_client_options(client),
                    settings,
                    |b, k: object_store::azure::AzureConfigKey, v| b.with_config(k, v),
                )?
                .with_container_name(authority)
                .with_retry(retry)
                .build()
                .map_err(|e| RemoteError::Config(format!("Azure store for container {authority}: {e}")))?,
            ))
        }
        s @ ("http" | "https") => Built::Http(Arc::new(
            object_store::http::HttpBuilder::new()
                .with_url(match query {
                    Some(q) => format!("{s}://{authority}/{base_path}?{q}"),
                    None => format!("{s}://{authority}"),
                })
                .with_retry(retry)
                .with_client_options(client.with_allow_http(s == "http"))
                .build()
                .map_err(|e| RemoteError::Config(format!("HTTP store for {authority}: {e}")))?,
        )),
        _ => return Err(bad("unsupported scheme (use s3://, gs://, az://, http:// or https://)")),
    };
    Ok((store, path))
}

/// GCS's own base URL, which the emulators replace.
pub(crate) const GCS_BASE_URL: &str = "https://storage.googleapis.com";

/// The last value of the `cloud` setting `want` (any of its aliases) among its
/// environment variables and then `settings` (later ones win), with the name it was
/// given under: the variable's (`AWS_ENDPOINT`) or the setting's.
fn effective<K: std::str::FromStr + PartialEq>(
    cloud: Cloud,
    settings: &[(String, String)],
    want: &[K],
) -> Option<(String, String)> {
    let env = cloud.env().into_iter().map(|(k, v)| (k.to_ascii_uppercase(), v));
    let own = settings.iter().filter(|(k, _)| {
        let lower = k.to_ascii_lowercase();
        !Cloud::ALL.iter().any(|c| *c != cloud && lower.starts_with(c.prefix()))
    });
    env.chain(own.cloned())
        .filter(|(k, _)| k.to_ascii_lowercase().parse::<K>().is_ok_and(|key| want.contains(&key)))
        .last()
}

/// The GCS service account named by the environment or `settings` (a file, or the key
/// itself) checked to be a service-account key, so that a wrong one is named in one line
/// instead of failing deep in the client; returns the base URL requests go to (the
/// setting's, the key's `gcs_base_url` for an emulator, else [`GCS_BASE_URL`]).
fn check_gcs_credentials(settings: &[(String, String)]) -> Result<String, RemoteError> {
    use object_store::gcp::GoogleConfigKey as G;
    let bad = |m: String| RemoteError::Config(m);
    let key = match effective(Cloud::Gcs, settings, &[G::ServiceAccountKey]) {
        Some((name, json)) => Some((format!("the service-account key in {name}"), json)),
        None => match effective(Cloud::Gcs, settings, &[G::ServiceAccount]) {
            Some((name, file)) => {
                let what = format!("GCS service-account file {file} ({name})");
                let text = std::fs::read_to_string(&file).map_err(|e| bad(format!("{what}: {e}")))?;
                Some((what, text))
            }
            None => None,
        },
    };
    let mut base = None;
    if let Some((what, text)) = key {
        let json: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| bad(format!("{what}: not JSON ({e})")))?;
        for field in ["private_key", "private_key_id", "client_email"] {
            if !json.get(field).is_some_and(serde_json::Value::is_string) {
                return Err(bad(format!(
                    "{what}: not a service-account key (no \"{field}\" text); download a JSON key \
                     of the service account, or for an emulator give {{\"gcs_base_url\": ..., \
                     \"disable_oauth\": true, \"private_key\": \"\", \"private_key_id\": \"\", \
                     \"client_email\": \"\"}}"
                )));
            }
        }
        base = json.get("gcs_base_url").and_then(serde_json::Value::as_str).map(str::to_owned);
    }
    let setting = effective(Cloud::Gcs, settings, &[G::BaseUrl]).map(|(_, v)| v);
    Ok(setting.or(base).unwrap_or_else(|| GCS_BASE_URL.to_owned()).trim_end_matches('/').to_owned())
}

/// The Azure account key of the environment or `settings`, checked to be base64 (the
/// client's own error names neither the variable nor the problem).
fn check_azure_key(settings: &[(String, String)]) -> Result<(), RemoteError> {
    let Some((name, key)) =
        effective(Cloud::Azure, settings, &[object_store::azure::AzureConfigKey::AccessKey])
    else {
        return Ok(());
    };
    let body = key.trim_end_matches('=');
    let base64 = !key.is_empty()
        && key.len() % 4 == 0
        && key.len() - body.len() <= 2
        && body.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'/');
    if base64 {
        Ok(())
    } else {
        Err(RemoteError::Config(format!(
            "{name} is not base64: an Azure storage account key is the base64 text shown under the \
             account's Access keys (a SAS token goes in AZURE_STORAGE_SAS_KEY)"
        )))
    }
}

/// The disk cache's name for the object at `location` reached with `settings`: the URL
/// without its query string (which for a presigned or signed URL changes with every
/// signature while the object stays the same; its identity, the ETag, is checked anyway),
/// and, for a cloud store reached elsewhere than at the provider's default, the endpoint
/// (and Azure account) it is reached at: the same bucket and key on another server is
/// another object. Locations at the default endpoints keep the names they always had.
pub(crate) fn cache_key(location: &str, settings: &[(String, String)]) -> String {
    use object_store::aws::AmazonS3ConfigKey as S;
    use object_store::azure::AzureConfigKey as A;
    let base = location.split_once('?').map_or(location, |(b, _)| b);
    let scheme = base.split_once("://").map(|(s, _)| s.to_ascii_lowercase()).unwrap_or_default();
    let mut at: Vec<String> = Vec::new();
    let mut add = |what: &str, v: Option<(String, String)>| {
        if let Some((_, v)) = v {
            at.push(format!("{what}={}", v.trim_end_matches('/')));
        }
    };
    match scheme.as_str() {
        "s3" => add("endpoint", effective(Cloud::S3, settings, &[S::Endpoint, S::S3Endpoint])),
        "gs" => {
            let base_url = check_gcs_credentials(settings).ok().filter(|b| b != GCS_BASE_URL);
            add("base_url", base_url.map(|b| (String::new(), b)));
        }
        "az" | "azure" => {
            add("account", effective(Cloud::Azure, settings, &[A::AccountName]));
            add("endpoint", effective(Cloud::Azure, settings, &[A::Endpoint]));
            add("emulator", effective(Cloud::Azure, settings, &[A::UseEmulator]));
            // Where object_store sends emulator requests.
            add("azurite", std::env::var("AZURITE_BLOB_STORAGE_URL").ok().map(|v| (String::new(), v)));
        }
        _ => {}
    }
    if at.is_empty() { base.to_owned() } else { format!("{base} at {}", at.join(" ")) }
}

/// Checks the S3 endpoint among `settings` (lower-case keys, later ones win): an
/// `http(s)://host[:port]` URL, and `http://` only with `aws_allow_http` true. A bad one
/// would otherwise fail deep in the client (or panic in it, for `http//host`).
pub(super) fn check_s3_endpoint<'a>(
    settings: impl Iterator<Item = &'a (String, String)>,
) -> Result<(), String> {
    let (mut endpoint, mut allow_http) = (None, false);
    for (k, v) in settings {
        match k.to_ascii_lowercase().as_str() {
            "aws_endpoint" | "aws_endpoint_url" | "endpoint" | "endpoint_url" => endpoint = Some(v.clone()),
            "aws_allow_http" | "allow_http" => allow_http = v.trim().eq_ignore_ascii_case("true"),
            _ => {}
        }
    }
    let Some(endpoint) = endpoint else { return Ok(()) };
    let url = reqwest::Url::parse(&endpoint).map_err(|e| {
        format!("S3 endpoint {endpoint:?} (AWS_ENDPOINT) is not a URL ({e}); expected http(s)://host[:port]")
    })?;
    match url.scheme() {
        "https" => {}
        "http" if allow_http => {}
        "http" => {
            return Err(format!(
                "S3 endpoint {endpoint} is plain http: set AWS_ALLOW_HTTP=true to allow it (or use https)"
            ));
        }
        other => {
            return Err(format!(
                "S3 endpoint {endpoint:?} has scheme {other:?}; expected http(s)://host[:port]"
            ));
        }
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(format!("S3 endpoint {endpoint:?} has no host; expected http(s)://host[:port]"));
    }
    Ok(())
}

/// The object stores reached through `object_store`'s cloud builders, each configured
/// from its own environment variables and settings (keys with its own prefix).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Cloud {
    /// `s3://bucket/key`: `AWS_*`, `aws_*`.
    S3,
    /// `gs://bucket/key`: `GOOGLE_*`, `google_*`.
    Gcs,
    /// `az://container/key`: `AZURE_*`, `azure_*`.
    Azure,
}

impl Cloud {
    const ALL: [Cloud; 3] = [Cloud::S3, Cloud::Gcs, Cloud::Azure];

    /// The lower-case prefix of this store's settings.
    fn prefix(self) -> &'static str {
        match self {
            Cloud::S3 => "aws_",
            Cloud::Gcs => "google_",
            Cloud::Azure => "azure_",
        }
    }

    /// The store's name in messages.
    fn name(self) -> &'static str {
        match self {
            Cloud::S3 => "S3",
            Cloud::Gcs => "GCS",
            Cloud::Azure => "Azure",
        }
    }

    /// This store's environment variables (`AWS_*`, `GOOGLE_*`, `AZURE_*`), as lower-case
    /// setting names, the way the builders' `from_env` reads them.
    fn env(self) -> Vec<(String, String)> {
        std::env::vars()
            .map(|(k, v)| (k.to_ascii_lowercase(), v))
            .filter(|(k, _)| k.starts_with(self.prefix()))
            .collect()
    }
}

/// `builder` with this store's environment and then `settings` applied through `set`
/// (later ones win). Settings of the other clouds (their prefixes) are left out, so one
/// list can carry all three; an unknown key of this cloud's own, or one without any
/// cloud's prefix that this cloud does not know, is an error. Unknown environment
/// variables are skipped, as `from_env` does.
pub(super) fn configure<B, K: std::str::FromStr>(
    cloud: Cloud,
    builder: B,
    settings: &[(String, String)],
    set: impl Fn(B, K, &str) -> B,
) -> Result<B, RemoteError> {
    let mut b = builder;
    for (k, v) in cloud.env() {
        if let Ok(key) = k.parse::<K>() {
            b = set(b, key, &v);
        }
    }
    for (k, v) in settings {
        let lower = k.to_ascii_lowercase();
        if Cloud::ALL.iter().any(|c| *c != cloud && lower.starts_with(c.prefix())) {
            continue;
        }
        let key = lower
            .parse::<K>()
            .map_err(|_| RemoteError::Config(format!("unknown {} setting {k:?}", cloud.name())))?;
        b = set(b, key, v);
    }
    Ok(b)
}

/// Selects ring as the TLS crypto provider, once per process (reqwest is built without
/// one, to avoid a second C crypto library in the build).
pub(super) fn install_crypto() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // Err means the application installed its own provider first: keep that one.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}
