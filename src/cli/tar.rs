//! The tar archives of `cp` (ustar, GNU long names, pax `path`): written
//! from a local file or directory, read into a local directory with every
//! entry kept inside it.

use std::io;
use std::path::{Component, Path, PathBuf};

const BLOCK: usize = 512;

/// A bad archive or an entry refused: the message names the entry.
#[derive(Debug, thiserror::Error)]
pub enum TarError {
    #[error("refusing tar entry {0:?}: it would be written outside the destination")]
    Outside(String),
    #[error("tar entry {0:?} is not below {1:?}, what was asked for")]
    Unexpected(String, String),
    #[error("bad tar archive: {0}")]
    Bad(String),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> TarError + '_ {
    move |source| TarError::Io { path: path.to_path_buf(), source }
}

fn octal(field: &mut [u8], v: u64) {
    let s = format!("{:0width$o}", v, width = field.len() - 1);
    field[..s.len()].copy_from_slice(s.as_bytes());
}

/// One header block.
fn header(name: &[u8], mode: u32, size: u64, kind: u8) -> [u8; BLOCK] {
    let mut h = [0u8; BLOCK];
    h[..name.len()].copy_from_slice(name);
    octal(&mut h[100..108], u64::from(mode & 0o7777));
    octal(&mut h[108..116], 0);
    octal(&mut h[116..124], 0);
    octal(&mut h[124..136], size);
    let mtime = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    octal(&mut h[136..148], mtime);
    h[156] = kind;
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    h[148..156].copy_from_slice(b"        ");
    let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
    let s = format!("{sum:06o}\0 ");
    h[148..156].copy_from_slice(s.as_bytes());
    h
}

fn push_entry(out: &mut Vec<u8>, name: &str, mode: u32, data: &[u8], kind: u8) {
    let name = name.as_bytes();
    if name.len() >= 100 {
        // GNU long name: its own entry before the real one
        let mut long = name.to_vec();
        long.push(0);
        out.extend_from_slice(&header(b"././@LongLink", 0, long.len() as u64, b'L'));
        pad_data(out, &long);
        out.extend_from_slice(&header(&name[..99], mode, data.len() as u64, kind));
    } else {
        out.extend_from_slice(&header(name, mode, data.len() as u64, kind));
    }
    pad_data(out, data);
}

fn pad_data(out: &mut Vec<u8>, data: &[u8]) {
    out.extend_from_slice(data);
    out.resize(out.len().div_ceil(BLOCK) * BLOCK, 0);
}

/// An archive of `src` (a file or a directory, walked without following
/// links; links are left out) whose entries are named `name` and
/// `name/...`; at most `limit` bytes.
pub fn archive(src: &Path, name: &str, limit: usize) -> Result<Vec<u8>, TarError> {
    let mut out = Vec::new();
    add(&mut out, src, name, limit)?;
    out.extend_from_slice(&[0u8; 2 * BLOCK]);
    Ok(out)
}

fn add(out: &mut Vec<u8>, path: &Path, name: &str, limit: usize) -> Result<(), TarError> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::symlink_metadata(path).map_err(io_err(path))?;
    let mode = meta.permissions().mode();
    if meta.is_dir() {
        push_entry(out, &format!("{name}/"), mode, &[], b'5');
        let mut entries: Vec<_> =
            std::fs::read_dir(path).map_err(io_err(path))?.collect::<Result<_, _>>().map_err(io_err(path))?;
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let child = format!("{name}/{}", e.file_name().to_string_lossy());
            add(out, &e.path(), &child, limit)?;
        }
    } else if meta.is_file() {
        if out.len() as u64 + meta.len() > limit as u64 {
            return Err(TarError::Bad(format!("{} makes the archive larger than {limit} bytes", path.display())));
        }
        let data = std::fs::read(path).map_err(io_err(path))?;
        push_entry(out, name, mode, &data, b'0');
    } else {
        eprintln!("podwarden: cp: skipping {} (not a regular file or directory)", path.display());
    }
    Ok(())
}

fn parse_octal(field: &[u8]) -> Result<u64, TarError> {
    let s: String = field.iter().take_while(|&&b| b != 0).map(|&b| b as char).collect();
    let s = s.trim();
    if s.is_empty() {
        return Ok(0);
    }
    u64::from_str_radix(s, 8).map_err(|_| TarError::Bad(format!("bad number field {s:?}")))
}

fn cstr(field: &[u8]) -> String {
    String::from_utf8_lossy(&field[..field.iter().position(|&b| b == 0).unwrap_or(field.len())]).into_owned()
}

