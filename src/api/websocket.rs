//! The WebSocket end of the stream relay, for the two WebSocket protocols
//! of client-go (kubectl 1.30+) that containerd's streaming server does not
//! speak; the API server translates both the same way (its
//! `StreamTranslatorHandler` and `TunnelingHandler`):
//!
//! - exec and attach over `v5.channel.k8s.io` ([`exec`]): podwarden is
//!   the client of a SPDY/3.1 session to the runtime (`v4.channel.k8s.io`,
//!   `api::spdy`), one stream per `streamtype` (error, stdin, stdout,
//!   stderr, resize). Each binary WebSocket message is a channel byte and
//!   data (0 stdin, 1 stdout, 2 stderr, 3 the final `Status`, 4 the
//!   terminal's size); v5 adds the client's CLOSE (255 and a channel),
//!   passed on as the stdin stream's `FIN`, so the command sees its stdin
//!   end. The runtime's error stream ending (or its GOAWAY) ends the
//!   session: the `Status` went out on channel 3, then a close frame.
//! - port-forward over `SPDY/3.1+portforward.k8s.io` ([`tunnel`]): the
//!   client speaks SPDY inside binary messages; their payloads go to a
//!   SPDY/3.1 `portforward.k8s.io` connection to the runtime as they are,
//!   and what the runtime sends comes back as binary messages.
//!
//! WebSocket framing is tungstenite's (as in the CLI's client), here on the
//! server side of a connection whose upgrade podwarden answers itself
//! ([`accept_head`]). Like the byte relay, each session runs on the
//! caller's thread: one `poll` loop, both sockets non-blocking, a bounded
//! buffer each way (a message at most [`MAX_MESSAGE`]), ended by either
//! side or by `idle` without a byte.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use tungstenite::protocol::frame::coding::CloseCode;
use tungstenite::protocol::{CloseFrame, Role, WebSocketConfig};
use tungstenite::{Message, WebSocket};

use crate::api::duplex::Duplex;
use crate::api::spdy::{self, Decoder, Encoder, Frame};
use crate::api::status::ApiError;
use crate::runtime::Streams;

/// exec and attach, translated to SPDY/3.1 for the runtime.
pub const V5: &str = "v5.channel.k8s.io";
/// port-forward's SPDY inside WebSocket, tunnelled to the runtime.
pub const SPDY_TUNNEL: &str = "SPDY/3.1+portforward.k8s.io";
/// The largest message read from a client (client-go's are a SPDY frame
/// or a 32 KiB copy buffer).
pub const MAX_MESSAGE: usize = 1 << 20;
/// Each direction's buffer (as the byte relay's).
const BUF: usize = 64 << 10;
/// How long the client has to answer the close frame.
const CLOSE_WAIT: Duration = Duration::from_secs(2);
/// CLOSE, v5's message that a stream ends: 255 and the channel.
const CLOSE: u8 = 255;

/// The answer that upgrades `req`'s connection to WebSocket with
/// `protocol`: a 400 unless it carries a `Sec-WebSocket-Key` and version 13.
pub fn accept_head(key: Option<&str>, version: Option<&str>, protocol: &str) -> Result<Vec<u8>, ApiError> {
    let key = key
        .map(str::trim)
        .filter(|k| !k.is_empty())
        .ok_or_else(|| ApiError::bad_request("a WebSocket upgrade needs a Sec-WebSocket-Key header"))?;
    if version.map(str::trim) != Some("13") {
        return Err(ApiError::bad_request("a WebSocket upgrade needs Sec-WebSocket-Version: 13"));
    }
    let accept = tungstenite::handshake::derive_accept_key(key.as_bytes());
    Ok(format!(
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Accept: {accept}\r\nSec-WebSocket-Protocol: {protocol}\r\n\r\n"
    )
    .into_bytes())
}

fn ws_error(e: tungstenite::Error) -> io::Error {
    match e {
        tungstenite::Error::Io(e) => e,
        e => io::Error::new(io::ErrorKind::InvalidData, format!("WebSocket: {e}")),
    }
}

/// The client's end: a server-side WebSocket over the upgraded
/// connection, non-blocking.
struct Client<'a> {
    ws: WebSocket<&'a mut dyn Duplex>,
    /// A message is queued that the socket did not take yet: nothing more
    /// is queued until it is through.
    blocked: bool,
    /// The client closed (a close frame, its socket's end).
    closed: bool,
}

