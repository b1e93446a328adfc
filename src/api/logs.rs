//! Container logs as the runtime writes them (the CRI format, one line per
//! entry: `<RFC 3339 time> <stream> <P|F> <content>`, `P` for a partial
//! line continued by the next entry), read back for `podwarden logs`.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// The largest chunk one call returns.
pub const MAX_CHUNK: u64 = 1 << 20;

/// A container's log files in `<pod log dir>/<container>/`: `<n>.log` by
/// restart count, lowest first.
pub fn files(container_dir: &Path) -> Vec<(u32, PathBuf)> {
    let mut out: Vec<(u32, PathBuf)> = std::fs::read_dir(container_dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let n: u32 = name.strip_suffix(".log")?.parse().ok()?;
            Some((n, e.path()))
        })
        .collect();
    out.sort();
    out
}

/// The current (`previous` false) or previous instance's log file.
pub fn pick(container_dir: &Path, previous: bool) -> Option<PathBuf> {
    let mut f = files(container_dir);
    if previous {
        f.pop()?;
    }
    f.pop().map(|(_, p)| p)
}

/// Strip the CRI prefix of each complete entry in `raw`; partial entries
/// (`P`) are joined with the next without a newline.
pub fn decode(raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(raw.len());
    for line in raw.split_inclusive(|b| *b == b'\n') {
        let body = line.strip_suffix(b"\n").unwrap_or(line);
        let mut parts = body.splitn(4, |b| *b == b' ');
        let (_time, _stream, tag, content) = (parts.next(), parts.next(), parts.next(), parts.next());
        match (tag, content) {
            (Some(b"P"), Some(c)) => out.extend_from_slice(c),
            (Some(b"F"), Some(c)) => {
                out.extend_from_slice(c);
                out.push(b'\n');
            }
            // not in the CRI format: pass it through
            _ => {
                out.extend_from_slice(body);
                out.push(b'\n');
            }
        }
    }
    out
}

/// Where the last `n` entries of `raw` begin.
fn tail_start(raw: &[u8], n: usize) -> usize {
    if n == 0 {
        return 0;
    }
    let ends: Vec<usize> = raw.iter().enumerate().filter(|(_, b)| **b == b'\n').map(|(i, _)| i + 1).collect();
    if ends.len() <= n { 0 } else { ends[ends.len() - n - 1] }
}

/// Read whole entries from `offset` (at most `limit` bytes, `tail` last
/// entries when reading from 0): (decoded text, next offset).
pub fn read(path: &Path, offset: u64, limit: u64, tail: usize) -> std::io::Result<(Vec<u8>, u64)> {
    let mut f = std::fs::File::open(path)?;
    let len = f.metadata()?.len();
    let limit = if limit == 0 { MAX_CHUNK } else { limit.min(MAX_CHUNK) };
    // a rotated or truncated file starts over
    let offset = if offset > len { 0 } else { offset };
    let mut start = offset;
    if offset == 0 && tail > 0 && len > limit {
        start = len - limit;
    }
    f.seek(SeekFrom::Start(start))?;
    let mut raw = Vec::new();
    f.take(if offset == 0 && tail > 0 { len - start } else { limit }).read_to_end(&mut raw)?;
    if start > offset {
        // began mid-file for a tail: drop the first, cut entry
        let cut = raw.iter().position(|b| *b == b'\n').map_or(raw.len(), |i| i + 1);
        raw.drain(..cut);
        start += cut as u64;
    }
    // whole entries only
    let whole = match raw.iter().rposition(|b| *b == b'\n') {
        Some(i) => i + 1,
        // one entry longer than the limit: pass it on in pieces
        None if raw.len() as u64 >= limit => raw.len(),
        None => 0,
    };
    raw.truncate(whole);
    let next = start + whole as u64;
    let from = if offset == 0 { tail_start(&raw, tail) } else { 0 };
    Ok((decode(&raw[from..]), next))
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOG: &str = "2026-01-01T00:00:00.1Z stdout F one\n2026-01-01T00:00:00.2Z stderr P tw\n2026-01-01T00:00:00.3Z stderr F o\n2026-01-01T00:00:00.4Z stdout F three\n2026-01-01T00:00:00.5Z stdout F fo";

    #[test]
    fn decodes_cri_lines_joins_partials_and_stops_at_whole_entries() {
        let dir = std::env::temp_dir().join(format!("podwarden-logs-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("main")).unwrap();
        for n in [0, 1, 2] {
            std::fs::write(dir.join("main").join(format!("{n}.log")), LOG).unwrap();
        }
        std::fs::write(dir.join("main").join("x.log"), "").unwrap();
        let path = dir.join("main/2.log");
        assert_eq!(pick(&dir.join("main"), false).unwrap(), path);
        assert_eq!(pick(&dir.join("main"), true).unwrap(), dir.join("main/1.log"));
        let (text, next) = read(&path, 0, 0, 0).unwrap();
        assert_eq!(String::from_utf8(text).unwrap(), "one\ntwo\nthree\n");
        let whole = LOG.rfind('\n').unwrap() as u64 + 1;
        assert_eq!(next, whole, "the unfinished last entry is left for the next call");
        // tail 2 entries: the partial and its end count as two
        let (text, _) = read(&path, 0, 0, 1).unwrap();
        assert_eq!(String::from_utf8(text).unwrap(), "three\n");
        // follow from the offset: nothing new, then the rest
        assert!(read(&path, next, 0, 0).unwrap().0.is_empty());
        std::fs::write(&path, format!("{LOG}ur\n")).unwrap();
        let (text, _) = read(&path, next, 0, 0).unwrap();
        assert_eq!(String::from_utf8(text).unwrap(), "four\n");
        // a small limit returns whole entries only
        let (text, n) = read(&path, 0, 40, 0).unwrap();
        assert_eq!((String::from_utf8(text).unwrap().as_str(), n), ("one\n", 36));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
