//! Rectangle packing for material atlases: places texture rectangles (in tiles) into one
//! virtual texture so that each keeps whole tiles for as many mips as its size allows.

/// Largest alignment, in tiles, a rectangle asks for along one axis.
pub const MAX_ALIGN: u32 = 64;

/// Where [`pack`] put each rectangle, and the size of the bin, all in tiles.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Packing {
    /// Top-left corner of each rectangle, in the order the sizes were given.
    pub positions: Vec<(u32, u32)>,
    /// Width of the bin.
    pub width: u32,
    /// Height of the bin.
    pub height: u32,
}

/// The alignment a side of `n` tiles asks for: the largest power of two dividing `n`,
/// at most [`MAX_ALIGN`]. A rectangle at a multiple of it keeps whole tiles down the mips.
pub fn alignment(n: u32) -> u32 {
    if n == 0 { MAX_ALIGN } else { (1u32 << n.trailing_zeros()).min(MAX_ALIGN) }
}

/// The largest `m` such that `x`, `y`, `w` and `h` (texels) are all multiples of
/// `tile · 2^m`: the coarsest mip at which the rectangle still owns whole tiles.
/// Zero when they are not even multiples of `tile`.
pub fn clean_mips(x: u32, y: u32, w: u32, h: u32, tile: u32) -> u32 {
    let tile = u64::from(tile.max(1));
    let mut m = 0;
    while m < 31 && [x, y, w, h].iter().all(|&v| u64::from(v).is_multiple_of(tile << (m + 1))) {
        m += 1;
    }
    m
}

/// The tiles `[x0, y0, x1, y1)` that the texel rectangle `[x, y, w, h]` (mip-0 texels)
/// touches on mip `mip` of a texture of `tile`-texel tiles.
pub fn tile_span(rect: [u32; 4], mip: u32, tile: u32) -> [u64; 4] {
    let unit = u64::from(tile.max(1)) << mip.min(40);
    let [x, y, w, h] = rect.map(u64::from);
    [x / unit, y / unit, (x + w).div_ceil(unit), (y + h).div_ceil(unit)]
}

/// The coarsest mip, at most `max`, up to which rectangle `i` of `rects` shares no tile
/// with any other rectangle: on those mips its tiles hold only its own texels (and
/// unused filler), so it can be sampled, and its borders built, on its own. At least
/// [`clean_mips`] for packed rectangles; the whole chain for a lone rectangle.
pub fn owned_mips(rects: &[[u32; 4]], i: usize, tile: u32, max: u32) -> u32 {
    let Some(&mine) = rects.get(i) else { return 0 };
    for m in 0..=max {
        let [ax0, ay0, ax1, ay1] = tile_span(mine, m, tile);
        let shared = rects.iter().enumerate().any(|(j, &other)| {
            let [bx0, by0, bx1, by1] = tile_span(other, m, tile);
            j != i && ax0 < bx1 && bx0 < ax1 && ay0 < by1 && by0 < ay1
        });
        if shared {
            return m.saturating_sub(1);
        }
    }
    max
}

/// Packs rectangles of `sizes` tiles (each side at least 1; a zero side counts as 1)
/// without overlap, each at a multiple of its per-axis [`alignment`]. Big rectangles go
/// first, each at the lowest, then leftmost, free aligned spot of a bin whose width is
/// tried at a few values. The result with the shortest longer side wins (a squarish virtual
/// texture keeps the page table and the mip chain small), then the one with the least area.
pub fn pack(sizes: &[(u32, u32)]) -> Packing {
    if sizes.is_empty() {
        return Packing::default();
    }
    let sizes: Vec<(u32, u32)> = sizes.iter().map(|&(w, h)| (w.max(1), h.max(1))).collect();
    let mut order: Vec<usize> = (0..sizes.len()).collect();
    order.sort_by_key(|&i| {
        let (w, h) = sizes[i];
        (std::cmp::Reverse(u64::from(w) * u64::from(h)), std::cmp::Reverse(w.max(h)), i)
    });
    let max_w = sizes.iter().map(|s| s.0).max().unwrap_or(1);
    let area: u64 = sizes.iter().map(|&(w, h)| u64::from(w) * u64::from(h)).sum();
    let side = (area as f64).sqrt().ceil() as u32;
    let mut widths: Vec<u32> = vec![max_w, side.max(max_w)];
    let mut w = max_w.next_power_of_two();
    while w <= side.saturating_mul(2).max(max_w) {
        widths.push(w.max(max_w));
        w = w.saturating_mul(2);
    }
    widths.push(side.saturating_mul(2).max(max_w));
    widths.sort_unstable();
    widths.dedup();
    widths
        .into_iter()
        .map(|w| pack_into_width(&sizes, &order, w))
        .min_by_key(|p| (p.width.max(p.height), u64::from(p.width) * u64::from(p.height), p.width))
        .unwrap_or_default()
}

