//! Go's `%q` (`strconv.Quote`), for the texts the kubelet and the API
//! server format with it (Pod Security messages, downward API files), so
//! podwarden's read the same.

/// Go's `strconv.Quote`: `"`, `\` and control characters escaped,
/// printable text (also non-ASCII) as it is.
pub fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            '\x07' => out.push_str("\\a"),
            '\x08' => out.push_str("\\b"),
            '\x0c' => out.push_str("\\f"),
            '\x0b' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => out.push_str(&format!("\\x{:02x}", c as u32)),
            c if c.is_control() => {
                if (c as u32) <= 0xffff {
                    out.push_str(&format!("\\u{:04x}", c as u32))
                } else {
                    out.push_str(&format!("\\U{:08x}", c as u32))
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::go_quote;

    #[test]
    fn go_quoting() {
        assert_eq!(go_quote("a\"b\\c\n\x01é"), "\"a\\\"b\\\\c\\n\\x01é\"");
        assert_eq!(go_quote("a\"b\\c\n\t\x01é"), "\"a\\\"b\\\\c\\n\\t\\x01é\"");
        assert_eq!(go_quote("\x07\x08\x0c\x0b\r\x7f"), "\"\\a\\b\\f\\v\\r\\x7f\"");
    }
}
