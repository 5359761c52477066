//! Where a scene's files may come from: URIs resolved inside the glTF's own folder
//! (percent-decoded, `data:` URIs decoded), and image files checked before use.

use super::*;

/// The folder a glTF's relative URIs are resolved against.
pub(super) fn scene_folder(gltf: &Path) -> &Path {
    match gltf.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// The file a buffer or image URI (not `data:`) of `gltf` names, after percent-decoding.
///
/// Under [`ScenePaths::Confined`] the URI must be relative, must not climb above the
/// glTF's folder, and, where the file exists, its real path (symbolic links followed)
/// must lie in the folder's real path. Nothing outside is opened, so an error says
/// nothing about the refused file. `what` names the URI's use for messages.
pub(crate) fn resolve_uri(
    gltf: &Path,
    uri: &str,
    what: &str,
    paths: ScenePaths,
) -> Result<PathBuf, SceneError> {
    let refuse = |reason: String| SceneError::OutsidePath {
        gltf: gltf.to_path_buf(),
        what: what.to_string(),
        uri: uri.to_string(),
        reason,
    };
    let base = scene_folder(gltf);
    let decoded = match uri_scheme(uri) {
        None => percent_decode(uri),
        Some(scheme) if scheme.eq_ignore_ascii_case("file") => {
            // file:///abs, file://localhost/abs or file:/abs: always an absolute path.
            let rest = &uri[5..];
            let rest = rest.strip_prefix("//").map_or(rest, |r| r.strip_prefix("localhost").unwrap_or(r));
            if !rest.starts_with('/') {
                return Err(SceneError::Gltf {
                    path: gltf.to_path_buf(),
                    reason: format!("{what} URI '{uri}': only local file:// URLs are supported"),
                });
            }
            percent_decode(rest)
        }
        Some(scheme) => {
            return Err(SceneError::Gltf {
                path: gltf.to_path_buf(),
                reason: format!(
                    "{what} URI '{uri}': scheme '{scheme}:' is not supported (only relative paths and data: URIs)"
                ),
            });
        }
    };
    let relative = Path::new(&decoded);
    let file = base.join(relative);
    if paths == ScenePaths::Anywhere {
        return Ok(file);
    }
    let mut depth = 0usize;
    for c in relative.components() {
        match c {
            std::path::Component::Normal(_) => depth += 1,
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir if depth > 0 => depth -= 1,
            std::path::Component::ParentDir => return Err(refuse("climbs out of the scene's folder".into())),
            std::path::Component::RootDir | std::path::Component::Prefix(_) => {
                return Err(refuse("is an absolute path".into()));
            }
        }
    }
    confine(gltf, &file)
        .map_err(|()| refuse("leads out of the scene's folder through a symbolic link".into()))?;
    Ok(file)
}

/// Checks that `file`, if it exists, really lies inside the folder of `gltf` (symbolic
/// links followed). A file that does not exist passes: reading it will say so.
pub(super) fn confine(gltf: &Path, file: &Path) -> Result<(), ()> {
    // The rule split atlases' data objects and shard parts follow too.
    if crate::local_file::lies_in(scene_folder(gltf), file) { Ok(()) } else { Err(()) }
}

/// Checks, just before reading, that an image file of `scene` is still allowed by its
/// [`ScenePaths`] (a symbolic link may have changed since the scene was loaded).
pub(crate) fn check_image_path(scene: &MaterialScene, file: &Path) -> Result<(), SceneError> {
    if scene.paths == ScenePaths::Anywhere {
        return Ok(());
    }
    confine(&scene.source, file).map_err(|()| SceneError::OutsidePath {
        gltf: scene.source.clone(),
        what: "image".into(),
        uri: file.display().to_string(),
        reason: "leads out of the scene's folder through a symbolic link".into(),
    })
}

/// The scheme of an absolute URI (`data`, `file`, `http`), or `None` for a relative one.
pub(super) fn uri_scheme(uri: &str) -> Option<&str> {
    let (scheme, _) = uri.split_once(':')?;
    let mut chars = scheme.chars();
    let first = chars.next()?;
    (first.is_ascii_alphabetic() && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')))
        .then_some(scheme)
}

/// Decodes `%XX` escapes of a relative URI.
pub(super) fn percent_decode(uri: &str) -> String {
    let b = uri.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        if b[i] == b'%'
            && i + 2 < b.len()
            && let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2]))
        {
            out.push((h * 16 + l) as u8);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The bytes of a base64 `data:` URI.
pub(super) fn data_uri(uri: &str) -> Option<Vec<u8>> {
    let (head, payload) = uri.strip_prefix("data:")?.split_once(',')?;
    if !head.ends_with(";base64") {
        return Some(percent_decode(payload).into_bytes());
    }
    base64_decode(payload)
}

/// Standard-alphabet base64 with optional padding; `None` on a bad character.
pub(super) fn base64_decode(s: &str) -> Option<Vec<u8>> {
    let value = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' | b'-' => 62,
            b'/' | b'_' => 63,
            _ => return None,
        } as u32)
    };
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for &c in s.as_bytes().iter().filter(|c| !c.is_ascii_whitespace() && **c != b'=') {
        acc = (acc << 6) | value(c)?;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Some(out)
}

