//! libyaml's event parser (the `unsafe-libyaml` translation serde_yaml_ng
//! uses) as a safe reader: [`Parser::next`] pulls one event at a time and
//! copies it out, so nothing of libyaml's memory is visible outside this
//! file. The budgets and the value building are `model::yaml`'s.

use std::mem::MaybeUninit;

/// One event, copied out of libyaml.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    StreamEnd,
    DocumentStart,
    DocumentEnd,
    /// An alias (`*name`), by anchor name.
    Alias(Vec<u8>),
    Scalar {
        anchor: Option<Vec<u8>>,
        tag: Option<Vec<u8>>,
        value: Vec<u8>,
        /// A plain (unquoted, not block) scalar.
        plain: bool,
    },
    SequenceStart {
        anchor: Option<Vec<u8>>,
        tag: Option<Vec<u8>>,
    },
    SequenceEnd,
    MappingStart {
        anchor: Option<Vec<u8>>,
        tag: Option<Vec<u8>>,
    },
    MappingEnd,
    /// `StreamStart` and anything else podwarden has no use for.
    Other,
}

/// Where a parse failed, as libyaml reports it (0-based).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorAt {
    /// The reader (encoding) failed at this byte offset of the input.
    Offset(u64),
    /// The scanner or parser failed at this line and column.
    Mark { line: u64, column: u64 },
}

/// libyaml's own description of a failed parse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    pub problem: Option<String>,
    pub context: Option<String>,
    pub at: ErrorAt,
}

/// libyaml's parser over `input` (UTF-8), heap-pinned (it points to itself)
/// and freed on drop. It reads only `input`, which outlives it.
pub struct Parser<'a> {
    sys: Box<MaybeUninit<unsafe_libyaml::yaml_parser_t>>,
    /// The stream's end was returned (libyaml then only returns empty
    /// events).
    ended: bool,
    _input: std::marker::PhantomData<&'a [u8]>,
}

/// A NUL-terminated string from libyaml, copied.
///
/// # Safety
/// `p` is null or points to a NUL-terminated string that stays valid for the
/// call.
unsafe fn c_bytes(p: *const u8) -> Option<Vec<u8>> {
    if p.is_null() {
        return None;
    }
    // SAFETY: non-null and NUL-terminated (the caller's contract).
    Some(unsafe { std::ffi::CStr::from_ptr(p.cast()) }.to_bytes().to_vec())
}

