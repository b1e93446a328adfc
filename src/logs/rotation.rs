//! Container log rotation on disk, as the kubelet's container log manager
//! does it: a live log `<n>.log` over the size limit is renamed
//! `<n>.log.<YYYYMMDD-hhmmss>` (local time) and the runtime reopens the live
//! name (`ReopenContainerLog`); older rotated files are gzip-compressed
//! (`.gz`, through `<name>.tmp`), and the oldest removed so that the live
//! file and its rotated files number at most `containerLogMaxFiles`.
//!
//! The files are containerd's (root's) in `podLogsDir`; nothing here follows
//! a symlink or opens anything but a regular file, so a link planted there
//! (through a hostPath mount) cannot make podwarden read or replace a file
//! elsewhere.

use std::fs::File;
use std::io::{BufWriter, Read};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use thiserror::Error;

use crate::runtime::RuntimeError;

/// The suffix of a compressed rotated log.
pub const COMPRESSED: &str = ".gz";
/// The suffix of a compression in progress (left by a crash: removed).
pub const TMP: &str = ".tmp";

/// Why a live log was not rotated; each names the live log's path.
#[derive(Debug, Error)]
pub enum RotateError {
    /// A symlink or anything but a regular file: never followed.
    #[error("{}: not a regular file; not rotated", .path.display())]
    NotRegular { path: PathBuf },
    /// The live log is missing and the runtime did not reopen it.
    #[error("{}: missing; reopening it failed: {source}", .path.display())]
    ReopenMissing {
        path: PathBuf,
        #[source]
        source: RuntimeError,
    },
    /// Its metadata could not be read.
    #[error("{}: {source}", .path.display())]
    Stat {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: cannot rename it: {source}", .path.display())]
    Rename {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Renamed, then the runtime did not reopen it (the rename is undone).
    #[error("{}: the runtime did not reopen it: {source}", .path.display())]
    Reopen {
        path: PathBuf,
        #[source]
        source: RuntimeError,
    },
}

/// How logs are rotated (`containerLogMaxSize`, `containerLogMaxFiles`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    pub max_size: u64,
    pub max_files: u32,
}

/// One rotated file of a live log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rotated {
    /// The rotated name without `.gz` (`0.log.20261124-011500`): the same
    /// before and after compression.
    pub base: String,
    pub path: PathBuf,
    pub compressed: bool,
}

/// The rotated files of the live log `<dir>/<live>`, oldest first (the
/// timestamp orders the names). `.tmp` files are not among them.
pub fn rotated(dir: &Path, live: &str) -> Vec<Rotated> {
    let prefix = format!("{live}.");
    let mut out: Vec<Rotated> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .take(10_000)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            if !name.starts_with(&prefix) || name.ends_with(TMP) {
                return None;
            }
            let (base, compressed) = match name.strip_suffix(COMPRESSED) {
                Some(b) => (b.to_string(), true),
                None => (name.clone(), false),
            };
            Some(Rotated { base, path: e.path(), compressed })
        })
        .collect();
    out.sort_by(|a, b| (&a.base, a.compressed).cmp(&(&b.base, b.compressed)));
    // a file both compressed and not (a compression cut short after the
    // rename): the compressed one is whole, the other goes at the clean-up
    out.dedup_by(|later, first| {
        if later.base == first.base {
            *first = later.clone();
            true
        } else {
            false
        }
    });
    out
}

/// What one rotation check did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The live log is under the limit.
    Small,
    /// Rotated to this file.
    Rotated(PathBuf),
    /// Ten rotations happened this second: the next check rotates.
    Later,
    /// There was no live log: the runtime was asked to open it again.
    Reopened,
}

/// Open `path` for reading if it is a regular file (not through a
/// symlink; a FIFO does not block the open).
fn open_plain(path: &Path) -> std::io::Result<File> {
    let f = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK).open(path)?;
    if !f.metadata()?.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    Ok(f)
}