/// The path below `dest` an entry named `name` goes to, where the archive
/// holds `base` (and `base/...`): `base` is `dest` itself. Refuses
/// absolute names and `..`.
pub fn target(dest: &Path, base: &str, name: &str) -> Result<PathBuf, TarError> {
    let rel = Path::new(name.trim_end_matches('/'));
    let mut parts = Vec::new();
    for c in rel.components() {
        match c {
            Component::Normal(p) => parts.push(p.to_string_lossy().into_owned()),
            Component::CurDir => {}
            _ => return Err(TarError::Outside(name.to_string())),
        }
    }
    let base_parts: Vec<String> = Path::new(base)
        .components()
        .filter_map(|c| match c {
            Component::Normal(p) => Some(p.to_string_lossy().into_owned()),
            _ => None,
        })
        .collect();
    if parts.len() < base_parts.len() || parts[..base_parts.len()] != base_parts[..] {
        return Err(TarError::Unexpected(name.to_string(), base.to_string()));
    }
    let mut out = dest.to_path_buf();
    out.extend(&parts[base_parts.len()..]);
    Ok(out)
}

/// Write the entries of `archive` (holding `base`) into `dest`. Returns
/// how many files it wrote.
pub fn extract(archive: &[u8], base: &str, dest: &Path) -> Result<usize, TarError> {
    use std::os::unix::fs::PermissionsExt;
    let mut at = 0;
    let mut long_name: Option<String> = None;
    let mut files = 0;
    while at + BLOCK <= archive.len() {
        let h = &archive[at..at + BLOCK];
        if h.iter().all(|&b| b == 0) {
            break;
        }
        let size = parse_octal(&h[124..136])? as usize;
        let data_at = at + BLOCK;
        let data = archive.get(data_at..data_at + size).ok_or_else(|| TarError::Bad("truncated".into()))?;
        at = data_at + size.div_ceil(BLOCK) * BLOCK;
        let kind = h[156];
        let mut name = long_name.take().unwrap_or_else(|| {
            let prefix = cstr(&h[345..500]);
            let n = cstr(&h[..100]);
            if &h[257..262] == b"ustar" && !prefix.is_empty() { format!("{prefix}/{n}") } else { n }
        });
        match kind {
            b'L' => {
                long_name = Some(cstr(data));
                continue;
            }
            b'x' => {
                // pax: only its path matters here
                for rec in String::from_utf8_lossy(data).lines() {
                    if let Some((_, kv)) = rec.split_once(' ')
                        && let Some(p) = kv.strip_prefix("path=")
                    {
                        long_name = Some(p.to_string());
                    }
                }
                continue;
            }
            b'g' => continue,
            _ => {}
        }
        if name.is_empty() {
            name = ".".into();
        }
        let path = target(dest, base, &name)?;
        let mode = parse_octal(&h[100..108])? as u32 & 0o777;
        match kind {
            b'5' => {
                std::fs::create_dir_all(&path).map_err(io_err(&path))?;
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode | 0o700))
                    .map_err(io_err(&path))?;
            }
            b'0' | 0 | b'7' => {
                if let Some(dir) = path.parent() {
                    std::fs::create_dir_all(dir).map_err(io_err(dir))?;
                }
                std::fs::write(&path, data).map_err(io_err(&path))?;
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).map_err(io_err(&path))?;
                files += 1;
            }
            _ => eprintln!("podwarden: cp: skipping {name:?} (a link or special file)"),
        }
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("pw-tar-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn a_directory_goes_round_and_comes_back_the_same() {
        let d = tmp("round");
        let src = d.join("src");
        std::fs::create_dir_all(src.join("sub")).unwrap();
        std::fs::write(src.join("a.txt"), b"hello").unwrap();
        let long = "n".repeat(150);
        std::fs::write(src.join("sub").join(&long), vec![7u8; 5000]).unwrap();
        let ar = archive(&src, "data", 1 << 20).unwrap();
        assert_eq!(ar.len() % BLOCK, 0);
        let out = d.join("out");
        assert_eq!(extract(&ar, "data", &out).unwrap(), 2);
        assert_eq!(std::fs::read(out.join("a.txt")).unwrap(), b"hello");
        assert_eq!(std::fs::read(out.join("sub").join(&long)).unwrap(), vec![7u8; 5000]);
        assert!(archive(&src, "data", 100).is_err(), "the limit holds");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn entries_that_escape_the_destination_are_refused() {
        let d = tmp("escape");
        for name in ["../evil", "data/../../evil", "/etc/passwd", "data/x/../../../evil"] {
            let mut ar = Vec::new();
            push_entry(&mut ar, name, 0o644, b"x", b'0');
            ar.extend_from_slice(&[0u8; 1024]);
            let e = extract(&ar, "data", &d.join("out")).unwrap_err();
            assert!(matches!(e, TarError::Outside(_)), "{name}: {e}");
            assert!(e.to_string().contains(name), "{e}");
        }
        let mut ar = Vec::new();
        push_entry(&mut ar, "other/file", 0o644, b"x", b'0');
        assert!(matches!(extract(&ar, "data", &d.join("out")).unwrap_err(), TarError::Unexpected(..)));
        assert!(!d.join("evil").exists() && !d.join("out").exists());
        // the base itself and below it map onto the destination
        assert_eq!(target(Path::new("/dst"), "data", "data/").unwrap(), PathBuf::from("/dst"));
        assert_eq!(target(Path::new("/dst"), "data", "./data/a/b").unwrap(), PathBuf::from("/dst/a/b"));
        let _ = std::fs::remove_dir_all(&d);
    }
}
