//! Registry credentials for image pulls, found as the kubelet finds them:
//!
//! - the docker config keyring: the first of `<rootDir>/config.json`,
//!   `<cwd>/config.json`, `$HOME/.docker/config.json`,
//!   `/.docker/config.json`, then the legacy `.dockercfg` in `<rootDir>`,
//!   the working directory, `$HOME` and `/`, that parses (one file, never
//!   merged), its `auths` read again every 5 minutes;
//! - credential provider plugins (`imageCredentialProviderConfig`,
//!   `imageCredentialProviderBinDir`): executables that answer a
//!   `CredentialProviderRequest` on stdin with a
//!   `CredentialProviderResponse` on stdout, for the images their
//!   `matchImages` name, their answers cached by `cacheKeyType` for
//!   `cacheDuration`.
//!
//! Keys match an image as the kubelet's keyring matches them: the same
//! number of host labels (each a glob: `*.example.com`), the same port, and
//! a path that is a string prefix of the image's repository; every matching
//! key gives its credentials, the most specific first. A pull with
//! credentials tries each in turn and never falls back to an anonymous
//! pull; one without any is anonymous.
//!
//! A password never leaves this module but inside [`Auth`], whose `Debug`
//! hides it: errors name files, keys and user names only.

use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde::Deserialize;
use thiserror::Error;

use crate::base::cancel::CancelToken;
use crate::runtime::Auth;

/// How long the docker config keyring keeps what it read (the kubelet's
/// `CachingDockerConfigProvider` lifetime).
pub const DOCKER_CONFIG_LIFETIME: Duration = Duration::from_secs(300);
/// A plugin that has not answered by then is killed (the kubelet's
/// catch-all exec timeout).
pub const PLUGIN_TIMEOUT: Duration = Duration::from_secs(60);
/// The largest docker config file, plugin config file or plugin answer
/// read.
const MAX_FILE_BYTES: u64 = 1 << 20;
/// What of a failed plugin's stderr its error shows.
const MAX_STDERR_BYTES: usize = 4096;
/// Cached plugin answers at most (an edge node pulls few repositories).
const MAX_CACHED: usize = 1024;

/// The plugin protocol versions the kubelet speaks; all have the same shape.
const PLUGIN_API_VERSIONS: &[&str] = &[
    "credentialprovider.kubelet.k8s.io/v1",
    "credentialprovider.kubelet.k8s.io/v1beta1",
    "credentialprovider.kubelet.k8s.io/v1alpha1",
];
const CONFIG_API_VERSIONS: &[&str] =
    &["kubelet.config.k8s.io/v1", "kubelet.config.k8s.io/v1beta1", "kubelet.config.k8s.io/v1alpha1"];

/// Why the plugins could not be loaded: the start stops.
#[derive(Debug, Error)]
pub enum CredentialError {
    #[error("imageCredentialProviderConfig {path}: {source}")]
    Config { path: String, source: ProviderConfigError },
    #[error("imageCredentialProviderBinDir {path}: {source}")]
    BinDir { path: String, source: BinDirError },
}

/// An administrator's file that could not be read ([`read_small`]).
#[derive(Debug, Error)]
pub enum AdminFileError {
    #[error("{0}")]
    Read(std::io::Error),
    #[error("larger than {} bytes", MAX_FILE_BYTES)]
    TooLarge,
}

/// Why a docker config file gives no keyring; never quotes a value.
#[derive(Debug, Error)]
pub enum DockerConfigError {
    #[error("{0}")]
    Read(AdminFileError),
    /// serde_json's messages name a line and column, never the text.
    #[error("{0}")]
    Parse(serde_json::Error),
    #[error("entry {key:?}: unable to parse auth field, must be formatted as base64(username:password)")]
    BadAuth { key: String },
}

/// What is wrong with a credential provider config (its files, their
/// documents, the providers they list).
#[derive(Debug, Error)]
pub enum ProviderConfigError {
    #[error("{0}")]
    Read(AdminFileError),
    /// The config path cannot be looked at or listed.
    #[error("{0}")]
    List(std::io::Error),
    #[error("a directory without *.json, *.yaml or *.yml files")]
    EmptyDir,
    #[error("{0}")]
    Yaml(crate::model::bounded_yaml::YamlError),
    #[error("holds {0} documents; expected one")]
    Documents(usize),
    /// Not a config's shape; `at` is the field's path (`None`: the top).
    #[error("{}", decode_text(.at.as_deref(), .source))]
    Decode { at: Option<String>, source: serde_json::Error },
    #[error("failed to decode {file:?} (wrong Kind): kind {kind:?}")]
    WrongKind { file: String, kind: String },
    #[error("apiVersion {version:?} is not supported: expected one of {versions:?}", versions = CONFIG_API_VERSIONS)]
    ApiVersion { version: String },
    #[error("{0}")]
    Provider(ProviderError),
    #[error("duplicate provider name {name:?} found in configuration file(s)")]
    Duplicate { name: String },
    #[error("at least 1 item in plugins is required")]
    NoProviders,
}

/// `<field path>: <error>`, or the error alone at the top.
fn decode_text(at: Option<&str>, e: &serde_json::Error) -> String {
    match at {
        Some(at) => format!("{at}: {e}"),
        None => e.to_string(),
    }
}

/// The kubelet's checks of one provider, each naming the provider and field.
#[derive(Debug, Error)]
pub enum ProviderError {
    #[error("providers: name is required")]
    NameRequired,
    #[error("providers[{name:?}].name: provider name cannot contain '/'")]
    NameSlash { name: String },
    #[error("providers[{name:?}].name: provider name cannot contain spaces")]
    NameSpace { name: String },
    #[error("providers[{name:?}].name: provider name cannot be {name:?}")]
    NameDots { name: String },
    #[error("providers[{name:?}].apiVersion: Required value")]
    ApiVersionRequired { name: String },
    #[error("providers[{name:?}].apiVersion: Unsupported value {version:?}: supported values: {versions:?}", versions = PLUGIN_API_VERSIONS)]
    ApiVersionUnsupported { name: String, version: String },
    #[error("providers[{name:?}].matchImages: at least 1 item in matchImages is required")]
    NoMatchImages { name: String },
    #[error("providers[{name:?}].matchImages: match image is invalid: {image:?}")]
    MatchImage { name: String, image: String },
    #[error("providers[{name:?}].defaultCacheDuration: Required value")]
    CacheDurationRequired { name: String },
    #[error("providers[{name:?}].defaultCacheDuration: must be greater than or equal to 0")]
    CacheDurationNegative { name: String },
    #[error("providers[{name:?}].defaultCacheDuration: {value:?} is not a duration")]
    CacheDurationInvalid { name: String, value: String },
    #[error("providers[{name:?}].tokenAttributes: service account tokens for plugins are not implemented by podwarden")]
    TokenAttributes { name: String },
}

