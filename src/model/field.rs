//! One invalid field of an input (a manifest, a ConfigMap or Secret), as
//! Kubernetes' `field.Error`: the field's path and the reason it is
//! refused. Validation stops at the first one, so a check returns a
//! `Result<_, FieldError>`; a caller that gathers several keeps them in a
//! [`FieldErrors`].

use std::fmt;

/// A refused field: where (`spec.containers[0].image`) and what is wrong
/// (`missing; every container needs an image`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// The field's path: JSON names joined by `.`, list items as `[i]`,
    /// map entries as `["key"]`.
    pub field: String,
    /// What is wrong with it, for a person.
    pub reason: String,
}

/// Several refused fields, in the order found.
pub type FieldErrors = Vec<FieldError>;

impl FieldError {
    pub fn new(field: impl Into<String>, reason: impl Into<String>) -> Self {
        FieldError { field: field.into(), reason: reason.into() }
    }

    /// The same error for a field under `prefix` (`documents[1]`): the path
    /// `prefix.field`.
    pub fn under(self, prefix: &str) -> Self {
        FieldError { field: format!("{prefix}.{}", self.field), reason: self.reason }
    }
}

/// `field <path>: <reason>`, as a manifest error names it after the file.
impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "field {}: {}", self.field, self.reason)
    }
}

impl std::error::Error for FieldError {}

/// `Err` of a [`FieldError`]: the checks' shorthand.
pub fn err<T>(field: impl Into<String>, reason: impl Into<String>) -> Result<T, FieldError> {
    Err(FieldError::new(field, reason))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shows_the_field_then_the_reason() {
        let e = FieldError::new("spec.containers[0].image", "missing; every container needs an image");
        assert_eq!(e.to_string(), "field spec.containers[0].image: missing; every container needs an image");
        assert_eq!(e.under("documents[1]").field, "documents[1].spec.containers[0].image");
    }
}
