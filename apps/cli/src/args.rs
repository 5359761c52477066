//! Value parsers that refuse what would otherwise be accepted silently: non-finite or
//! non-positive numbers, absurd thread counts, and byte sizes with units.

/// Fails, saying so, when an atlas path is a folder (opening one would report only an
/// obscure "No such device").
pub(crate) fn atlas_file(path: &std::path::Path) -> anyhow::Result<()> {
    if path.is_dir() {
        anyhow::bail!("{}: is a directory, not an atlas file", path.display());
    }
    Ok(())
}

/// Most loader threads accepted: far past any useful count, short of exhausting the system.
pub(crate) const MAX_LOADER_THREADS: usize = 256;

/// Largest frame side accepted: the largest texture side every desktop GPU renders to.
pub(crate) const MAX_FRAME_SIDE: u32 = 16384;

/// Parses a frame size `WxH`, each side from 1 to [`MAX_FRAME_SIDE`].
pub(crate) fn frame_size(s: &str) -> Result<(u32, u32), String> {
    let (w, h) = crate::parse_size(s)?;
    if w == 0 || h == 0 || w > MAX_FRAME_SIDE || h > MAX_FRAME_SIDE {
        return Err(format!("'{s}': frame sides go from 1 to {MAX_FRAME_SIDE}"));
    }
    Ok((w, h))
}

/// Parses a finite number (NaN and infinities rejected).
pub(crate) fn finite_f32(s: &str) -> Result<f32, String> {
    let v: f32 = s.trim().parse().map_err(|_| format!("'{s}' is not a number"))?;
    if v.is_finite() { Ok(v) } else { Err(format!("'{s}' is not a finite number")) }
}

/// Parses a finite number greater than zero.
pub(crate) fn positive_f64(s: &str) -> Result<f64, String> {
    let v: f64 = s.trim().parse().map_err(|_| format!("'{s}' is not a number"))?;
    if v.is_finite() && v > 0.0 {
        Ok(v)
    } else {
        Err(format!("'{s}' must be a finite number greater than 0"))
    }
}

/// Parses a finite number of zero or more.
pub(crate) fn non_negative_f32(s: &str) -> Result<f32, String> {
    let v = finite_f32(s)?;
    if v >= 0.0 { Ok(v) } else { Err(format!("'{s}' must not be negative")) }
}

/// Parses a loader thread count: 0 (one per core but one) up to [`MAX_LOADER_THREADS`].
pub(crate) fn loader_threads(s: &str) -> Result<usize, String> {
    let n: usize = s.trim().parse().map_err(|_| format!("'{s}' is not a thread count"))?;
    if n > MAX_LOADER_THREADS {
        return Err(format!(
            "{n} loader threads is too many: at most {MAX_LOADER_THREADS} (0: one per core but one)"
        ));
    }
    Ok(n)
}

/// Parses a byte size: a number with an optional unit B, K/KiB, M/MiB, G/GiB, T/TiB
/// (powers of 1024, case-insensitive), e.g. `4GiB`, `512M`, `1.5G`.
pub(crate) fn byte_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => return Err(format!("'{s}' is not a size: use e.g. 4GiB, 512MiB or a byte count")),
    };
    let v: f64 = num.parse().map_err(|_| format!("'{s}' is not a size: use e.g. 4GiB, 512MiB"))?;
    let bytes = v * (1u64 << shift) as f64;
    if !(bytes >= 1.0 && bytes < u64::MAX as f64) {
        return Err(format!("'{s}' is not a usable size"));
    }
    Ok(bytes as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parsers_refuse_what_they_should() {
        assert!(finite_f32("NaN").is_err() && finite_f32("inf").is_err() && finite_f32("-1.5") == Ok(-1.5));
        assert!(positive_f64("0").is_err() && positive_f64("NaN").is_err() && positive_f64("-3").is_err());
        assert_eq!(positive_f64("16.6"), Ok(16.6));
        assert!(loader_threads("5000").is_err());
        assert_eq!(loader_threads("8"), Ok(8));
        assert_eq!(byte_size("4GiB"), Ok(4 << 30));
        assert_eq!(byte_size("512m"), Ok(512 << 20));
        assert_eq!(byte_size("1000"), Ok(1000));
        assert_eq!(byte_size("1.5G"), Ok(3 << 29));
        assert!(frame_size("0x720").is_err() && frame_size("99999x10").is_err());
        assert_eq!(frame_size("640x360"), Ok((640, 360)));
        assert!(byte_size("4 parsecs").is_err() && byte_size("0").is_err() && byte_size("").is_err());
    }
}
