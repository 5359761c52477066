//! Structured mutations of KTX2 files for the `image` fuzz target: one field of the header
//! or level index set to a value readers get wrong (0, 1, the largest, 2^32, sizes near
//! the file's length), so that forged lengths and offsets are tried even where random
//! byte flips would rarely build one.

/// A field of a KTX2 file: where it lies and how wide it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Field {
    /// Its name in the KTX2 specification.
    pub name: &'static str,
    /// The level-index entry it belongs to, if any.
    pub level: Option<u32>,
    /// Byte offset in the file.
    pub at: usize,
    /// Width in bytes: 4 or 8.
    pub bytes: usize,
}

/// The header's fields after the identifier.
const HEADER: [(&str, usize, usize); 15] = [
    ("vkFormat", 12, 4),
    ("typeSize", 16, 4),
    ("pixelWidth", 20, 4),
    ("pixelHeight", 24, 4),
    ("pixelDepth", 28, 4),
    ("layerCount", 32, 4),
    ("faceCount", 36, 4),
    ("levelCount", 40, 4),
    ("supercompressionScheme", 44, 4),
    ("dfdByteOffset", 48, 4),
    ("dfdByteLength", 52, 4),
    ("kvdByteOffset", 56, 4),
    ("kvdByteLength", 60, 4),
    ("sgdByteOffset", 64, 8),
    ("sgdByteLength", 72, 8),
];

/// A level-index entry's fields, each 8 bytes.
const LEVEL: [&str; 3] = ["byteOffset", "byteLength", "uncompressedByteLength"];

/// The fields `file` holds: the header's, then those of each level-index entry inside the
/// file (at most 16 levels).
pub fn fields(file: &[u8]) -> Vec<Field> {
    let mut out: Vec<Field> = HEADER
        .iter()
        .filter(|&&(_, at, bytes)| at + bytes <= file.len())
        .map(|&(name, at, bytes)| Field { name, level: None, at, bytes })
        .collect();
    let levels = read(file, 40, 4).unwrap_or(1).clamp(1, 16) as u32;
    for level in 0..levels {
        for (k, name) in LEVEL.iter().enumerate() {
            let at = 80 + 24 * level as usize + 8 * k;
            if at + 8 <= file.len() {
                out.push(Field { name, level: Some(level), at, bytes: 8 });
            }
        }
    }
    out
}

/// The values to try in `field` of `file`: 0, 1, the largest and near it, 2^31, 2^32,
/// 5 GiB, the file's length and its neighbours, and the field's own value's neighbours
/// and double (those that fit the field).
pub fn values(file: &[u8], field: &Field) -> Vec<u64> {
    let max = if field.bytes == 4 { u64::from(u32::MAX) } else { u64::MAX };
    let len = file.len() as u64;
    let now = read(file, field.at, field.bytes).unwrap_or(0);
    let mut v = vec![
        0,
        1,
        max,
        max - 1,
        1 << 31,
        1 << 32,
        5 << 30,
        len.saturating_sub(1),
        len,
        len + 1,
        now.saturating_add(1),
        now.saturating_sub(1),
        now.saturating_mul(2),
    ];
    v.retain(|&x| x <= max && x != now);
    v.sort_unstable();
    v.dedup();
    v
}

/// `file` with `field` set to `value` (cut to the field's width).
pub fn set(file: &[u8], field: &Field, value: u64) -> Vec<u8> {
    let mut out = file.to_vec();
    if let Some(place) = out.get_mut(field.at..field.at + field.bytes) {
        place.copy_from_slice(&value.to_le_bytes()[..field.bytes]);
    }
    out
}

/// One mutation of `file` chosen by `pick` (a field, then one of its values); `None` when
/// the file is too short to hold a field.
pub fn mutate(file: &[u8], pick: u64) -> Option<(Field, u64, Vec<u8>)> {
    let fields = fields(file);
    let field = *fields.get((pick % fields.len().max(1) as u64) as usize)?;
    let values = values(file, &field);
    let value = *values.get(((pick >> 16) % values.len().max(1) as u64) as usize)?;
    Some((field, value, set(file, &field, value)))
}

/// The little-endian value of `bytes` bytes at `at` of `file`.
fn read(file: &[u8], at: usize, bytes: usize) -> Option<u64> {
    let mut v = [0u8; 8];
    v[..bytes].copy_from_slice(file.get(at..at.checked_add(bytes)?)?);
    Some(u64::from_le_bytes(v))
}
