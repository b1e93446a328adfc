//! Bounded parsing of YAML and JSON into `serde_json::Value`s.
//!
//! A manifest (or a config) of at most 1 MiB must be accepted or rejected
//! quickly and with little memory, whatever it holds. Two things make naive
//! parsing unbounded:
//!
//! - aliases: a few kilobytes of nested `*a` references expand to billions
//!   of nodes (the "billion laughs");
//! - nesting: libyaml's scanner is O(depth²) on nested flow collections, and
//!   serde_yaml_ng only checks its recursion limit after libyaml parsed the
//!   whole document (an 80,000-deep `a: [[[...]]]` took 14 s).
//!
//! So the value is built here straight from libyaml's event stream (the same
//! libyaml translation serde_yaml_ng uses, `unsafe-libyaml`), pulled one
//! event at a time, with a budget checked *before* anything is built: at
//! most [`MAX_DEPTH`] nested collections, [`MAX_NODES`] nodes and
//! [`MAX_SCALAR_BYTES`] bytes of scalars, aliases counted as what they
//! expand to. The parse stops at the first event over budget, so libyaml
//! never scans more than its bounded look-ahead past it.
//!
//! Plain scalars are resolved as serde_yaml_ng resolves them (YAML 1.2 core
//! schema: `null`/`~`, `true`/`false`, integers with `0x`/`0o`/`0b`,
//! floats, `.inf`/`.nan`), so a manifest means what it meant before. Keys
//! must be scalars and unique in their mapping.

use std::collections::HashMap;

use serde::de::{DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};
use thiserror::Error;

use crate::sys::libyaml::{ErrorAt, Event};

/// Most nested collections (sequences and mappings) in one document.
pub const MAX_DEPTH: usize = 100;
/// Most nodes (scalars, sequences, mappings) in one input, after alias
/// expansion. A large real pod has a few hundred.
pub const MAX_NODES: usize = 65_536;
/// Most bytes of scalars (keys and values) in one input, after alias
/// expansion: twice the 1 MiB size cap of a manifest.
pub const MAX_SCALAR_BYTES: usize = 2 * 1024 * 1024;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum YamlError {
    /// Malformed input, with where it was found (1-based).
    #[error("{message} at line {line} column {column}")]
    Syntax { message: String, line: u64, column: u64 },
    /// Nested deeper than [`MAX_DEPTH`].
    #[error("nesting deeper than {limit} levels at line {line} column {column}")]
    TooDeep { limit: usize, line: u64, column: u64 },
    /// Over the node or byte budget; `what` says which and whether aliases
    /// made it so.
    #[error("{what} exceeds {limit} {unit}")]
    TooLarge { what: &'static str, limit: usize, unit: &'static str },
}

/// What has been spent so far on one input.
#[derive(Default)]
struct Budget {
    nodes: usize,
    bytes: usize,
    /// Whether an alias was expanded (for the error message).
    aliased: bool,
}

impl Budget {
    fn charge(&mut self, nodes: usize, bytes: usize) -> Result<(), YamlError> {
        self.nodes = self.nodes.saturating_add(nodes);
        self.bytes = self.bytes.saturating_add(bytes);
        let what = if self.aliased { "alias expansion" } else { "document" };
        if self.nodes > MAX_NODES {
            return Err(YamlError::TooLarge { what, limit: MAX_NODES, unit: "nodes" });
        }
        if self.bytes > MAX_SCALAR_BYTES {
            return Err(YamlError::TooLarge { what, limit: MAX_SCALAR_BYTES, unit: "bytes of scalars" });
        }
        Ok(())
    }
}

/// libyaml's event parser (through `sys`), with errors as [`YamlError`]s
/// at 1-based positions.
struct Parser<'a> {
    sys: crate::sys::libyaml::Parser<'a>,
    input: &'a [u8],
}

