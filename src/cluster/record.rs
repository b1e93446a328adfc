//! The node's record of what the API assigned it, kept under
//! `<rootDir>/cluster/` so that a node cut off from its control plane (or
//! started while it is away) runs what it last knew: the pods bound to it,
//! the ConfigMaps and Secrets they use, their service account tokens.
//!
//! Each file is written whole (a temporary file, fsync, rename, the
//! directory synced; mode 0600: Secrets and tokens are in it) and starts
//! with a header line `podwarden-record 1 <bytes> <sha256>` over the JSON
//! that follows: a torn or corrupt file is reported and skipped, never
//! half-applied. Every read is bounded.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::model::Pod;
use crate::model::objects::{Kind, ObjKey};

const MAGIC: &str = "podwarden-record 1";
/// The largest record file read (the pods of a full node with their
/// specs, or a Secret at the API's 1 MiB limit, fit many times).
const MAX_BYTES: u64 = 64 << 20;

/// Why a record file is not used.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("{path}: {source}")]
    Io { path: String, source: std::io::Error },
    #[error("{path}: {why}")]
    Corrupt { path: String, why: String },
}

/// The pods the API bound to this node, as last seen.
#[derive(Serialize, Deserialize)]
pub struct PodsRecord {
    /// When the record was written (seconds since the epoch).
    pub written: u64,
    pub pods: Vec<Pod>,
}

/// A service account token as the API issued it.
#[derive(Serialize, Deserialize, Clone)]
pub struct TokenRecord {
    /// pod UID, service account, audience, expiration seconds.
    pub key: (String, String, String, i64),
    pub token: String,
    /// Seconds since the epoch.
    pub issued: u64,
    pub expires: u64,
}

/// The record's directory and its files.
pub struct Record {
    dir: PathBuf,
}

impl Record {
    pub fn new(root_dir: &Path) -> Self {
        Record { dir: root_dir.join("cluster") }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn pods_path(&self) -> PathBuf {
        self.dir.join("pods.json")
    }

    fn tokens_path(&self) -> PathBuf {
        self.dir.join("tokens.json")
    }

    fn object_path(&self, key: &ObjKey) -> PathBuf {
        let kind = match key.kind {
            Kind::ConfigMap => "configmap",
            Kind::Secret => "secret",
        };
        // names and namespaces are DNS labels/subdomains: no `/`, no `_`
        self.dir.join("objects").join(format!("{kind}_{}_{}.json", key.namespace, key.name))
    }

    /// Write `value` as the record file `path`.
    fn write(&self, path: &Path, value: &impl Serialize) -> Result<(), RecordError> {
        let io = |source| RecordError::Io { path: path.display().to_string(), source };
        let body = serde_json::to_vec(value).map_err(|e| io(std::io::Error::other(e)))?;
        let digest = ring::digest::digest(&ring::digest::SHA256, &body);
        let mut bytes = format!("{MAGIC} {} {}\n", body.len(), crate::base::hex(digest.as_ref())).into_bytes();
        bytes.extend_from_slice(&body);
        if let Some(parent) = path.parent() {
            crate::base::fsutil::create_dir_mode(parent, 0o700).map_err(io)?;
        }
        crate::base::fsutil::write_atomically(path, &bytes).map_err(io)
    }

    /// Read the record file `path`: `Ok(None)` when there is none.
    fn read<T: for<'de> Deserialize<'de>>(&self, path: &Path) -> Result<Option<T>, RecordError> {
        let p = path.display().to_string();
        let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else { return Ok(None) };
        if !dir.exists() {
            return Ok(None); // nothing recorded yet
        }
        // a regular file the record wrote, at most MAX_BYTES of it
        let bytes = match crate::base::fsutil::read_regular_in(dir, name, crate::base::fsutil::Links::Refuse, MAX_BYTES)
        {
            Ok(b) => b,
            Err(e) if e.is_not_found() => return Ok(None),
            Err(e) => return Err(RecordError::Corrupt { path: p, why: e.to_string() }),
        };
        let corrupt = |why: String| RecordError::Corrupt { path: p.clone(), why };
        let nl = bytes.iter().position(|b| *b == b'\n').ok_or_else(|| corrupt("no header line".into()))?;
        let header = std::str::from_utf8(&bytes[..nl]).map_err(|_| corrupt("a header that is not text".into()))?;
        let body = &bytes[nl + 1..];
        let mut parts = header.rsplitn(3, ' ');
        let (sum, len, magic) = (parts.next(), parts.next(), parts.next());
        if magic != Some(MAGIC) {
            return Err(corrupt(format!("not a podwarden record (header {header:?})")));
        }
        if len.and_then(|l| l.parse::<usize>().ok()) != Some(body.len()) {
            return Err(corrupt(format!(
                "torn: {} bytes after the header, the header says {}",
                body.len(),
                len.unwrap_or("?")
            )));
        }
        let digest = ring::digest::digest(&ring::digest::SHA256, body);
        if sum != Some(crate::base::hex(digest.as_ref()).as_str()) {
            return Err(corrupt("its checksum does not match its content".into()));
        }
        serde_json::from_slice(body).map(Some).map_err(|e| corrupt(format!("its content: {e}")))
    }

    pub fn save_pods(&self, pods: &[std::sync::Arc<Pod>]) -> Result<(), RecordError> {
        #[derive(Serialize)]
        struct Out<'a> {
            written: u64,
            pods: Vec<&'a Pod>,
        }
        self.write(
            &self.pods_path(),
            &Out { written: epoch(SystemTime::now()), pods: pods.iter().map(|p| &**p).collect() },
        )
    }

