//! Go durations, as the kubelet's config writes them (`1m30s`, `500ms`):
//! parsing (exact, saturating, never panicking) and printing for messages.

use std::time::Duration;

/// Why a duration string was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DurationError {
    /// Not a Go duration (`30s`, `1m30s`, `500ms`, `1.5h`, `0`).
    Syntax,
    /// A negative duration (`-5s`).
    Negative,
    /// More than `u64::MAX` nanoseconds (about 584 years).
    TooLarge,
}

/// Parse a Go duration (`1m30s`, `500ms`, `2h`, `1.5h`, `0`; units ns, us,
/// µs, ms, s, m, h; an optional sign), as `time.ParseDuration` does. Integer
/// arithmetic, saturating: no input overflows or panics; values beyond
/// `u64::MAX` nanoseconds are `TooLarge`, negative ones `Negative`.
pub fn parse_duration_checked(s: &str) -> Result<Duration, DurationError> {
    const LIMIT: u128 = u64::MAX as u128;
    let s = s.trim();
    let (negative, mut rest) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    if rest.is_empty() {
        return Err(DurationError::Syntax);
    }
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let int_len = rest.bytes().take_while(u8::is_ascii_digit).count();
        let int_digits = &rest[..int_len];
        rest = &rest[int_len..];
        let mut frac_digits = "";
        if let Some(r) = rest.strip_prefix('.') {
            let n = r.bytes().take_while(u8::is_ascii_digit).count();
            frac_digits = &r[..n];
            rest = &r[n..];
        }
        if int_digits.is_empty() && frac_digits.is_empty() {
            return Err(DurationError::Syntax);
        }
        let unit_len = rest.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(rest.len());
        let unit: u128 = match &rest[..unit_len] {
            "ns" => 1,
            "us" | "\u{b5}s" | "\u{3bc}s" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            _ => return Err(DurationError::Syntax),
        };
        rest = &rest[unit_len..];
        let int = int_digits.bytes().fold(0u128, |a, d| a.saturating_mul(10).saturating_add(u128::from(d - b'0')));
        // at most 20 fraction digits count (beyond a nanosecond anyway)
        let (frac, scale) =
            frac_digits.bytes().take(20).fold((0u128, 1u128), |(f, sc), d| (f * 10 + u128::from(d - b'0'), sc * 10));
        total = total.saturating_add(int.saturating_mul(unit)).saturating_add(frac * unit / scale);
    }
    if total > LIMIT {
        return Err(DurationError::TooLarge);
    }
    if negative && total > 0 {
        return Err(DurationError::Negative);
    }
    Ok(Duration::new((total / 1_000_000_000) as u64, (total % 1_000_000_000) as u32))
}

/// Parse a Go duration (see [`parse_duration_checked`]); `None` if it is
/// not one, negative or too large.
pub fn parse_duration(s: &str) -> Option<Duration> {
    parse_duration_checked(s).ok()
}

