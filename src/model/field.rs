//! Invalid fields of an input (a manifest, a ConfigMap or Secret), as
//! Kubernetes' `field.Error` and `field.ErrorList`: each field's path and
//! the reason it is refused. A check of one field returns a
//! `Result<_, FieldError>`; a validation that looks at several independent
//! fields gathers every refusal, in the order it checks them, into a
//! [`FieldErrors`], bounded at [`MAX_FIELD_ERRORS`] entries.

use std::fmt;

/// A refused field: where (`spec.containers[0].image`) and what is wrong
/// (`missing; every container needs an image`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// The field's path: JSON names joined by `.`, list items as `[i]`,
    /// map entries as `["key"]`. Empty for the list's "too many errors"
    /// entry, which is about no one field.
    pub field: String,
    /// What is wrong with it, for a person.
    pub reason: String,
}

impl FieldError {
    pub fn new(field: impl Into<String>, reason: impl Into<String>) -> Self {
        FieldError { field: field.into(), reason: reason.into() }
    }

    /// The same error for a field under `prefix` (`documents[1]`): the path
    /// `prefix.field`.
    pub fn under(self, prefix: &str) -> Self {
        if self.field.is_empty() {
            return self;
        }
        FieldError { field: format!("{prefix}.{}", self.field), reason: self.reason }
    }
}

/// `field <path>: <reason>`, as a manifest error names it after the file
/// (the reason alone for an error about no one field).
impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.field.is_empty() {
            return f.write_str(&self.reason);
        }
        write!(f, "field {}: {}", self.field, self.reason)
    }
}

impl std::error::Error for FieldError {}

/// `Err` of a [`FieldError`]: the checks' shorthand.
pub fn err<T>(field: impl Into<String>, reason: impl Into<String>) -> Result<T, FieldError> {
    Err(FieldError::new(field, reason))
}

/// The most entries a [`FieldErrors`] holds: past it, its last entry is
/// [`TOO_MANY`] and further errors are only counted (as the API server
/// caps the list it answers with).
pub const MAX_FIELD_ERRORS: usize = 1000;

/// The reason of a list's last entry when it is capped.
pub const TOO_MANY: &str = "too many errors";

/// How many errors a one-line summary ([`FieldErrors`]' `Display`) shows
/// before `and N more`.
pub const SUMMARY_SHOWN: usize = 10;

/// Every refused field of an input, in the order checked. At most
/// [`MAX_FIELD_ERRORS`] entries: the error that would be the last is
/// replaced by a [`TOO_MANY`] entry (no field), and the errors past it are
/// counted, not kept; that entry is always the last.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldErrors {
    list: Vec<FieldError>,
    /// Errors found after the list was full (the one the [`TOO_MANY`]
    /// entry stands in place of among them).
    omitted: usize,
}

impl FieldErrors {
    pub fn new() -> Self {
        Self::default()
    }

    /// Add an error (counted only, once the list is full).
    pub fn push(&mut self, e: FieldError) {
        if self.omitted == 0 && self.list.len() < MAX_FIELD_ERRORS - 1 {
            self.list.push(e);
        } else {
            self.count_omitted(1);
        }
    }

    /// Count `n` errors not kept (the first of them becomes the list's
    /// [`TOO_MANY`] entry, its last from then on).
    fn count_omitted(&mut self, n: usize) {
        if n > 0 && self.omitted == 0 {
            self.list.push(FieldError::new("", TOO_MANY));
        }
        self.omitted += n;
    }

    /// Add the error of a one-field check, if it failed.
    pub fn check(&mut self, r: Result<(), FieldError>) {
        if let Err(e) = r {
            self.push(e);
        }
    }

    /// Add every error of `other` after these.
    pub fn append(&mut self, other: FieldErrors) {
        let (found, omitted) = (other.found().len(), other.omitted);
        for e in other.list.into_iter().take(found) {
            self.push(e);
        }
        self.count_omitted(omitted);
    }

    /// The errors `keep` holds to, in order (those counted past the cap
    /// stay counted).
    pub fn keeping(self, keep: impl Fn(&FieldError) -> bool) -> FieldErrors {
        let (found, omitted) = (self.found().len(), self.omitted);
        let mut out = FieldErrors::new();
        for e in self.list.into_iter().take(found).filter(|e| keep(e)) {
            out.push(e);
        }
        out.count_omitted(omitted);
        out
    }

    /// The same errors for fields under `prefix` (`documents[1]`).
    pub fn under(self, prefix: &str) -> Self {
        FieldErrors { list: self.list.into_iter().map(|e| e.under(prefix)).collect(), omitted: self.omitted }
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// The entries, the [`TOO_MANY`] one included.
    pub fn len(&self) -> usize {
        self.list.len()
    }

    /// The entries in order, the [`TOO_MANY`] one (if any) last.
    pub fn iter(&self) -> std::slice::Iter<'_, FieldError> {
        self.list.iter()
    }

    pub fn first(&self) -> Option<&FieldError> {
        self.list.first()
    }

    /// The errors found: the entries but the [`TOO_MANY`] one, and those
    /// counted past the cap.
    pub fn total(&self) -> usize {
        self.found().len() + self.omitted
    }

