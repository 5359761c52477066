//! Remote atlases that cannot be read say why in one line a person can act on, against
//! real servers on loopback (nginx, moto): refused connections, unknown hosts, TLS to a
//! plain port, bad S3 endpoints, missing credentials, missing buckets, access denied
//! (never answered from the disk cache), unsupported schemes; and presigned or signed
//! URLs keep their query strings (issue 29).

#![allow(clippy::unwrap_used)]

use std::path::Path;

use tessera_core::Atlas;
use tessera_core::bake::source::Generated;
use tessera_core::format::atlas::RemoteOptions;
use tessera_tests::{Azurite, FakeGcs, Moto, Nginx, bake_source};

fn open_error(url: &str, opts: &RemoteOptions) -> String {
    let e = Atlas::open_with(url, opts).unwrap_err().to_string();
    assert!(!e.contains('\n'), "one line: {e}");
    e
}

fn s3(endpoint: &str, extra: &[(&str, &str)]) -> RemoteOptions {
    let mut s3: Vec<(String, String)> = [
        ("aws_endpoint", endpoint),
        ("aws_access_key_id", "testing"),
        ("aws_secret_access_key", "testing"),
        ("aws_region", "us-east-1"),
    ]
    .iter()
    .chain(extra)
    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
    .collect();
    s3.dedup_by(|a, b| a.0 == b.0);
    RemoteOptions { s3, ..RemoteOptions::without_disk_cache() }
}

#[test]
fn network_failures_name_their_cause() {
    let none = RemoteOptions::without_disk_cache();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let e = open_error(&format!("http://127.0.0.1:{port}/x.tsa"), &none);
    assert!(e.contains("connection refused") && e.contains("is the server running"), "{e}");
    let e = open_error("http://tessera-no-such-host.invalid/x.tsa", &none);
    assert!(e.contains("host not found"), "{e}");
    let dir = tempfile::tempdir().unwrap();
    let server = Nginx::serve(dir.path(), "");
    let e = open_error(&format!("https://127.0.0.1:{}/x.tsa", server.port()), &none);
    assert!(e.contains("TLS handshake failed") && e.contains("plain-HTTP port"), "{e}");
    for (url, scheme) in [("ftp://host/x.tsa", "ftp://"), ("htp://host/x.tsa", "htp://")] {
        let e = open_error(url, &none);
        assert!(e.contains(&format!("unsupported URL scheme {scheme}")), "{e}");
    }
}

#[test]
fn s3_configuration_errors_say_what_to_set() {
    let moto = Moto::start();
    let endpoint = moto.endpoint();
    // Not a URL (object_store panicked on this one).
    let e = open_error("s3://textures/x.tsa", &s3("http//127.0.0.1:15001", &[("aws_allow_http", "true")]));
    assert!(e.contains("is not a URL") && e.contains("http(s)://host"), "{e}");
    let e = open_error("s3://textures/x.tsa", &s3(&endpoint, &[]));
    assert!(e.contains("AWS_ALLOW_HTTP=true"), "{e}");
    let http = [("aws_allow_http", "true")];
    let e = open_error("s3://no-such-bucket/x.tsa", &s3(&endpoint, &http));
    assert!(e.contains("bucket does not exist"), "{e}");
    let dir = tempfile::tempdir().unwrap();
    let atlas = bake_source(dir.path(), "a", Generated::new(256, 256));
    moto.put("textures", "a.tsa", &atlas);
    let e = open_error("s3://textures/missing.tsa", &s3(&endpoint, &http));
    assert!(e.contains("not found"), "{e}");
    // No credentials: the metadata service (here: nothing listening) has none either.
    let opts = RemoteOptions {
        s3: [
            ("aws_endpoint", endpoint.as_str()),
            ("aws_allow_http", "true"),
            ("aws_region", "us-east-1"),
            ("aws_metadata_endpoint", "http://127.0.0.1:9"),
        ]
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect(),
        ..RemoteOptions::without_disk_cache()
    };
    if std::env::var_os("AWS_ACCESS_KEY_ID").is_none() {
        let e = open_error("s3://textures/a.tsa", &opts);
        assert!(e.contains("no credentials") && e.contains("AWS_ACCESS_KEY_ID"), "{e}");
    }
    assert!(Atlas::open_with("s3://textures/a.tsa", &s3(&endpoint, &http)).is_ok());
}

