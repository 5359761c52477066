//! One line for an error and its causes, each said once (many errors show their cause's
//! text in their own message and also return it as their source), and URLs made safe to
//! print: query-string values and user info, where presigned and signed URLs carry their
//! credentials, replaced by a marker.

use std::borrow::Cow;
use std::error::Error;

/// What stands in place of a redacted query value or user info.
pub const REDACTED: &str = "REDACTED";

/// Query parameters (lower case) that carry a credential or a signature, redacted
/// wherever they appear in a message, inside a URL or not.
const SECRET_PARAMS: [&str; 12] = [
    "x-amz-credential",
    "x-amz-signature",
    "x-amz-security-token",
    "x-goog-credential",
    "x-goog-signature",
    "awsaccesskeyid",
    "signature",
    "sig",
    "token",
    "access_token",
    "key",
    "credential",
];

/// `err` and its chain of sources joined by ": ", leaving out a cause whose text its
/// parent's message already contains (so "Is a directory (os error 21)" appears once),
/// and the name a cause starts with when its parent ended with it ("capturing x.tsa" and
/// "x.tsa: tile … unavailable" make "capturing x.tsa: tile … unavailable"); URLs
/// [`redact`]ed, so a presigned URL's credentials never reach a terminal or a log.
pub fn chain(err: &(dyn Error + 'static)) -> String {
    let mut text = redact(&err.to_string()).into_owned();
    let mut parent = text.clone();
    let mut cause = err.source();
    while let Some(e) = cause {
        let s = redact(&e.to_string()).into_owned();
        if !parent.contains(&s) {
            let last_word = parent.rsplit(' ').next().unwrap_or_default();
            let own = match s.strip_prefix(last_word).and_then(|r| r.strip_prefix(": ")) {
                // Only a file name, path or URL: a word like "layer" may start a cause
                // for another reason.
                Some(rest) if last_word.contains(['.', '/']) => rest,
                _ => &s,
            };
            text.push_str(": ");
            text.push_str(own);
        }
        parent = s;
        cause = e.source();
    }
    text
}

/// `url` safe to print: every query value replaced by [`REDACTED`] (the parameter names
/// stay, so "X-Amz-Expires=REDACTED" still says what the URL was), user info before an
/// `@` and a fragment likewise. A text without `scheme://` is returned as it is.
pub fn redact_url(url: &str) -> Cow<'_, str> {
    let Some(scheme_end) = url.find("://") else { return Cow::Borrowed(url) };
    let rest_at = scheme_end + 3;
    let rest = &url[rest_at..];
    let authority_len = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..authority_len];
    let tail = &rest[authority_len..];
    if !authority.contains('@') && !tail.contains(['?', '#']) {
        return Cow::Borrowed(url);
    }
    let mut out = String::with_capacity(url.len());
    out.push_str(&url[..rest_at]);
    match authority.rsplit_once('@') {
        Some((_, host)) => {
            out.push_str(REDACTED);
            out.push('@');
            out.push_str(host);
        }
        None => out.push_str(authority),
    }
    let (before_fragment, fragment) = match tail.split_once('#') {
        Some((b, _)) => (b, true),
        None => (tail, false),
    };
    match before_fragment.split_once('?') {
        Some((path, query)) => {
            out.push_str(path);
            out.push('?');
            let pairs: Vec<String> = query
                .split('&')
                .map(|pair| match pair.split_once('=') {
                    Some((name, _)) => format!("{name}={REDACTED}"),
                    None => pair.to_owned(),
                })
                .collect();
            out.push_str(&pairs.join("&"));
        }
        None => out.push_str(before_fragment),
    }
    if fragment {
        out.push('#');
        out.push_str(REDACTED);
    }
    Cow::Owned(out)
}

/// `text` (an error message, a log line) safe to print: every URL in it passed through
/// [`redact_url`], and the value of every credential-bearing parameter outside a URL
/// (`X-Amz-Signature=…`, `sig=…`) replaced by [`REDACTED`].
pub fn redact(text: &str) -> Cow<'_, str> {
    // URLs end at whitespace or a quote; their scheme is the letters before "://".
    let is_end = |c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '<' | '>' | '`');
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    let mut changed = false;
    while let Some(found) = text[at..].find("://") {
        let mark = at + found;
        let start = text[at..mark]
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')))
            .map_or(at, |i| at + i + 1);
        let end = text[mark..].find(is_end).map_or(text.len(), |i| mark + i);
        // Punctuation after a URL ("…/a.tsa?x=1: refused") is the sentence's.
        let end = start + text[start..end].trim_end_matches([':', ',', ';', '.', ')']).len();
        out.push_str(&text[at..start]);
        let url = redact_url(&text[start..end]);
        changed |= matches!(url, Cow::Owned(_));
        out.push_str(&url);
        at = end;
    }
    out.push_str(&text[at..]);
    // Parameters quoted outside a URL ("…&X-Amz-Signature=abc", a header dump).
    let mut words = String::with_capacity(out.len());
    let mut rest = out.as_str();
    while !rest.is_empty() {
        let split = rest.find(is_end).unwrap_or(rest.len());
        let (word, tail) = rest.split_at(split);
        let sep_len = tail.chars().next().map_or(0, char::len_utf8);
        let (sep, tail) = tail.split_at(sep_len);
        if word.contains("://") {
            words.push_str(word);
        } else {
            let pairs: Vec<Cow<'_, str>> = word
                .split('&')
                .map(|pair| match pair.split_once('=') {
                    Some((name, value)) if value != REDACTED && secret_name(name) => {
                        changed = true;
                        Cow::Owned(format!("{name}={REDACTED}"))
                    }
                    _ => Cow::Borrowed(pair),
                })
                .collect();
            words.push_str(&pairs.join("&"));
        }
        words.push_str(sep);
        rest = tail;
    }
    if changed { Cow::Owned(words) } else { Cow::Borrowed(text) }
}