    /// The entries that are errors (not the [`TOO_MANY`] one).
    fn found(&self) -> &[FieldError] {
        if self.omitted > 0 { &self.list[..self.list.len() - 1] } else { &self.list }
    }

    /// `Ok` when there is no error.
    pub fn into_result(self) -> Result<(), FieldErrors> {
        if self.is_empty() { Ok(()) } else { Err(self) }
    }
}

impl From<FieldError> for FieldErrors {
    fn from(e: FieldError) -> Self {
        FieldErrors { list: vec![e], omitted: 0 }
    }
}

impl<'a> IntoIterator for &'a FieldErrors {
    type Item = &'a FieldError;
    type IntoIter = std::slice::Iter<'a, FieldError>;
    fn into_iter(self) -> Self::IntoIter {
        self.list.iter()
    }
}

/// One line for a log or an event: the first [`SUMMARY_SHOWN`] errors
/// (`field <path>: <reason>`, separated by `; `), then `and N more`. One
/// error reads as the error alone.
impl fmt::Display for FieldErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let found = self.found();
        for (i, e) in found.iter().take(SUMMARY_SHOWN).enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{e}")?;
        }
        let more = self.total() - found.len().min(SUMMARY_SHOWN);
        if more > 0 {
            write!(f, "; and {more} more")?;
        }
        Ok(())
    }
}

impl std::error::Error for FieldErrors {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shows_the_field_then_the_reason() {
        let e = FieldError::new("spec.containers[0].image", "missing; every container needs an image");
        assert_eq!(e.to_string(), "field spec.containers[0].image: missing; every container needs an image");
        assert_eq!(e.under("documents[1]").field, "documents[1].spec.containers[0].image");
        assert_eq!(FieldError::new("", TOO_MANY).to_string(), "too many errors");
    }

    fn numbered(n: usize) -> FieldErrors {
        let mut errs = FieldErrors::new();
        for i in 0..n {
            errs.push(FieldError::new(format!("spec.x[{i}]"), "bad"));
        }
        errs
    }

    #[test]
    fn a_list_keeps_its_order_and_summarizes_after_ten() {
        assert_eq!(numbered(1).to_string(), "field spec.x[0]: bad");
        assert_eq!(numbered(2).to_string(), "field spec.x[0]: bad; field spec.x[1]: bad");
        let twelve = numbered(12);
        assert_eq!((twelve.len(), twelve.total()), (12, 12));
        let shown = (0..10).map(|i| format!("field spec.x[{i}]: bad")).collect::<Vec<_>>().join("; ");
        assert_eq!(twelve.to_string(), format!("{shown}; and 2 more"));
        assert!(FieldErrors::new().into_result().is_ok());
        assert_eq!(
            numbered(3).into_result().unwrap_err().iter().map(|e| &e.field).collect::<Vec<_>>(),
            ["spec.x[0]", "spec.x[1]", "spec.x[2]"]
        );
    }

    #[test]
    fn the_list_is_capped_with_a_last_too_many_entry() {
        for n in [MAX_FIELD_ERRORS - 1, MAX_FIELD_ERRORS, MAX_FIELD_ERRORS + 1, 5000] {
            let errs = numbered(n);
            assert_eq!(errs.total(), n, "{n}");
            if n < MAX_FIELD_ERRORS {
                assert_eq!(errs.len(), n);
                assert!(errs.iter().all(|e| e.reason == "bad"));
                continue;
            }
            assert_eq!(errs.len(), MAX_FIELD_ERRORS, "{n}");
            let last = errs.iter().last().unwrap();
            assert_eq!((last.field.as_str(), last.reason.as_str()), ("", TOO_MANY));
            assert_eq!(
                errs.iter().nth(MAX_FIELD_ERRORS - 2).unwrap().field,
                format!("spec.x[{}]", MAX_FIELD_ERRORS - 2)
            );
            assert!(errs.to_string().ends_with(&format!("; and {} more", n - SUMMARY_SHOWN)), "{errs}");
        }
        // appending keeps the cap and the count
        let mut a = numbered(600);
        a.append(numbered(700));
        assert_eq!((a.len(), a.total()), (MAX_FIELD_ERRORS, 1300));
        let mut b = numbered(2);
        b.append(numbered(5000));
        assert_eq!((b.len(), b.total()), (MAX_FIELD_ERRORS, 5002));
        assert_eq!(b.iter().filter(|e| e.reason == TOO_MANY).count(), 1);
        // keeping some keeps their order and the count past the cap
        let odd = numbered(5).keeping(|e| ["spec.x[1]", "spec.x[3]"].contains(&e.field.as_str()));
        assert_eq!(odd.iter().map(|e| e.field.as_str()).collect::<Vec<_>>(), ["spec.x[1]", "spec.x[3]"]);
        let few = numbered(1500).keeping(|e| e.field.ends_with("0]"));
        assert_eq!((few.len(), few.total()), (101, 100 + 501));
        assert_eq!(few.iter().last().unwrap().reason, TOO_MANY);
        let mut c = numbered(1);
        c.append(numbered(1).under("documents[2]"));
        assert_eq!(c.iter().map(|e| e.field.as_str()).collect::<Vec<_>>(), ["spec.x[0]", "documents[2].spec.x[0]"]);
    }
}