/// Google Cloud Storage and Azure (fake-gcs-server and Azurite on loopback): a wrong
/// account key is a hard 403, a plain-http endpoint names the variable that allows it,
/// missing buckets, containers and keys are told apart.
#[test]
fn gcs_and_azure_errors_say_what_to_set() {
    let dir = tempfile::tempdir().unwrap();
    let atlas = bake_source(dir.path(), "a", Generated::new(256, 256));
    let azure = Azurite::start();
    azure.create_container("textures");
    let opts = |s: Vec<(String, String)>| RemoteOptions { s3: s, ..RemoteOptions::without_disk_cache() };
    let good = opts(azure.settings());
    let e = open_error("az://textures/a.tsa", &good);
    assert!(e.contains("not found"), "{e}");
    let e = open_error("az://elsewhere/a.tsa", &good);
    assert!(e.contains("container does not exist"), "{e}");
    let wrong_key = azure
        .settings()
        .into_iter()
        .map(|(k, v)| if k == "azure_storage_account_key" { (k, "d3Jvbmcga2V5".to_owned()) } else { (k, v) })
        .collect();
    let e = open_error("az://textures/a.tsa", &opts(wrong_key));
    assert!(e.contains("403") && e.contains("access denied"), "{e}");
    let no_http: Vec<_> = azure.settings().into_iter().filter(|(k, _)| k != "azure_allow_http").collect();
    let e = open_error("az://textures/a.tsa", &opts(no_http));
    assert!(e.contains("AZURE_ALLOW_HTTP=true"), "{e}");
    let gcs = FakeGcs::start();
    gcs.put("textures", "a.tsa", &atlas);
    assert!(Atlas::open_with("gs://textures/a.tsa", &opts(gcs.settings())).is_ok());
    let e = open_error("gs://textures/missing.tsa", &opts(gcs.settings()));
    assert!(e.contains("not found"), "{e}");
    let no_http: Vec<_> = gcs.settings().into_iter().filter(|(k, _)| k != "google_allow_http").collect();
    let e = open_error("gs://textures/a.tsa", &opts(no_http));
    assert!(e.contains("GOOGLE_ALLOW_HTTP=true"), "{e}");
    let odd = opts(vec![("google_no_such_setting".into(), "1".into())]);
    let e = open_error("gs://textures/a.tsa", &odd);
    assert!(e.contains("unknown GCS setting"), "{e}");
}

