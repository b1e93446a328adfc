//! Container logs as the runtime writes them (the CRI format, one line per
//! entry: `<RFC 3339 time> <stream> <P|F> <content>`, `P` for a partial
//! line continued by the next entry), read back for `podwarden logs`.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// The largest chunk one call returns.
pub const MAX_CHUNK: u64 = 1 << 20;

/// A pod's log directory's name in `podLogsDir`: `<ns>_<name>_<uid>`, the
/// kubelet's layout.
pub fn pod_dir_name(namespace: &str, name: &str, uid: &str) -> String {
    format!("{namespace}_{name}_{uid}")
}

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
    decode_with(raw, false)
}

/// [`decode`], each entry led by its time and a space (`kubectl logs
/// --timestamps`; a partial entry's time leads the joined line).
pub fn decode_timestamped(raw: &[u8]) -> Vec<u8> {
    decode_with(raw, true)
}

fn decode_with(raw: &[u8], times: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(raw.len());
    let mut in_partial = false;
    for line in raw.split_inclusive(|b| *b == b'\n') {
        let body = line.strip_suffix(b"\n").unwrap_or(line);
        let mut parts = body.splitn(4, |b| *b == b' ');
        let (time, _stream, tag, content) = (parts.next(), parts.next(), parts.next(), parts.next());
        if times
            && !in_partial
            && let (Some(t), Some(_)) = (time, content)
        {
            out.extend_from_slice(t);
            out.push(b' ');
        }
        in_partial = tag == Some(b"P") && content.is_some();
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

/// Where a reader of an instance's log files is. A file is known by the
/// time of its first entry (`first`): it stays the same when rotation
/// renames or compresses the file, and no two files share it. `last` is
/// the time of the last entry read, to find where to go on when the file
/// is gone (removed as the oldest) or was empty when read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cursor {
    /// The file's name when read (the live name or a rotated one's without
    /// `.gz`): where the search starts, and what the reader is told.
    pub file: String,
    pub first: String,
    pub last: String,
    /// The offset in the file's (uncompressed) content.
    pub offset: u64,
}

/// One read of [`read_instance`]: the decoded text and where to go on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    pub data: Vec<u8>,
    pub next: Cursor,
}

/// One file of an instance's log, oldest first: the rotated ones, then the
/// live one.
#[derive(Debug, Clone)]
struct Part {
    name: String,
    compressed: bool,
}

fn parts(dir: &Path, rel_dir: &Path, live: &str) -> Vec<Part> {
    let mut out: Vec<Part> = crate::logs::rotation::rotated(&dir.join(rel_dir), live)
        .into_iter()
        .map(|r| Part { name: r.base, compressed: r.compressed })
        .collect();
    out.push(Part { name: live.to_string(), compressed: false });
    out
}

fn gz_path(dir: &Path, rel: &Path) -> PathBuf {
    dir.join(format!("{}{}", rel.display(), crate::logs::rotation::COMPRESSED))
}

/// The time field of the first entry of `raw` (empty if it has none yet).
fn time_of(entry: &[u8]) -> String {
    let end = entry.iter().position(|b| *b == b' ').unwrap_or(0);
    String::from_utf8_lossy(&entry[..end.min(64)]).into_owned()
}

/// The time field of the last whole entry of `raw`.
fn last_time(raw: &[u8]) -> Option<String> {
    let body = raw.strip_suffix(b"\n")?;
    let start = body.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
    Some(time_of(&body[start..]))
}

/// The first entry's time of a file (empty when it has none or cannot be
/// read).
fn first_time(dir: &Path, rel_dir: &Path, f: &Part) -> String {
    let rel = rel_dir.join(&f.name);
    let head = if f.compressed {
        crate::logs::rotation::read_compressed(&gz_path(dir, &rel), 0, 64).ok()
    } else {
        return crate::base::fsutil::open_regular_in(dir, &rel, crate::base::fsutil::Links::Refuse)
            .map(|(f, _)| first_of(&f))
            .unwrap_or_default();
    };
    head.filter(|h| h.contains(&b' ')).map(|h| time_of(&h)).unwrap_or_default()
}

/// Entry times compare as instants (RFC 3339 with any fraction length or
/// offset, as runtimes write them); text that is not one compares as text.
fn time_after(a: &str, b: &str) -> bool {
    use k8s_openapi::jiff::Timestamp;
    match (a.parse::<Timestamp>(), b.parse::<Timestamp>()) {
        (Ok(x), Ok(y)) => x > y,
        _ => a > b,
    }
}

