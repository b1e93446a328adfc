//! Writing files so that readers see the old content or the new, never a
//! half-written file.

use std::io::Write;
use std::path::Path;

/// Write `bytes` to `path` through `.<name>.tmp` in the same directory,
/// synced, then renamed over it (the directory synced too).
pub fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().ok_or_else(|| std::io::Error::other(format!("{} has no directory", path.display())))?;
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let tmp = dir.join(format!(".{name}.tmp"));
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)?;
    std::fs::File::open(dir)?.sync_all()
}