/// A duration as Go prints it (`1h0m0s`, `20s`, `500ms`): for messages.
pub fn format_duration(d: Duration) -> String {
    if d.is_zero() {
        return "0s".into();
    }
    if d < Duration::from_secs(1) {
        let ns = d.as_nanos();
        return if ns.is_multiple_of(1_000_000) {
            format!("{}ms", ns / 1_000_000)
        } else if ns.is_multiple_of(1_000) {
            format!("{}us", ns / 1_000)
        } else {
            format!("{ns}ns")
        };
    }
    let secs = d.as_secs();
    let (h, m, s) = (secs / 3600, secs / 60 % 60, secs % 60);
    let frac = match d.subsec_nanos() {
        0 => String::new(),
        n => format!(".{n:09}").trim_end_matches('0').to_string(),
    };
    match (h, m) {
        (0, 0) => format!("{s}{frac}s"),
        (0, _) => format!("{m}m{s}{frac}s"),
        _ => format!("{h}h{m}m{s}{frac}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30s"), Some(Duration::from_secs(30)));
        assert_eq!(parse_duration("1m30s"), Some(Duration::from_secs(90)));
        assert_eq!(parse_duration("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(parse_duration("2h"), Some(Duration::from_secs(7200)));
        assert_eq!(parse_duration("1.5h"), Some(Duration::from_secs(5400)));
        assert_eq!(parse_duration(".5s"), Some(Duration::from_millis(500)));
        assert_eq!(parse_duration("1h0m0s"), Some(Duration::from_secs(3600)));
        assert_eq!(parse_duration("3\u{b5}s"), Some(Duration::from_micros(3)));
        assert_eq!(parse_duration("7ns"), Some(Duration::from_nanos(7)));
        assert_eq!(parse_duration("0"), Some(Duration::ZERO));
        assert_eq!(parse_duration("0s"), Some(Duration::ZERO));
        assert_eq!(parse_duration("-0s"), Some(Duration::ZERO));
        assert_eq!(parse_duration("+5s"), Some(Duration::from_secs(5)));
        for bad in ["10", "1x", "", "-", "s", ".s", "1..5s", "5parsecs", "1s2", "1 s"] {
            assert_eq!(parse_duration_checked(bad), Err(DurationError::Syntax), "{bad:?}");
        }
        assert_eq!(parse_duration_checked("-5s"), Err(DurationError::Negative));
        assert_eq!(parse_duration_checked("99999999999999999999h"), Err(DurationError::TooLarge));
        assert_eq!(parse_duration_checked("18446744073709551615ns"), Ok(Duration::from_nanos(u64::MAX)));
        assert_eq!(parse_duration_checked("18446744073709551616ns"), Err(DurationError::TooLarge));
        assert_eq!(parse_duration_checked(&"9".repeat(5000)), Err(DurationError::Syntax));
        assert_eq!(parse_duration_checked(&format!("{}s", "9".repeat(5000))), Err(DurationError::TooLarge));
        assert_eq!(format_duration(Duration::from_secs(86400)), "24h0m0s");
        assert_eq!(format_duration(Duration::from_secs(90)), "1m30s");
        assert_eq!(format_duration(Duration::from_millis(1500)), "1.5s");
        assert_eq!(format_duration(Duration::from_millis(20)), "20ms");
    }

    mod prop {
        use super::super::*;
        use proptest::prelude::*;

        const UNITS: &[(&str, u64)] = &[
            ("ns", 1),
            ("us", 1_000),
            ("ms", 1_000_000),
            ("s", 1_000_000_000),
            ("m", 60_000_000_000),
            ("h", 3_600_000_000_000),
        ];

        proptest! {
            #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

            /// No input panics or overflows; an accepted value is never
            /// negative and fits the limit.
            #[test]
            fn any_string_parses_or_is_refused(s in ".{0,64}") {
                let _ = parse_duration_checked(&s);
            }

            #[test]
            fn any_duration_like_string_parses_or_is_refused(s in "[-+]?([0-9]{0,25}(\\.[0-9]{0,25})?(ns|us|ms|s|m|h|x|)){0,6}") {
                if let Ok(d) = parse_duration_checked(&s) {
                    prop_assert!(d.as_nanos() <= u64::MAX as u128);
                }
            }

            /// Sums of whole numbers of units parse to exactly their value.
            #[test]
            fn sums_of_units_are_exact(parts in proptest::collection::vec((0u64..1_000_000, 0usize..6), 1..5)) {
                let text: String = parts.iter().map(|(n, u)| format!("{n}{}", UNITS[*u].0)).collect();
                let want: u128 = parts.iter().map(|(n, u)| u128::from(*n) * u128::from(UNITS[*u].1)).sum();
                prop_assert_eq!(parse_duration_checked(&text).map(|d| d.as_nanos()), Ok(want));
            }

            /// What format_duration prints parses back to the same value.
            #[test]
            fn formatted_durations_parse_back(ns in 0u64..=u64::MAX) {
                let d = Duration::from_nanos(ns);
                prop_assert_eq!(parse_duration_checked(&format_duration(d)), Ok(d));
            }
        }
    }
}