/// Read one instance's log (`<dir>/<rel_dir>/<live>` and its rotated files,
/// compressed or not) from `cursor`, at most `limit` bytes of whole entries:
/// - no cursor and no `tail`: from the oldest rotated file;
/// - no cursor and `tail` > 0: the last `tail` entries across the files
///   (at most [`MAX_CHUNK`] bytes of them);
/// - a cursor: where it says, in the file it names however that file was
///   renamed or compressed since; when the file is gone, the oldest file
///   with entries after the last one read.
///
/// At the end of a rotated file the cursor moves to the next file, so a
/// follower sees every line once, across rotations.
pub fn read_instance(
    dir: &Path,
    rel_dir: &Path,
    live: &str,
    cursor: Option<&Cursor>,
    limit: u64,
    tail: usize,
) -> Result<Chunk, crate::base::fsutil::FileError> {
    read_instance_as(dir, rel_dir, live, cursor, limit, tail, decode)
}

/// [`read_instance`] with each entry's time kept ([`decode_timestamped`]).
pub fn read_instance_timestamped(
    dir: &Path,
    rel_dir: &Path,
    live: &str,
    cursor: Option<&Cursor>,
    limit: u64,
    tail: usize,
) -> Result<Chunk, crate::base::fsutil::FileError> {
    read_instance_as(dir, rel_dir, live, cursor, limit, tail, decode_timestamped)
}

/// [`read_instance_cri`]'s entries through `decode`.
fn read_instance_as(
    dir: &Path,
    rel_dir: &Path,
    live: &str,
    cursor: Option<&Cursor>,
    limit: u64,
    tail: usize,
    decode: fn(&[u8]) -> Vec<u8>,
) -> Result<Chunk, crate::base::fsutil::FileError> {
    let mut c = read_instance_cri(dir, rel_dir, live, cursor, limit, tail)?;
    c.data = decode(&c.data);
    Ok(c)
}

/// [`read_instance`]'s entries as the runtime wrote them.
fn read_instance_cri(
    dir: &Path,
    rel_dir: &Path,
    live: &str,
    cursor: Option<&Cursor>,
    limit: u64,
    tail: usize,
) -> Result<Chunk, crate::base::fsutil::FileError> {
    let files = parts(dir, rel_dir, live);
    let limit = if limit == 0 { MAX_CHUNK } else { limit.min(MAX_CHUNK) };
    let Some(cursor) = cursor else {
        if tail > 0 {
            return tail_instance(dir, rel_dir, &files, tail, limit);
        }
        return read_from(dir, rel_dir, &files, 0, 0, String::new(), String::new(), limit);
    };
    let firsts: Vec<String> = files.iter().map(|f| first_time(dir, rel_dir, f)).collect();
    let found = if cursor.first.is_empty() {
        // a file without a first entry when read (empty, or not in the CRI
        // format) that still has none: the same file, at the same place
        files.iter().position(|f| f.name == cursor.file).filter(|i| firsts[*i].is_empty())
    } else {
        firsts.iter().position(|t| *t == cursor.first)
    };
    let (index, offset) = match found {
        Some(i) => (i, cursor.offset),
        None => {
            // the file is gone, or it was empty when read: the oldest file
            // with an entry after the last one read (an empty live file
            // before anything was read: the live file)
            let after = |t: &String| !t.is_empty() && (cursor.last.is_empty() || time_after(t, &cursor.last));
            match firsts.iter().position(after) {
                Some(i) => (i, 0),
                None => (files.len() - 1, 0),
            }
        }
    };
    read_from(dir, rel_dir, &files, index, offset, firsts[index].clone(), cursor.last.clone(), limit)
}

