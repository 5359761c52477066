//! The page's query string: which atlas, camera, overlay and disk-tier budget.

use tessera::web::DEFAULT_DISK_TIER_BYTES;

use crate::free_camera::CameraChoice;

/// The atlas the page streams without `?atlas=` (beside the page).
const DEFAULT_ATLAS: &str = "atlas.tsa";

/// What the page's query string asks for.
pub(crate) struct Query {
    /// The atlas to stream (absolute URL); `None`: the procedural pattern
    /// (`?scene=pattern`).
    pub(crate) atlas: Option<String>,
    pub(crate) camera: CameraChoice,
    /// Whether the overlay's panel starts shown (`?overlay=0` hides it).
    pub(crate) overlay: bool,
    /// The disk tier's budget in bytes (`?disk-cache-mib=N`; 0 turns it off).
    pub(crate) disk_budget: u64,
}

impl Query {
    /// `?atlas=URL` (default [`DEFAULT_ATLAS`] beside the page), `?camera=free|static|fly`
    /// (default free), `?overlay=0|1` (default 1), `?disk-cache-mib=N` (the disk tier's
    /// budget, default [`DEFAULT_DISK_TIER_BYTES`]; 0 turns it off), `?scene=pattern`.
    pub(crate) fn of_page(window: &web_sys::Window) -> Result<Self, String> {
        let location = window.location();
        let search = location.search().unwrap_or_default();
        let params = web_sys::UrlSearchParams::new_with_str(&search).map_err(|e| format!("{e:?}"))?;
        let camera = CameraChoice::parse(&params.get("camera").unwrap_or_else(|| "free".into()))?;
        let overlay = match params.get("overlay").as_deref() {
            None | Some("1") => true,
            Some("0") => false,
            Some(other) => return Err(format!("overlay=\"{other}\" is neither 0 nor 1")),
        };
        let disk_budget = match params.get("disk-cache-mib") {
            None => DEFAULT_DISK_TIER_BYTES,
            Some(mib) => mib
                .trim()
                .parse::<u64>()
                .ok()
                .and_then(|m| m.checked_mul(1 << 20))
                .ok_or_else(|| format!("disk-cache-mib=\"{mib}\" is not a whole number of MiB"))?,
        };
        let atlas = match params.get("scene").as_deref() {
            Some("pattern") => None,
            Some("atlas") | None => {
                let given = params.get("atlas").unwrap_or_else(|| DEFAULT_ATLAS.into());
                let base = location.href().map_err(|e| format!("{e:?}"))?;
                let url = web_sys::Url::new_with_base(&given, &base)
                    .map_err(|_| format!("atlas=\"{given}\" is not a URL"))?;
                Some(url.href())
            }
            Some(other) => {
                return Err(format!("unknown scene \"{other}\" (use scene=atlas or scene=pattern)"));
            }
        };
        Ok(Self { atlas, camera, overlay, disk_budget })
    }
}
