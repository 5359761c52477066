//! How texel values are interpreted: sRGB colour or linear data.

use serde::{Deserialize, Serialize};

/// How texel values are to be interpreted (and filtered).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[repr(u8)]
pub enum ColorSpace {
    /// sRGB-encoded colour: filtered in linear light.
    Srgb = 0,
    /// Linear data (normals, roughness): filtered as stored.
    Linear = 1,
}