/// Whether the parameter `name` (its last `?`- or `;`-separated part, any case) carries a
/// credential.
fn secret_name(name: &str) -> bool {
    let last = name.rsplit(['?', ';', ',', '(', '[']).next().unwrap_or(name);
    SECRET_PARAMS.iter().any(|s| last.eq_ignore_ascii_case(s))
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    const PRESIGNED: &str = "http://127.0.0.1:9000/textures/a.tsa?X-Amz-Algorithm=AWS4-HMAC-SHA256\
        &X-Amz-Credential=AKIAEXAMPLE%2F20261205%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Date=20261205T000000Z\
        &X-Amz-Expires=600&X-Amz-SignedHeaders=host&X-Amz-Signature=0123456789abcdef";

    #[test]
    fn urls_lose_query_values_and_user_info() {
        let r = redact_url(PRESIGNED);
        assert!(!r.contains("AKIAEXAMPLE") && !r.contains("0123456789abcdef"), "{r}");
        assert!(r.starts_with("http://127.0.0.1:9000/textures/a.tsa?X-Amz-Algorithm=REDACTED&"), "{r}");
        assert!(r.contains("X-Amz-Expires=REDACTED"), "{r}");
        assert_eq!(redact_url("https://user:pw@host/a.tsa#frag"), "https://REDACTED@host/a.tsa#REDACTED");
        assert_eq!(redact_url("s3://bucket/key.tsa"), "s3://bucket/key.tsa");
        assert!(matches!(redact_url("/local/a.tsa"), Cow::Borrowed(_)));
        assert_eq!(redact_url("https://h/a?uploads"), "https://h/a?uploads");
    }

    #[test]
    fn messages_lose_every_url_secret() {
        let m = format!("capturing {PRESIGNED}: GET {PRESIGNED} failed: 500");
        let r = redact(&m);
        assert_eq!(r.matches("REDACTED: ").count(), 1, "the colon after the URL stays: {r}");
        assert!(!r.contains("AKIAEXAMPLE") && !r.contains("0123456789abcdef"), "{r}");
        assert!(
            r.starts_with("capturing http://127.0.0.1:9000/textures/a.tsa?") && r.ends_with("failed: 500"),
            "{r}"
        );
        let quoted = redact("url \"https://h/a?sig=s3cr3t&se=2030\" refused");
        assert_eq!(quoted, "url \"https://h/a?sig=REDACTED&se=REDACTED\" refused");
        let loose = redact("params X-Amz-Credential=AKIA1&X-Amz-Signature=abc and sig=zzz, done");
        assert!(!loose.contains("AKIA1") && !loose.contains("abc ") && !loose.contains("zzz"), "{loose}");
        assert!(matches!(redact("nothing secret here: a.tsa, key=x"), Cow::Owned(_)));
        assert!(matches!(redact("nothing secret: a.tsa"), Cow::Borrowed(_)));
    }

    #[derive(Debug, thiserror::Error)]
    #[error("{path}: {source}")]
    struct Shows {
        path: String,
        source: std::io::Error,
    }

    #[derive(Debug, thiserror::Error)]
    #[error("baking {0}")]
    struct Context(String, #[source] Shows);

    #[test]
    fn each_cause_is_said_once() {
        let io = std::io::Error::from_raw_os_error(21);
        let os = io.to_string();
        let err = Context("x.tsa".into(), Shows { path: "x.tsa".into(), source: io });
        let text = chain(&err);
        assert_eq!(text.matches(&os).count(), 1, "{text}");
        assert!(text.starts_with("baking x.tsa: "), "{text}");
        assert_eq!(text.matches("x.tsa").count(), 1, "the path once: {text}");
    }

    #[derive(Debug, thiserror::Error)]
    #[error("capturing {0}")]
    struct Capturing(String, #[source] Shows);

    #[test]
    fn a_location_is_said_once_and_redacted() {
        let url = "http://h/a.tsa?X-Amz-Credential=AKIAEXAMPLE&X-Amz-Signature=feed";
        let io = std::io::Error::other("connection refused");
        let err = Capturing(url.into(), Shows { path: url.into(), source: io });
        let text = chain(&err);
        assert_eq!(
            text,
            "capturing http://h/a.tsa?X-Amz-Credential=REDACTED&X-Amz-Signature=REDACTED: connection refused"
        );
    }
}