/// A presigned S3 URL (moto) and a signed CDN-style URL (nginx checking a query
/// argument) are fetched with their query strings as given.
#[test]
fn presigned_and_signed_urls_keep_their_query() {
    let dir = tempfile::tempdir().unwrap();
    let atlas = bake_source(dir.path(), "signed", Generated::new(512, 256));
    let local = Atlas::open(&atlas).unwrap();
    let tiles: Vec<_> = local.layers()[0].layout.tiles(0).collect();
    let none = RemoteOptions::without_disk_cache();
    let moto = Moto::start();
    moto.put("textures", "signed/a.tsa", &atlas);
    let url = moto.presign("textures", "signed/a.tsa", 600);
    assert!(url.contains("X-Amz-Signature="), "{url}");
    let remote = Atlas::open_with(&url, &none).unwrap();
    for (t, got) in tiles.iter().zip(remote.read_tiles(&tiles, &|_| true)) {
        assert_eq!(got.unwrap(), local.read_tile(*t).unwrap(), "{t}");
    }
    let server = Nginx::serve(dir.path(), r#"location / { if ($arg_token != "s3cr3t") { return 403; } }"#);
    let signed = format!("{}?token=s3cr3t&expires=1999999999", server.url("signed.tsa"));
    let remote = Atlas::open_with(&signed, &none).unwrap();
    assert_eq!(remote.read_tile(tiles[3]).unwrap(), local.read_tile(tiles[3]).unwrap());
    let e = open_error(&server.url("signed.tsa"), &none);
    assert!(e.contains("403 Forbidden"), "{e}");
}

/// A server that refuses access (401/403) is a hard error even when the disk cache holds
/// the atlas: only a server that cannot be reached falls back to the cache.
#[test]
fn access_denied_is_not_answered_from_the_disk_cache() {
    let dir = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let atlas = bake_source(dir.path(), "guarded", Generated::new(512, 256));
    let opts = RemoteOptions::with_disk_cache(cache.path(), 64);
    let mut server = Nginx::serve(dir.path(), "");
    let url = server.url(Path::new(&atlas).file_name().unwrap().to_str().unwrap());
    let a = Atlas::open_with(&url, &opts).unwrap();
    let tile = a.layers()[0].layout.tiles(0).next().unwrap();
    a.read_tile(tile).unwrap();
    drop(a);
    for (rule, what) in [("return 403;", "403 Forbidden"), ("return 401;", "401 Unauthorized")] {
        server.stop();
        server.set_extra(&format!("location / {{ {rule} }}"));
        server.start();
        let e = open_error(&url, &opts);
        assert!(e.contains(what), "{e}");
    }
    // Unreachable: the cache answers.
    server.stop();
    let a = Atlas::open_with(&url, &opts).unwrap();
    assert!(a.network_stats().unwrap().offline);
    assert!(a.read_tile(tile).is_ok());
}

/// `verify` of a URL reads the server's copy in coalesced ranges (not one request per
/// tile) and, with the server stopped and only part of the atlas in the disk cache,
/// finishes and names the tiles it could not check instead of waiting on each.
#[test]
fn remote_verify_reads_few_ranges_and_finishes_with_the_server_down() {
    use tessera_core::format::atlas::AtlasError;
    let dir = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    bake_source(dir.path(), "big", Generated::new(4096, 4096));
    let mut server = Nginx::serve(dir.path(), "");
    let url = server.url("big.tsa");
    let a = Atlas::open_with(&url, &RemoteOptions::without_disk_cache()).unwrap();
    let tiles = a.tile_count();
    assert!(a.verify(&tessera_core::NoProgress).is_empty());
    let n = a.network_stats().unwrap();
    assert!(n.requests * 64 <= tiles, "{} requests for {tiles} tiles", n.requests);
    drop(a);
    // Five tiles in the disk cache, then the server goes away.
    let opts = RemoteOptions::with_disk_cache(cache.path(), 64);
    let a = Atlas::open_with(&url, &opts).unwrap();
    let five: Vec<_> = a.layers()[0].layout.tiles(0).take(5).collect();
    assert!(a.read_tiles(&five, &|_| true).iter().all(Result::is_ok));
    drop(a);
    server.stop();
    let a = Atlas::open_with(&url, &opts).unwrap();
    let (done, errors) = std::sync::mpsc::channel();
    let worker = std::thread::spawn(move || {
        let e = a.verify(&tessera_core::NoProgress);
        let _ = done.send(());
        e
    });
    // Not a timing test: a liveness bound, far above the second it takes.
    assert!(errors.recv_timeout(std::time::Duration::from_secs(120)).is_ok(), "verify did not finish");
    let errors = worker.join().unwrap();
    assert!(errors.iter().all(|e| matches!(e, AtlasError::Unavailable { .. })), "{:?}", errors.first());
    assert!(!errors.is_empty() && errors.len() as u64 <= tiles - 5, "{} of {tiles}", errors.len());
    // --offline: only the cache is read, the server is never asked.
    let offline = RemoteOptions { offline: true, ..opts };
    let a = Atlas::open_with(&url, &offline).unwrap();
    assert_eq!(a.read_tiles(&five, &|_| true).iter().filter(|r| r.is_ok()).count(), 5);
    assert_eq!(a.network_stats().unwrap().requests, 0);
}

/// The background read-ahead of a small index keeps in the disk cache only the pages that
/// pass their checksums: a damaged page on the server is not stored for the next run.
#[test]
fn a_damaged_index_page_read_ahead_is_not_cached() {
    use tessera_core::format::atlas::AtlasError;
    use tessera_core::format::tile::TileId;
    let dir = tempfile::tempdir().unwrap();
    let atlas = bake_source(dir.path(), "wide", Generated::new(8192, 4096));
    let mut bytes = std::fs::read(&atlas).unwrap();
    let tiles = u64::from_le_bytes(bytes[24..32].try_into().unwrap());
    let index_offset = u64::from_le_bytes(bytes[32..40].try_into().unwrap());
    // The last page, past the bytes the opening request reads.
    let last_entry = (index_offset + (tiles - 1) * 24) as usize;
    assert!(last_entry > 64 << 10, "the last page must lie past the opening request");
    let damaged = dir.path().join("damaged.tsa");
    bytes[last_entry + 17] ^= 0xFF;
    std::fs::write(&damaged, &bytes).unwrap();
    let server = Nginx::serve(dir.path(), "");
    // Mip 0's last tile on the curve: its entry is the last one.
    let last = TileId::new(0, 0, 63, 31);
    let writes = |name: &str| {
        let cache = tempfile::tempdir().unwrap();
        let a =
            Atlas::open_with(server.url(name), &RemoteOptions::with_disk_cache(cache.path(), 64)).unwrap();
        let read = a.read_tile(last);
        let n = a.network_stats().unwrap().disk_cache.unwrap().writes;
        (read, n)
    };
    let (read, good_writes) = writes("wide.tsa");
    assert!(read.is_ok(), "{read:?}");
    let (read, bad_writes) = writes("damaged.tsa");
    assert!(matches!(read, Err(AtlasError::Unavailable { .. })), "{read:?}");
    // The intact copy stores its page and the blob; the damaged one nothing at all (the
    // read-ahead stored its page unchecked before).
    assert!(good_writes >= 2, "{good_writes}");
    assert_eq!(bad_writes, 0, "the damaged page was cached");
}

/// `publish` uploads an atlas (a split one with its data objects), checks the copy,
/// skips an identical one and refuses to replace a different one without `force`.
#[test]
fn publish_uploads_checks_and_never_replaces_another_atlas_by_accident() {
    use tessera_core::bake::shard::{MergeForm, Shard, merge_shards};
    use tessera_core::bake::{BakeInput, BakeOptions, bake};
    use tessera_core::format::atlas::publish::{PublishError, publish};
    let dir = tempfile::tempdir().unwrap();
    let moto = Moto::start();
    let a = bake_source(dir.path(), "a", Generated::new(1024, 512));
    let b = bake_source(dir.path(), "b", Generated::new(512, 512));
    moto.put("pub", "README", &a);
    let s3 = moto.settings();
    let none = tessera_core::NoProgress;
    let url = "s3://pub/atlases/a.tsa";
    let r = publish(&a, url, false, &s3, &none).unwrap();
    assert_eq!((r.uploaded.len(), r.already_there), (1, false));
    assert!(r.entries_checked > 0 && r.blobs_checked > 0, "{r:?}");
    let r = publish(&a, url, false, &s3, &none).unwrap();
    assert!(r.already_there && r.uploaded.is_empty(), "{r:?}");
    let e = publish(&b, url, false, &s3, &none).unwrap_err();
    assert!(matches!(e, PublishError::Exists { .. }) && e.to_string().contains("--force"), "{e}");
    let r = publish(&b, url, true, &s3, &none).unwrap();
    assert_eq!(r.uploaded.len(), 1);
    let opts = RemoteOptions { s3: s3.clone(), ..RemoteOptions::without_disk_cache() };
    assert_eq!(Atlas::open_with(url, &opts).unwrap().layers(), Atlas::open(&b).unwrap().layers());
    // A split atlas goes up with its parts.
    let split = dir.path().join("s.tsa");
    for i in 0..2 {
        let o = BakeOptions { shard: Shard::new(i, 2), ..BakeOptions::default() };
        bake(vec![BakeInput::new("s", Generated::new(1024, 1024))], &split, &o, &none).unwrap();
    }
    merge_shards(&split, MergeForm::Split, &none).unwrap();
    let r = publish(&split, "s3://pub/atlases/s.tsa", false, &s3, &none).unwrap();
    assert_eq!(r.uploaded.len(), 3, "{r:?}");
    let there = Atlas::open_with("s3://pub/atlases/s.tsa", &opts).unwrap();
    assert!(there.is_split() && there.verify(&none).is_empty());
    // A publish cut short after its first data object: the rerun keeps that one, and
    // uploads again a data object that is there but not equal to the local one.
    let parts = Atlas::open(&split).unwrap().data_objects();
    let key = |name: &str| format!("again/{name}");
    moto.put("pub", &key(&parts[0].0.name), &parts[0].1);
    moto.put("pub", &key(&parts[1].0.name), &parts[0].1);
    let r = publish(&split, "s3://pub/again/s.tsa", false, &s3, &none).unwrap();
    assert_eq!(r.kept, vec![format!("s3://pub/{}", key(&parts[0].0.name))], "{r:?}");
    assert_eq!(r.uploaded.len(), 2, "{r:?}");
    let there = Atlas::open_with("s3://pub/again/s.tsa", &opts).unwrap();
    assert!(there.verify(&none).is_empty());
    let e = publish(&a, "https://example.com/a.tsa", false, &s3, &none).unwrap_err();
    assert!(matches!(e, PublishError::NotObjectStore(_)), "{e}");
}

/// What the disk cache holds of a remote atlas is at hand without a request (the loader
/// delivers it at once instead of with the network part of its batch); the rest is not.
#[test]
fn disk_cache_hits_are_at_hand_without_a_request() {
    let dir = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    bake_source(dir.path(), "hand", Generated::new(2048, 2048));
    let server = Nginx::serve(dir.path(), "");
    let url = server.url("hand.tsa");
    let opts = RemoteOptions::with_disk_cache(cache.path(), 64);
    let a = Atlas::open_with(&url, &opts).unwrap();
    let tiles: Vec<_> = a.layers()[0].layout.tiles(0).take(12).collect();
    assert!(a.read_tiles(&tiles[..5], &|_| true).iter().all(Result::is_ok));
    drop(a);
    let b = Atlas::open_with(&url, &opts).unwrap();
    let before = b.network_stats().unwrap().requests;
    let got = b.read_tiles_cached(&tiles);
    assert_eq!(b.network_stats().unwrap().requests, before, "no request");
    let at_hand: Vec<bool> = got.iter().map(Option::is_some).collect();
    assert_eq!(at_hand, [[true; 5].as_slice(), &[false; 7]].concat());
    let local = Atlas::open(dir.path().join("hand.tsa")).unwrap();
    for (t, blob) in tiles.iter().zip(&got).take(5) {
        assert_eq!(blob.as_deref().unwrap(), local.read_tile(*t).unwrap().as_slice(), "{t}");
    }
}