impl<'a> Parser<'a> {
    fn new(input: &'a [u8]) -> Parser<'a> {
        Parser { sys: crate::sys::libyaml::Parser::new(input), input }
    }

    fn error(&self, e: crate::sys::libyaml::ParseError) -> YamlError {
        let mut message = e.problem.unwrap_or_else(|| "libyaml failed without saying why".into());
        if let Some(c) = e.context {
            message = format!("{c}: {message}");
        }
        let (line, column) = match e.at {
            ErrorAt::Offset(offset) => {
                // the reader says where by byte offset, not by mark
                let offset = (offset as usize).min(self.input.len());
                let before = &self.input[..offset];
                let line = before.iter().filter(|b| **b == b'\n').count() as u64 + 1;
                let column = (offset - before.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1)) as u64 + 1;
                (line, column)
            }
            ErrorAt::Mark { line, column } => (line + 1, column + 1),
        };
        YamlError::Syntax { message, line, column }
    }

    /// The next event and where it starts (1-based line and column).
    fn next(&mut self) -> Result<(Event, u64, u64), YamlError> {
        match self.sys.next() {
            Ok((event, line, column)) => Ok((event, line + 1, column + 1)),
            Err(e) => Err(self.error(e)),
        }
    }
}

/// A completed node: its value, its text when it is a scalar (for use as a
/// key), what it cost and how deep it is.
#[derive(Clone)]
struct Node {
    value: Value,
    key: Option<String>,
    nodes: usize,
    bytes: usize,
    height: usize,
}

enum Frame {
    Seq(Vec<Value>),
    /// The mapping and its pending key with where the key is.
    Map(Map<String, Value>, Option<(String, u64, u64)>),
}

/// A collection being built.
struct Open {
    frame: Frame,
    anchor: Option<Vec<u8>>,
    nodes_at_start: usize,
    bytes_at_start: usize,
    height: usize,
}

const TAG_PREFIX: &[u8] = b"tag:yaml.org,2002:";

fn syntax(message: impl Into<String>, line: u64, column: u64) -> YamlError {
    YamlError::Syntax { message: message.into(), line, column }
}

fn tag_text(tag: &[u8]) -> String {
    match tag.strip_prefix(TAG_PREFIX) {
        Some(rest) => format!("!!{}", String::from_utf8_lossy(rest)),
        None => String::from_utf8_lossy(tag).into_owned(),
    }
}

/// The state of one parse: the budget, the anchors of the current
/// document and the collections open.
#[derive(Default)]
struct Builder {
    budget: Budget,
    anchors: HashMap<Vec<u8>, Node>,
    stack: Vec<Open>,
}

impl Builder {
    fn open(
        &mut self,
        frame: Frame,
        anchor: Option<Vec<u8>>,
        tag: Option<Vec<u8>>,
        at: (u64, u64),
    ) -> Result<(), YamlError> {
        if let Some(t) = tag
            && !matches!(t.as_slice(), b"tag:yaml.org,2002:seq" | b"tag:yaml.org,2002:map" | b"!")
        {
            return Err(syntax(format!("unsupported tag {} on a collection", tag_text(&t)), at.0, at.1));
        }
        if self.stack.len() >= MAX_DEPTH {
            return Err(YamlError::TooDeep { limit: MAX_DEPTH, line: at.0, column: at.1 });
        }
        self.budget.charge(1, 0)?;
        self.stack.push(Open {
            frame,
            anchor,
            nodes_at_start: self.budget.nodes - 1,
            bytes_at_start: self.budget.bytes,
            height: 1,
        });
        Ok(())
    }

    fn close(&mut self, at: (u64, u64)) -> Result<Node, YamlError> {
        let Some(open) = self.stack.pop() else {
            return Err(syntax("collection end without a start", at.0, at.1));
        };
        let value = match open.frame {
            Frame::Seq(items) => Value::Array(items),
            Frame::Map(map, None) => Value::Object(map),
            Frame::Map(_, Some(_)) => return Err(syntax("mapping key without a value", at.0, at.1)),
        };
        let node = Node {
            value,
            key: None,
            nodes: self.budget.nodes - open.nodes_at_start,
            bytes: self.budget.bytes - open.bytes_at_start,
            height: open.height,
        };
        if let Some(a) = open.anchor {
            self.anchors.insert(a, node.clone());
        }
        Ok(node)
    }