/// The most of a compressed log's content ever decompressed for one read:
/// far beyond what a rotation leaves (`containerLogMaxSize` and what came
/// while it was checked), so that a planted gzip bomb costs seconds, not
/// hours.
pub const MAX_DECOMPRESSED: u64 = 4 << 30;

/// A decoder of the compressed log `path`, at most [`MAX_DECOMPRESSED`]
/// bytes of it.
fn decompress(path: &Path) -> std::io::Result<impl Read> {
    Ok(flate2::read::GzDecoder::new(std::io::BufReader::new(open_plain(path)?)).take(MAX_DECOMPRESSED))
}

/// Compress `r` (a rotated log) into `<r>.gz` through `<r>.tmp`, then
/// remove `r`. Returns the bytes read.
pub fn compress(r: &Path) -> std::io::Result<u64> {
    let src = open_plain(r)?;
    let tmp = PathBuf::from(format!("{}{TMP}", r.display()));
    let gz = PathBuf::from(format!("{}{COMPRESSED}", r.display()));
    let out = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o640)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&tmp)?;
    let mut enc =
        flate2::write::GzEncoder::new(BufWriter::with_capacity(64 << 10, out), flate2::Compression::default());
    let n = std::io::copy(&mut src.take(u64::MAX), &mut enc)?;
    let out = enc.finish()?.into_inner().map_err(|e| e.into_error())?;
    out.sync_all()?;
    std::fs::rename(&tmp, &gz)?;
    std::fs::remove_file(r)?;
    Ok(n)
}

/// Check the live log `<dir>/<live>` and rotate it when it has reached the
/// policy's size: clean up what an interrupted rotation left, rename the
/// live log to `<live>.<stamp>`, `reopen` (the runtime's
/// `ReopenContainerLog`), then remove the oldest rotated files beyond
/// `max_files - 1`, and more of the oldest while the files hold more than
/// `max_files` x `max_size` (a burst writes on into the renamed file until
/// the reopen; the newest rotated file always stays). [`compress_older`] then compresses the others but the
/// newest: the files the kubelet leaves, in an order that lets the next
/// rotation happen while a compression runs. When `reopen` fails the
/// rename is undone, so the next check tries again and no line is lost.
pub fn rotate(
    dir: &Path,
    live: &str,
    policy: Policy,
    stamp: &str,
    reopen: impl FnOnce() -> Result<(), RuntimeError>,
) -> Result<Outcome, RotateError> {
    let path = dir.join(live);
    let size = match std::fs::symlink_metadata(&path) {
        Ok(m) if m.is_file() => m.size(),
        Ok(_) => return Err(RotateError::NotRegular { path }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            // a rename whose reopen never came (a crash between the two):
            // the runtime writes to the renamed file until it reopens
            reopen().map_err(|source| RotateError::ReopenMissing { path, source })?;
            return Ok(Outcome::Reopened);
        }
        Err(source) => return Err(RotateError::Stat { path, source }),
    };
    if size < policy.max_size {
        return Ok(Outcome::Small);
    }
    // the kubelet's name has seconds; a log written fast enough to be due
    // again within the second gets `-001` to `-999` after it (names still
    // sort in time order: a burst rotates many times a second), then waits
    // for the next second
    let taken = |p: &Path| {
        std::fs::symlink_metadata(p).is_ok()
            || std::fs::symlink_metadata(format!("{}{COMPRESSED}", p.display())).is_ok()
    };
    // and after every name already made: the oldest removed frees a name
    // that would sort before the newer ones
    let newest = rotated(dir, live).pop().map(|r| r.base);
    let Some(target) = std::iter::once(format!("{live}.{stamp}"))
        .chain((1..=999).map(|k| format!("{live}.{stamp}-{k:03}")))
        .filter(|n| newest.as_ref().is_none_or(|b| n.as_str() > b.as_str()))
        .map(|n| dir.join(n))
        .find(|p| !taken(p))
    else {
        return Ok(Outcome::Later);
    };
    clean_up(dir, live);
    if let Err(source) = std::fs::rename(&path, &target) {
        return Err(RotateError::Rename { path, source });
    }
    if let Err(source) = reopen() {
        if let Err(back) = std::fs::rename(&target, &path) {
            log::warn!("container log {}: cannot rename it back after a failed reopen: {back}", target.display());
        }
        return Err(RotateError::Reopen { path, source });
    }
    // the live file counts too
    let mut old = rotated(dir, live);
    let keep = policy.max_files.saturating_sub(1) as usize;
    let excess = old.len().saturating_sub(keep);
    for r in old.drain(..excess) {
        remove(&r.path);
    }
    // and as many of the oldest as it takes for the files to hold at most
    // `max_files` x `max_size`: the runtime writes on into the renamed
    // file until its reopen, so in a burst a rotated file holds several
    // times the limit (the newest rotated file stays, whatever it holds)
    let len = |p: &Path| std::fs::symlink_metadata(p).map_or(0, |m| m.len());
    let budget = policy.max_size.saturating_mul(u64::from(policy.max_files.max(1)));
    let mut held: u64 = len(&path) + old.iter().map(|r| len(&r.path)).sum::<u64>();
    while held > budget && old.len() > 1 {
        let r = old.remove(0);
        held = held.saturating_sub(len(&r.path));
        remove(&r.path);
    }
    Ok(Outcome::Rotated(target))
}