/// Read from `files[index]` at `offset`; `expect` is that file's first
/// entry time when it was resolved (empty: not known, or empty then). At
/// the end of a rotated file go on with the next file.
#[allow(clippy::too_many_arguments)]
fn read_from(
    dir: &Path,
    rel_dir: &Path,
    files: &[Part],
    mut index: usize,
    mut offset: u64,
    mut expect: String,
    mut last: String,
    limit: u64,
) -> Result<Chunk, crate::base::fsutil::FileError> {
    loop {
        let f = &files[index];
        let rel = rel_dir.join(&f.name);
        let is_live = index + 1 == files.len();
        // the cursor as it stands: the next call resolves it again
        let stay = |expect: String, last: String| Chunk {
            data: Vec::new(),
            next: Cursor { file: f.name.clone(), first: expect, last, offset },
        };
        let (raw, first) = if f.compressed {
            // a compressed file never changes: its name is its identity
            let path = gz_path(dir, &rel);
            let io = |source| crate::base::fsutil::FileError::Io { path: path.display().to_string(), source };
            let mut raw = match crate::logs::rotation::read_compressed(&path, offset, limit) {
                Ok(raw) => raw,
                // removed since the listing (the oldest beyond
                // containerLogMaxFiles): the next call goes on after it
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(stay(expect, last)),
                Err(e) => return Err(io(e)),
            };
            if let Some(i) = raw.iter().rposition(|b| *b == b'\n') {
                raw.truncate(i + 1);
            }
            let first = if expect.is_empty() { first_time(dir, rel_dir, f) } else { expect.clone() };
            (raw, first)
        } else {
            match read_raw(dir, &rel, offset, limit) {
                // the name now holds another file (the live one rotated
                // since it was resolved): resolve again next time
                Ok((_, first)) if !expect.is_empty() && first != expect => return Ok(stay(expect, last)),
                Ok(r) => r,
                // compressed or removed since the listing: the next call
                // finds it by its first entry, or goes on after it
                Err(crate::base::fsutil::FileError::NotFound { .. }) if !is_live => return Ok(stay(expect, last)),
                Err(e) => return Err(e),
            }
        };
        if let Some(t) = last_time(&raw) {
            last = t;
        }
        let next = offset + raw.len() as u64;
        if !raw.is_empty() || is_live {
            return Ok(Chunk { data: raw, next: Cursor { file: f.name.clone(), first, last, offset: next } });
        }
        // the end of a rotated file. The runtime may still be writing to
        // it (renamed, not yet reopened): it is finished only once the next
        // file has an entry; until then stay at its end
        if first_time(dir, rel_dir, &files[index + 1]).is_empty() {
            return Ok(Chunk { data: Vec::new(), next: Cursor { file: f.name.clone(), first, last, offset: next } });
        }
        index += 1;
        offset = 0;
        expect = String::new();
    }
}

/// Whole entries of the file `rel` inside `dir` from `offset`, at most
/// `limit` bytes (one entry longer than that in pieces); a file shorter
/// than `offset` (truncated) from its start.
fn read_raw(
    dir: &Path,
    rel: &Path,
    offset: u64,
    limit: u64,
) -> Result<(Vec<u8>, String), crate::base::fsutil::FileError> {
    let (mut f, len) = crate::base::fsutil::open_regular_in(dir, rel, crate::base::fsutil::Links::Refuse)?;
    let io = |source| crate::base::fsutil::FileError::Io { path: dir.join(rel).display().to_string(), source };
    let first = first_of(&f);
    let offset = if offset > len { 0 } else { offset };
    f.seek(SeekFrom::Start(offset)).map_err(io)?;
    let mut raw = Vec::new();
    f.take(limit).read_to_end(&mut raw).map_err(io)?;
    let whole = match raw.iter().rposition(|b| *b == b'\n') {
        Some(i) => i + 1,
        None if raw.len() as u64 >= limit => raw.len(),
        None => 0,
    };
    raw.truncate(whole);
    Ok((raw, first))
}

/// The first entry's time of the open file `f` (read at offset 0, so the
/// file read and the file named are the same even when rotation renames
/// it meanwhile); empty when it has no whole first field yet.
fn first_of(f: &std::fs::File) -> String {
    use std::os::unix::fs::FileExt;
    let mut head = [0u8; 64];
    let n = f.read_at(&mut head, 0).unwrap_or(0);
    let head = &head[..n];
    if head.contains(&b' ') { time_of(head) } else { String::new() }
}