    fn scalar(
        &mut self,
        anchor: Option<Vec<u8>>,
        tag: Option<Vec<u8>>,
        value: Vec<u8>,
        plain: bool,
        at: (u64, u64),
    ) -> Result<Node, YamlError> {
        self.budget.charge(1, value.len())?;
        let bytes = value.len();
        let text = String::from_utf8(value).map_err(|_| syntax("scalar is not valid UTF-8", at.0, at.1))?;
        let v = resolve(&text, tag.as_deref(), plain).map_err(|e| syntax(e.to_string(), at.0, at.1))?;
        let node = Node { value: v, key: Some(text), nodes: 1, bytes, height: 0 };
        if let Some(a) = anchor {
            self.anchors.insert(a, node.clone());
        }
        Ok(node)
    }

    fn alias(&mut self, name: &[u8], at: (u64, u64)) -> Result<Node, YamlError> {
        let Some(node) = self.anchors.get(name) else {
            return Err(syntax(format!("unknown anchor *{}", String::from_utf8_lossy(name)), at.0, at.1));
        };
        self.budget.aliased = true;
        self.budget.charge(node.nodes, node.bytes)?;
        if self.stack.len() + node.height > MAX_DEPTH {
            return Err(YamlError::TooDeep { limit: MAX_DEPTH, line: at.0, column: at.1 });
        }
        // charged first, copied second: the budget bounds the copy
        Ok(node.clone())
    }

    /// Hand a completed node to the collection it is in; the root of the
    /// document is handed back.
    fn add(&mut self, done: Node, at: (u64, u64)) -> Result<Option<Value>, YamlError> {
        let Some(parent) = self.stack.last_mut() else {
            return Ok(Some(done.value));
        };
        parent.height = parent.height.max(done.height + 1);
        match &mut parent.frame {
            Frame::Seq(items) => items.push(done.value),
            Frame::Map(_, pending @ None) => match done.key {
                Some(k) => *pending = Some((k, at.0, at.1)),
                None => return Err(syntax("mapping keys must be scalars", at.0, at.1)),
            },
            Frame::Map(map, pending @ Some(_)) => {
                let (k, line, column) = pending.take().expect("a pending key");
                if map.contains_key(&k) {
                    return Err(syntax(format!("duplicate key {k:?}"), line, column));
                }
                map.insert(k, done.value);
            }
        }
        Ok(None)
    }
}

/// Parse every document of a YAML stream, within the budget. An empty
/// document is `Value::Null`.
pub fn parse_bounded(text: &str) -> Result<Vec<Value>, YamlError> {
    let mut parser = Parser::new(text.as_bytes());
    let mut b = Builder::default();
    let mut docs = Vec::new();
    let mut root: Option<Value> = None;
    loop {
        let (event, line, column) = parser.next()?;
        let at = (line, column);
        let done = match event {
            Event::StreamEnd => return Ok(docs),
            Event::DocumentStart => {
                b.anchors.clear();
                root = None;
                continue;
            }
            Event::DocumentEnd => {
                docs.push(root.take().unwrap_or(Value::Null));
                continue;
            }
            Event::Other => continue,
            Event::SequenceStart { anchor, tag } => {
                b.open(Frame::Seq(Vec::new()), anchor, tag, at)?;
                continue;
            }
            Event::MappingStart { anchor, tag } => {
                b.open(Frame::Map(Map::new(), None), anchor, tag, at)?;
                continue;
            }
            Event::SequenceEnd | Event::MappingEnd => b.close(at)?,
            Event::Scalar { anchor, tag, value, plain } => b.scalar(anchor, tag, value, plain, at)?,
            Event::Alias(name) => b.alias(&name, at)?,
        };
        if let Some(v) = b.add(done, at)? {
            root = Some(v);
        }
    }
}

