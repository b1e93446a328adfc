//! The name, key and path checks that manifests, ConfigMaps and Secrets
//! share, as the API server makes them: DNS-1123 labels and subdomains,
//! ConfigMap and Secret keys (`IsConfigMapKey`), file names and `..`.

use std::path::{Component, Path};

use thiserror::Error;

/// RFC 1123 label: lowercase alphanumerics and '-', alphanumeric at both
/// ends, at most 63 characters.
pub fn is_dns1123_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// RFC 1123 subdomain: labels joined by '.', at most 253 characters.
pub fn is_dns1123_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_dns1123_label)
}

/// The longest file name (one path component) Linux takes.
pub const NAME_MAX: usize = 255;

/// Whether a path has a `..` component.
pub fn has_dot_dot(p: &str) -> bool {
    Path::new(p).components().any(|c| c == Component::ParentDir)
}

/// Why a ConfigMap or Secret key is refused (the API server's
/// `IsConfigMapKey`).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum KeyError {
    #[error("a key must not be empty")]
    Empty,
    #[error("must be no more than 253 characters ({0} here)")]
    TooLong(usize),
    #[error(
        "{0:?}: a valid config key must consist of alphanumeric characters, '-', '_' or '.' \
         (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')"
    )]
    Characters(String),
    #[error("must not be '.'")]
    Dot,
    #[error("must not be '..'")]
    DotDot,
    #[error("{0:?} must not start with '..'")]
    StartsWithDotDot(String),
}

/// A ConfigMap or Secret key, as the API server checks it
/// (`IsConfigMapKey`).
pub fn check_key(k: &str) -> Result<(), KeyError> {
    if k.is_empty() {
        return Err(KeyError::Empty);
    }
    if k.len() > 253 {
        return Err(KeyError::TooLong(k.len()));
    }
    if !k.bytes().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.')) {
        return Err(KeyError::Characters(k.to_string()));
    }
    match k {
        "." => Err(KeyError::Dot),
        ".." => Err(KeyError::DotDot),
        _ if k.starts_with("..") => Err(KeyError::StartsWithDotDot(k.to_string())),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns_names() {
        assert!(is_dns1123_label("a-1"));
        assert!(!is_dns1123_label("-a"));
        assert!(!is_dns1123_label("a-"));
        assert!(!is_dns1123_label(&"a".repeat(64)));
        assert!(is_dns1123_subdomain("a.b-c.d"));
        assert!(!is_dns1123_subdomain("a..b"));
    }
}