impl<'a> Client<'a> {
    /// `early`: bytes the client sent after its request head.
    fn new(conn: &'a mut dyn Duplex, early: Vec<u8>) -> Self {
        let config = WebSocketConfig::default()
            .read_buffer_size(16 << 10)
            .write_buffer_size(0)
            .max_message_size(Some(MAX_MESSAGE))
            .max_frame_size(Some(MAX_MESSAGE));
        Client {
            ws: WebSocket::from_partially_read(conn, early, Role::Server, Some(config)),
            blocked: false,
            closed: false,
        }
    }

    fn fd(&self) -> i32 {
        self.ws.get_ref().fd()
    }

    fn outcome(&mut self, r: tungstenite::Result<()>) -> io::Result<()> {
        match r {
            Ok(()) => {
                self.blocked = false;
                Ok(())
            }
            Err(tungstenite::Error::Io(e)) if e.kind() == io::ErrorKind::WouldBlock => {
                self.blocked = true;
                Ok(())
            }
            Err(tungstenite::Error::ConnectionClosed | tungstenite::Error::AlreadyClosed) => {
                self.closed = true;
                Ok(())
            }
            Err(e) => Err(ws_error(e)),
        }
    }

    /// Queue one binary message and write what the socket takes.
    fn send(&mut self, msg: Vec<u8>) -> io::Result<()> {
        let r = self.ws.write(Message::binary(msg));
        let r = match r {
            Ok(()) => self.ws.flush(),
            e => e,
        };
        self.outcome(r)
    }

    /// Write what is queued; whether anything was waiting.
    fn flush(&mut self) -> io::Result<bool> {
        let was = self.blocked;
        let r = self.ws.flush();
        self.outcome(r)?;
        Ok(was && !self.blocked)
    }

    /// The next data message (binary, or text as its bytes); `None` when
    /// none is complete yet or the client closed ([`Client::closed`]).
    /// Pings are answered by tungstenite.
    fn recv(&mut self) -> io::Result<Option<tungstenite::Bytes>> {
        if self.closed {
            return Ok(None);
        }
        loop {
            match self.ws.read() {
                Ok(Message::Binary(b)) => return Ok(Some(b)),
                Ok(Message::Close(_)) => {
                    self.closed = true;
                    // tungstenite queued the answer: one try to send it
                    let _ = self.ws.flush();
                    return Ok(None);
                }
                // Python's client sends a str as text (the API server
                // takes its bytes too)
                Ok(Message::Text(t)) => return Ok(Some(t.into())),
                Ok(_) => {}
                Err(tungstenite::Error::Io(e)) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
                Err(
                    tungstenite::Error::ConnectionClosed
                    | tungstenite::Error::AlreadyClosed
                    | tungstenite::Error::Protocol(tungstenite::error::ProtocolError::ResetWithoutClosingHandshake),
                ) => {
                    self.closed = true;
                    return Ok(None);
                }
                Err(tungstenite::Error::Io(e))
                    if matches!(e.kind(), io::ErrorKind::ConnectionReset | io::ErrorKind::UnexpectedEof) =>
                {
                    self.closed = true;
                    return Ok(None);
                }
                Err(e) => return Err(ws_error(e)),
            }
        }
    }

    /// End the session: a close frame (normal closure), then the client's
    /// answer awaited for at most [`CLOSE_WAIT`] (what is still queued goes
    /// out first).
    fn close(mut self) {
        if self.closed {
            return;
        }
        let _ = self.ws.close(Some(CloseFrame { code: CloseCode::Normal, reason: "".into() }));
        let end = Instant::now() + CLOSE_WAIT;
        while Instant::now() < end {
            match self.ws.read() {
                Ok(_) => {}
                Err(tungstenite::Error::Io(e)) if e.kind() == io::ErrorKind::WouldBlock => {
                    let _ = self.ws.flush();
                    let mut fds = [libc::pollfd { fd: self.fd(), events: libc::POLLIN, revents: 0 }];
                    let _ = crate::sys::poll(&mut fds, 100);
                }
                Err(_) => return,
            }
        }
    }
}

/// Bytes on their way to the runtime.
struct Out {
    buf: Vec<u8>,
    start: usize,
}

