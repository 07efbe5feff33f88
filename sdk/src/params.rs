//! A policy's configuration: the JSON object the platform team stores with the policy, read by a
//! small JSON reader (no dependency, no `serde` in the guest).
//!
//! ```
//! use airtime_policy_sdk::params::Params;
//!
//! let params = Params::parse(r#"{"max_placements": 20, "prefer": "H100", "spread": false}"#);
//! assert_eq!(params.get_or("max_placements", u32::MAX).unwrap(), 20);
//! assert_eq!(params.get::<String>("prefer").unwrap().as_deref(), Some("H100"));
//! assert_eq!(params.get_or("missing", 7u32).unwrap(), 7);
//! // A value of the wrong type is an error that names the key, never a silent default.
//! assert_eq!(
//!     params.get::<u32>("spread").unwrap_err().to_string(),
//!     "params.spread: expected an unsigned 32-bit integer, found false"
//! );
//! ```

use std::borrow::Cow;
use std::fmt;

/// Nesting deeper than this is refused (a guard against stack exhaustion on hostile input).
const MAX_DEPTH: usize = 64;

/// A JSON value. Numbers keep their text so integers convert exactly.
#[derive(Debug, Clone, PartialEq)]
pub enum Json<'a> {
    Null,
    Bool(bool),
    Number(&'a str),
    String(Cow<'a, str>),
    Array(Vec<Json<'a>>),
    Object(Vec<(Cow<'a, str>, Json<'a>)>),
}

impl<'a> Json<'a> {
    /// Parses one JSON value filling all of `text` (surrounding whitespace allowed).
    pub fn parse(text: &'a str) -> Result<Json<'a>, ParamError> {
        let mut parser = Parser { text, pos: 0 };
        let value = parser.value(0)?;
        parser.skip_whitespace();
        if parser.pos != text.len() {
            return Err(parser.error("trailing characters after the JSON value"));
        }
        Ok(value)
    }

    /// The member `key` of an object (the last one, if repeated).
    pub fn member(&self, key: &str) -> Option<&Json<'a>> {
        match self {
            Json::Object(members) => members.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// "a string", "an object", …: for error messages.
    fn kind(&self) -> String {
        match self {
            Json::Null => "null".to_owned(),
            Json::Bool(b) => b.to_string(),
            Json::Number(n) => n.to_string(),
            Json::String(s) => format!("the string {:?}", s),
            Json::Array(_) => "an array".to_owned(),
            Json::Object(_) => "an object".to_owned(),
        }
    }
}

/// A wrong or unreadable parameter. `Display` names the key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParamError {
    message: String,
}

impl ParamError {
    fn new(message: impl Into<String>) -> Self {
        ParamError { message: message.into() }
    }
}

impl fmt::Display for ParamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ParamError {}

/// The policy's parameters: a JSON object, parsed once.
#[derive(Debug, Clone)]
pub struct Params<'a> {
    raw: &'a str,
    root: Result<Json<'a>, ParamError>,
}

impl<'a> Params<'a> {
    /// Parses `raw`; an empty or all-blank string counts as `{}`. A parse error is kept and
    /// returned by every getter, so a policy that reads no parameters never fails on them.
    pub fn parse(raw: &'a str) -> Self {
        let root = if raw.trim().is_empty() {
            Ok(Json::Object(Vec::new()))
        } else {
            match Json::parse(raw) {
                Ok(value @ Json::Object(_)) => Ok(value),
                Ok(other) => Err(ParamError::new(format!("params must be a JSON object, found {}", other.kind()))),
                Err(error) => Err(ParamError::new(format!("params are not valid JSON: {error}"))),
            }
        };
        Params { raw, root }
    }

    /// The JSON text as the platform stored it.
    pub fn raw(&self) -> &'a str {
        self.raw
    }

    /// The whole object, or why it could not be read.
    pub fn root(&self) -> Result<&Json<'a>, ParamError> {
        self.root.as_ref().map_err(Clone::clone)
    }

    /// The raw value of `key`, if present.
    pub fn value(&self, key: &str) -> Result<Option<&Json<'a>>, ParamError> {
        Ok(self.root()?.member(key))
    }

    /// `key` converted to `T`; `Ok(None)` when absent or `null`.
    pub fn get<T: FromParam>(&self, key: &str) -> Result<Option<T>, ParamError> {
        match self.value(key)? {
            None | Some(Json::Null) => Ok(None),
            Some(value) => T::from_param(value).map(Some).map_err(|expected| {
                ParamError::new(format!("params.{key}: expected {expected}, found {}", value.kind()))
            }),
        }
    }

    /// `key` converted to `T`, or `default` when absent or `null`.
    pub fn get_or<T: FromParam>(&self, key: &str, default: T) -> Result<T, ParamError> {
        Ok(self.get(key)?.unwrap_or(default))
    }

    /// `key` as a string borrowed from the params when it has no escapes.
    pub fn str(&self, key: &str) -> Result<Option<&str>, ParamError> {
        match self.value(key)? {
            None | Some(Json::Null) => Ok(None),
            Some(Json::String(s)) => Ok(Some(s)),
            Some(other) => Err(ParamError::new(format!("params.{key}: expected a string, found {}", other.kind()))),
        }
    }
}

