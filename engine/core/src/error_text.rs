//! One line for an error and its causes, each said once: many errors show their cause's
//! text in their own message and also return it as their source.

use std::error::Error;

/// `err` and its chain of sources joined by ": ", leaving out a cause whose text its
/// parent's message already contains (so "Is a directory (os error 21)" appears once).
pub fn chain(err: &(dyn Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut parent = text.clone();
    let mut cause = err.source();
    while let Some(e) = cause {
        let s = e.to_string();
        if !parent.contains(&s) {
            text.push_str(": ");
            text.push_str(&s);
        }
        parent = s;
        cause = e.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert!(text.starts_with("baking x.tsa: x.tsa: "), "{text}");
    }
}