    pub fn load_pods(&self) -> Result<Option<PodsRecord>, RecordError> {
        self.read(&self.pods_path())
    }

    /// Keep `value` as the object `key` (`None`: the API has none).
    pub fn save_object(&self, key: &ObjKey, value: Option<&Value>) -> Result<(), RecordError> {
        let path = self.object_path(key);
        match value {
            Some(v) => self.write(&path, v),
            None => match std::fs::remove_file(&path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    Err(RecordError::Io { path: path.display().to_string(), source: e })
                }
                _ => Ok(()),
            },
        }
    }

    /// Every recorded object the pods reference, by key; a file that
    /// cannot be used is reported in the second list and left out.
    pub fn load_objects(&self, keys: impl IntoIterator<Item = ObjKey>) -> (Vec<(ObjKey, Value)>, Vec<RecordError>) {
        let (mut found, mut bad) = (Vec::new(), Vec::new());
        for k in keys {
            match self.read::<Value>(&self.object_path(&k)) {
                Ok(Some(v)) => found.push((k, v)),
                Ok(None) => {}
                Err(e) => bad.push(e),
            }
        }
        (found, bad)
    }

    /// Drop the object files no key names any more.
    pub fn retain_objects(&self, keep: &std::collections::BTreeSet<ObjKey>) {
        let keep: std::collections::BTreeSet<PathBuf> = keep.iter().map(|k| self.object_path(k)).collect();
        let Ok(dir) = std::fs::read_dir(self.dir.join("objects")) else { return };
        for e in dir.flatten() {
            let p = e.path();
            if p.extension().is_some_and(|x| x == "json") && !keep.contains(&p) {
                let _ = std::fs::remove_file(&p);
            }
        }
    }

    pub fn save_tokens(&self, tokens: &[TokenRecord]) -> Result<(), RecordError> {
        self.write(&self.tokens_path(), &tokens)
    }

    pub fn load_tokens(&self) -> Result<Vec<TokenRecord>, RecordError> {
        Ok(self.read(&self.tokens_path())?.unwrap_or_default())
    }
}

pub fn epoch(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// When `written` (seconds since the epoch) was, as RFC 3339.
pub fn when(written: u64) -> String {
    crate::model::rfc3339(SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(written))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tmp(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("pw-record-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn a_record_reads_back_and_a_torn_or_changed_one_is_refused() {
        let root = tmp("torn");
        let r = Record::new(&root);
        let key = ObjKey::new(Kind::Secret, "ns", "creds");
        let v = json!({"metadata": {"name": "creds"}, "data": {"p": "cHc="}});
        r.save_object(&key, Some(&v)).unwrap();
        let path = r.object_path(&key);
        let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&path).unwrap().permissions());
        assert_eq!(mode & 0o777, 0o600);
        let (found, bad) = r.load_objects([key.clone()]);
        assert!(bad.is_empty());
        assert_eq!(found, vec![(key.clone(), v)]);
        // torn: the end cut off
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() - 3]).unwrap();
        let (found, bad) = r.load_objects([key.clone()]);
        assert!(found.is_empty());
        assert!(bad[0].to_string().contains("torn"), "{}", bad[0]);
        // the same length, one byte changed
        let mut changed = bytes.clone();
        let i = changed.len() - 5;
        changed[i] ^= 1;
        std::fs::write(&path, &changed).unwrap();
        let (_, bad) = r.load_objects([key.clone()]);
        assert!(bad[0].to_string().contains("checksum"), "{}", bad[0]);
        // not a record at all
        std::fs::write(&path, b"{}").unwrap();
        let (_, bad) = r.load_objects([key.clone()]);
        assert!(bad[0].to_string().contains("header"), "{}", bad[0]);
        // removed when the API has none
        r.save_object(&key, None).unwrap();
        assert!(!path.exists());
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn pods_and_tokens_read_back() {
        let root = tmp("pods");
        let r = Record::new(&root);
        assert!(r.load_pods().unwrap().is_none());
        let pod: Pod = serde_json::from_value(json!({"metadata": {"name": "a", "namespace": "n", "uid": "u1"},
            "spec": {"containers": [{"name": "c", "image": "i"}]}}))
        .unwrap();
        r.save_pods(&[std::sync::Arc::new(pod.clone())]).unwrap();
        let back = r.load_pods().unwrap().unwrap();
        assert_eq!(back.pods, vec![pod]);
        assert!(back.written > 0);
        let t = TokenRecord {
            key: ("u1".into(), "default".into(), "".into(), 3600),
            token: "tok".into(),
            issued: 1,
            expires: 2,
        };
        r.save_tokens(std::slice::from_ref(&t)).unwrap();
        assert_eq!(r.load_tokens().unwrap()[0].token, "tok");
        let _ = std::fs::remove_dir_all(&root);
    }
}