/// What is wrong with `imageCredentialProviderBinDir`.
#[derive(Debug, Error)]
pub enum BinDirError {
    #[error("required with imageCredentialProviderConfig")]
    Required,
    #[error("plugin binary directory {} did not exist", dir.display())]
    NoDir { dir: PathBuf },
    #[error("plugin binary executable {} did not exist", exe.display())]
    NoExecutable { exe: PathBuf },
}

/// Why running a plugin process gave no answer.
#[derive(Debug, Error)]
pub enum ExecError {
    #[error("{0}")]
    Spawn(std::io::Error),
    /// Its pipes could not be made non-blocking.
    #[error("{0}")]
    Pipes(std::io::Error),
    #[error("cancelled")]
    Cancelled,
    #[error("no answer within {}s; killed", PLUGIN_TIMEOUT.as_secs())]
    Timeout,
    #[error("answer larger than {} bytes", MAX_FILE_BYTES)]
    TooLarge,
    /// It exited unsuccessfully; `stderr` is what it wrote there, trimmed.
    #[error("{status}: {stderr}")]
    Exited { status: std::process::ExitStatus, stderr: String },
}

/// Why a plugin gave no credentials (logged; the pull goes on without).
#[derive(Debug, Error)]
pub enum PluginError {
    #[error("error execing credential provider plugin {plugin} for image {image}: {source}")]
    Exec { plugin: String, image: String, source: ExecError },
    #[error("error decoding credential provider plugin response from stdout: {0}")]
    Decode(serde_json::Error),
    #[error(
        "apiVersion from credential plugin response did not match expected apiVersion:{expected}, actual apiVersion:{actual}"
    )]
    ApiVersion { expected: String, actual: String },
    #[error("credential plugin {plugin} answered kind {kind:?}, not CredentialProviderResponse")]
    Kind { plugin: String, kind: String },
    #[error("credential provider plugin did not return a valid cacheKeyType: {0:?}")]
    CacheKeyType(String),
    #[error("credential plugin {plugin} answered cacheDuration {value:?}: not a duration")]
    CacheDuration { plugin: String, value: String },
}

// ---------------------------------------------------------------------
// Image names and key matching

/// The repository an image is pulled from, normalized as the kubelet looks
/// it up: no tag or digest, Docker Hub spelled out (`busybox` ->
/// `docker.io/library/busybox`, `127.0.0.1:5000/a/b:1` ->
/// `127.0.0.1:5000/a/b`).
pub fn repository(image: &str) -> String {
    let name = image.split_once('@').map_or(image, |(n, _)| n);
    let name = match name.rfind(':') {
        Some(i) if !name[i..].contains('/') => &name[..i],
        _ => name,
    };
    let (domain, rest) = match name.split_once('/') {
        Some((d, r)) if d.contains('.') || d.contains(':') || d == "localhost" => (d, r.to_string()),
        _ => ("docker.io", name.to_string()),
    };
    let domain = if domain == "index.docker.io" { "docker.io" } else { domain };
    let rest = if domain == "docker.io" && !rest.contains('/') { format!("library/{rest}") } else { rest };
    format!("{domain}/{rest}")
}

/// A key or image as host labels, port and path (`https://` assumed).
struct Url<'a> {
    labels: Vec<&'a str>,
    port: &'a str,
    path: &'a str,
}

/// A location without its scheme, as host (with its port) and path (`/...`
/// or empty).
fn host_and_path(s: &str) -> (&str, &str) {
    let s = s.strip_prefix("https://").or_else(|| s.strip_prefix("http://")).unwrap_or(s);
    match s.find('/') {
        Some(i) => (&s[..i], &s[i..]),
        None => (s, ""),
    }
}

fn split_url(s: &str) -> Url<'_> {
    let (host, path) = host_and_path(s);
    let (host, port) = match host.rsplit_once(':') {
        Some((h, p)) if !p.contains(']') => (h, p),
        _ => (host, ""),
    };
    Url { labels: host.split('.').collect(), port, path }
}

/// Whether key `glob` matches `target` (an image repository), as the
/// kubelet's `URLsMatch`: equal ports, as many host labels, each label a
/// glob (`*`, `?`, `[a-z]`) of the target's, and the key's path a string
/// prefix of the target's.
pub fn url_matches(glob: &str, target: &str) -> bool {
    let (g, t) = (split_url(glob), split_url(target));
    g.port == t.port
        && g.labels.len() == t.labels.len()
        && t.path.starts_with(g.path)
        && g.labels.iter().zip(&t.labels).all(|(g, t)| glob_matches(g.as_bytes(), t.as_bytes()))
}

/// `filepath.Match` on one host label: `*` any run, `?` one byte, `[...]`
/// a class (ranges, `^` negation), `\` an escape. A bad pattern matches
/// nothing.
fn glob_matches(p: &[u8], s: &[u8]) -> bool {
    match p.first() {
        None => s.is_empty(),
        Some(b'*') => (0..=s.len()).any(|i| glob_matches(&p[1..], &s[i..])),
        Some(b'?') => !s.is_empty() && glob_matches(&p[1..], &s[1..]),
        Some(b'[') => {
            let Some(&c) = s.first() else { return false };
            let mut i = 1;
            let negate = p.get(i) == Some(&b'^');
            if negate {
                i += 1;
            }
            let mut hit = false;
            let mut first = true;
            loop {
                match p.get(i) {
                    None => return false,
                    Some(b']') if !first => break,
                    _ => {}
                }
                first = false;
                let lo = if p[i] == b'\\' {
                    i += 1;
                    *p.get(i).unwrap_or(&0)
                } else {
                    p[i]
                };
                i += 1;
                let hi = if p.get(i) == Some(&b'-') && p.get(i + 1).is_some_and(|&b| b != b']') {
                    i += 2;
                    p[i - 1]
                } else {
                    lo
                };
                hit |= lo <= c && c <= hi;
            }
            hit != negate && glob_matches(&p[i + 1..], &s[1..])
        }
        Some(b'\\') => p.len() > 1 && s.first() == Some(&p[1]) && glob_matches(&p[2..], &s[1..]),
        Some(&b) => s.first() == Some(&b) && glob_matches(&p[1..], &s[1..]),
    }
}

/// Whether an image is Docker Hub's, for the `index.docker.io` key.
fn is_default_registry(image: &str) -> bool {
    match image.split_once('/') {
        None => !image.is_empty(),
        Some(("", _)) => false,
        Some((first, _)) => first == "docker.io" || first == "index.docker.io" || !first.contains(['.', ':']),
    }
}

/// Credentials by key, matched as the kubelet's `BasicDockerKeyring`.
#[derive(Debug, Default, Clone)]
pub struct BasicKeyring {
    /// Key -> its credentials in the order added; keys sorted in reverse
    /// (the most specific of a prefix first, wildcards after names).
    pub(super) keys: Vec<(String, Vec<Auth>)>,
}

