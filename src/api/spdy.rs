//! SPDY/3.1 frames, as much as the client end of one exec or attach
//! session to the runtime's streaming server needs (`api::websocket`
//! translates a WebSocket `v5.channel.k8s.io` client to it, as the API
//! server's stream translator does).
//!
//! A frame is 8 bytes of header and a payload. Control frames: the C bit,
//! version (3) and type in the first word, flags and a 24-bit length in the
//! second. Data frames: the stream id (C bit clear), flags (`FIN`), length.
//! Header blocks (SYN_STREAM, SYN_REPLY, HEADERS) are zlib streams, one per
//! direction and connection, flushed (`Z_SYNC_FLUSH`) at the end of every
//! block. The runtime (containerd: moby/spdystream with Go's zlib) reads a
//! zlib stream without the `FDICT` flag as well as one with the SPDY
//! dictionary, so [`Encoder`] compresses without it (flate2's Rust backend
//! has no preset dictionary); the runtime's own header blocks are never
//! read here: [`Decoder`] hands their frames over whole and podwarden looks
//! only at the stream id and flags. spdystream has no flow control, so no
//! `WINDOW_UPDATE` is needed either way.

use std::io;

use flate2::{Compress, Compression, FlushCompress};

/// The protocol version in every control frame.
pub const VERSION: u16 = 3;
pub const SYN_STREAM: u16 = 1;
pub const SYN_REPLY: u16 = 2;
pub const RST_STREAM: u16 = 3;
pub const SETTINGS: u16 = 4;
pub const PING: u16 = 6;
pub const GOAWAY: u16 = 7;
pub const HEADERS: u16 = 8;
pub const WINDOW_UPDATE: u16 = 9;
/// The last frame of a stream from this side (data, SYN_STREAM, SYN_REPLY).
pub const FLAG_FIN: u8 = 0x01;
/// RST_STREAM's status for a stream given up (`CANCEL`).
pub const CANCEL: u32 = 5;
/// The largest control frame read (whole): SYN_REPLY's header block is a
/// few bytes, a SETTINGS frame a few entries.
pub const MAX_CONTROL: usize = 16 << 10;
/// The largest frame payload the format allows (24 bits).
pub const MAX_LENGTH: usize = (1 << 24) - 1;

fn invalid(what: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what)
}

/// What [`Decoder::next`] found at the start of the bytes it was given.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame<'a> {
    /// A piece of a data frame's payload, passed on as it arrives (a frame
    /// may come in several pieces; an empty piece means nothing); `fin` on
    /// the piece that ends a frame flagged `FIN`.
    Data { stream: u32, data: &'a [u8], fin: bool },
    /// A whole control frame: its type, flags and payload.
    Control { kind: u16, flags: u8, body: &'a [u8] },
}

impl Frame<'_> {
    /// The stream a SYN_REPLY, RST_STREAM or HEADERS frame is about (its
    /// payload's first word), or a PING's id.
    pub fn first_word(&self) -> Option<u32> {
        match self {
            Frame::Control { body, .. } if body.len() >= 4 => {
                Some(u32::from_be_bytes([body[0], body[1], body[2], body[3]]) & 0x7fff_ffff)
            }
            _ => None,
        }
    }
}

/// Reads frames from a byte stream the caller buffers: a data frame's
/// payload piece by piece (bounded by the caller's buffer), a control frame
/// whole (at most [`MAX_CONTROL`]).
#[derive(Debug, Default)]
pub struct Decoder {
    /// Inside a data frame: its stream, the payload bytes still to come,
    /// its `FIN`.
    data: Option<(u32, usize, bool)>,
}

impl Decoder {
    pub fn new() -> Self {
        Decoder::default()
    }

    /// The frame (or data piece) at the start of `buf` and the bytes it
    /// took; `None` when `buf` does not hold one yet. A control frame of
    /// another version or over [`MAX_CONTROL`] is an error.
    pub fn next<'a>(&mut self, buf: &'a [u8]) -> io::Result<Option<(Frame<'a>, usize)>> {
        if let Some((stream, left, fin)) = self.data {
            if buf.is_empty() {
                return Ok(None);
            }
            let n = left.min(buf.len());
            self.data = (n < left).then_some((stream, left - n, fin));
            return Ok(Some((Frame::Data { stream, data: &buf[..n], fin: fin && n == left }, n)));
        }
        if buf.len() < 8 {
            return Ok(None);
        }
        let word = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]);
        let flags = buf[4];
        let len = u32::from_be_bytes([0, buf[5], buf[6], buf[7]]) as usize;
        if word & 0x8000_0000 == 0 {
            let stream = word;
            let fin = flags & FLAG_FIN != 0;
            let n = len.min(buf.len() - 8);
            self.data = (n < len).then_some((stream, len - n, fin));
            return Ok(Some((Frame::Data { stream, data: &buf[8..8 + n], fin: fin && n == len }, 8 + n)));
        }
        let version = (word >> 16) as u16 & 0x7fff;
        if version != VERSION {
            return Err(invalid(format!("a SPDY control frame of version {version} (not 3)")));
        }
        if len > MAX_CONTROL {
            return Err(invalid(format!("a SPDY control frame of {len} bytes (at most {MAX_CONTROL})")));
        }
        if buf.len() < 8 + len {
            return Ok(None);
        }
        Ok(Some((Frame::Control { kind: word as u16, flags, body: &buf[8..8 + len] }, 8 + len)))
    }
}