/// A type a parameter converts to. `Err` carries what was expected ("an unsigned 32-bit integer").
pub trait FromParam: Sized {
    fn from_param(value: &Json<'_>) -> Result<Self, &'static str>;
}

impl FromParam for bool {
    fn from_param(value: &Json<'_>) -> Result<Self, &'static str> {
        match value {
            Json::Bool(b) => Ok(*b),
            _ => Err("true or false"),
        }
    }
}

impl FromParam for String {
    fn from_param(value: &Json<'_>) -> Result<Self, &'static str> {
        match value {
            Json::String(s) => Ok(s.to_string()),
            _ => Err("a string"),
        }
    }
}

impl FromParam for f64 {
    fn from_param(value: &Json<'_>) -> Result<Self, &'static str> {
        match value {
            Json::Number(text) => text.parse().map_err(|_| "a number"),
            _ => Err("a number"),
        }
    }
}

impl<T: FromParam> FromParam for Vec<T> {
    fn from_param(value: &Json<'_>) -> Result<Self, &'static str> {
        match value {
            Json::Array(items) => items.iter().map(T::from_param).collect(),
            _ => Err("an array"),
        }
    }
}

macro_rules! integer_param {
    ($($t:ty => $what:literal),* $(,)?) => {$(
        impl FromParam for $t {
            fn from_param(value: &Json<'_>) -> Result<Self, &'static str> {
                let Json::Number(text) = value else { return Err($what) };
                if let Ok(exact) = text.parse::<$t>() {
                    return Ok(exact);
                }
                // 1e3 or 40.0: accept when the value is a whole number in range.
                let float: f64 = text.parse().map_err(|_| $what)?;
                if float.fract() == 0.0 && float >= <$t>::MIN as f64 && float <= <$t>::MAX as f64 {
                    Ok(float as $t)
                } else {
                    Err($what)
                }
            }
        }
    )*};
}

integer_param! {
    u32 => "an unsigned 32-bit integer",
    u64 => "an unsigned 64-bit integer",
    i32 => "a 32-bit integer",
    i64 => "a 64-bit integer",
}

struct Parser<'a> {
    text: &'a str,
    pos: usize,
}

impl<'a> Parser<'a> {
    fn error(&self, what: &str) -> ParamError {
        ParamError::new(format!("{what} at byte {}", self.pos))
    }

    fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.pos).copied()
    }

    fn skip_whitespace(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.pos += 1;
        }
    }