/// The encoded bytes of glTF image `index` of `gltf` (buffer view or data URI), reading
/// its buffers under `paths`.
pub(crate) fn embedded_image_bytes(
    gltf: &Path,
    index: usize,
    paths: ScenePaths,
) -> Result<Vec<u8>, SceneError> {
    let (doc, buffers) = open_document(gltf, paths)?;
    let bad = |reason: String| SceneError::Gltf { path: gltf.to_path_buf(), reason };
    let image = doc.images().nth(index).ok_or_else(|| bad(format!("no image {index}")))?;
    match image.source() {
        gltf::image::Source::View { view, .. } => {
            let data = &buffers[view.buffer().index()];
            view.offset()
                .checked_add(view.length())
                .and_then(|end| data.get(view.offset()..end))
                .map(<[u8]>::to_vec)
                .ok_or_else(|| bad(format!("image {index}: buffer view outside its buffer")))
        }
        gltf::image::Source::Uri { uri, .. } => {
            data_uri(uri).ok_or_else(|| bad(format!("image {index}: bad data URI")))
        }
    }
}

/// Checks that an image file exists and that its header can be read.
pub(crate) fn check_image_file(file: &Path, material: &str) -> Result<(), SceneError> {
    match crate::bake::input_file::check_input(file) {
        Ok(_) => {}
        // Refused unopened: a FIFO would block the header read, a device never end it.
        Err(crate::bake::source::SourceError::NotRegular { kind, .. }) => {
            return Err(SceneError::BadTexture {
                image: file.display().to_string(),
                material: material.into(),
                reason: format!("it is {kind}, not an image file"),
            });
        }
        Err(_) => {
            return Err(SceneError::MissingTexture { image: file.to_path_buf(), material: material.into() });
        }
    }
    image_size(file, material).map(|_| ())
}

/// The size of an image file (PNG, JPEG, KTX2…), from its header.
pub(crate) fn image_size(file: &Path, material: &str) -> Result<(u32, u32), SceneError> {
    let bad = |reason: String| SceneError::BadTexture {
        image: file.display().to_string(),
        material: material.into(),
        reason,
    };
    let head = crate::bake::ktx2::read_head(file).map_err(|e| bad(e.to_string()))?;
    if head.starts_with(&crate::bake::ktx2::IDENTIFIER) {
        let h = crate::bake::ktx2::Header::parse(file, &head).map_err(|e| bad(e.to_string()))?;
        return Ok((h.width, h.height));
    }
    image::ImageReader::open(file)
        .map_err(|e| bad(e.to_string()))?
        .with_guessed_format()
        .map_err(|e| bad(e.to_string()))?
        .into_dimensions()
        .map_err(|e| bad(e.to_string()))
}