impl Out {
    fn new() -> Self {
        Out { buf: Vec::with_capacity(BUF), start: 0 }
    }
    fn pending(&self) -> bool {
        self.start < self.buf.len()
    }
    fn room(&self) -> bool {
        self.buf.len() - self.start < BUF
    }
    /// Write what the runtime takes.
    fn drain(&mut self, to: &mut TcpStream) -> io::Result<bool> {
        let mut moved = false;
        while self.pending() {
            match to.write(&self.buf[self.start..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    self.start += n;
                    moved = true;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        if !self.pending() {
            self.buf.clear();
            self.start = 0;
        }
        Ok(moved)
    }
}

/// One read from the runtime into `buf` past `end`: `None` at its end.
fn read_some(from: &mut TcpStream, buf: &mut [u8]) -> io::Result<Option<usize>> {
    loop {
        return match from.read(buf) {
            Ok(0) => Ok(None),
            Ok(n) => Ok(Some(n)),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(Some(0)),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => Ok(None),
            Err(e) => Err(e),
        };
    }
}

/// Wait until either socket may move what is waiting, or `idle` passed
/// since `last` (an error then).
fn wait(
    client: &Client,
    want_client: bool,
    runtime: &TcpStream,
    (read_runtime, write_runtime): (bool, bool),
    last: Instant,
    idle: Duration,
) -> io::Result<()> {
    let left = idle.saturating_sub(last.elapsed());
    if left.is_zero() {
        return Err(io::Error::new(io::ErrorKind::TimedOut, format!("no byte either way for {idle:?}")));
    }
    let ev = |read: bool, write: bool| (if read { libc::POLLIN } else { 0 }) | (if write { libc::POLLOUT } else { 0 });
    let mut fds = [
        libc::pollfd { fd: client.fd(), events: ev(want_client, client.blocked), revents: 0 },
        libc::pollfd { fd: runtime.as_raw_fd(), events: ev(read_runtime, write_runtime), revents: 0 },
    ];
    let ms = left.as_millis().min(60_000) as libc::c_int;
    match crate::sys::poll(&mut fds, ms) {
        Err(e) if e.kind() != io::ErrorKind::Interrupted => Err(e),
        _ => Ok(()),
    }
}

/// port-forward's tunnel: the client's binary messages to the runtime's
/// SPDY connection (`runtime`, upgraded, non-blocking; `first`: what came
/// after its answer) as they are, the runtime's bytes back as binary
/// messages, until either side ends or nothing moved for `idle`.
pub fn tunnel(
    conn: &mut dyn Duplex,
    early: Vec<u8>,
    runtime: &mut TcpStream,
    first: &[u8],
    idle: Duration,
) -> io::Result<()> {
    let mut client = Client::new(conn, early);
    let mut up = Out::new();
    let mut chunk = vec![0u8; BUF];
    if !first.is_empty() {
        client.send(first.to_vec())?;
    }
    let (mut runtime_done, mut last) = (false, Instant::now());
    loop {
        let mut moved = client.flush()?;
        while up.room() {
            match client.recv()? {
                Some(b) => {
                    up.buf.extend_from_slice(&b);
                    moved = true;
                }
                None => break,
            }
        }
        moved |= up.drain(runtime)?;
        while !client.blocked && !runtime_done && !client.closed {
            match read_some(runtime, &mut chunk)? {
                None => runtime_done = true,
                Some(0) => break,
                Some(n) => {
                    client.send(chunk[..n].to_vec())?;
                    moved = true;
                }
            }
        }
        if client.closed {
            return Ok(());
        }
        if runtime_done && !client.blocked {
            client.close();
            return Ok(());
        }
        if moved {
            last = Instant::now();
            continue;
        }
        wait(&client, up.room(), runtime, (!client.blocked && !runtime_done, up.pending()), last, idle)?;
    }
}

/// The streams of an exec or attach session, as client-go's v4 creates
/// them: (`streamtype`, channel), error first, stdin, stdout, stderr, the
/// terminal's size with a tty; stream ids 1, 3, 5, ...
fn streams_of(s: Streams) -> Vec<(&'static str, u8)> {
    let mut v = vec![("error", 3)];
    for (on, name, channel) in
        [(s.stdin, "stdin", 0), (s.stdout, "stdout", 1), (s.stderr, "stderr", 2), (s.tty, "resize", 4)]
    {
        if on {
            v.push((name, channel));
        }
    }
    v
}

/// The exec session's state on the runtime's side.
struct Session {
    /// Each channel's stream id (0: none).
    ids: [u32; 5],
    /// Streams the runtime has not answered yet (SYN_REPLY).
    unanswered: usize,
    /// The error stream's data came (the final Status).
    status: bool,
    /// The runtime ended the session: the error stream's end, GOAWAY.
    over: bool,
    /// stdin's FIN was sent.
    stdin_closed: bool,
}

impl Session {
    fn channel_of(&self, stream: u32) -> Option<u8> {
        (stream != 0).then(|| self.ids.iter().position(|&id| id == stream).map(|c| c as u8)).flatten()
    }

    /// One frame (or data piece) from the runtime: data to the client's
    /// channel, replies counted, pings answered.
    fn on_frame(&mut self, f: &Frame, client: &mut Client, up: &mut Out) -> io::Result<()> {
        match *f {
            Frame::Data { stream, data, fin } => {
                let channel = self.channel_of(stream);
                if let Some(c @ 1..=3) = channel
                    && !data.is_empty()
                {
                    let mut msg = Vec::with_capacity(data.len() + 1);
                    msg.push(c);
                    msg.extend_from_slice(data);
                    client.send(msg)?;
                    self.status |= c == 3;
                }
                if fin && channel == Some(3) {
                    self.over = true;
                }
            }
            Frame::Control { kind, flags, .. } => {
                let id = f.first_word().unwrap_or(0);
                match kind {
                    spdy::SYN_REPLY => {
                        self.unanswered = self.unanswered.saturating_sub(1);
                        self.over |= flags & spdy::FLAG_FIN != 0 && self.channel_of(id) == Some(3);
                    }
                    spdy::RST_STREAM => {
                        if self.unanswered > 0 && !self.over {
                            // refused before the session started: the client hears why
                            client.send(failure(&format!("the runtime refused stream {id} (RST_STREAM)")))?;
                            self.over = true;
                        }
                        self.over |= self.channel_of(id) == Some(3);
                    }
                    spdy::PING if id.is_multiple_of(2) => spdy::ping(&mut up.buf, id),
                    spdy::GOAWAY => self.over = true,
                    _ => {}
                }
            }
        }
        Ok(())
    }

    /// One message from the client: stdin and the terminal's size to their
    /// streams, CLOSE of stdin as its `FIN`; anything else is dropped.
    fn on_message(&mut self, msg: &[u8], up: &mut Out) {
        match msg {
            [c @ (0 | 4), data @ ..]
                if self.ids[*c as usize] != 0 && !data.is_empty() && !(*c == 0 && self.stdin_closed) =>
            {
                spdy::data(&mut up.buf, self.ids[*c as usize], data, false);
            }
            [CLOSE, 0] if self.ids[0] != 0 && !self.stdin_closed => {
                self.stdin_closed = true;
                spdy::data(&mut up.buf, self.ids[0], &[], true);
            }
            _ => {}
        }
    }
}

/// A `Status` for channel 3 when the runtime could not give one.
fn failure(message: &str) -> Vec<u8> {
    let mut msg = vec![3u8];
    msg.extend_from_slice(&ApiError::internal(message.to_string()).body());
    msg
}

/// exec or attach over v5: open `streams`' SPDY streams on `runtime`
/// (upgraded to SPDY/3.1 `v4.channel.k8s.io`, non-blocking; `first`: what
/// came after its answer), then copy both ways until the runtime ends the
/// session (its error stream or GOAWAY; then the close frame), the client
/// closes, or nothing moved for `idle`. The runtime must answer every
/// stream within `deadline`; the client's messages wait until it has (the
/// runtime drops data for a stream it has not answered).
pub fn exec(
    conn: &mut dyn Duplex,
    early: Vec<u8>,
    runtime: &mut TcpStream,
    first: &[u8],
    streams: Streams,
    deadline: Duration,
    idle: Duration,
) -> io::Result<()> {
    let mut client = Client::new(conn, early);
    let mut up = Out::new();
    let mut enc = Encoder::new();
    let mut s = Session { ids: [0; 5], unanswered: 0, status: false, over: false, stdin_closed: false };
    for (i, (name, channel)) in streams_of(streams).into_iter().enumerate() {
        let id = 1 + 2 * i as u32;
        enc.syn_stream(&mut up.buf, id, &[("streamtype", name)])?;
        s.ids[channel as usize] = id;
        s.unanswered += 1;
    }
    // as the API server does: an empty first message on the first output
    client.send(vec![if streams.stdout {
        1
    } else if streams.stderr {
        2
    } else {
        3
    }])?;
    let mut dec = Decoder::new();
    let mut down = vec![0u8; BUF];
    let mut have = first.len().min(BUF);
    down[..have].copy_from_slice(&first[..have]);
    let (start, mut last, mut runtime_done) = (Instant::now(), Instant::now(), false);
    loop {
        let mut moved = client.flush()?;
        // the runtime's frames, while the client takes them
        if !client.blocked && !runtime_done && !s.over {
            match read_some(runtime, &mut down[have..])? {
                None => runtime_done = true,
                Some(n) => {
                    have += n;
                    moved |= n > 0;
                }
            }
        }
        let mut at = 0;
        while !s.over
            && let Some((f, n)) = dec.next(&down[at..have])?
        {
            s.on_frame(&f, &mut client, &mut up)?;
            at += n;
        }
        down.copy_within(at..have, 0);
        have -= at;
        // the client's messages, once every stream is answered
        while s.unanswered == 0 && up.room() && !s.over {
            match client.recv()? {
                Some(msg) => {
                    s.on_message(&msg, &mut up);
                    moved = true;
                }
                None => break,
            }
        }
        moved |= up.drain(runtime)?;
        if client.closed {
            return Ok(());
        }
        if s.over || runtime_done {
            if !s.over && !s.status {
                client.send(failure("the runtime's stream ended without the command's status"))?;
            }
            client.close();
            return Ok(());
        }
        if s.unanswered > 0 && start.elapsed() > deadline {
            client.send(failure(&format!("the runtime did not open the streams within {deadline:?}")))?;
            client.close();
            return Ok(());
        }
        if moved {
            last = Instant::now();
            continue;
        }
        let until = if s.unanswered > 0 { idle.min(deadline) } else { idle };
        wait(&client, s.unanswered == 0 && up.room(), runtime, (!client.blocked, up.pending()), last, until)?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_upgrade_is_answered_as_rfc_6455_says() {
        // RFC 6455's own example
        let head = accept_head(Some("dGhlIHNhbXBsZSBub25jZQ=="), Some("13"), V5).unwrap();
        let head = String::from_utf8(head).unwrap();
        assert!(head.starts_with("HTTP/1.1 101 Switching Protocols\r\n"), "{head}");
        assert!(head.contains("Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n"), "{head}");
        assert!(head.contains("Sec-WebSocket-Protocol: v5.channel.k8s.io\r\n") && head.ends_with("\r\n\r\n"));
        assert_eq!(accept_head(None, Some("13"), V5).unwrap_err().code, 400);
        assert_eq!(accept_head(Some("k"), Some("8"), V5).unwrap_err().code, 400);
    }

    #[test]
    fn streams_are_opened_as_client_go_opens_them() {
        let s = |stdin, stdout, stderr, tty| Streams { stdin, stdout, stderr, tty };
        assert_eq!(streams_of(s(false, true, true, false)), [("error", 3), ("stdout", 1), ("stderr", 2)]);
        assert_eq!(streams_of(s(true, true, false, true)), [("error", 3), ("stdin", 0), ("stdout", 1), ("resize", 4)]);
    }

    /// A v5 client and a stand-in SPDY runtime around [`exec`], on
    /// loopback sockets: the streams opened with their types, stdin and
    /// its CLOSE passed on only after the replies, the output and the
    /// status back on their channels, then a normal close.
    #[test]
    fn a_v5_session_is_translated_to_spdy_and_back() {
        use flate2::{Decompress, FlushDecompress};
        use std::net::TcpListener;
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let client = crate::base::thread::spawn("test-ws-client", None, move || {
            let tcp = TcpStream::connect(addr).unwrap();
            tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let mut ws = WebSocket::from_raw_socket(tcp, Role::Client, None);
            // stdin as text, as Python's client sends a str
            ws.send(Message::text("\u{0}hi")).unwrap();
            ws.send(Message::binary(vec![CLOSE, 0])).unwrap();
            let (mut got, mut closed) = (Vec::new(), None);
            loop {
                match ws.read() {
                    Ok(Message::Binary(b)) => got.push(b.to_vec()),
                    Ok(Message::Close(c)) => closed = c.map(|c| c.code),
                    Ok(_) => {}
                    Err(_) => return (got, closed),
                }
            }
        })
        .unwrap();
        let (mut conn, _) = l.accept().unwrap();
        let rl = TcpListener::bind("127.0.0.1:0").unwrap();
        let raddr = rl.local_addr().unwrap();
        let runtime = crate::base::thread::spawn("test-spdy-runtime", None, move || {
            let (mut rt, _) = rl.accept().unwrap();
            rt.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let (mut dec, mut z) = (Decoder::new(), Decompress::new(true));
            let (mut buf, mut chunk) = (Vec::new(), [0u8; 4096]);
            let (mut types, mut stdin, mut fin) = (Vec::new(), Vec::new(), false);
            let mut replied = false;
            while !fin {
                let n = rt.read(&mut chunk).unwrap();
                assert!(n > 0, "the relay closed early");
                buf.extend_from_slice(&chunk[..n]);
                while let Some((f, used)) = dec.next(&buf).unwrap() {
                    match f {
                        Frame::Control { kind: spdy::SYN_STREAM, body, .. } => {
                            let mut plain = Vec::with_capacity(256);
                            z.decompress_vec(&body[10..], &mut plain, FlushDecompress::Sync).unwrap();
                            assert_eq!(&plain[..18], b"\0\0\0\x01\0\0\0\x0astreamtype");
                            types.push((f.first_word().unwrap(), String::from_utf8(plain[22..].to_vec()).unwrap()));
                        }
                        Frame::Data { stream: 3, data, fin: f } => {
                            assert!(replied, "no data before the replies");
                            stdin.extend_from_slice(data);
                            fin |= f;
                        }
                        other => panic!("unexpected {other:?}"),
                    }
                    buf.drain(..used);
                }
                if types.len() == 3 && !replied {
                    let mut out = Vec::new();
                    for id in [1u8, 3, 5] {
                        // SYN_REPLY with a header block the relay does not read
                        out.extend_from_slice(&[0x80, 3, 0, 2, 0, 0, 0, 7, 0, 0, 0, id, 0x78, 0x9c, 0]);
                    }
                    rt.write_all(&out).unwrap();
                    replied = true;
                }
            }
            let mut out = Vec::new();
            spdy::ping(&mut out, 2);
            spdy::data(&mut out, 5, b"HI", false);
            spdy::data(&mut out, 1, b"{\"status\":\"Success\"}", false);
            spdy::rst_stream(&mut out, 1, spdy::CANCEL);
            spdy::goaway(&mut out);
            rt.write_all(&out).unwrap();
            // the ping's answer
            let mut pong = [0u8; 12];
            rt.read_exact(&mut pong).unwrap();
            assert_eq!(pong, [0x80, 3, 0, 6, 0, 0, 0, 4, 0, 0, 0, 2]);
            (types, stdin)
        })
        .unwrap();
        let mut rt = TcpStream::connect(raddr).unwrap();
        rt.set_nonblocking(true).unwrap();
        conn.set_nonblocking(true).unwrap();
        let streams = Streams { stdin: true, stdout: true, stderr: false, tty: false };
        let idle = Duration::from_secs(10);
        exec(&mut conn, Vec::new(), &mut rt, &[], streams, idle, idle).unwrap();
        drop(conn);
        let (types, stdin) = runtime.join().unwrap();
        let want: Vec<(u32, String)> = vec![(1, "error".into()), (3, "stdin".into()), (5, "stdout".into())];
        assert_eq!((types, stdin), (want, b"hi".to_vec()));
        let (got, closed) = client.join().unwrap();
        assert_eq!(got, [vec![1], b"\x01HI".to_vec(), b"\x03{\"status\":\"Success\"}".to_vec()]);
        assert_eq!(closed, Some(CloseCode::Normal));
    }

    #[test]
    fn client_messages_become_stream_data_and_close_becomes_fin() {
        let mut s = Session { ids: [3, 5, 0, 1, 7], unanswered: 0, status: false, over: false, stdin_closed: false };
        let mut up = Out::new();
        s.on_message(&[0, b'h', b'i'], &mut up);
        s.on_message(&[4, b'{', b'}'], &mut up);
        s.on_message(&[2, b'x'], &mut up); // stderr is not the client's to write
        s.on_message(&[CLOSE, 1], &mut up); // only stdin's close means anything
        s.on_message(&[CLOSE, 0], &mut up);
        s.on_message(&[CLOSE, 0], &mut up); // once
        s.on_message(&[0, b'z'], &mut up); // nothing after the close
        let mut want = Vec::new();
        spdy::data(&mut want, 3, b"hi", false);
        spdy::data(&mut want, 7, b"{}", false);
        spdy::data(&mut want, 3, b"", true);
        assert_eq!(up.buf, want);
        assert_eq!(s.channel_of(1), Some(3));
        assert_eq!(s.channel_of(0), None);
        assert_eq!(s.channel_of(9), None);
    }
}
