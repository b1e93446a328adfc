//! Pod sources. podwarden has one: static pod manifests in `staticPodPath`.

pub mod file;
pub mod watcher;

pub use file::{FileSource, ScanReport};
pub use watcher::{SourceHandle, start_watcher};
