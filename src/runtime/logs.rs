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

/// Read whole entries of the log `rel` inside `dir` (`<ns>_<name>_<uid>/
/// <container>/<n>.log` in `podLogsDir`) from `offset` (at most `limit`
/// bytes, `tail` last entries when reading from 0): (decoded text, next
/// offset). The file is opened with [`crate::fsutil::open_regular_in`]: a
/// FIFO, device or symlink there is an error at once.
pub fn read(
    dir: &Path,
    rel: &Path,
    offset: u64,
    limit: u64,
    tail: usize,
) -> Result<(Vec<u8>, u64), crate::fsutil::FileError> {
    let (mut f, len) = crate::fsutil::open_regular_in(dir, rel, crate::fsutil::Links::Refuse)?;
    let io = |source| crate::fsutil::FileError::Io { path: dir.join(rel).display().to_string(), source };
    let limit = if limit == 0 { MAX_CHUNK } else { limit.min(MAX_CHUNK) };
    // a rotated or truncated file starts over
    let offset = if offset > len { 0 } else { offset };
    let mut start = offset;
    if offset == 0 && tail > 0 && len > limit {
        start = len - limit;
    }
    f.seek(SeekFrom::Start(start)).map_err(io)?;
    let mut raw = Vec::new();
    f.take(if offset == 0 && tail > 0 { len - start } else { limit }).read_to_end(&mut raw).map_err(io)?;
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

/// The kubelet's termination message from a log (`FallbackToLogsOnError`):
/// the decoded last `lines` entries of the log `rel` inside `dir`, at most
/// the last `max` bytes of them. Reads only the end of the file (seek), so
/// a log of any size costs a few KiB.
pub fn termination_tail(dir: &Path, rel: &Path, lines: usize, max: usize) -> Result<String, crate::fsutil::FileError> {
    // `lines` CRI prefixes (time, stream, tag: under 64 bytes each) plus
    // `max` bytes of content hold everything that can be kept
    let window = (max + lines * 64 + 1) as u64;
    let (mut raw, cut) = crate::fsutil::read_tail_in(dir, rel, crate::fsutil::Links::Refuse, window)?;
    if cut {
        // began mid-entry: its prefix is gone
        let first = raw.iter().position(|b| *b == b'\n').map_or(raw.len(), |i| i + 1);
        raw.drain(..first);
    }
    let from = tail_start(&raw, lines);
    let text = decode(&raw[from..]);
    let keep = text.len().saturating_sub(max);
    let mut out = String::from_utf8_lossy(&text[keep..]).into_owned();
    // a cut in the middle of a character leaves U+FFFD at the start
    if keep > 0 {
        out = out.trim_start_matches('\u{FFFD}').to_string();
    }
    Ok(out)
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
        let read = |offset, limit, tail| read(&dir, Path::new("main/2.log"), offset, limit, tail).unwrap();
        let (text, next) = read(0, 0, 0);
        assert_eq!(String::from_utf8(text).unwrap(), "one\ntwo\nthree\n");
        let whole = LOG.rfind('\n').unwrap() as u64 + 1;
        assert_eq!(next, whole, "the unfinished last entry is left for the next call");
        // tail 2 entries: the partial and its end count as two
        let (text, _) = read(0, 0, 1);
        assert_eq!(String::from_utf8(text).unwrap(), "three\n");
        // follow from the offset: nothing new, then the rest
        assert!(read(next, 0, 0).0.is_empty());
        std::fs::write(&path, format!("{LOG}ur\n")).unwrap();
        let (text, _) = read(next, 0, 0);
        assert_eq!(String::from_utf8(text).unwrap(), "four\n");
        // a small limit returns whole entries only
        let (text, n) = read(0, 40, 0);
        assert_eq!((String::from_utf8(text).unwrap().as_str(), n), ("one\n", 36));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn termination_tail_keeps_the_last_80_entries_and_2048_bytes_like_the_kubelet() {
        let dir = std::env::temp_dir().join(format!("podwarden-logtail-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("c")).unwrap();
        let mut log = String::new();
        for i in 0..200 {
            log.push_str(&format!("2026-01-01T00:00:00.000000001Z stderr F line {i}\n"));
        }
        std::fs::write(dir.join("c/0.log"), &log).unwrap();
        let t = termination_tail(&dir, Path::new("c/0.log"), 80, 2048).unwrap();
        assert!(t.starts_with("line 120\n") && t.ends_with("line 199\n"), "{t}");
        // long entries: the last 2048 bytes
        let long = format!("2026-01-01T00:00:00Z stdout F {}\n", "x".repeat(5000));
        std::fs::write(dir.join("c/1.log"), format!("{log}{long}")).unwrap();
        let t = termination_tail(&dir, Path::new("c/1.log"), 80, 2048).unwrap();
        assert_eq!(t, format!("{}\n", "x".repeat(2047)));
        // not a regular file: an error at once, nothing read
        std::os::unix::fs::symlink("/dev/zero", dir.join("c/2.log")).unwrap();
        let e = termination_tail(&dir, Path::new("c/2.log"), 80, 2048).unwrap_err();
        assert!(e.to_string().ends_with("is a symlink; not followed"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