fn control_head(out: &mut Vec<u8>, kind: u16, flags: u8, len: usize) {
    out.extend_from_slice(&(0x8000_0000 | (u32::from(VERSION) << 16) | u32::from(kind)).to_be_bytes());
    out.extend_from_slice(&((u32::from(flags) << 24) | len as u32).to_be_bytes());
}

/// Writes frames: one header compression context for the connection.
pub struct Encoder {
    zlib: Compress,
}

impl Default for Encoder {
    fn default() -> Self {
        Encoder::new()
    }
}

impl Encoder {
    pub fn new() -> Self {
        Encoder { zlib: Compress::new(Compression::default(), true) }
    }

    /// A header block: the pairs' count, then each name (lower case) and
    /// value with its length, compressed and sync-flushed.
    fn header_block(&mut self, headers: &[(&str, &str)]) -> io::Result<Vec<u8>> {
        let mut raw = Vec::new();
        raw.extend_from_slice(&(headers.len() as u32).to_be_bytes());
        for (name, value) in headers {
            let name = name.to_ascii_lowercase();
            raw.extend_from_slice(&(name.len() as u32).to_be_bytes());
            raw.extend_from_slice(name.as_bytes());
            raw.extend_from_slice(&(value.len() as u32).to_be_bytes());
            raw.extend_from_slice(value.as_bytes());
        }
        let start = self.zlib.total_in();
        let mut z = Vec::with_capacity(raw.len() + 64);
        loop {
            let done = (self.zlib.total_in() - start) as usize;
            self.zlib
                .compress_vec(&raw[done..], &mut z, FlushCompress::Sync)
                .map_err(|e| invalid(format!("compressing a SPDY header block: {e}")))?;
            // a flush that left room in the output is complete
            if (self.zlib.total_in() - start) as usize == raw.len() && z.len() < z.capacity() {
                return Ok(z);
            }
            z.reserve(256);
        }
    }

    /// SYN_STREAM: open `stream` (odd, rising) with `headers`, priority 0.
    pub fn syn_stream(&mut self, out: &mut Vec<u8>, stream: u32, headers: &[(&str, &str)]) -> io::Result<()> {
        let block = self.header_block(headers)?;
        control_head(out, SYN_STREAM, 0, 10 + block.len());
        out.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
        out.extend_from_slice(&0u32.to_be_bytes()); // associated-to stream
        out.extend_from_slice(&[0, 0]); // priority, unused, slot
        out.extend_from_slice(&block);
        Ok(())
    }
}

/// A data frame on `stream` (`data` at most [`MAX_LENGTH`] bytes; the
/// caller's chunks are far smaller), `fin` ending this side of it.
pub fn data(out: &mut Vec<u8>, stream: u32, data: &[u8], fin: bool) {
    debug_assert!(data.len() <= MAX_LENGTH);
    out.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
    out.extend_from_slice(&((u32::from(if fin { FLAG_FIN } else { 0 }) << 24) | data.len() as u32).to_be_bytes());
    out.extend_from_slice(data);
}

/// PING with `id` (the answer to the server's even ids is the same frame).
pub fn ping(out: &mut Vec<u8>, id: u32) {
    control_head(out, PING, 0, 4);
    out.extend_from_slice(&id.to_be_bytes());
}

/// RST_STREAM: `stream` given up with `status`.
pub fn rst_stream(out: &mut Vec<u8>, stream: u32, status: u32) {
    control_head(out, RST_STREAM, 0, 8);
    out.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
    out.extend_from_slice(&status.to_be_bytes());
}