impl BasicKeyring {
    /// Add credentials under `location` (a registry host, with an optional
    /// scheme, port and path: `https://index.docker.io/v1/`,
    /// `registry.example:5000/team`). `false`: not a location.
    pub fn add(&mut self, location: &str, auth: Auth) -> bool {
        let (host, path) = host_and_path(location);
        if host.is_empty() || host.contains(['@', '?', '#', ' ']) {
            return false;
        }
        let path = path.split(['?', '#']).next().unwrap_or_default();
        let path = if path.starts_with("/v1/") || path.starts_with("/v2/") { &path[3..] } else { path };
        let key = if path.is_empty() || path == "/" { host.to_string() } else { format!("{host}{path}") };
        match self.keys.binary_search_by(|(k, _)| key.cmp(k)) {
            Ok(i) => self.keys[i].1.push(auth),
            Err(i) => self.keys.insert(i, (key, vec![auth])),
        }
        true
    }

    /// Every credential whose key matches `repo` (see [`repository`]), the
    /// most specific key first; Docker Hub images fall back on the
    /// `index.docker.io` key.
    pub fn lookup(&self, repo: &str) -> Vec<Auth> {
        let found: Vec<Auth> =
            self.keys.iter().filter(|(k, _)| url_matches(k, repo)).flat_map(|(_, a)| a.iter().cloned()).collect();
        if found.is_empty() && is_default_registry(repo) {
            return self.keys.iter().find(|(k, _)| k == "index.docker.io").map(|(_, a)| a.clone()).unwrap_or_default();
        }
        found
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

// ---------------------------------------------------------------------
// The docker config keyring

#[derive(Deserialize)]
pub(super) struct DockerEntry {
    #[serde(default)]
    username: String,
    #[serde(default)]
    password: String,
    #[serde(default)]
    auth: String,
}

#[derive(Deserialize)]
pub(super) struct DockerConfigJson {
    #[serde(default)]
    pub(super) auths: BTreeMap<String, DockerEntry>,
}

/// Standard base64, padded (`=` at the end) or not.
fn base64_decode(s: &str) -> Option<Vec<u8>> {
    let s = s.trim().trim_end_matches('=');
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0);
    for b in s.bytes() {
        let v = match b {
            b'A'..=b'Z' => b - b'A',
            b'a'..=b'z' => b - b'a' + 26,
            b'0'..=b'9' => b - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    (bits < 6).then_some(out)
}

/// A docker config's entries as a keyring; `Err` names what is wrong
/// without quoting a value.
pub(super) fn keyring_of(entries: BTreeMap<String, DockerEntry>) -> Result<BasicKeyring, DockerConfigError> {
    let mut ring = BasicKeyring::default();
    for (key, e) in entries {
        let (username, password) = if e.auth.is_empty() {
            (e.username, e.password)
        } else {
            let decoded = base64_decode(&e.auth).and_then(|b| String::from_utf8(b).ok());
            match decoded.as_deref().and_then(|d| d.split_once(':')) {
                Some((u, p)) => (u.to_string(), p.to_string()),
                None => return Err(DockerConfigError::BadAuth { key }),
            }
        };
        if !ring.add(&key, Auth::new(username, password)) {
            log::warn!("docker config entry {key:?} is not a registry location; ignored");
        }
    }
    Ok(ring)
}

/// A file the administrator controls, at most [`MAX_FILE_BYTES`] of it.
fn read_small(path: &Path) -> Result<String, AdminFileError> {
    let text = crate::base::fsutil::read_host_file(path, MAX_FILE_BYTES + 1).map_err(AdminFileError::Read)?;
    if text.len() as u64 > MAX_FILE_BYTES {
        return Err(AdminFileError::TooLarge);
    }
    Ok(text)
}

/// A docker config file's keyring: `config.json` (`{"auths": {...}}`) or,
/// `legacy`, a `.dockercfg` (the entries alone).
fn read_docker_config(path: &Path, legacy: bool) -> Result<BasicKeyring, DockerConfigError> {
    let text = read_small(path).map_err(DockerConfigError::Read)?;
    // serde_json's messages name a line and column, never the text
    let entries = if legacy {
        serde_json::from_str::<BTreeMap<String, DockerEntry>>(&text).map_err(DockerConfigError::Parse)?
    } else {
        serde_json::from_str::<DockerConfigJson>(&text).map_err(DockerConfigError::Parse)?.auths
    };
    keyring_of(entries)
}

/// Where the kubelet looks for docker config files, in order; the second
/// of each pair is whether it is a legacy `.dockercfg`.
pub fn docker_config_paths(root_dir: &Path) -> Vec<(PathBuf, bool)> {
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    let home = std::env::var_os("HOME").map(PathBuf::from).filter(|h| h.is_absolute());
    let mut json = vec![root_dir.to_path_buf(), cwd.clone()];
    let mut legacy = vec![root_dir.to_path_buf(), cwd];
    if let Some(h) = &home {
        json.push(h.join(".docker"));
        legacy.push(h.clone());
    }
    json.push(PathBuf::from("/.docker"));
    legacy.push(PathBuf::from("/"));
    let mut out: Vec<(PathBuf, bool)> = json.into_iter().map(|d| (d.join("config.json"), false)).collect();
    out.extend(legacy.into_iter().map(|d| (d.join(".dockercfg"), true)));
    out
}

/// The node's docker config, read again after [`DOCKER_CONFIG_LIFETIME`].
struct DockerConfig {
    paths: Vec<(PathBuf, bool)>,
    read: Mutex<Option<(Instant, BasicKeyring)>>,
}

impl DockerConfig {
    fn keyring(&self) -> BasicKeyring {
        let mut read = self.read.lock();
        if let Some((at, ring)) = &*read
            && at.elapsed() < DOCKER_CONFIG_LIFETIME
        {
            return ring.clone();
        }
        let mut ring = BasicKeyring::default();
        for (path, legacy) in &self.paths {
            match read_docker_config(path, *legacy) {
                Ok(r) => {
                    log::debug!("registry credentials: using {}", path.display());
                    ring = r;
                    break;
                }
                Err(e) if path.exists() => log::warn!("registry credentials: {} not used: {e}", path.display()),
                Err(_) => {}
            }
        }
        *read = Some((Instant::now(), ring.clone()));
        ring
    }
}

// ---------------------------------------------------------------------
// Credential provider plugins

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ProviderConfigFile {
    api_version: String,
    kind: String,
    #[serde(default)]
    providers: Vec<ProviderSpec>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ProviderSpec {
    name: String,
    #[serde(default)]
    match_images: Vec<String>,
    default_cache_duration: Option<String>,
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: Vec<EnvVar>,
    token_attributes: Option<serde_json::Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EnvVar {
    name: String,
    value: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PluginResponse {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    cache_key_type: String,
    cache_duration: Option<String>,
    #[serde(default)]
    auth: BTreeMap<String, PluginAuth>,
}

#[derive(Deserialize)]
struct PluginAuth {
    #[serde(default)]
    username: String,
    #[serde(default)]
    password: String,
}

/// One configured plugin and its cache.
struct Plugin {
    name: String,
    exe: PathBuf,
    match_images: Vec<String>,
    default_cache: Duration,
    api_version: String,
    args: Vec<String>,
    env: Vec<(String, String)>,
    /// Cache key (`image:<repo>`, `registry:<host>`, `global`) -> the
    /// answer and when it expires.
    cache: Mutex<HashMap<String, (Instant, BasicKeyring)>>,
    /// One run at a time: a pull that waits finds the first run's answer
    /// in the cache (the kubelet's single flight).
    running: Mutex<()>,
}

impl Plugin {
    fn cached(&self, repo: &str) -> Option<BasicKeyring> {
        let mut cache = self.cache.lock();
        let now = Instant::now();
        cache.retain(|_, (until, _)| *until > now);
        let registry = repo.split('/').next().unwrap_or_default();
        [format!("image:{repo}"), format!("registry:{registry}"), "global".to_string()]
            .iter()
            .find_map(|k| cache.get(k).map(|(_, r)| r.clone()))
    }

    /// The plugin's credentials for `repo`; errors are logged (as the
    /// kubelet does, the pull goes on without them).
    fn lookup(
        &self,
        repo: &str,
        cancel: &CancelToken,
        metrics: Option<&crate::telemetry::metrics::Metrics>,
    ) -> Vec<Auth> {
        if !self.match_images.iter().any(|m| url_matches(m, repo)) {
            return Vec::new();
        }
        if let Some(r) = self.cached(repo) {
            return r.lookup(repo);
        }
        let _turn = loop {
            if let Some(t) = self.running.try_lock_for(Duration::from_millis(100)) {
                break t;
            }
            if cancel.is_cancelled() {
                return Vec::new();
            }
        };
        if let Some(r) = self.cached(repo) {
            return r.lookup(repo);
        }
        let began = Instant::now();
        let ran = self.run(repo, cancel);
        if let Some(m) = metrics {
            m.credential_plugin_ran(&self.name, began.elapsed().as_secs_f64(), ran.is_err());
        }
        match ran {
            Ok(r) => r.lookup(repo),
            Err(e) => {
                log::warn!("Failed getting credential from external registry credential provider: {e}");
                Vec::new()
            }
        }
    }

    /// Run the plugin for `repo`, cache its answer, return it.
    fn run(&self, repo: &str, cancel: &CancelToken) -> Result<BasicKeyring, PluginError> {
        let request = serde_json::json!({
            "kind": "CredentialProviderRequest",
            "apiVersion": self.api_version,
            "image": repo,
        });
        let fail = |source: ExecError| PluginError::Exec { plugin: self.name.clone(), image: repo.to_string(), source };
        let (status, stdout, stderr) =
            exec(&self.exe, &self.args, &self.env, request.to_string().as_bytes(), cancel).map_err(fail)?;
        if !status.success() {
            let stderr = String::from_utf8_lossy(&stderr).trim().to_string();
            return Err(fail(ExecError::Exited { status, stderr }));
        }
        let r: PluginResponse = serde_json::from_slice(&stdout).map_err(PluginError::Decode)?;
        if r.api_version != self.api_version {
            return Err(PluginError::ApiVersion { expected: self.api_version.clone(), actual: r.api_version });
        }
        if r.kind != "CredentialProviderResponse" {
            return Err(PluginError::Kind { plugin: self.name.clone(), kind: r.kind });
        }
        let key = match r.cache_key_type.as_str() {
            "Image" => format!("image:{repo}"),
            "Registry" => format!("registry:{}", repo.split('/').next().unwrap_or_default()),
            "Global" => "global".to_string(),
            _ => return Err(PluginError::CacheKeyType(r.cache_key_type)),
        };
        let ttl = match r.cache_duration {
            Some(d) => crate::config::parse_duration_checked(&d)
                .map_err(|_| PluginError::CacheDuration { plugin: self.name.clone(), value: d })?,
            None => self.default_cache,
        };
        let mut ring = BasicKeyring::default();
        for (k, a) in r.auth {
            if !ring.add(&k, Auth::new(a.username, a.password)) {
                log::warn!("credential plugin {}: auth key {k:?} is not a registry location; ignored", self.name);
            }
        }
        if !ttl.is_zero() {
            let mut cache = self.cache.lock();
            if cache.len() >= MAX_CACHED {
                cache.clear();
            }
            cache.insert(key, (Instant::now() + ttl, ring.clone()));
        }
        Ok(ring)
    }
}

/// Run `exe` with `stdin` as its input: its status, stdout (at most
/// [`MAX_FILE_BYTES`]) and stderr (the first [`MAX_STDERR_BYTES`]); killed
/// at [`PLUGIN_TIMEOUT`] or when `cancel` fires. Output is read as it
/// comes, so a chatty plugin cannot block on a full pipe.
fn exec(
    exe: &Path,
    args: &[String],
    env: &[(String, String)],
    stdin: &[u8],
    cancel: &CancelToken,
) -> Result<(std::process::ExitStatus, Vec<u8>, Vec<u8>), ExecError> {
    use std::io::Write;
    use std::os::fd::{AsFd, AsRawFd};
    let mut child = Command::new(exe)
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(ExecError::Spawn)?;
    // a request is far below a pipe's capacity: this write cannot block
    if let Some(mut i) = child.stdin.take() {
        let _ = i.write_all(stdin);
    }
    let mut out = child.stdout.take().expect("piped");
    let mut err = child.stderr.take().expect("piped");
    if let Err(e) = crate::sys::set_nonblocking(out.as_fd()).and_then(|()| crate::sys::set_nonblocking(err.as_fd())) {
        let _ = child.kill();
        let _ = child.wait();
        return Err(ExecError::Pipes(e));
    }
    let deadline = Instant::now() + PLUGIN_TIMEOUT;
    let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
    let (mut out_open, mut err_open) = (true, true);
    let mut exited: Option<(std::process::ExitStatus, Instant)> = None;
    let mut buf = [0u8; 8192];
    let outcome = loop {
        if cancel.is_cancelled() {
            break Err(ExecError::Cancelled);
        }
        if Instant::now() >= deadline {
            break Err(ExecError::Timeout);
        }
        let mut fds: Vec<libc::pollfd> = Vec::new();
        if out_open {
            fds.push(libc::pollfd { fd: out.as_raw_fd(), events: libc::POLLIN, revents: 0 });
        }
        if err_open {
            fds.push(libc::pollfd { fd: err.as_raw_fd(), events: libc::POLLIN, revents: 0 });
        }
        if !fds.is_empty() {
            let _ = crate::sys::poll(&mut fds, 50);
        } else {
            std::thread::sleep(Duration::from_millis(10));
        }
        for (open, pipe, sink, max) in [
            (&mut out_open, &mut out as &mut dyn Read, &mut stdout, MAX_FILE_BYTES as usize + 1),
            (&mut err_open, &mut err as &mut dyn Read, &mut stderr, MAX_STDERR_BYTES),
        ] {
            while *open {
                match pipe.read(&mut buf) {
                    Ok(0) => *open = false,
                    Ok(n) => {
                        let keep = n.min(max.saturating_sub(sink.len()));
                        sink.extend_from_slice(&buf[..keep]);
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(_) => break,
                }
            }
        }
        if stdout.len() > MAX_FILE_BYTES as usize {
            break Err(ExecError::TooLarge);
        }
        if exited.is_none()
            && let Ok(Some(s)) = child.try_wait()
        {
            exited = Some((s, Instant::now()));
        }
        match exited {
            // both pipes closed, or a descendant keeps them open a second
            // after the plugin itself ended
            Some((s, at)) if (!out_open && !err_open) || at.elapsed() > Duration::from_secs(1) => break Ok(s),
            _ => {}
        }
    };
    match outcome {
        Ok(s) => Ok((s, stdout, stderr)),
        Err(e) => {
            let _ = child.kill();
            let _ = child.wait();
            Err(e)
        }
    }
}

/// Parse and check a credential provider config (the kubelet's
/// `CredentialProviderConfig`, YAML or JSON, strict): its providers.
fn parse_provider_config(path: &str, text: &str) -> Result<Vec<ProviderSpec>, ProviderConfigError> {
    let mut docs = crate::model::bounded_yaml::parse_bounded(text).map_err(ProviderConfigError::Yaml)?;
    docs.retain(|d| !d.is_null());
    let [doc] = <[_; 1]>::try_from(docs).map_err(|d| ProviderConfigError::Documents(d.len()))?;
    let file: ProviderConfigFile = serde_path_to_error::deserialize(&doc).map_err(|e| {
        let at = e.path().to_string();
        ProviderConfigError::Decode { at: (at != ".").then_some(at), source: e.into_inner() }
    })?;
    if file.kind != "CredentialProviderConfig" {
        return Err(ProviderConfigError::WrongKind { file: path.to_string(), kind: file.kind });
    }
    if !CONFIG_API_VERSIONS.contains(&file.api_version.as_str()) {
        return Err(ProviderConfigError::ApiVersion { version: file.api_version });
    }
    Ok(file.providers)
}

/// The kubelet's checks of one provider.
fn check_provider(p: &ProviderSpec) -> Result<(), ProviderError> {
    let name = || p.name.clone();
    if p.name.is_empty() {
        return Err(ProviderError::NameRequired);
    }
    if p.name.contains('/') {
        return Err(ProviderError::NameSlash { name: name() });
    }
    if p.name.contains(' ') {
        return Err(ProviderError::NameSpace { name: name() });
    }
    if p.name == "." || p.name == ".." {
        return Err(ProviderError::NameDots { name: name() });
    }
    if p.api_version.is_empty() {
        return Err(ProviderError::ApiVersionRequired { name: name() });
    }
    if !PLUGIN_API_VERSIONS.contains(&p.api_version.as_str()) {
        return Err(ProviderError::ApiVersionUnsupported { name: name(), version: p.api_version.clone() });
    }
    if p.match_images.is_empty() {
        return Err(ProviderError::NoMatchImages { name: name() });
    }
    for m in &p.match_images {
        if m.is_empty() || m.contains(['@', ' ', '?', '#']) || split_url(m).labels.iter().any(|l| l.is_empty()) {
            return Err(ProviderError::MatchImage { name: name(), image: m.clone() });
        }
    }
    match p.default_cache_duration.as_deref() {
        None => return Err(ProviderError::CacheDurationRequired { name: name() }),
        Some(d) => match crate::config::parse_duration_checked(d) {
            Ok(_) => {}
            Err(crate::config::DurationError::Negative) => {
                return Err(ProviderError::CacheDurationNegative { name: name() });
            }
            Err(_) => return Err(ProviderError::CacheDurationInvalid { name: name(), value: d.to_string() }),
        },
    }
    if p.token_attributes.is_some() {
        return Err(ProviderError::TokenAttributes { name: name() });
    }
    Ok(())
}

/// The provider config files `path` names: itself, or a directory's
/// `*.json`, `*.yaml` and `*.yml` in name order.
fn provider_config_files(path: &Path) -> Result<Vec<PathBuf>, ProviderConfigError> {
    let meta = std::fs::metadata(path).map_err(ProviderConfigError::List)?;
    if !meta.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(path)
        .map_err(ProviderConfigError::List)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json" || x == "yaml" || x == "yml") && p.is_file())
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(ProviderConfigError::EmptyDir);
    }
    Ok(files)
}

/// Load the plugins `config` configures from `bin_dir`, as the kubelet does
/// at its start: any error stops the start.
fn load_plugins(config: &Path, bin_dir: &Path) -> Result<Vec<Plugin>, CredentialError> {
    let cfg_err =
        |path: &Path, source: ProviderConfigError| CredentialError::Config { path: path.display().to_string(), source };
    let mut specs = Vec::new();
    for file in provider_config_files(config).map_err(|e| cfg_err(config, e))? {
        let text = read_small(&file).map_err(|e| cfg_err(&file, ProviderConfigError::Read(e)))?;
        let providers = parse_provider_config(&file.display().to_string(), &text).map_err(|e| cfg_err(&file, e))?;
        for p in providers {
            check_provider(&p).map_err(|e| cfg_err(&file, ProviderConfigError::Provider(e)))?;
            if specs.iter().any(|s: &ProviderSpec| s.name == p.name) {
                return Err(cfg_err(&file, ProviderConfigError::Duplicate { name: p.name }));
            }
            specs.push(p);
        }
    }
    if specs.is_empty() {
        return Err(cfg_err(config, ProviderConfigError::NoProviders));
    }
    let bin_err = |source: BinDirError| CredentialError::BinDir { path: bin_dir.display().to_string(), source };
    if bin_dir.as_os_str().is_empty() {
        return Err(bin_err(BinDirError::Required));
    }
    if !bin_dir.is_dir() {
        return Err(bin_err(BinDirError::NoDir { dir: bin_dir.to_path_buf() }));
    }
    specs
        .into_iter()
        .map(|s| {
            let exe = bin_dir.join(&s.name);
            let runnable = std::fs::metadata(&exe)
                .is_ok_and(|m| m.is_file() && std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o111 != 0);
            if !runnable {
                return Err(bin_err(BinDirError::NoExecutable { exe }));
            }
            let default_cache =
                s.default_cache_duration.as_deref().and_then(crate::config::parse_duration).unwrap_or_default();
            Ok(Plugin {
                name: s.name,
                exe,
                match_images: s.match_images,
                default_cache,
                api_version: s.api_version,
                args: s.args,
                env: s.env.into_iter().map(|e| (e.name, e.value)).collect(),
                cache: Mutex::new(HashMap::new()),
                running: Mutex::new(()),
            })
        })
        .collect()
}

// ---------------------------------------------------------------------
// The node's keyring

/// Where pulls find their credentials: the docker config keyring, then the
/// plugins in their configured order.
pub struct Keyring {
    docker: Option<DockerConfig>,
    plugins: Vec<Plugin>,
    /// Where plugin runs are counted (set once the metrics exist).
    metrics: std::sync::OnceLock<std::sync::Arc<crate::telemetry::metrics::Metrics>>,
}

impl Keyring {
    /// No credentials at all (every pull anonymous).
    pub fn none() -> Self {
        Keyring { docker: None, plugins: Vec::new(), metrics: Default::default() }
    }

    /// The kubelet's keyring for a node with `root_dir`; plugins when
    /// `provider_config` is set (its errors stop the start).
    pub fn load(root_dir: &Path, provider_config: Option<&Path>, bin_dir: &Path) -> Result<Self, CredentialError> {
        let plugins = match provider_config {
            Some(c) => load_plugins(c, bin_dir)?,
            None => Vec::new(),
        };
        if !plugins.is_empty() {
            let names: Vec<&str> = plugins.iter().map(|p| p.name.as_str()).collect();
            log::info!("registry credentials: provider plugins {names:?}");
        }
        Ok(Keyring {
            docker: Some(DockerConfig { paths: docker_config_paths(root_dir), read: Mutex::new(None) }),
            plugins,
            metrics: Default::default(),
        })
    }

    /// Count plugin runs in `metrics`.
    pub fn attach_metrics(&self, metrics: std::sync::Arc<crate::telemetry::metrics::Metrics>) {
        let _ = self.metrics.set(metrics);
    }

    /// The docker config files the keyring reads, in order (none when it
    /// reads none): what the `credentials-watch` thread watches.
    pub fn docker_config_files(&self) -> Vec<PathBuf> {
        self.docker.as_ref().map(|d| d.paths.iter().map(|(p, _)| p.clone()).collect()).unwrap_or_default()
    }

    /// A docker config file changed: read the files again at the next
    /// lookup instead of after [`DOCKER_CONFIG_LIFETIME`].
    pub fn docker_config_changed(&self) {
        if let Some(d) = &self.docker {
            *d.read.lock() = None;
        }
    }

    /// A digest of the docker config's credentials for `image` (0: none):
    /// an image pull's back-off is kept per digest, so new credentials for
    /// an image end its back-off at once, as an edit of the pod would.
    pub fn docker_digest(&self, image: &str) -> u64 {
        use std::hash::{Hash, Hasher};
        let Some(d) = &self.docker else { return 0 };
        let found = d.keyring().lookup(&repository(image));
        if found.is_empty() {
            return 0;
        }
        let mut h = std::collections::hash_map::DefaultHasher::new();
        for a in &found {
            a.username.hash(&mut h);
            a.password().hash(&mut h);
        }
        h.finish().max(1)
    }

    /// Every credential for `image`, in the order to try them: the docker
    /// config's, then each plugin's. Empty: pull anonymously.
    pub fn lookup(&self, image: &str, cancel: &CancelToken) -> Vec<Auth> {
        let repo = repository(image);
        let mut out = self.docker.as_ref().map(|d| d.keyring().lookup(&repo)).unwrap_or_default();
        for p in &self.plugins {
            out.extend(p.lookup(&repo, cancel, self.metrics.get().map(|m| &**m)));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn auth(u: &str) -> Auth {
        Auth::new(u, format!("{u}-secret"))
    }

    fn users(a: &[Auth]) -> Vec<&str> {
        a.iter().map(|a| a.username.as_str()).collect()
    }

    #[test]
    fn images_are_looked_up_by_their_normalized_repository() {
        for (image, repo) in [
            ("busybox", "docker.io/library/busybox"),
            ("busybox:1.36", "docker.io/library/busybox"),
            ("team/app:v1", "docker.io/team/app"),
            ("index.docker.io/library/busybox", "docker.io/library/busybox"),
            ("127.0.0.1:5000/busybox:e2e", "127.0.0.1:5000/busybox"),
            ("localhost/pause:e2e", "localhost/pause"),
            ("registry.example/a/b@sha256:abcd", "registry.example/a/b"),
            ("registry.example:443/a/b:1@sha256:abcd", "registry.example:443/a/b"),
        ] {
            assert_eq!(repository(image), repo, "{image}");
        }
    }

    #[test]
    fn keys_match_as_the_kubelets_keyring_matches() {
        // (key, image repository, matches)
        for (key, repo, hit) in [
            ("127.0.0.1:5000", "127.0.0.1:5000/busybox", true),
            ("127.0.0.1", "127.0.0.1:5000/busybox", false),
            ("127.0.0.1:5001", "127.0.0.1:5000/busybox", false),
            ("reg.io/foo", "reg.io/foobar", true),
            ("reg.io/foo", "reg.io/bar", false),
            ("*.my-registry.io/images", "sub.my-registry.io/images/app", true),
            ("*.my-registry.io/images", "a.sub.my-registry.io/images/app", false),
            ("*.k8s.io", "k8s.io/pause", false),
            ("app*.k8s.io", "appserver.k8s.io/x", true),
            ("re?.io", "reg.io/x", true),
            ("[a-c]eg.io", "beg.io/x", true),
            ("[^a-c]eg.io", "beg.io/x", false),
            ("docker.io", "docker.io/library/busybox", true),
        ] {
            assert_eq!(url_matches(key, repo), hit, "{key} ~ {repo}");
        }
    }

    #[test]
    fn every_matching_key_gives_credentials_most_specific_first() {
        let mut ring = BasicKeyring::default();
        assert!(ring.add("https://quay.io/v1/", auth("all")));
        assert!(ring.add("quay.io/team", auth("team")));
        assert!(ring.add("*.quay.io", auth("wild")));
        assert!(ring.add("quay.io/team", auth("team2")));
        assert!(!ring.add("https:///nohost", auth("x")));
        assert_eq!(users(&ring.lookup("quay.io/team/app")), ["team", "team2", "all"]);
        assert_eq!(users(&ring.lookup("quay.io/other/app")), ["all"]);
        assert_eq!(users(&ring.lookup("eu.quay.io/team/app")), ["wild"]);
        assert!(ring.lookup("gcr.io/x").is_empty());
        // Docker Hub images fall back on index.docker.io's key
        let mut hub = BasicKeyring::default();
        hub.add("https://index.docker.io/v1/", auth("hub"));
        assert_eq!(users(&hub.lookup("docker.io/library/busybox")), ["hub"]);
        assert!(hub.lookup("quay.io/x").is_empty());
    }

    #[test]
    fn docker_config_auth_decodes_and_overrides_username_and_password() {
        let dir = std::env::temp_dir().join(format!("pw-creds-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("config.json");
        // base64("u1:p:w") padded, and "u2:pw" unpadded
        std::fs::write(
            &f,
            r#"{"auths": {"a.io": {"auth": "dTE6cDp3", "username": "ignored"}, "b.io:5000": {"auth": "dTI6cHc"},
                          "c.io": {"username": "u3", "password": "p3"}}, "credHelpers": {}}"#,
        )
        .unwrap();
        let ring = read_docker_config(&f, false).unwrap();
        let a = ring.lookup("a.io/x");
        assert_eq!((a[0].username.as_str(), a[0].password()), ("u1", "p:w"));
        let b = ring.lookup("b.io:5000/x");
        assert_eq!((b[0].username.as_str(), b[0].password()), ("u2", "pw"));
        assert_eq!(ring.lookup("c.io/x")[0].password(), "p3");
        // a bad auth fails the whole file, naming the key, not the value
        std::fs::write(&f, r#"{"auths": {"a.io": {"auth": "bm9jb2xvbg=="}}}"#).unwrap();
        let e = read_docker_config(&f, false).unwrap_err().to_string();
        assert!(e.contains("\"a.io\"") && e.contains("base64(username:password)") && !e.contains("bm9j"), "{e}");
        // legacy .dockercfg: the entries alone
        let l = dir.join(".dockercfg");
        std::fs::write(&l, r#"{"https://index.docker.io/v1/": {"auth": "aHViOnNlY3JldA=="}}"#).unwrap();
        assert_eq!(users(&read_docker_config(&l, true).unwrap().lookup("docker.io/library/x")), ["hub"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_first_docker_config_that_parses_wins() {
        let dir = std::env::temp_dir().join(format!("pw-creds-first-{}", std::process::id()));
        let (a, b) = (dir.join("a"), dir.join("b"));
        std::fs::create_dir_all(&a).unwrap();
        std::fs::create_dir_all(&b).unwrap();
        std::fs::write(a.join("config.json"), "{not json").unwrap();
        std::fs::write(b.join("config.json"), r#"{"auths": {"r.io": {"username": "b", "password": "x"}}}"#).unwrap();
        std::fs::write(a.join(".dockercfg"), r#"{"r.io": {"username": "legacy", "password": "x"}}"#).unwrap();
        let d = DockerConfig {
            paths: vec![(a.join("config.json"), false), (b.join("config.json"), false), (a.join(".dockercfg"), true)],
            read: Mutex::new(None),
        };
        assert_eq!(users(&d.keyring().lookup("r.io/x")), ["b"], "the broken file is skipped, the legacy one unread");
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(users(&d.keyring().lookup("r.io/x")), ["b"], "kept for the cache's lifetime");
        let paths = docker_config_paths(Path::new("/var/lib/podwarden"));
        assert_eq!(paths[0], (PathBuf::from("/var/lib/podwarden/config.json"), false));
        assert_eq!(paths.last().unwrap(), &(PathBuf::from("/.dockercfg"), true));
        assert_eq!(paths.iter().filter(|(_, legacy)| !legacy).count(), paths.len() / 2);
    }

    #[test]
    fn auth_debug_never_shows_the_password() {
        let a = Auth::new("user", "hunter2");
        let shown = format!("{a:?} {:?}", vec![a.clone()]);
        assert!(shown.contains("user") && !shown.contains("hunter2"), "{shown}");
    }

    #[test]
    fn base64_accepts_padded_and_unpadded_and_refuses_garbage() {
        assert_eq!(base64_decode("dTpw").unwrap(), b"u:p");
        assert_eq!(base64_decode("dTpwMQ==").unwrap(), b"u:p1");
        assert_eq!(base64_decode("dTpwMQ").unwrap(), b"u:p1");
        assert!(base64_decode("dT!w").is_none());
        assert!(base64_decode("d").is_none());
    }

    const PROVIDER: &str = "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders:\n";

    #[test]
    fn provider_configs_are_checked_as_the_kubelet_checks_them() {
        let check = |providers: &str| -> Result<(), ProviderConfigError> {
            for p in parse_provider_config("p.yaml", &format!("{PROVIDER}{providers}"))? {
                check_provider(&p).map_err(ProviderConfigError::Provider)?;
            }
            Ok(())
        };
        let good = "- name: ecr\n  matchImages: ['*.dkr.ecr.*.amazonaws.com', 'registry.io:8080/path']\n  \
                    defaultCacheDuration: 12h\n  apiVersion: credentialprovider.kubelet.k8s.io/v1\n";
        check(good).unwrap();
        for (bad, says) in [
            (good.replace("name: ecr", "name: a/b"), "cannot contain '/'"),
            (good.replace("name: ecr", "name: 'a b'"), "cannot contain spaces"),
            (good.replace("name: ecr", "name: '..'"), "cannot be"),
            (good.replace("12h", "-1s"), "greater than or equal to 0"),
            (good.replace("  defaultCacheDuration: 12h\n", ""), "defaultCacheDuration: Required"),
            (good.replace("k8s.io/v1\n", "k8s.io/v9\n"), "Unsupported value"),
            (good.replace("['*.dkr.ecr.*.amazonaws.com', 'registry.io:8080/path']", "[]"), "at least 1 item"),
            (good.to_string() + "  shell: true\n", "unknown field `shell`"),
            (good.to_string() + "  tokenAttributes: {}\n", "not implemented"),
        ] {
            let e = check(&bad).unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
        let e = parse_provider_config("p.yaml", "apiVersion: kubelet.config.k8s.io/v1\nkind: Other\nproviders: []\n")
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("wrong Kind"), "{e}");
    }

    #[test]
    fn error_texts_are_the_ones_people_read() {
        let name = "a b".to_string();
        assert_eq!(
            ProviderConfigError::ApiVersion { version: "v9".into() }.to_string(),
            format!("apiVersion \"v9\" is not supported: expected one of {CONFIG_API_VERSIONS:?}")
        );
        assert_eq!(
            ProviderError::ApiVersionUnsupported { name: name.clone(), version: "v9".into() }.to_string(),
            format!(
                "providers[\"a b\"].apiVersion: Unsupported value \"v9\": supported values: {PLUGIN_API_VERSIONS:?}"
            )
        );
        assert_eq!(
            ProviderError::NameDots { name: "..".into() }.to_string(),
            "providers[\"..\"].name: provider name cannot be \"..\""
        );
        assert_eq!(ExecError::Timeout.to_string(), "no answer within 60s; killed");
        assert_eq!(ExecError::TooLarge.to_string(), "answer larger than 1048576 bytes");
        assert_eq!(AdminFileError::TooLarge.to_string(), "larger than 1048576 bytes");
        let e =
            CredentialError::BinDir { path: "/bin".into(), source: BinDirError::NoDir { dir: PathBuf::from("/bin") } };
        assert_eq!(e.to_string(), "imageCredentialProviderBinDir /bin: plugin binary directory /bin did not exist");
        let json = serde_json::from_str::<DockerConfigJson>("{").err().unwrap();
        let shown = json.to_string();
        let e = ProviderConfigError::Decode { at: Some("providers[0]".into()), source: json };
        assert_eq!(e.to_string(), format!("providers[0]: {shown}"));
    }

    fn plugin_dir(tag: &str, script: &str) -> (PathBuf, PathBuf) {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("pw-plugin-{tag}-{}", std::process::id()));
        let bin = dir.join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        let exe = bin.join("creds");
        std::fs::write(&exe, format!("#!/bin/sh\n{script}")).unwrap();
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
        let cfg = dir.join("providers.yaml");
        std::fs::write(
            &cfg,
            format!(
                "{PROVIDER}- name: creds\n  matchImages: ['*.example', 'r.example:5000']\n  defaultCacheDuration: 1m\n  \
                 apiVersion: credentialprovider.kubelet.k8s.io/v1\n  args: [get]\n  env: [{{name: WHO, value: plugin-user}}]\n"
            ),
        )
        .unwrap();
        (dir, cfg)
    }

    #[test]
    fn a_plugin_is_run_for_matching_images_and_its_answer_cached_by_key_type() {
        // answers for the registry of the image it was asked about; counts runs
        let (dir, cfg) = plugin_dir(
            "run",
            r#"read req; echo run >> "$(dirname "$0")/../runs"
[ "$1" = get ] || exit 3
img=$(echo "$req" | sed 's/.*"image":"\([^"]*\)".*/\1/'); reg=${img%%/*}
case "$img" in *nocache*) dur=0s;; *) dur=5m;; esac
printf '{"apiVersion":"credentialprovider.kubelet.k8s.io/v1","kind":"CredentialProviderResponse","cacheKeyType":"Registry","cacheDuration":"%s","auth":{"%s":{"username":"%s","password":"pw"}}}' "$dur" "$reg" "$WHO"
"#,
        );
        let metrics = std::sync::Arc::new(crate::telemetry::metrics::Metrics::new());
        let ring = Keyring {
            docker: None,
            plugins: load_plugins(&cfg, &dir.join("bin")).unwrap(),
            metrics: Default::default(),
        };
        ring.attach_metrics(metrics.clone());
        let cancel = CancelToken::new();
        let runs = || std::fs::read_to_string(dir.join("runs")).map_or(0, |s| s.lines().count());
        assert_eq!(users(&ring.lookup("r.example:5000/app:1", &cancel)), ["plugin-user"]);
        assert_eq!(users(&ring.lookup("r.example:5000/other:2", &cancel)), ["plugin-user"]);
        assert_eq!(runs(), 1, "the second image of the registry is answered from the cache");
        assert!(ring.lookup("quay.io/app", &cancel).is_empty(), "not in matchImages: not run");
        assert_eq!(runs(), 1);
        assert_eq!(users(&ring.lookup("a.example/nocache", &cancel)), ["plugin-user"]);
        assert_eq!(users(&ring.lookup("a.example/nocache", &cancel)), ["plugin-user"]);
        assert_eq!(runs(), 3, "cacheDuration 0s: not cached");
        let text = crate::telemetry::metrics::render(&metrics);
        assert!(text.contains("kubelet_credential_provider_plugin_duration_count{plugin_name=\"creds\"} 3"), "{text}");
        assert!(text.contains("kubelet_credential_provider_plugin_errors{plugin_name=\"creds\"} 0"), "{text}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_failing_or_lying_plugin_gives_no_credentials() {
        for (script, _what) in [
            ("echo 'token expired' >&2; exit 1", "exit status"),
            (
                "echo '{\"apiVersion\":\"credentialprovider.kubelet.k8s.io/v1beta1\",\"kind\":\"CredentialProviderResponse\",\"cacheKeyType\":\"Global\"}'",
                "apiVersion",
            ),
            (
                "echo '{\"apiVersion\":\"credentialprovider.kubelet.k8s.io/v1\",\"kind\":\"CredentialProviderResponse\",\"cacheKeyType\":\"Pod\",\"auth\":{\"r.example:5000\":{\"username\":\"u\",\"password\":\"p\"}}}'",
                "cacheKeyType",
            ),
            ("echo not json", "decoding"),
            ("head -c 3000000 /dev/zero | tr '\\0' x", "larger"),
        ] {
            let (dir, cfg) = plugin_dir("bad", script);
            let plugins = load_plugins(&cfg, &dir.join("bin")).unwrap();
            let e = plugins[0].run("r.example:5000/app", &CancelToken::new()).err().unwrap().to_string();
            assert!(e.contains(_what), "{script}: {e}");
            let ring = Keyring { docker: None, plugins, metrics: Default::default() };
            assert!(ring.lookup("r.example:5000/app", &CancelToken::new()).is_empty());
            std::fs::remove_dir_all(&dir).unwrap();
        }
    }

    #[test]
    fn a_hanging_plugin_is_killed_when_the_pull_is_cancelled() {
        let (dir, cfg) = plugin_dir("hang", "exec sleep 600");
        let plugins = load_plugins(&cfg, &dir.join("bin")).unwrap();
        let cancel = CancelToken::new();
        let c = cancel.clone();
        let t = Instant::now();
        crate::base::thread::spawn("cancel-pull", None, move || {
            std::thread::sleep(Duration::from_millis(300));
            c.cancel();
        })
        .unwrap();
        let e = plugins[0].run("r.example:5000/app", &cancel).err().unwrap();
        assert!(matches!(&e, PluginError::Exec { source: ExecError::Cancelled, .. }), "{e}");
        let e = e.to_string();
        assert!(e.contains("cancelled") && t.elapsed() < Duration::from_secs(5), "{e} after {:?}", t.elapsed());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_missing_plugin_or_bin_dir_stops_the_start() {
        let (dir, cfg) = plugin_dir("missing", "exit 0");
        let e = load_plugins(&cfg, &dir.join("nope")).err().unwrap().to_string();
        assert!(e.contains("did not exist") && e.starts_with("imageCredentialProviderBinDir"), "{e}");
        std::fs::remove_file(dir.join("bin/creds")).unwrap();
        let e = load_plugins(&cfg, &dir.join("bin")).err().unwrap().to_string();
        assert!(e.contains("plugin binary executable") && e.contains("creds"), "{e}");
        let e = load_plugins(&dir.join("none.yaml"), &dir.join("bin")).err().unwrap().to_string();
        assert!(e.starts_with("imageCredentialProviderConfig") && e.contains("none.yaml"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