/// Why a scalar has no value; becomes the syntax error at its position.
#[derive(Debug, thiserror::Error)]
enum ScalarError {
    #[error("{text:?} is not {what} (tag {tag})")]
    NotTagged { text: String, what: &'static str, tag: String },
    #[error("unsupported tag {0}")]
    UnsupportedTag(String),
    #[error("integer {0} is out of range")]
    OutOfRange(String),
}

/// The value of a scalar: plain scalars by the core schema, quoted ones
/// and `!!str` as strings, other core tags checked.
fn resolve(text: &str, tag: Option<&[u8]>, plain: bool) -> Result<Value, ScalarError> {
    let Some(tag) = tag else {
        return if plain { resolve_plain(text) } else { Ok(Value::String(text.to_string())) };
    };
    let bad = |what: &'static str| Err(ScalarError::NotTagged { text: text.into(), what, tag: tag_text(tag) });
    match tag.strip_prefix(TAG_PREFIX) {
        Some(b"str") => Ok(Value::String(text.to_string())),
        Some(b"null") => {
            if matches!(text, "" | "~" | "null" | "Null" | "NULL") {
                Ok(Value::Null)
            } else {
                bad("null")
            }
        }
        Some(b"bool") => match parse_bool(text) {
            Some(b) => Ok(Value::Bool(b)),
            None => bad("a boolean"),
        },
        Some(b"int") => parse_int(text).unwrap_or_else(|| bad("an integer")),
        Some(b"float") => parse_float(text).map_or_else(|| bad("a float"), Ok),
        _ if tag == b"!" => Ok(Value::String(text.to_string())),
        _ => Err(ScalarError::UnsupportedTag(tag_text(tag))),
    }
}

fn resolve_plain(text: &str) -> Result<Value, ScalarError> {
    if matches!(text, "" | "~" | "null" | "Null" | "NULL") {
        return Ok(Value::Null);
    }
    if let Some(b) = parse_bool(text) {
        return Ok(Value::Bool(b));
    }
    if let Some(v) = parse_int(text) {
        return v;
    }
    if !digits_but_not_number(text)
        && let Some(v) = parse_float(text)
    {
        return Ok(v);
    }
    Ok(Value::String(text.to_string()))
}

fn parse_bool(text: &str) -> Option<bool> {
    match text {
        "true" | "True" | "TRUE" => Some(true),
        "false" | "False" | "FALSE" => Some(false),
        _ => None,
    }
}

/// Integers exactly as serde_yaml_ng reads them: optional sign, decimal
/// (no leading zeros) or `0x`/`0o`/`0b`. `Some(Err)` past 64 bits.
fn parse_int(text: &str) -> Option<Result<Value, ScalarError>> {
    let range = || ScalarError::OutOfRange(text.into());
    if let Some(u) = parse_unsigned(text) {
        return Some(u64::try_from(u).map(|u| Value::Number(u.into())).map_err(|_| range()));
    }
    if let Some(i) = parse_negative(text) {
        return Some(i64::try_from(i).map(|i| Value::Number(i.into())).map_err(|_| range()));
    }
    None
}

fn parse_unsigned(text: &str) -> Option<u128> {
    let unpositive = text.strip_prefix('+').unwrap_or(text);
    for (prefix, radix) in [("0x", 16), ("0o", 8), ("0b", 2)] {
        if let Some(rest) = unpositive.strip_prefix(prefix) {
            if rest.starts_with(['+', '-']) {
                return None;
            }
            if let Ok(n) = u128::from_str_radix(rest, radix) {
                return Some(n);
            }
        }
    }
    if unpositive.starts_with(['+', '-']) || digits_but_not_number(text) {
        return None;
    }
    unpositive.parse::<u128>().ok()
}

fn parse_negative(text: &str) -> Option<i128> {
    for (prefix, radix) in [("-0x", 16), ("-0o", 8), ("-0b", 2)] {
        if let Some(rest) = text.strip_prefix(prefix)
            && let Ok(n) = i128::from_str_radix(&format!("-{rest}"), radix)
        {
            return Some(n);
        }
    }
    if digits_but_not_number(text) {
        return None;
    }
    text.parse::<i128>().ok()
}

fn parse_float(text: &str) -> Option<Value> {
    let unpositive = match text.strip_prefix('+') {
        Some(r) if r.starts_with(['+', '-']) => return None,
        Some(r) => r,
        None => text,
    };
    // JSON has no infinities or NaN: serde_json makes them null
    if matches!(unpositive, ".inf" | ".Inf" | ".INF")
        || matches!(text, "-.inf" | "-.Inf" | "-.INF" | ".nan" | ".NaN" | ".NAN")
    {
        return Some(Value::Null);
    }
    let f: f64 = unpositive.parse().ok()?;
    f.is_finite().then(|| float_value(f))
}

fn float_value(f: f64) -> Value {
    Number::from_f64(f).map_or(Value::Null, Value::Number)
}

/// Leading zeros then digits is a string in YAML 1.2 (`0123`).
fn digits_but_not_number(text: &str) -> bool {
    let t = text.strip_prefix(['-', '+']).unwrap_or(text);
    t.len() > 1 && t.starts_with('0') && t[1..].bytes().all(|b| b.is_ascii_digit())
}

/// Parse every JSON value in `text` (whitespace-separated), within the same
/// budget as YAML (JSON has no aliases; the node, byte and depth limits
/// apply). serde_json's own recursion limit is 128; ours is lower.
pub fn parse_json_bounded(text: &str) -> Result<Vec<Value>, YamlError> {
    let budget = std::cell::RefCell::new(Budget::default());
    let over = std::cell::Cell::new(None::<YamlError>);
    let mut de = serde_json::Deserializer::from_str(text);
    let mut docs = Vec::new();
    while de.end().is_err() {
        let seed = Seed { budget: &budget, over: &over, depth: 0 };
        match seed.deserialize(&mut de) {
            Ok(v) => docs.push(v),
            Err(e) => {
                match over.take() {
                    Some(YamlError::TooDeep { limit, .. }) => {
                        return Err(YamlError::TooDeep { limit, line: e.line() as u64, column: e.column() as u64 });
                    }
                    Some(other) => return Err(other),
                    None => {}
                }
                return Err(YamlError::Syntax {
                    message: strip_position(&e.to_string()),
                    line: e.line() as u64,
                    column: e.column() as u64,
                });
            }
        }
    }
    Ok(docs)
}

fn strip_position(msg: &str) -> String {
    match msg.rfind(" at line ") {
        Some(i) => msg[..i].to_string(),
        None => msg.to_string(),
    }
}

/// Builds a `Value` from JSON, charging the budget as it goes.
#[derive(Clone, Copy)]
struct Seed<'b> {
    budget: &'b std::cell::RefCell<Budget>,
    over: &'b std::cell::Cell<Option<YamlError>>,
    depth: usize,
}