    fn expect_literal(&mut self, literal: &str, value: Json<'a>) -> Result<Json<'a>, ParamError> {
        if self.text.get(self.pos..).is_some_and(|rest| rest.starts_with(literal)) {
            self.pos += literal.len();
            Ok(value)
        } else {
            Err(self.error("unexpected character"))
        }
    }

    fn value(&mut self, depth: usize) -> Result<Json<'a>, ParamError> {
        if depth > MAX_DEPTH {
            return Err(self.error("nesting deeper than 64 levels"));
        }
        self.skip_whitespace();
        match self.peek() {
            None => Err(self.error("unexpected end of input")),
            Some(b'n') => self.expect_literal("null", Json::Null),
            Some(b't') => self.expect_literal("true", Json::Bool(true)),
            Some(b'f') => self.expect_literal("false", Json::Bool(false)),
            Some(b'"') => Ok(Json::String(self.string()?)),
            Some(b'[') => {
                self.pos += 1;
                let mut items = Vec::new();
                self.skip_whitespace();
                if self.peek() == Some(b']') {
                    self.pos += 1;
                    return Ok(Json::Array(items));
                }
                loop {
                    items.push(self.value(depth + 1)?);
                    self.skip_whitespace();
                    match self.peek() {
                        Some(b',') => self.pos += 1,
                        Some(b']') => {
                            self.pos += 1;
                            return Ok(Json::Array(items));
                        }
                        _ => return Err(self.error("expected ',' or ']'")),
                    }
                }
            }
            Some(b'{') => {
                self.pos += 1;
                let mut members = Vec::new();
                self.skip_whitespace();
                if self.peek() == Some(b'}') {
                    self.pos += 1;
                    return Ok(Json::Object(members));
                }
                loop {
                    self.skip_whitespace();
                    if self.peek() != Some(b'"') {
                        return Err(self.error("expected a string key"));
                    }
                    let key = self.string()?;
                    self.skip_whitespace();
                    if self.peek() != Some(b':') {
                        return Err(self.error("expected ':'"));
                    }
                    self.pos += 1;
                    let value = self.value(depth + 1)?;
                    members.push((key, value));
                    self.skip_whitespace();
                    match self.peek() {
                        Some(b',') => self.pos += 1,
                        Some(b'}') => {
                            self.pos += 1;
                            return Ok(Json::Object(members));
                        }
                        _ => return Err(self.error("expected ',' or '}'")),
                    }
                }
            }
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(_) => Err(self.error("unexpected character")),
        }
    }

    fn number(&mut self) -> Result<Json<'a>, ParamError> {
        let start = self.pos;
        if self.peek() == Some(b'-') {
            self.pos += 1;
        }
        let digits = |p: &mut Self| {
            let from = p.pos;
            while matches!(p.peek(), Some(b'0'..=b'9')) {
                p.pos += 1;
            }
            p.pos - from
        };
        match self.peek() {
            Some(b'0') => self.pos += 1,
            Some(b'1'..=b'9') => {
                digits(self);
            }
            _ => return Err(self.error("expected a digit")),
        }
        if self.peek() == Some(b'.') {
            self.pos += 1;
            if digits(self) == 0 {
                return Err(self.error("expected a digit after '.'"));
            }
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.pos += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.pos += 1;
            }
            if digits(self) == 0 {
                return Err(self.error("expected a digit in the exponent"));
            }
        }
        Ok(Json::Number(self.text.get(start..self.pos).unwrap_or("0")))
    }

