//! Kubernetes resource quantities (`500m`, `1.5`, `128Mi`, `1e3`, `2G`).

use thiserror::Error;

#[derive(Debug, Error, PartialEq)]
#[error("invalid quantity {0:?}: expected a number with an optional suffix (m, k, M, G, Ki, Mi, Gi, ...)")]
pub struct QuantityError(pub String);

/// Parse a quantity into its base unit as f64 (cores for CPU, bytes for memory).
pub fn parse(s: &str) -> Result<f64, QuantityError> {
    let t = s.trim();
    let err = || QuantityError(s.to_string());
    if t.is_empty() {
        return Err(err());
    }
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-')).unwrap_or(t.len());
    let (num, suffix) = t.split_at(split);
    let base: f64 = num.parse().map_err(|_| err())?;
    let mult = match suffix {
        "" => 1.0,
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024.0,
        "Mi" => 1024.0 * 1024.0,
        "Gi" => 1024.0 * 1024.0 * 1024.0,
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        e if e.starts_with(['e', 'E']) => {
            let exp: i32 = e[1..].parse().map_err(|_| err())?;
            10f64.powi(exp)
        }
        _ => return Err(err()),
    };
    let v = base * mult;
    if !v.is_finite() || v < 0.0 {
        return Err(err());
    }
    Ok(v)
}

/// CPU quantity in millicores, rounded up as Kubernetes does.
pub fn cpu_millis(s: &str) -> Result<i64, QuantityError> {
    Ok((parse(s)? * 1000.0).ceil() as i64)
}

/// Memory quantity in bytes, rounded up.
pub fn bytes(s: &str) -> Result<i64, QuantityError> {
    Ok(parse(s)?.ceil() as i64)
}

/// Bytes as Kubernetes prints a binary quantity: the largest of Ki, Mi,
/// Gi, Ti that divides it, else plain bytes (`100Mi`, `91916Ki`, `1000`).
pub fn format_bytes(n: i64) -> String {
    for (unit, shift) in [("Ti", 40), ("Gi", 30), ("Mi", 20), ("Ki", 10)] {
        if n != 0 && n % (1i64 << shift) == 0 {
            return format!("{}{unit}", n >> shift);
        }
    }
    n.to_string()
}

/// A count as a Kubernetes quantity prints it in decimal SI form
/// (`32768`, `32k`, `2M`): PIDs and inodes in eviction messages.
pub fn format_decimal(n: i64) -> String {
    for (unit, div) in [
        ("E", 1_000_000_000_000_000_000i64),
        ("P", 1_000_000_000_000_000),
        ("T", 1_000_000_000_000),
        ("G", 1_000_000_000),
        ("M", 1_000_000),
        ("k", 1_000),
    ] {
        if n != 0 && n % div == 0 {
            return format!("{}{unit}", n / div);
        }
    }
    n.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_print_in_decimal_si() {
        assert_eq!(format_decimal(32768), "32768");
        assert_eq!(format_decimal(32000), "32k");
        assert_eq!(format_decimal(2_000_000), "2M");
        assert_eq!(format_decimal(0), "0");
    }

    #[test]
    fn parses_kubernetes_forms() {
        assert_eq!(cpu_millis("500m").unwrap(), 500);
        assert_eq!(cpu_millis("1.5").unwrap(), 1500);
        assert_eq!(cpu_millis("2").unwrap(), 2000);
        assert_eq!(bytes("128Mi").unwrap(), 128 * 1024 * 1024);
        assert_eq!(bytes("1G").unwrap(), 1_000_000_000);
        assert_eq!(bytes("1e3").unwrap(), 1000);
        assert_eq!(bytes("1k").unwrap(), 1000);
        assert!(parse("12x").is_err());
        assert!(parse("").is_err());
        assert!(parse("-1").is_err());
    }
}
