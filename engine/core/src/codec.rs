//! Per-tile codecs: how a tile's texels are stored on disk and turned back into
//! GPU-ready bytes.

use serde::{Deserialize, Serialize};

/// How a tile's texels are stored in the atlas.
///
/// The numeric value is the on-disk code (see `docs/atlas-format.md`); new codecs
/// (Basis Universal ETC1S / UASTC) take the next free codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
#[repr(u8)]
pub enum Codec {
    /// Uncompressed RGBA8, row-major, tile rows top to bottom.
    Raw = 0,
    /// RGBA8 compressed with the LZ4 block format (`lz4_flex`).
    Lz4 = 1,
}

impl Codec {
    /// Every codec this build can read and write.
    pub const ALL: [Codec; 2] = [Codec::Raw, Codec::Lz4];

    /// The codec stored under on-disk code `code`, if this build knows it.
    pub fn from_code(code: u8) -> Option<Self> {
        Self::ALL.into_iter().find(|c| *c as u8 == code)
    }

    /// Short lowercase name, as used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Codec::Raw => "raw",
            Codec::Lz4 => "lz4",
        }
    }

    /// Encodes `rgba` (RGBA8 texels). The result may be larger than the input for
    /// incompressible data; the baker then stores the tile raw.
    pub fn encode(self, rgba: &[u8]) -> Vec<u8> {
        match self {
            Codec::Raw => rgba.to_vec(),
            Codec::Lz4 => lz4_flex::block::compress(rgba),
        }
    }

    /// Decodes a stored tile back into `raw_len` bytes of RGBA8.
    pub fn decode(self, data: &[u8], raw_len: usize) -> Result<Vec<u8>, CodecError> {
        match self {
            Codec::Raw if data.len() == raw_len => Ok(data.to_vec()),
            Codec::Raw => Err(CodecError::Length { expected: raw_len, found: data.len() }),
            Codec::Lz4 => {
                let out = lz4_flex::block::decompress(data, raw_len)
                    .map_err(|e| CodecError::Corrupt(e.to_string()))?;
                if out.len() == raw_len {
                    Ok(out)
                } else {
                    Err(CodecError::Length { expected: raw_len, found: out.len() })
                }
            }
        }
    }
}

impl std::fmt::Display for Codec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Codec {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Self::ALL.into_iter().find(|c| c.name() == s).ok_or_else(|| {
            let names: Vec<_> = Self::ALL.iter().map(|c| c.name()).collect();
            format!("unknown codec '{s}' (expected one of: {})", names.join(", "))
        })
    }
}

/// A stored tile that cannot be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CodecError {
    /// The decoded size is not what the index promised.
    #[error("decoded {found} bytes, expected {expected}")]
    Length {
        /// Size the index promised.
        expected: usize,
        /// Size found.
        found: usize,
    },
    /// The compressed stream is malformed.
    #[error("corrupt compressed data: {0}")]
    Corrupt(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_every_codec() {
        let data: Vec<u8> = (0..136 * 136 * 4).map(|i| (i % 251) as u8).collect();
        for c in Codec::ALL {
            let enc = c.encode(&data);
            assert_eq!(c.decode(&enc, data.len()).unwrap(), data, "{c}");
            assert_eq!(c.name().parse::<Codec>().unwrap(), c);
            assert_eq!(Codec::from_code(c as u8), Some(c));
        }
        assert!("basis".parse::<Codec>().is_err());
    }

    #[test]
    fn corrupt_lz4_is_an_error() {
        let data = vec![7u8; 4096];
        let mut enc = Codec::Lz4.encode(&data);
        enc.truncate(enc.len() / 2);
        assert!(Codec::Lz4.decode(&enc, data.len()).is_err());
        assert!(Codec::Raw.decode(&data[..10], data.len()).is_err());
    }
}