/// Compress every rotated file of `<dir>/<live>` but the newest.
pub fn compress_older(dir: &Path, live: &str) {
    let mut old = rotated(dir, live);
    old.pop();
    for r in old.iter().filter(|r| !r.compressed) {
        match compress(&r.path) {
            Ok(_) => {}
            // removed meanwhile as the oldest
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                log::warn!("container log {}: cannot compress it: {e}", r.path.display());
                let _ = std::fs::remove_file(format!("{}{TMP}", r.path.display()));
            }
        }
    }
}

/// Compress the rotated files rotation leaves plain (the newest of each
/// log, which the kubelet never compresses) of every log in `dir` whose
/// live file was not written for `idle` (or is gone: the container
/// exited and was removed). After a burst nothing rotates an idle log
/// again, so its newest rotated file would stay plain for good.
pub fn compress_idle(dir: &Path, idle: std::time::Duration) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let mut lives: Vec<String> = entries
        .flatten()
        .take(10_000)
        .filter_map(|e| e.file_name().into_string().ok())
        .filter_map(|n| n.split_once(".log.").map(|(a, _)| format!("{a}.log")))
        .collect();
    lives.sort();
    lives.dedup();
    let idle_for =
        |p: &Path| std::fs::symlink_metadata(p).ok().and_then(|m| m.modified().ok()).and_then(|t| t.elapsed().ok());
    for live in lives {
        let old = rotated(dir, &live);
        // the live file's last write; when it is gone, the newest rotated
        // file's (the container removed, or a reopen still to come)
        let written = idle_for(&dir.join(&live)).or_else(|| old.last().and_then(|r| idle_for(&r.path)));
        if written.is_none_or(|age| age < idle) {
            continue;
        }
        for r in old.iter().filter(|r| !r.compressed) {
            if let Err(e) = compress(&r.path)
                && e.kind() != std::io::ErrorKind::NotFound
            {
                log::warn!("container log {}: cannot compress it: {e}", r.path.display());
                let _ = std::fs::remove_file(format!("{}{TMP}", r.path.display()));
            }
        }
    }
}

/// Remove what an interrupted rotation left: `.tmp` files and a rotated
/// file whose compressed form is complete.
fn clean_up(dir: &Path, live: &str) {
    let prefix = format!("{live}.");
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let names: Vec<String> = entries.flatten().take(10_000).filter_map(|e| e.file_name().into_string().ok()).collect();
    for name in &names {
        if !name.starts_with(&prefix) {
            continue;
        }
        let done = names.contains(&format!("{name}{COMPRESSED}"));
        if name.ends_with(TMP) || done {
            remove(&dir.join(name));
        }
    }
}

