//! Text on the wire. PostgreSQL's `text` cannot hold a NUL, so a request whose JSON holds one is
//! refused where it is read (the control plane's extractors), for people and agents alike.

/// Whether a JSON document holds a NUL: a raw 0 byte (never valid JSON anyway) or the escape
/// `\u0000` inside a string (an escaped backslash followed by `u0000` is not one).
pub fn json_has_nul(bytes: &[u8]) -> bool {
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            0 => return true,
            b'\\' => {
                if bytes.get(i + 1) == Some(&b'u') && bytes.get(i + 2..i + 6) == Some(b"0000") {
                    return true;
                }
                i += 2; // the escaped character, whatever it is
            }
            _ => i += 1,
        }
    }
    false
}

/// Whether a percent-encoded URI part (a path, a query string) decodes to a NUL (`%00`).
pub fn uri_has_nul(part: &str) -> bool {
    part.as_bytes().windows(3).any(|w| w == b"%00")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nul_escape_is_found_and_an_escaped_backslash_is_not_one() {
        assert!(json_has_nul(br#"{"name": "a\u0000b"}"#));
        assert!(json_has_nul(b"{\"name\": \"a\0b\"}"));
        assert!(!json_has_nul(br#"{"name": "a\\u0000b"}"#));
        assert!(!json_has_nul(br#"{"name": "a\u0001b", "n": 0}"#));
    }

    #[test]
    fn a_percent_encoded_nul_is_found() {
        assert!(uri_has_nul("tenant=a%00b"));
        assert!(!uri_has_nul("tenant=a%2500b"));
    }
}
