//! Text that crosses from a guest (a policy's reasons, log lines and failure messages) to the host:
//! one definition of what is kept, so the host, a policy's own tests and the simulator store the
//! same bytes.
//!
//! Guest text is untrusted. PostgreSQL's `text` cannot hold a NUL, a terminal interprets escape
//! sequences, and an 8 MiB reason would be copied into every event and answer that names it. So
//! every string a guest returns is *cleaned* where it is decoded: control characters other than tab
//! and newline become U+FFFD (the replacement character, so the tampering stays visible), and the
//! text is cut at a bound per field, with `…` marking the cut.

use std::borrow::Cow;

/// Longest decision reason kept, in characters. A reason answers "why is my job pending?" in a
/// table cell; 500 characters is several sentences.
pub const MAX_REASON_CHARS: usize = 500;
/// Longest log line kept, in characters (the log's byte budget bounds the total).
pub const MAX_LOG_CHARS: usize = 2_000;
/// Longest failure message (`airtime.fail`, a panic message) kept, in characters.
pub const MAX_FAILURE_CHARS: usize = 2_000;

/// `text` with control characters other than `\t` and `\n` replaced by U+FFFD and cut to at most
/// `max_chars` characters (the last of them `…` when it was cut). Borrows when nothing changes,
/// which is the common case.
pub fn clean(text: &str, max_chars: usize) -> Cow<'_, str> {
    let bad = |c: char| c.is_control() && c != '\t' && c != '\n';
    let mut chars = 0usize;
    let mut cut_at = None;
    let mut dirty = false;
    for (at, c) in text.char_indices() {
        if chars == max_chars {
            cut_at = Some(at);
            break;
        }
        dirty |= bad(c);
        chars += 1;
    }
    if !dirty && cut_at.is_none() {
        return Cow::Borrowed(text);
    }
    let kept = match cut_at {
        // Room for the ellipsis within the bound.
        Some(_) => max_chars.saturating_sub(1),
        None => chars,
    };
    let mut out: String = text.chars().take(kept).map(|c| if bad(c) { '\u{FFFD}' } else { c }).collect();
    if cut_at.is_some() && max_chars > 0 {
        out.push('…');
    }
    Cow::Owned(out)
}

/// [`clean`] for text that is owned already.
pub fn clean_owned(text: String, max_chars: usize) -> String {
    match clean(&text, max_chars) {
        Cow::Borrowed(_) => text,
        Cow::Owned(cleaned) => cleaned,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_text_is_borrowed_unchanged() {
        assert!(matches!(clean("no GPU with 40 GiB free\non node a", 500), Cow::Borrowed(_)));
    }

    #[test]
    fn nul_and_escape_sequences_become_visible_replacements() {
        assert_eq!(clean("a\0b\u{1b}[31mc\td", 100), "a\u{FFFD}b\u{FFFD}[31mc\td");
    }

    #[test]
    fn long_text_is_cut_within_the_bound_with_an_ellipsis() {
        let long = "x".repeat(10_000);
        let cut = clean(&long, 500);
        assert_eq!(cut.chars().count(), 500);
        assert!(cut.ends_with('…'));
        // Characters, not bytes: a multi-byte text is never split inside a character.
        assert_eq!(clean(&"é".repeat(600), 500).chars().count(), 500);
        // Exactly at the bound: kept whole.
        assert_eq!(clean(&"y".repeat(500), 500), "y".repeat(500));
    }
}