/// The last `tail` entries across an instance's files, newest file first
/// until enough are found or `limit` bytes are read; the cursor is the live
/// file's last whole entry.
fn tail_instance(
    dir: &Path,
    rel_dir: &Path,
    files: &[Part],
    tail: usize,
    limit: u64,
) -> Result<Chunk, crate::base::fsutil::FileError> {
    let live = &files[files.len() - 1];
    let mut pieces: Vec<Vec<u8>> = Vec::new();
    let mut entries = 0;
    let mut total = 0u64;
    let mut end = 0;
    let mut live_first = String::new();
    for (i, f) in files.iter().enumerate().rev() {
        let rel = rel_dir.join(&f.name);
        let (mut raw, cut) = if f.compressed {
            let path = gz_path(dir, &rel);
            crate::logs::rotation::tail_compressed(&path, limit - total)
                .map_err(|source| crate::base::fsutil::FileError::Io { path: path.display().to_string(), source })?
        } else {
            match tail_raw(dir, &rel, limit - total) {
                Ok((raw, cut, len, first)) => {
                    if i + 1 == files.len() {
                        end = len;
                        live_first = first;
                    }
                    (raw, cut)
                }
                Err(crate::base::fsutil::FileError::NotFound { .. }) if i + 1 < files.len() => continue,
                Err(e) => return Err(e),
            }
        };
        if i + 1 == files.len() {
            // whole entries only: an unfinished last one is for the next call
            let whole = raw.iter().rposition(|b| *b == b'\n').map_or(0, |p| p + 1);
            end -= (raw.len() - whole) as u64;
            raw.truncate(whole);
        }
        if cut {
            let first = raw.iter().position(|b| *b == b'\n').map_or(raw.len(), |p| p + 1);
            raw.drain(..first);
        }
        entries += raw.iter().filter(|b| **b == b'\n').count();
        total += raw.len() as u64;
        pieces.push(raw);
        if entries >= tail || total >= limit || cut {
            break;
        }
    }
    let raw: Vec<u8> = pieces.into_iter().rev().flatten().collect();
    let from = tail_start(&raw, tail);
    let last = last_time(&raw).unwrap_or_default();
    let next = Cursor { file: live.name.clone(), first: live_first, last, offset: end };
    Ok(Chunk { data: raw[from..].to_vec(), next })
}

/// The last `max` bytes of the file `rel` inside `dir`, whether that cut
/// the file, and the file's length at the read.
fn tail_raw(dir: &Path, rel: &Path, max: u64) -> Result<(Vec<u8>, bool, u64, String), crate::base::fsutil::FileError> {
    let (mut f, len) = crate::base::fsutil::open_regular_in(dir, rel, crate::base::fsutil::Links::Refuse)?;
    let io = |source| crate::base::fsutil::FileError::Io { path: dir.join(rel).display().to_string(), source };
    let first = first_of(&f);
    let start = len.saturating_sub(max);
    f.seek(SeekFrom::Start(start)).map_err(io)?;
    let mut buf = Vec::with_capacity(max.min(len) as usize);
    f.take(len - start).read_to_end(&mut buf).map_err(io)?;
    let len = start + buf.len() as u64;
    Ok((buf, start > 0, len, first))
}