/// Packs into a bin `bin_w` tiles wide that grows downwards as needed.
fn pack_into_width(sizes: &[(u32, u32)], order: &[usize], bin_w: u32) -> Packing {
    let mut grid = Grid { width: bin_w as usize, cells: Vec::new() };
    let mut positions = vec![(0, 0); sizes.len()];
    let (mut used_w, mut used_h) = (0u32, 0u32);
    for &i in order {
        let (w, h) = sizes[i];
        let (ax, ay) = (alignment(w), alignment(h));
        let mut y = 0u32;
        let spot = 'search: loop {
            // Rows below the used area are empty, so a spot is always found there.
            let mut x = 0u32;
            while x + w <= bin_w {
                if grid.is_free(x, y, w, h) {
                    break 'search (x, y);
                }
                x += ax;
            }
            y += ay;
        };
        grid.fill(spot.0, spot.1, w, h);
        positions[i] = spot;
        used_w = used_w.max(spot.0 + w);
        used_h = used_h.max(spot.1 + h);
    }
    Packing { positions, width: used_w, height: used_h }
}

/// Occupancy of the bin, one bool per tile, rows added on demand.
struct Grid {
    width: usize,
    cells: Vec<bool>,
}

impl Grid {
    fn rows(&self) -> usize {
        self.cells.len() / self.width
    }

    fn is_free(&self, x: u32, y: u32, w: u32, h: u32) -> bool {
        let (x, w) = (x as usize, w as usize);
        let end = (y as usize + h as usize).min(self.rows());
        (y as usize..end).all(|r| !self.cells[r * self.width + x..r * self.width + x + w].iter().any(|&c| c))
    }

    fn fill(&mut self, x: u32, y: u32, w: u32, h: u32) {
        let end = y as usize + h as usize;
        if end > self.rows() {
            self.cells.resize(end * self.width, false);
        }
        for r in y as usize..end {
            self.cells[r * self.width + x as usize..r * self.width + (x + w) as usize].fill(true);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    #[test]
    fn owned_mips_of_lone_packed_and_touching_rectangles() {
        // A lone rectangle owns the whole chain, aligned or not.
        assert_eq!(owned_mips(&[[0, 0, 10880, 5504]], 0, 128, 7), 7);
        // Two 1024² side by side own mips 0..=3 (at mip 4 both fall in one tile).
        let two = [[0, 0, 1024, 1024], [1024, 0, 1024, 1024]];
        assert_eq!(owned_mips(&two, 0, 128, 6), 3);
        assert_eq!(owned_mips(&two, 1, 128, 6), 3);
        assert!(owned_mips(&two, 0, 128, 6) >= clean_mips(0, 0, 1024, 1024, 128).min(3));
        // 512² beside a 1024²: they share a tile from mip 4 on (one 2048-texel tile).
        let mixed = [[0, 0, 1024, 1024], [1024, 0, 512, 512]];
        assert_eq!(owned_mips(&mixed, 1, 128, 6), 3);
        // Unaligned neighbours share the tile they both touch from mip 0.
        assert_eq!(owned_mips(&[[0, 0, 200, 128], [200, 0, 56, 128]], 0, 128, 6), 0);
        assert_eq!(owned_mips(&mixed, 5, 128, 6), 0, "no such rectangle");
    }
    use proptest::prelude::*;

    #[test]
    fn clean_mips_examples() {
        assert_eq!(clean_mips(0, 0, 1024, 1024, 128), 3);
        assert_eq!(clean_mips(1024, 0, 1024, 512, 128), 2);
        assert_eq!(clean_mips(128, 0, 1024, 1024, 128), 0);
        assert_eq!(clean_mips(0, 0, 100, 128, 128), 0);
    }

    #[test]
    fn equal_squares_pack_into_a_square() {
        let p = pack(&[(8, 8); 4]);
        assert_eq!((p.width, p.height), (16, 16));
    }

    proptest! {
        #[test]
        fn packing_is_valid_and_tight(sizes in proptest::collection::vec((1u32..20, 1u32..20), 1..24)) {
            let p = pack(&sizes);
            prop_assert_eq!(p.positions.len(), sizes.len());
            let mut owner = vec![usize::MAX; (p.width * p.height) as usize];
            for (i, (&(x, y), &(w, h))) in p.positions.iter().zip(&sizes).enumerate() {
                prop_assert!(x + w <= p.width && y + h <= p.height, "rect {} outside the bin", i);
                prop_assert_eq!(x % alignment(w), 0);
                prop_assert_eq!(y % alignment(h), 0);
                for yy in y..y + h {
                    for xx in x..x + w {
                        let cell = &mut owner[(yy * p.width + xx) as usize];
                        prop_assert_eq!(*cell, usize::MAX, "rects {} and {} overlap", *cell, i);
                        *cell = i;
                    }
                }
            }
            // Every cell of every rectangle maps back to that rectangle only.
            for (i, (&(x, y), &(w, h))) in p.positions.iter().zip(&sizes).enumerate() {
                for yy in y..y + h {
                    for xx in x..x + w {
                        prop_assert_eq!(owner[(yy * p.width + xx) as usize], i);
                    }
                }
            }
            let area: u64 = sizes.iter().map(|&(w, h)| u64::from(w * h)).sum();
            let slack = 64 * 64;
            prop_assert!(u64::from(p.width * p.height) <= 4 * area + slack,
                "bin {}x{} for area {}", p.width, p.height, area);
        }
    }
}