impl<'a> Parser<'a> {
    pub fn new(input: &'a [u8]) -> Parser<'a> {
        let mut sys = Box::new(MaybeUninit::<unsafe_libyaml::yaml_parser_t>::uninit());
        let p = sys.as_mut_ptr();
        // SAFETY: `p` points to heap memory for a parser that never moves
        // (the Box is only dropped after yaml_parser_delete); it is
        // initialized here before any other use. The input pointer is
        // non-null (a slice's pointer always is) and valid for `input.len()`
        // bytes for 'a, which the parser's lifetime is tied to.
        unsafe {
            if unsafe_libyaml::yaml_parser_initialize(p).fail {
                // only on allocation failure, which aborts anyway
                panic!("libyaml: cannot initialize a parser");
            }
            unsafe_libyaml::yaml_parser_set_encoding(p, unsafe_libyaml::YAML_UTF8_ENCODING);
            unsafe_libyaml::yaml_parser_set_input_string(p, input.as_ptr(), input.len() as u64);
        }
        Parser { sys, ended: false, _input: std::marker::PhantomData }
    }

    /// The parser, initialized in `new`.
    fn get(&self) -> &unsafe_libyaml::yaml_parser_t {
        // SAFETY: `new` initialized it (or panicked before a Parser existed).
        unsafe { self.sys.assume_init_ref() }
    }

    fn error(&self) -> ParseError {
        let p = self.get();
        let text = |s: *const libc::c_char| {
            // SAFETY: libyaml sets problem and context to null or to static
            // NUL-terminated strings.
            unsafe { c_bytes(s.cast()) }.map(|b| String::from_utf8_lossy(&b).into_owned())
        };
        let at = if p.error == unsafe_libyaml::YAML_READER_ERROR {
            // the reader says where by byte offset, not by mark
            ErrorAt::Offset(p.problem_offset)
        } else {
            ErrorAt::Mark { line: p.problem_mark.line, column: p.problem_mark.column }
        };
        ParseError { problem: text(p.problem), context: text(p.context), at }
    }

    /// The next event and where it starts (0-based line and column). After
    /// an error every call returns that error again; after the stream's end,
    /// [`Event::StreamEnd`] again.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Result<(Event, u64, u64), ParseError> {
        if self.get().error != unsafe_libyaml::YAML_NO_ERROR {
            return Err(self.error());
        }
        if self.ended {
            return Ok((Event::StreamEnd, 0, 0));
        }
        let mut ev = MaybeUninit::<unsafe_libyaml::yaml_event_t>::uninit();
        let e = ev.as_mut_ptr();
        // SAFETY: the parser is initialized and `e` is writable memory for
        // one event; yaml_parser_parse zeroes it first and fills it on
        // success.
        if unsafe { unsafe_libyaml::yaml_parser_parse(self.sys.as_mut_ptr(), e) }.fail {
            return Err(self.error());
        }
        // SAFETY: the parse succeeded, so the event is initialized; each
        // arm reads only the union member its type says is set; the strings
        // are null or NUL-terminated and the scalar's value holds `length`
        // bytes, all owned by the event until yaml_event_delete, which runs
        // exactly once after everything was copied.
        unsafe {
            let d = &(*e).data;
            let out = match (*e).type_ {
                unsafe_libyaml::YAML_STREAM_END_EVENT => Event::StreamEnd,
                unsafe_libyaml::YAML_DOCUMENT_START_EVENT => Event::DocumentStart,
                unsafe_libyaml::YAML_DOCUMENT_END_EVENT => Event::DocumentEnd,
                unsafe_libyaml::YAML_ALIAS_EVENT => Event::Alias(c_bytes(d.alias.anchor).unwrap_or_default()),
                unsafe_libyaml::YAML_SCALAR_EVENT => Event::Scalar {
                    anchor: c_bytes(d.scalar.anchor),
                    tag: c_bytes(d.scalar.tag),
                    value: if d.scalar.length == 0 || d.scalar.value.is_null() {
                        Vec::new()
                    } else {
                        std::slice::from_raw_parts(d.scalar.value, d.scalar.length as usize).to_vec()
                    },
                    plain: d.scalar.style == unsafe_libyaml::YAML_PLAIN_SCALAR_STYLE,
                },
                unsafe_libyaml::YAML_SEQUENCE_START_EVENT => Event::SequenceStart {
                    anchor: c_bytes(d.sequence_start.anchor),
                    tag: c_bytes(d.sequence_start.tag),
                },
                unsafe_libyaml::YAML_SEQUENCE_END_EVENT => Event::SequenceEnd,
                unsafe_libyaml::YAML_MAPPING_START_EVENT => {
                    Event::MappingStart { anchor: c_bytes(d.mapping_start.anchor), tag: c_bytes(d.mapping_start.tag) }
                }
                unsafe_libyaml::YAML_MAPPING_END_EVENT => Event::MappingEnd,
                _ => Event::Other,
            };
            let mark = (*e).start_mark;
            unsafe_libyaml::yaml_event_delete(e);
            self.ended = out == Event::StreamEnd;
            Ok((out, mark.line, mark.column))
        }
    }
}

impl Drop for Parser<'_> {
    fn drop(&mut self) {
        // SAFETY: initialized in `new`, deleted once here; the Box is freed
        // only after this.
        unsafe { unsafe_libyaml::yaml_parser_delete(self.sys.as_mut_ptr()) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_errors_and_calls_past_the_end() {
        let mut p = Parser::new(b"a: &x [1]\n");
        let mut got = Vec::new();
        loop {
            let (e, ..) = p.next().unwrap();
            let end = e == Event::StreamEnd;
            got.push(e);
            if end {
                break;
            }
        }
        assert!(got.contains(&Event::SequenceStart { anchor: Some(b"x".to_vec()), tag: None }));
        assert!(got.contains(&Event::Scalar { anchor: None, tag: None, value: b"1".to_vec(), plain: true }));
        assert_eq!(p.next().unwrap().0, Event::StreamEnd);
        let mut bad = Parser::new(b"a: [b\n");
        let e = loop {
            match bad.next() {
                Ok((Event::StreamEnd, ..)) => panic!("no error"),
                Ok(_) => {}
                Err(e) => break e,
            }
        };
        assert!(matches!(e.at, ErrorAt::Mark { .. }) && e.problem.is_some(), "{e:?}");
        assert_eq!(bad.next().unwrap_err(), e);
        let mut r = Parser::new(b"a: \xff\n");
        let e = std::iter::from_fn(|| Some(r.next())).take(20).find_map(Result::err).unwrap();
        assert_eq!(e.at, ErrorAt::Offset(3));
    }
}