/// The kubelet's termination message from a log (`FallbackToLogsOnError`):
/// the decoded last `lines` entries of the log `rel` inside `dir`, at most
/// the last `max` bytes of them. Reads only the end of the file (seek), so
/// a log of any size costs a few KiB.
pub fn termination_tail(
    dir: &Path,
    rel: &Path,
    lines: usize,
    max: usize,
) -> Result<String, crate::base::fsutil::FileError> {
    // `lines` CRI prefixes (time, stream, tag: under 64 bytes each) plus
    // `max` bytes of content hold everything that can be kept
    let window = (max + lines * 64 + 1) as u64;
    let (mut raw, cut) = crate::base::fsutil::read_tail_in(dir, rel, crate::base::fsutil::Links::Refuse, window)?;
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
        let read = |cursor: Option<&Cursor>, limit, tail| {
            let c = read_instance(&dir, Path::new("main"), "2.log", cursor, limit, tail).unwrap();
            (String::from_utf8(c.data).unwrap(), c.next)
        };
        let (text, next) = read(None, 0, 0);
        assert_eq!(text, "one\ntwo\nthree\n");
        let whole = LOG.rfind('\n').unwrap() as u64 + 1;
        assert_eq!(next.offset, whole, "the unfinished last entry is left for the next call");
        // tail 2 entries: the partial and its end count as two
        assert_eq!(read(None, 0, 1).0, "three\n");
        // follow from the cursor: nothing new, then the rest
        assert!(read(Some(&next), 0, 0).0.is_empty());
        std::fs::write(&path, format!("{LOG}ur\n")).unwrap();
        assert_eq!(read(Some(&next), 0, 0).0, "four\n");
        // a small limit returns whole entries only
        let (text, n) = read(None, 40, 0);
        assert_eq!((text.as_str(), n.offset), ("one\n", 36));
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

    fn entries(range: std::ops::Range<u32>) -> String {
        range.map(|i| format!("2026-01-01T00:00:{:02}.{:03}Z stdout F line {i}\n", i / 1000, i % 1000)).collect()
    }

    fn lines(range: std::ops::Range<u32>) -> String {
        range.map(|i| format!("line {i}\n")).collect()
    }

    #[test]
    fn a_compressed_file_removed_between_listing_and_reading_is_not_an_error() {
        let dir = std::env::temp_dir().join(format!("podwarden-logs-gone-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("p/c")).unwrap();
        std::fs::write(dir.join("p/c/0.log"), LOG).unwrap();
        // the listing still names the oldest file; the rotation removed it
        let files = [
            Part { name: "0.log.20260101-000000".into(), compressed: true },
            Part { name: "0.log".into(), compressed: false },
        ];
        let ch = read_from(&dir, Path::new("p/c"), &files, 0, 10, "t0".into(), "t1".into(), 1 << 20).unwrap();
        assert!(ch.data.is_empty());
        assert_eq!(
            ch.next,
            Cursor { file: "0.log.20260101-000000".into(), first: "t0".into(), last: "t1".into(), offset: 10 },
            "the cursor stays: the next call resolves it to the file after"
        );
        let next = read_instance(&dir, Path::new("p/c"), "0.log", Some(&ch.next), 0, 0).unwrap();
        assert_eq!(String::from_utf8(next.data).unwrap(), "one\ntwo\nthree\n", "and reads on there");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_instance_reads_across_rotated_and_compressed_files_and_follows_a_rotation() {
        use crate::logs::rotation::{Policy, rotate};
        let dir = std::env::temp_dir().join(format!("podwarden-logrot-read-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let c = dir.join("p/c");
        std::fs::create_dir_all(&c).unwrap();
        let rel = Path::new("p/c");
        let policy = Policy { max_size: entries(0..10).len() as u64, max_files: 5 };
        // three rotations: 0..10 and 10..20 compressed, 20..30 plain,
        // 30..40 live (with an unfinished entry at its end)
        for (k, stamp) in ["20261124-010001", "20261124-010002", "20261124-010003"].iter().enumerate() {
            let k = k as u32;
            std::fs::write(c.join("0.log"), entries(k * 10..k * 10 + 10)).unwrap();
            rotate(&c, "0.log", policy, stamp, || Ok(())).unwrap();
            crate::logs::rotation::compress_older(&c, "0.log");
        }
        std::fs::write(c.join("0.log"), format!("{}2026-01-01T00:00:00Z stdout P unfin", entries(30..40))).unwrap();
        let names: Vec<String> = crate::logs::rotation::rotated(&c, "0.log")
            .into_iter()
            .map(|r| r.path.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["0.log.20261124-010001.gz", "0.log.20261124-010002.gz", "0.log.20261124-010003"]);
        let mut all = Vec::new();
        let mut cur: Option<Cursor> = None;
        for _ in 0..20 {
            let ch = read_instance(&dir, rel, "0.log", cur.as_ref(), 200, 0).unwrap();
            all.extend_from_slice(&ch.data);
            if cur.as_ref() == Some(&ch.next) {
                break;
            }
            cur = Some(ch.next);
        }
        assert_eq!(String::from_utf8(all).unwrap(), lines(0..40));
        let end = cur.unwrap();
        assert_eq!(end.file, "0.log");
        // tail across files: 15 entries = 5 from the plain rotated file and
        // the live file's 10; the cursor at the live file's last whole entry
        let t = read_instance(&dir, rel, "0.log", None, 0, 15).unwrap();
        assert_eq!(String::from_utf8(t.data).unwrap(), lines(25..40));
        assert_eq!(t.next, end);
        // tail reaching into a compressed file
        let t = read_instance(&dir, rel, "0.log", None, 0, 25).unwrap();
        assert_eq!(String::from_utf8(t.data).unwrap(), lines(15..40));
        // a follower at the live file's end; the live file is rotated and
        // the runtime writes on in a new one: the rest of the old file,
        // then the new one
        std::fs::write(c.join("0.log"), format!("{}{}", entries(30..40), entries(40..42))).unwrap();
        rotate(&c, "0.log", policy, "20261124-010004", || Ok(())).unwrap();
        std::fs::write(c.join("0.log"), entries(42..44)).unwrap();
        let mut got = Vec::new();
        let mut cur = end;
        for _ in 0..10 {
            let ch = read_instance(&dir, rel, "0.log", Some(&cur), 0, 0).unwrap();
            got.extend_from_slice(&ch.data);
            if ch.next == cur {
                break;
            }
            cur = ch.next;
        }
        assert_eq!(String::from_utf8(got).unwrap(), lines(40..44));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