fn remove(path: &Path) {
    if let Err(e) = std::fs::remove_file(path)
        && e.kind() != std::io::ErrorKind::NotFound
    {
        log::warn!("container log {}: cannot remove it: {e}", path.display());
    }
}

/// Remove every log file of instance `<dir>/<live>`: the live file, its
/// rotated files and leftovers (a removed container's, as the kubelet's
/// `removeContainerLog`).
pub fn remove_instance(dir: &Path, live: &str) {
    remove(&dir.join(live));
    let prefix = format!("{live}.");
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten().take(10_000) {
        if e.file_name().to_str().is_some_and(|n| n.starts_with(&prefix)) {
            remove(&e.path());
        }
    }
}

/// Read a compressed rotated log from its start: at most `limit` bytes of
/// its content after skipping `skip`.
pub fn read_compressed(path: &Path, skip: u64, limit: u64) -> std::io::Result<Vec<u8>> {
    let mut dec = decompress(path)?;
    std::io::copy(&mut (&mut dec).take(skip), &mut std::io::sink())?;
    let mut out = Vec::new();
    dec.take(limit).read_to_end(&mut out)?;
    Ok(out)
}

/// The last `max` bytes of a compressed rotated log's content (streamed:
/// memory stays within twice `max`) and whether it was cut.
pub fn tail_compressed(path: &Path, max: u64) -> std::io::Result<(Vec<u8>, bool)> {
    let mut dec = decompress(path)?;
    let max = max as usize;
    let mut buf = Vec::with_capacity(max.min(1 << 20) * 2);
    let mut chunk = vec![0u8; 64 << 10];
    let mut cut = false;
    loop {
        let n = dec.read(&mut chunk)?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
        if buf.len() > 2 * max {
            buf.drain(..buf.len() - max);
            cut = true;
        }
    }
    if buf.len() > max {
        buf.drain(..buf.len() - max);
        cut = true;
    }
    Ok((buf, cut))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;

    fn write(path: &Path, data: &[u8]) {
        std::fs::write(path, data).unwrap();
    }

    fn tmpdir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("podwarden-rot-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> =
            std::fs::read_dir(dir).unwrap().flatten().map(|e| e.file_name().into_string().unwrap()).collect();
        v.sort();
        v
    }

    const POLICY: Policy = Policy { max_size: 100, max_files: 4 };

    #[test]
    fn an_idle_logs_newest_rotated_file_is_compressed_too() {
        let d = std::env::temp_dir().join(format!("podwarden-rot-idle-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        for stamp in ["20261124-010001", "20261124-010002"] {
            write(&d.join("0.log"), &[b'a'; 200]);
            rotate(&d, "0.log", POLICY, stamp, || Ok(())).unwrap();
            compress_older(&d, "0.log");
        }
        write(&d.join("0.log"), b"x");
        // rotation leaves the newest plain; a log written just now is not idle
        compress_idle(&d, std::time::Duration::from_secs(3600));
        assert_eq!(names(&d), ["0.log", "0.log.20261124-010001.gz", "0.log.20261124-010002"]);
        compress_idle(&d, std::time::Duration::ZERO);
        assert_eq!(names(&d), ["0.log", "0.log.20261124-010001.gz", "0.log.20261124-010002.gz"]);
        // a log whose live file is gone (the container removed): idle when
        // its newest rotated file is
        write(&d.join("1.log"), &[b'a'; 200]);
        rotate(&d, "1.log", POLICY, "20261124-010003", || Ok(())).unwrap();
        compress_idle(&d, std::time::Duration::from_secs(3600));
        assert!(names(&d).contains(&"1.log.20261124-010003".to_string()), "{:?}", names(&d));
        compress_idle(&d, std::time::Duration::ZERO);
        assert!(names(&d).contains(&"1.log.20261124-010003.gz".to_string()), "{:?}", names(&d));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_small_log_stays_and_a_large_one_is_rotated_and_reopened() {
        let d = tmpdir("basic");
        write(&d.join("0.log"), &[b'a'; 99]);
        let mut reopened = 0;
        let r = rotate(&d, "0.log", POLICY, "20261124-010000", || {
            reopened += 1;
            Ok(())
        });
        assert_eq!((r.map_err(|e| e.to_string()), reopened), (Ok(Outcome::Small), 0));
        write(&d.join("0.log"), &[b'a'; 100]);
        let r = rotate(&d, "0.log", POLICY, "20261124-010000", || {
            reopened += 1;
            Ok(())
        });
        assert_eq!(r.map_err(|e| e.to_string()), Ok(Outcome::Rotated(d.join("0.log.20261124-010000"))));
        assert_eq!(reopened, 1);
        assert_eq!(names(&d), ["0.log.20261124-010000"]);
        // the same second again: `-001`..`-999`, then later, never over a file
        for k in 1..=999 {
            write(&d.join("0.log"), &[b'b'; 100]);
            let to = d.join(format!("0.log.20261124-010000-{k:03}"));
            assert_eq!(
                rotate(&d, "0.log", Policy { max_size: 100, max_files: 20 }, "20261124-010000", || Ok(()))
                    .map_err(|e| e.to_string()),
                Ok(Outcome::Rotated(to))
            );
            if k % 100 == 0 || k > 990 {
                compress_older(&d, "0.log");
            }
        }
        write(&d.join("0.log"), &[b'b'; 200]);
        assert_eq!(
            rotate(&d, "0.log", POLICY, "20261124-010000", || Ok(())).map_err(|e| e.to_string()),
            Ok(Outcome::Later)
        );
        // they sort in the order they were made (the 19 newest are kept)
        let r = rotated(&d, "0.log");
        assert!(r.windows(2).all(|w| w[0].base < w[1].base));
        assert_eq!(r.len(), 19);
        assert!(r[0].base.ends_with("010000-981") && r[18].base.ends_with("010000-999"), "{r:?}");
        assert!(r[..18].iter().all(|f| f.compressed) && !r[18].compressed, "{r:?}");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn rotated_files_grown_past_the_limit_are_removed_oldest_first_to_keep_the_byte_budget() {
        let d = tmpdir("budget");
        // a burst: the runtime wrote on into each renamed file until its reopen
        let policy = Policy { max_size: 100, max_files: 3 };
        write(&d.join("0.log.20261124-010000"), &[b'a'; 150]);
        write(&d.join("0.log.20261124-010001"), &[b'b'; 120]);
        write(&d.join("0.log"), &[b'c'; 250]);
        let r = rotate(&d, "0.log", policy, "20261124-010002", || {
            // the reopen lags: 40 more bytes go to the renamed file, 30 to the new one
            std::fs::OpenOptions::new()
                .append(true)
                .open(d.join("0.log.20261124-010002"))
                .unwrap()
                .write_all(&[b'c'; 40])
                .unwrap();
            write(&d.join("0.log"), &[b'd'; 30]);
            Ok(())
        });
        assert_eq!(r.map_err(|e| e.to_string()), Ok(Outcome::Rotated(d.join("0.log.20261124-010002"))));
        // by count two rotated files stay (120 + 290 + 30 = 440 > 300): the
        // older goes, the newest stays whatever it holds
        assert_eq!(names(&d), ["0.log", "0.log.20261124-010002"]);
        // within the budget nothing more goes than the count says
        write(&d.join("0.log"), &[b'e'; 100]);
        std::fs::write(d.join("0.log.20261124-010002"), [b'c'; 100]).unwrap();
        rotate(&d, "0.log", policy, "20261124-010003", || Ok(())).unwrap();
        assert_eq!(names(&d), ["0.log.20261124-010002", "0.log.20261124-010003"]);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn older_files_are_compressed_and_the_oldest_removed_to_keep_max_files() {
        let d = tmpdir("keep");
        for (i, stamp) in
            ["20261124-010001", "20261124-010002", "20261124-010003", "20261124-010004"].iter().enumerate()
        {
            write(&d.join("0.log"), format!("{i}\n").repeat(60).as_bytes());
            assert!(matches!(rotate(&d, "0.log", POLICY, stamp, || Ok(())), Ok(Outcome::Rotated(_))));
            compress_older(&d, "0.log");
        }
        // max_files 4: the live log (not yet reopened here) and 3 rotated,
        // the newest uncompressed
        assert_eq!(names(&d), ["0.log.20261124-010002.gz", "0.log.20261124-010003.gz", "0.log.20261124-010004"],);
        let r = rotated(&d, "0.log");
        assert_eq!(
            r.iter().map(|r| (r.base.as_str(), r.compressed)).collect::<Vec<_>>(),
            [("0.log.20261124-010002", true), ("0.log.20261124-010003", true), ("0.log.20261124-010004", false),]
        );
        assert_eq!(read_compressed(&r[0].path, 0, 1 << 20).unwrap(), "1\n".repeat(60).as_bytes());
        assert_eq!(read_compressed(&r[1].path, 4, 4).unwrap(), b"2\n2\n");
        assert_eq!(tail_compressed(&r[1].path, 6).unwrap(), (b"2\n2\n2\n".to_vec(), true));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_failed_reopen_undoes_the_rename_and_a_missing_live_log_is_reopened() {
        let d = tmpdir("reopen");
        write(&d.join("0.log"), &[b'a'; 150]);
        let r = rotate(&d, "0.log", POLICY, "20261124-010000", || {
            Err(RuntimeError::Failed {
                op: crate::runtime::Op::ReopenContainerLog,
                code: crate::runtime::Code::FailedPrecondition,
                message: "container is not running".into(),
            })
        });
        assert!(
            r.unwrap_err()
                .to_string()
                .ends_with("the runtime did not reopen it: ReopenContainerLog failed: container is not running")
        );
        assert_eq!(names(&d), ["0.log"]);
        std::fs::remove_file(d.join("0.log")).unwrap();
        let mut asked = false;
        assert_eq!(
            rotate(&d, "0.log", POLICY, "20261124-010001", || {
                asked = true;
                Ok(())
            })
            .map_err(|e| e.to_string()),
            Ok(Outcome::Reopened)
        );
        assert!(asked);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn leftovers_of_an_interrupted_compression_are_cleaned_and_links_are_not_followed() {
        let d = tmpdir("leftover");
        write(&d.join("0.log.20261124-010000"), b"x\n");
        compress(&d.join("0.log.20261124-010000")).unwrap();
        // as if cut short after the rename: both forms, and a stray .tmp
        write(&d.join("0.log.20261124-010000"), b"x\n");
        write(&d.join("0.log.20261124-010001.tmp"), b"half");
        assert_eq!(rotated(&d, "0.log").len(), 1);
        write(&d.join("0.log"), &[b'a'; 100]);
        rotate(&d, "0.log", POLICY, "20261124-010002", || Ok(())).unwrap();
        compress_older(&d, "0.log");
        assert_eq!(names(&d), ["0.log.20261124-010000.gz", "0.log.20261124-010002"]);
        // a symlink as the live log: refused, the target untouched
        let outside = d.join("outside");
        write(&outside, &[b'o'; 500]);
        std::os::unix::fs::symlink(&outside, d.join("1.log")).unwrap();
        assert!(
            rotate(&d, "1.log", POLICY, "20261124-010003", || Ok(()))
                .unwrap_err()
                .to_string()
                .ends_with("not a regular file; not rotated")
        );
        assert!(compress(&d.join("1.log")).is_err());
        assert_eq!(std::fs::read(&outside).unwrap().len(), 500);
        remove_instance(&d, "0.log");
        assert_eq!(names(&d), ["1.log", "outside"]);
        std::fs::remove_dir_all(&d).unwrap();
    }
}