    /// A string starting at the opening quote; borrowed when it has no escapes.
    fn string(&mut self) -> Result<Cow<'a, str>, ParamError> {
        self.pos += 1;
        let start = self.pos;
        let bytes = self.text.as_bytes();
        // Fast path: no escapes.
        while let Some(&b) = bytes.get(self.pos) {
            match b {
                b'"' => {
                    let s = self.text.get(start..self.pos).unwrap_or("");
                    self.pos += 1;
                    return Ok(Cow::Borrowed(s));
                }
                b'\\' => break,
                0..=0x1f => return Err(self.error("control character in string")),
                _ => self.pos += 1,
            }
        }
        let mut out = String::from(self.text.get(start..self.pos).unwrap_or(""));
        loop {
            let Some(c) = self.text.get(self.pos..).and_then(|rest| rest.chars().next()) else {
                return Err(self.error("unterminated string"));
            };
            self.pos += c.len_utf8();
            match c {
                '"' => return Ok(Cow::Owned(out)),
                '\\' => {
                    let Some(escape) = self.peek() else { return Err(self.error("unterminated string")) };
                    self.pos += 1;
                    match escape {
                        b'"' => out.push('"'),
                        b'\\' => out.push('\\'),
                        b'/' => out.push('/'),
                        b'b' => out.push('\u{8}'),
                        b'f' => out.push('\u{c}'),
                        b'n' => out.push('\n'),
                        b'r' => out.push('\r'),
                        b't' => out.push('\t'),
                        b'u' => {
                            let first = self.hex4()?;
                            let code = if (0xD800..0xDC00).contains(&first) {
                                if self.text.get(self.pos..).is_some_and(|r| r.starts_with("\\u")) {
                                    self.pos += 2;
                                    let second = self.hex4()?;
                                    if !(0xDC00..0xE000).contains(&second) {
                                        return Err(self.error("unpaired surrogate in \\u escape"));
                                    }
                                    0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00)
                                } else {
                                    return Err(self.error("unpaired surrogate in \\u escape"));
                                }
                            } else {
                                first
                            };
                            match char::from_u32(code) {
                                Some(c) => out.push(c),
                                None => return Err(self.error("invalid \\u escape")),
                            }
                        }
                        _ => return Err(self.error("invalid escape")),
                    }
                }
                c if (c as u32) < 0x20 => return Err(self.error("control character in string")),
                c => out.push(c),
            }
        }
    }

    fn hex4(&mut self) -> Result<u32, ParamError> {
        let digits = self.text.get(self.pos..self.pos + 4).ok_or_else(|| self.error("short \\u escape"))?;
        let value = u32::from_str_radix(digits, 16).map_err(|_| self.error("invalid \\u escape"))?;
        if !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(self.error("invalid \\u escape"));
        }
        self.pos += 4;
        Ok(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_every_kind_of_value() {
        let text = r#" {"a": [1, -2.5e3, true, null, "x\"\u00e9\ud83d\ude00"], "b": {"c": {}}} "#;
        let value = Json::parse(text).expect("valid JSON");
        let Some(Json::Array(items)) = value.member("a") else { panic!("a is an array") };
        assert_eq!(items[0], Json::Number("1"));
        assert_eq!(items[1], Json::Number("-2.5e3"));
        assert_eq!(items[2], Json::Bool(true));
        assert_eq!(items[3], Json::Null);
        assert_eq!(items[4], Json::String(Cow::Owned("x\"é😀".to_owned())));
        assert!(matches!(value.member("b"), Some(Json::Object(_))));
    }

    #[test]
    fn converts_integers_exactly_and_refuses_what_does_not_fit() {
        let params = Params::parse(r#"{"big": 18446744073709551615, "neg": -1, "whole": 40.0, "half": 2.5}"#);
        assert_eq!(params.get::<u64>("big"), Ok(Some(u64::MAX)));
        assert_eq!(params.get::<i32>("neg"), Ok(Some(-1)));
        assert_eq!(params.get::<u32>("whole"), Ok(Some(40)));
        assert_eq!(
            params.get::<u32>("neg").expect_err("negative").to_string(),
            "params.neg: expected an unsigned 32-bit integer, found -1"
        );
        assert!(params.get::<u32>("half").is_err());
        assert_eq!(params.get::<f64>("half"), Ok(Some(2.5)));
    }

    #[test]
    fn empty_params_are_an_empty_object_and_bad_params_fail_only_when_read() {
        assert_eq!(Params::parse("").get_or("x", 3u32), Ok(3));
        let bad = Params::parse("{\"x\": ");
        assert!(bad.raw().starts_with('{'));
        let error = bad.get::<u32>("x").expect_err("bad JSON").to_string();
        assert!(error.starts_with("params are not valid JSON: unexpected end of input"), "{error}");
        let array = Params::parse("[1]");
        assert_eq!(
            array.get::<u32>("x").expect_err("not an object").to_string(),
            "params must be a JSON object, found an array"
        );
    }

    #[test]
    fn lists_and_borrowed_strings() {
        let params = Params::parse(r#"{"models": ["H100", "A100"], "name": "plain"}"#);
        assert_eq!(params.get::<Vec<String>>("models"), Ok(Some(vec!["H100".to_owned(), "A100".to_owned()])));
        assert_eq!(params.str("name"), Ok(Some("plain")));
        assert!(params.str("models").is_err());
    }

    #[test]
    fn hostile_input_is_an_error_not_a_crash() {
        let deep = "[".repeat(10_000);
        assert!(Json::parse(&deep).is_err());
        for text in ["{", "\"\\u12", "\"\\ud800\"", "01", "-", "1.", "1e", "{\"a\" 1}", "[1,]", "\"\u{1}\"", "tru"] {
            assert!(Json::parse(text).is_err(), "{text:?} should be refused");
        }
    }
}