impl Seed<'_> {
    fn charge<E: serde::de::Error>(&self, nodes: usize, bytes: usize) -> Result<(), E> {
        self.budget.borrow_mut().charge(nodes, bytes).map_err(|e| self.fail(e))
    }

    fn fail<E: serde::de::Error>(&self, e: YamlError) -> E {
        let msg = e.to_string();
        self.over.set(Some(e));
        E::custom(msg)
    }

    fn nested<E: serde::de::Error>(&self) -> Result<Seed<'_>, E> {
        if self.depth >= MAX_DEPTH {
            // serde_json does not say where; the error's line and column do
            return Err(self.fail(YamlError::TooDeep { limit: MAX_DEPTH, line: 0, column: 0 }));
        }
        Ok(Seed { depth: self.depth + 1, ..*self })
    }
}

impl<'de> DeserializeSeed<'de> for Seed<'_> {
    type Value = Value;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Seed<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Value, E> {
        self.charge(1, 0)?;
        Ok(Value::Null)
    }

    fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Value, E> {
        self.charge(1, 0)?;
        Ok(Value::Bool(v))
    }

    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Value, E> {
        self.charge(1, 0)?;
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Value, E> {
        self.charge(1, 0)?;
        Ok(Value::Number(v.into()))
    }

    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Value, E> {
        self.charge(1, 0)?;
        Ok(float_value(v))
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Value, E> {
        self.charge(1, v.len())?;
        Ok(Value::String(v.to_string()))
    }

    fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Value, E> {
        self.charge(1, v.len())?;
        Ok(Value::String(v))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        self.charge(1, 0)?;
        let inner = self.nested()?;
        let mut items = Vec::new();
        while let Some(v) = seq.next_element_seed(inner)? {
            items.push(v);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Value, A::Error> {
        self.charge(1, 0)?;
        let inner = self.nested()?;
        let mut map = Map::new();
        while let Some(k) = access.next_key::<String>()? {
            self.charge(1, k.len())?;
            if map.contains_key(&k) {
                return Err(serde::de::Error::custom(format!("duplicate key {k:?}")));
            }
            let v = access.next_value_seed(inner)?;
            map.insert(k, v);
        }
        Ok(Value::Object(map))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn one(text: &str) -> Value {
        let mut d = parse_bounded(text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
        assert_eq!(d.len(), 1, "{text:?}");
        d.pop().unwrap()
    }

    #[test]
    fn scalars_resolve_as_serde_yaml_ng_does() {
        let cases = [
            "a",
            "1",
            "-1",
            "+7",
            "0x1f",
            "0o17",
            "0b101",
            "0123",
            "-0123",
            "1.5",
            "-2e3",
            ".inf",
            ".nan",
            "~",
            "null",
            "",
            "true",
            "False",
            "yes",
            "no",
            "on",
            "1_000",
            "18446744073709551615",
            "18446744073709551616",
            "-9223372036854775808",
            "-9223372036854775809",
            "'1'",
            "\"true\"",
            "!!str 1",
            "!!int 12",
            "!!float 1",
            "!!bool true",
            "!!null ~",
            "1:2",
            "0x",
            "+-1",
            "- 1",
            "[1, 2]",
            "{a: 1}",
            "007",
            "1e400",
            "0.",
        ];
        for c in cases {
            let text = format!("v: {c}\n");
            let ours = parse_bounded(&text).map(|mut d| d.pop().unwrap());
            let theirs: Result<Value, _> = serde_yaml_ng::from_str(&text);
            match (ours, theirs) {
                (Ok(a), Ok(b)) => assert_eq!(a, b, "{c:?}"),
                (Err(_), Err(_)) => {}
                (a, b) => panic!("{c:?}: ours {a:?}, serde_yaml_ng {b:?}"),
            }
        }
    }

    #[test]
    fn documents_and_structure() {
        assert_eq!(one("a: [1, {b: c}]\nd: |\n  x\n"), json!({"a": [1, {"b": "c"}], "d": "x\n"}));
        let docs = parse_bounded("a: 1\n---\n---\nb: 2\n").unwrap();
        assert_eq!(docs, vec![json!({"a": 1}), Value::Null, json!({"b": 2})]);
        assert!(parse_bounded("").unwrap().is_empty());
        assert_eq!(one("a: &x [1, 2]\nb: *x\n"), json!({"a": [1, 2], "b": [1, 2]}));
        assert_eq!(one("a: &k key\n*k : w\n"), json!({"a": "key", "key": "w"}));
    }

    #[test]
    fn errors_name_the_problem() {
        let e = parse_bounded("a: 1\na: 2\n").unwrap_err();
        assert_eq!(e.to_string(), "duplicate key \"a\" at line 2 column 1");
        let e = parse_bounded("a: *nope\n").unwrap_err();
        assert_eq!(e.to_string(), "unknown anchor *nope at line 1 column 4");
        let e = parse_bounded("? [a]\n: 1\n").unwrap_err();
        assert!(e.to_string().starts_with("mapping keys must be scalars"), "{e}");
        let e = parse_bounded("a: !custom x\n").unwrap_err();
        assert!(e.to_string().starts_with("unsupported tag !custom"), "{e}");
        let e = parse_bounded("a: [b\n").unwrap_err();
        assert!(matches!(e, YamlError::Syntax { .. }), "{e}");
        let e = parse_bounded("a: !!int x\n").unwrap_err();
        assert!(e.to_string().starts_with("\"x\" is not an integer (tag !!int)"), "{e}");
    }

    #[test]
    fn depth_is_bounded_before_the_document_is_read() {
        let ok = format!("{}{}", "[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH));
        assert!(parse_bounded(&ok).is_ok());
        let deep = format!("{}{}", "[".repeat(MAX_DEPTH + 1), "]".repeat(MAX_DEPTH + 1));
        assert_eq!(
            parse_bounded(&deep).unwrap_err(),
            YamlError::TooDeep { limit: MAX_DEPTH, line: 1, column: MAX_DEPTH as u64 + 1 }
        );
        // 80,000 deep under a key: libyaml alone takes seconds for the
        // whole of it; the budget stops at level 101
        let t = std::time::Instant::now();
        let bomb = format!("a: {}{}", "[".repeat(80_000), "]".repeat(80_000));
        assert!(matches!(parse_bounded(&bomb), Err(YamlError::TooDeep { .. })));
        let blocks = format!("{}x\n", "- ".repeat(200_000));
        assert!(matches!(parse_bounded(&blocks), Err(YamlError::TooDeep { .. })));
        assert!(t.elapsed() < std::time::Duration::from_secs(1), "{:?}", t.elapsed());
        // an alias deepens what holds it
        let half = MAX_DEPTH / 2 + 1;
        let aliased =
            format!("a: &x {}{}\nb: {}*x{}\n", "[".repeat(half), "]".repeat(half), "[".repeat(half), "]".repeat(half));
        assert!(matches!(parse_bounded(&aliased), Err(YamlError::TooDeep { .. })));
    }

    #[test]
    fn aliases_are_charged_before_they_are_copied() {
        let mut bomb = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..10 {
            bomb.push_str(&format!("a{i}: &a{i} [{}]\n", vec![format!("*a{}", i - 1); 10].join(", ")));
        }
        let e = parse_bounded(&bomb).unwrap_err();
        assert_eq!(e.to_string(), format!("alias expansion exceeds {MAX_NODES} nodes"));
        let big = "x".repeat(600 * 1024);
        let bytes = format!("a: &s {big}\nb: [*s, *s, *s]\n");
        assert_eq!(
            parse_bounded(&bytes).unwrap_err().to_string(),
            format!("alias expansion exceeds {MAX_SCALAR_BYTES} bytes of scalars")
        );
        let flat = format!("[{}0]", "0,".repeat(MAX_NODES));
        assert_eq!(parse_bounded(&flat).unwrap_err().to_string(), format!("document exceeds {MAX_NODES} nodes"));
    }

    #[test]
    fn json_is_bounded_too() {
        assert_eq!(
            parse_json_bounded(r#"{"a": [1, 2.5, null, true, "s"]}"#).unwrap(),
            vec![json!({"a": [1, 2.5, null, true, "s"]})]
        );
        assert_eq!(parse_json_bounded("{} {}").unwrap().len(), 2);
        assert!(parse_json_bounded("  \n").unwrap().is_empty());
        let deep = format!("{}{}", "[".repeat(MAX_DEPTH + 1), "]".repeat(MAX_DEPTH + 1));
        assert!(matches!(parse_json_bounded(&deep), Err(YamlError::TooDeep { .. })));
        let very = "[".repeat(500_000);
        assert!(matches!(parse_json_bounded(&very), Err(YamlError::TooDeep { .. })));
        let flat = format!("[{}0]", "0,".repeat(MAX_NODES));
        assert_eq!(parse_json_bounded(&flat).unwrap_err().to_string(), format!("document exceeds {MAX_NODES} nodes"));
        let e = parse_json_bounded(r#"{"a": 1, "a": 2}"#).unwrap_err();
        assert_eq!(e.to_string(), "duplicate key \"a\" at line 1 column 12");
        let e = parse_json_bounded("{\"a\": }").unwrap_err();
        assert_eq!(e.to_string(), "expected value at line 1 column 7");
    }
}