/// GOAWAY: no stream opened by the server was accepted (the client side's
/// last good stream id is 0), status OK.
pub fn goaway(out: &mut Vec<u8>) {
    control_head(out, GOAWAY, 0, 8);
    out.extend_from_slice(&0u32.to_be_bytes());
    out.extend_from_slice(&0u32.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use flate2::{Decompress, FlushDecompress};

    /// Every frame in `bytes`, data frames' pieces joined (as owned values).
    fn frames(bytes: &[u8], step: usize) -> Vec<(u16, u8, u32, Vec<u8>)> {
        let mut d = Decoder::new();
        let mut out: Vec<(u16, u8, u32, Vec<u8>)> = Vec::new();
        let (mut buf, mut fed) = (Vec::new(), 0);
        let mut open_data = false;
        loop {
            while let Some((f, n)) = d.next(&buf).unwrap() {
                match f {
                    Frame::Data { stream, data, fin } => {
                        if !open_data {
                            out.push((0, 0, stream, Vec::new()));
                        }
                        let last = out.last_mut().unwrap();
                        last.3.extend_from_slice(data);
                        open_data = d.data.is_some();
                        if fin {
                            last.1 = FLAG_FIN;
                        }
                    }
                    Frame::Control { kind, flags, body } => {
                        let id = f.first_word().unwrap_or(0);
                        out.push((kind, flags, id, body.to_vec()));
                    }
                }
                buf.drain(..n);
            }
            if fed == bytes.len() {
                return out;
            }
            let n = step.min(bytes.len() - fed);
            buf.extend_from_slice(&bytes[fed..fed + n]);
            fed += n;
        }
    }

    #[test]
    fn frames_are_read_whatever_the_pieces_they_arrive_in() {
        let mut e = Encoder::new();
        let mut wire = Vec::new();
        e.syn_stream(&mut wire, 1, &[("streamtype", "error")]).unwrap();
        data(&mut wire, 3, b"hello", false);
        data(&mut wire, 3, b"", true);
        ping(&mut wire, 2);
        rst_stream(&mut wire, 5, CANCEL);
        let big: Vec<u8> = (0..70_000u32).map(|i| i as u8).collect();
        data(&mut wire, 7, &big, true);
        goaway(&mut wire);
        for step in [1, 3, 8, 4096, wire.len()] {
            let got = frames(&wire, step);
            let kinds: Vec<(u16, u8, u32)> = got.iter().map(|f| (f.0, f.1, f.2)).collect();
            assert_eq!(
                kinds,
                [
                    (SYN_STREAM, 0, 1),
                    (0, 0, 3),
                    (0, FLAG_FIN, 3),
                    (PING, 0, 2),
                    (RST_STREAM, 0, 5),
                    (0, FLAG_FIN, 7),
                    (GOAWAY, 0, 0)
                ],
                "in pieces of {step}"
            );
            assert_eq!(got[1].3, b"hello");
            assert_eq!(got[4].3, [0, 0, 0, 5, 0, 0, 0, CANCEL as u8]);
            assert!(got[5].3 == big, "a data frame larger than a read, in pieces of {step}");
        }
    }

    #[test]
    fn the_wire_format_is_spdy_3() {
        let mut out = Vec::new();
        data(&mut out, 3, b"ab", true);
        assert_eq!(out, [0, 0, 0, 3, 1, 0, 0, 2, b'a', b'b']);
        out.clear();
        ping(&mut out, 7);
        assert_eq!(out, [0x80, 3, 0, 6, 0, 0, 0, 4, 0, 0, 0, 7]);
        out.clear();
        rst_stream(&mut out, 9, CANCEL);
        assert_eq!(out, [0x80, 3, 0, 3, 0, 0, 0, 8, 0, 0, 0, 9, 0, 0, 0, 5]);
        // another version, an oversized control frame: refused
        let mut d = Decoder::new();
        assert!(d.next(&[0x80, 2, 0, 6, 0, 0, 0, 4, 0, 0, 0, 1]).is_err());
        assert!(d.next(&[0x80, 3, 0, 2, 0, 1, 0, 0]).is_err());
        // a control frame waits for its whole payload
        assert_eq!(d.next(&[0x80, 3, 0, 6, 0, 0, 0, 4, 0, 0]).unwrap(), None);
    }

    /// The header blocks are one zlib stream (no preset dictionary),
    /// each block readable as soon as its frame arrived, as Go's
    /// `zlib.NewReaderDict` reads them.
    #[test]
    fn header_blocks_are_one_flushed_zlib_stream() {
        let mut e = Encoder::new();
        let mut wire = Vec::new();
        e.syn_stream(&mut wire, 1, &[("Streamtype", "error")]).unwrap();
        let first = wire.len();
        e.syn_stream(&mut wire, 3, &[("streamtype", "stdin")]).unwrap();
        // the zlib header: deflate, FCHECK right, no FDICT
        let block1 = &wire[18..first];
        assert_eq!(block1[0] & 0x0f, 8);
        assert_eq!(u16::from_be_bytes([block1[0], block1[1]]) % 31, 0);
        assert_eq!(block1[1] & 0x20, 0, "no preset dictionary");
        assert_eq!(u32::from_be_bytes([0, wire[5], wire[6], wire[7]]) as usize, first - 8);
        let mut z = Decompress::new(true);
        let mut plain = Vec::with_capacity(256);
        z.decompress_vec(block1, &mut plain, FlushDecompress::Sync).unwrap();
        assert_eq!(z.total_in() as usize, block1.len(), "the whole block is consumed");
        let want = |n: &str, v: &str| {
            let mut b = 1u32.to_be_bytes().to_vec();
            b.extend_from_slice(&(n.len() as u32).to_be_bytes());
            b.extend_from_slice(n.as_bytes());
            b.extend_from_slice(&(v.len() as u32).to_be_bytes());
            b.extend_from_slice(v.as_bytes());
            b
        };
        assert_eq!(plain, want("streamtype", "error"), "names in lower case");
        let block2 = &wire[first + 18..];
        plain.clear();
        z.decompress_vec(block2, &mut plain, FlushDecompress::Sync).unwrap();
        assert_eq!(plain, want("streamtype", "stdin"));
        assert_eq!(u32::from_be_bytes(wire[first + 8..first + 12].try_into().unwrap()), 3);
    }
}
