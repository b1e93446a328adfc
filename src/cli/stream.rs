//! `exec`, `attach` and `port-forward`: the daemon hands out the runtime's
//! streaming URL (one use), and the CLI speaks to the runtime's streaming
//! server itself over WebSocket (`tungstenite`), in the Kubernetes channel
//! protocol that containerd serves there, `v4.channel.k8s.io`: each binary
//! message is one channel byte and data. exec and attach: 0 stdin, 1
//! stdout, 2 stderr, 3 the final `Status` (JSON), 4 the terminal's size
//! (`{"Width":..,"Height":..}`). port-forward (`?port=P`, one connection
//! per local connection): 0 data, 1 errors, the first message of each
//! carrying the port (2 bytes, little endian).
//!
//! v4 has no way to close stdin alone: after stdin's end the command keeps
//! running until it ends by itself (`cp` sends its archive through `head
//! -c SIZE` for that reason).
//!
//! One thread per session polls the socket, stdin (or the local
//! connection) and the signals; `port-forward` runs one such thread per
//! accepted connection.

use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use tungstenite::{Message, WebSocket};

use crate::api::pb::api;
use crate::cli::args::Args;
use crate::cli::error::{CliError, Result, usage};

/// The channel protocol the runtime's streaming server speaks over
/// WebSocket (containerd 1.6: `v4.channel.k8s.io`, `channel.k8s.io`).
pub const PROTOCOL: &str = "v4.channel.k8s.io";
/// Connecting to the runtime and its handshake.
const CONNECT: Duration = Duration::from_secs(10);
/// Bytes read from stdin or a local connection at a time.
const CHUNK: usize = 32 << 10;
/// Bytes waiting for a slow local connection before the socket is no
/// longer read.
const MAX_PENDING: usize = 1 << 20;

fn stream_err(what: impl Into<String>) -> CliError {
    CliError::Stream(what.into())
}

/// One WebSocket connection to the runtime's streaming server,
/// non-blocking once open.
pub(super) struct Conn {
    ws: WebSocket<TcpStream>,
    /// Frames are queued that the socket did not take yet.
    unflushed: bool,
}

/// What came from the runtime.
pub(super) enum Event {
    Data(u8, Vec<u8>),
    Closed,
}

impl Conn {
    /// Open `url` (`http://...`, from the daemon) with `query` appended.
    pub(super) fn open(url: &str, query: &str) -> Result<Self> {
        let ws_url = url.replacen("http://", "ws://", 1) + query;
        let rest = url.strip_prefix("http://").ok_or_else(|| {
            stream_err(format!("the runtime's streaming URL {url:?} is not plain HTTP (podwarden speaks only that)"))
        })?;
        let host = rest.split('/').next().unwrap_or_default();
        let fail = |e: io::Error| stream_err(format!("cannot reach the runtime's streaming server at {host}: {e}"));
        let addr = host.to_socket_addrs().map_err(fail)?.next().ok_or_else(|| fail(io::ErrorKind::NotFound.into()))?;
        let tcp = TcpStream::connect_timeout(&addr, CONNECT).map_err(fail)?;
        tcp.set_nodelay(true).map_err(fail)?;
        tcp.set_read_timeout(Some(CONNECT)).map_err(fail)?;
        tcp.set_write_timeout(Some(CONNECT)).map_err(fail)?;
        use tungstenite::client::IntoClientRequest;
        let mut req = ws_url.as_str().into_client_request().map_err(|e| stream_err(format!("{ws_url}: {e}")))?;
        req.headers_mut().insert("Sec-WebSocket-Protocol", tungstenite::http::HeaderValue::from_static(PROTOCOL));
        let (ws, resp) = tungstenite::client(req, tcp).map_err(|e| match e {
            tungstenite::HandshakeError::Failure(tungstenite::Error::Http(r)) => stream_err(format!(
                "the runtime refused the stream: {} {}",
                r.status(),
                String::from_utf8_lossy(r.body().as_deref().unwrap_or_default()).trim()
            )),
            e => stream_err(format!("the runtime's streaming server at {host}: {e}")),
        })?;
        if resp.headers().get("Sec-WebSocket-Protocol").and_then(|v| v.to_str().ok()) != Some(PROTOCOL) {
            return Err(stream_err(format!("the runtime did not agree to {PROTOCOL}")));
        }
        ws.get_ref().set_read_timeout(None).map_err(fail)?;
        ws.get_ref().set_write_timeout(None).map_err(fail)?;
        ws.get_ref().set_nonblocking(true).map_err(fail)?;
        Ok(Conn { ws, unflushed: false })
    }

    fn fd(&self) -> RawFd {
        self.ws.get_ref().as_raw_fd()
    }

    /// Queue `data` on `channel` and write what the socket takes.
    pub(super) fn send(&mut self, channel: u8, data: &[u8]) -> Result<()> {
        let mut msg = Vec::with_capacity(data.len() + 1);
        msg.push(channel);
        msg.extend_from_slice(data);
        match self.ws.write(Message::binary(msg)) {
            Ok(()) => self.flush(),
            Err(tungstenite::Error::Io(e)) if e.kind() == io::ErrorKind::WouldBlock => {
                self.unflushed = true;
                Ok(())
            }
            Err(e) => Err(stream_err(format!("sending to the runtime: {e}"))),
        }
    }

    fn flush(&mut self) -> Result<()> {
        match self.ws.flush() {
            Ok(()) => {
                self.unflushed = false;
                Ok(())
            }
            Err(tungstenite::Error::Io(e)) if e.kind() == io::ErrorKind::WouldBlock => {
                self.unflushed = true;
                Ok(())
            }
            Err(e) => Err(stream_err(format!("sending to the runtime: {e}"))),
        }
    }

    /// The next message, `None` when none is complete yet.
    pub(super) fn recv(&mut self) -> Result<Option<Event>> {
        loop {
            match self.ws.read() {
                Ok(Message::Binary(b)) if !b.is_empty() => return Ok(Some(Event::Data(b[0], b[1..].to_vec()))),
                Ok(Message::Text(t)) if !t.is_empty() => {
                    let b = t.as_bytes();
                    return Ok(Some(Event::Data(b[0], b[1..].to_vec())));
                }
                Ok(Message::Close(_)) => return Ok(Some(Event::Closed)),
                Ok(_) => continue,
                Err(tungstenite::Error::Io(e)) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
                Err(tungstenite::Error::ConnectionClosed | tungstenite::Error::AlreadyClosed) => {
                    return Ok(Some(Event::Closed));
                }
                Err(tungstenite::Error::Io(e))
                    if matches!(e.kind(), io::ErrorKind::ConnectionReset | io::ErrorKind::UnexpectedEof) =>
                {
                    return Ok(Some(Event::Closed));
                }
                Err(tungstenite::Error::Protocol(tungstenite::error::ProtocolError::ResetWithoutClosingHandshake)) => {
                    return Ok(Some(Event::Closed));
                }
                Err(e) => return Err(stream_err(format!("reading from the runtime: {e}"))),
            }
        }
    }

    /// Send a close frame and wait (briefly) for the runtime's.
    fn close(mut self) {
        let _ = self.ws.close(None);
        let end = Instant::now() + Duration::from_secs(2);
        while Instant::now() < end {
            match self.ws.read() {
                Ok(_) => {}
                Err(tungstenite::Error::Io(e)) if e.kind() == io::ErrorKind::WouldBlock => {
                    let mut fds = [libc::pollfd { fd: self.fd(), events: libc::POLLIN, revents: 0 }];
                    let _ = crate::sys::poll(&mut fds, 100);
                }
                Err(_) => return,
            }
        }
    }
}

/// The exit status a command's final `Status` (channel 3) carries: 0 for
/// `Success`, its `ExitCode` cause for `NonZeroExitCode`; any other
/// failure is an error with the runtime's message.
pub(super) fn exit_status(status: &[u8]) -> Result<u8> {
    let v: serde_json::Value = serde_json::from_slice(status).map_err(|e| {
        stream_err(format!("the runtime's status is not JSON ({e}): {}", String::from_utf8_lossy(status)))
    })?;
    if v["status"] == "Success" {
        return Ok(0);
    }
    let message = v["message"].as_str().unwrap_or("the command failed").to_string();
    if v["reason"] == "NonZeroExitCode" {
        let code = v["details"]["causes"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["reason"] == "ExitCode")
            .and_then(|c| c["message"].as_str()?.parse::<i64>().ok());
        if let Some(code) = code {
            return Ok(code.clamp(0, 255) as u8);
        }
    }
    Err(stream_err(message))
}

/// The local terminal in raw mode while a `-t` session runs; restored
/// when dropped (also on a signal's way out).
pub(super) struct RawTerminal {
    saved: libc::termios,
}

impl RawTerminal {
    pub(super) fn enter() -> Result<Self> {
        let stdin = io::stdin();
        let fail = |e: io::Error| stream_err(format!("-t: stdin is not a terminal ({e}); leave -t out"));
        let saved = crate::sys::terminal_attrs(stdin.as_fd()).map_err(fail)?;
        crate::sys::set_terminal_attrs(stdin.as_fd(), &crate::sys::raw_terminal_attrs(&saved)).map_err(fail)?;
        Ok(RawTerminal { saved })
    }
}

impl Drop for RawTerminal {
    fn drop(&mut self) {
        let _ = crate::sys::set_terminal_attrs(io::stdin().as_fd(), &self.saved);
    }
}

/// The terminal's size as the resize channel carries it.
fn resize_message() -> Option<Vec<u8>> {
    let (w, h) =
        crate::sys::window_size(io::stdout().as_fd()).or_else(|_| crate::sys::window_size(io::stdin().as_fd())).ok()?;
    Some(format!("{{\"Width\":{w},\"Height\":{h}}}").into_bytes())
}

/// Signals a session handles: each writes a byte to its own socket,
/// which the session polls.
struct Signals {
    pipes: Vec<(i32, UnixStream)>,
}

impl Signals {
    fn new(signals: &[i32]) -> Result<Self> {
        let mut pipes = Vec::new();
        for &sig in signals {
            let (r, w) = UnixStream::pair().map_err(|e| stream_err(format!("signal pipe: {e}")))?;
            r.set_nonblocking(true).map_err(|e| stream_err(format!("signal pipe: {e}")))?;
            signal_hook::low_level::pipe::register(sig, w).map_err(|e| stream_err(format!("signal {sig}: {e}")))?;
            pipes.push((sig, r));
        }
        Ok(Signals { pipes })
    }
}

/// Where a session's stdin comes from.
pub(super) enum Input {
    None,
    /// This process's stdin (read straight from the descriptor).
    Stdin(std::fs::File),
    /// Bytes in memory (`cp` into a pod).
    Bytes(Vec<u8>, usize),
}

/// Run one exec or attach session to its end: stdin (or `input`) to
/// channel 0, channels 1 and 2 to `out` and `err`, the terminal's size to
/// channel 4 with `tty` (now and on every SIGWINCH). Returns the exit
/// status from channel 3 (0 when the runtime closed without one).
pub(super) fn session(
    conn: &mut Conn,
    mut input: Input,
    tty: bool,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<u8> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM, SIGWINCH};
    let signals = Signals::new(&[SIGWINCH, SIGTERM, SIGHUP, SIGINT])?;
    if tty && let Some(size) = resize_message() {
        conn.send(4, &size)?;
    }
    let mut status: Option<Vec<u8>> = None;
    let mut buf = vec![0u8; CHUNK];
    let write =
        |w: &mut dyn Write, d: &[u8]| w.write_all(d).and_then(|_| w.flush()).map_err(crate::cli::error::writing);
    loop {
        // what the runtime sent
        while let Some(ev) = conn.recv()? {
            match ev {
                Event::Data(1, d) => write(out, &d)?,
                Event::Data(2, d) => write(err, &d)?,
                Event::Data(3, d) if !d.is_empty() => status = Some(d),
                Event::Data(..) => {}
                Event::Closed => return status.map_or(Ok(0), |s| exit_status(&s)),
            }
        }
        // what goes to it
        if !conn.unflushed
            && let Input::Bytes(data, at) = &mut input
        {
            let n = (data.len() - *at).min(CHUNK);
            if n > 0 {
                conn.send(0, &data[*at..*at + n])?;
                *at += n;
                continue;
            }
        }
        let stdin_fd = match &input {
            Input::Stdin(f) if !conn.unflushed => f.as_raw_fd(),
            _ => -1,
        };
        let mut fds = vec![
            libc::pollfd {
                fd: conn.fd(),
                events: libc::POLLIN | if conn.unflushed { libc::POLLOUT } else { 0 },
                revents: 0,
            },
            libc::pollfd { fd: stdin_fd, events: libc::POLLIN, revents: 0 },
        ];
        fds.extend(signals.pipes.iter().map(|(_, p)| libc::pollfd {
            fd: p.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }));
        match crate::sys::poll(&mut fds, -1) {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(stream_err(format!("poll: {e}"))),
        }
        if fds[0].revents & libc::POLLOUT != 0 {
            conn.flush()?;
        }
        if fds[1].revents != 0
            && let Input::Stdin(f) = &mut input
        {
            match f.read(&mut buf) {
                Ok(0) | Err(_) => input = Input::None, // v4 cannot tell the command; it runs on
                Ok(n) => conn.send(0, &buf[..n])?,
            }
        }
        for (i, (sig, pipe)) in signals.pipes.iter().enumerate() {
            if fds[2 + i].revents == 0 {
                continue;
            }
            let mut drain = [0u8; 16];
            let _ = (&*pipe).read(&mut drain);
            if *sig == SIGWINCH {
                if tty && let Some(size) = resize_message() {
                    conn.send(4, &size)?;
                }
            } else {
                return Err(CliError::Signal(*sig as u8));
            }
        }
    }
}

/// The request the daemon needs for `kind` on the pod the arguments name.
fn request(a: &Args, pod: &str, command: Vec<String>, ports: Vec<u32>) -> api::StreamRequest {
    let stdin = a.stdin;
    api::StreamRequest {
        pod: protobuf::MessageField::some(api::PodRef {
            namespace: a.ns(),
            name: pod.to_string(),
            ..Default::default()
        }),
        container: a.container.clone().unwrap_or_default(),
        command,
        stdin,
        stdout: true,
        stderr: !a.tty,
        tty: a.tty,
        ports,
        ..Default::default()
    }
}

/// `podwarden exec [-i] [-t] POD [-c C] -- CMD...`: the command's exit
/// status becomes podwarden's.
pub(super) fn exec(a: &Args) -> Result<()> {
    let (pod, command) = match a.rest.split_first() {
        Some((pod, cmd)) if !cmd.is_empty() => (pod.clone(), cmd.to_vec()),
        _ => return Err(usage("exec: name the pod and the command: podwarden exec POD -- CMD [ARG...]")),
    };
    let resp = a.client()?.stream("exec", &request(a, &pod, command, Vec::new()))?;
    interactive(a, &resp.url)
}

/// `podwarden attach [-i] [-t] POD [-c C]`.
pub(super) fn attach(a: &Args) -> Result<()> {
    let [pod] = a.rest.as_slice() else {
        return Err(usage("attach: name one pod: podwarden attach POD [-c CONTAINER]"));
    };
    let resp = a.client()?.stream("attach", &request(a, pod, Vec::new(), Vec::new()))?;
    interactive(a, &resp.url)
}

fn interactive(a: &Args, url: &str) -> Result<()> {
    let mut conn = Conn::open(url, "")?;
    let raw = if a.tty && a.stdin { Some(RawTerminal::enter()?) } else { None };
    let input = if a.stdin {
        let fd = io::stdin().as_fd().try_clone_to_owned().map_err(|e| stream_err(format!("stdin: {e}")))?;
        Input::Stdin(std::fs::File::from(fd))
    } else {
        Input::None
    };
    let (mut out, mut err) = (io::stdout().lock(), io::stderr().lock());
    let code = session(&mut conn, input, a.tty, &mut out, &mut err);
    drop(raw);
    match code? {
        0 => Ok(()),
        n => Err(CliError::Exit(n)),
    }
}

/// `[LOCAL:]REMOTE` of `port-forward` (LOCAL 0 or empty: any free port).
pub(super) fn port_spec(spec: &str) -> Result<(u16, u16)> {
    let bad = || usage(format!("port-forward: {spec:?} is not [LOCAL:]REMOTE (ports 1 to 65535, LOCAL 0 for any)"));
    let (local, remote) = spec.split_once(':').unwrap_or((spec, spec));
    let remote: u16 = remote.parse().ok().filter(|&p| p > 0).ok_or_else(bad)?;
    let local: u16 = if local.is_empty() { 0 } else { local.parse().map_err(|_| bad())? };
    Ok((local, remote))
}

/// `podwarden port-forward POD [LOCAL:]REMOTE...`: listens on 127.0.0.1
/// (or `--address`); each connection gets its own stream to the pod's
/// port. Runs until interrupted.
pub(super) fn port_forward(a: &Args) -> Result<()> {
    let Some((pod, specs)) = a.rest.split_first().filter(|(_, s)| !s.is_empty()) else {
        return Err(usage("port-forward: name the pod and ports: podwarden port-forward POD [LOCAL:]REMOTE..."));
    };
    let specs = specs.iter().map(|s| port_spec(s)).collect::<Result<Vec<_>>>()?;
    // the pod and ports are checked once before listening
    a.client()?
        .stream("portforward", &request(a, pod, Vec::new(), specs.iter().map(|&(_, r)| u32::from(r)).collect()))?;
    let address = a.address.clone().unwrap_or_else(|| "127.0.0.1".into());
    let mut threads = Vec::new();
    for (local, remote) in specs {
        let l = TcpListener::bind((address.as_str(), local))
            .map_err(|e| stream_err(format!("port-forward: cannot listen on {address}:{local}: {e}")))?;
        let port = l.local_addr().map(|s| s.port()).unwrap_or(local);
        println!("Forwarding from {address}:{port} -> {remote}");
        let _ = io::stdout().flush();
        let (socket, ns, pod, container) = (a.socket.clone(), a.ns(), pod.clone(), a.container.clone());
        threads.push(crate::base::thread::spawn("pf-accept", None, move || {
            for conn in l.incoming().flatten() {
                let (socket, ns, pod, container) = (socket.clone(), ns.clone(), pod.clone(), container.clone());
                let spawned = crate::base::thread::spawn("pf-conn", None, move || {
                    if let Err(e) = forward_one(conn, socket, &ns, &pod, container, remote) {
                        eprintln!("podwarden: port-forward {ns}/{pod} port {remote}: {e}");
                    }
                });
                if let Err(e) = spawned {
                    eprintln!("podwarden: port-forward: cannot start a thread: {e}");
                }
            }
        }));
    }
    // until a signal ends the process (the default action of SIGINT)
    for t in threads.into_iter().flatten() {
        let _ = t.join();
    }
    Ok(())
}

/// One local connection to `remote` in the pod: a fresh URL from the
/// daemon, then bytes both ways until either side closes.
fn forward_one(
    local: TcpStream,
    socket: Option<String>,
    ns: &str,
    pod: &str,
    container: Option<String>,
    remote: u16,
) -> Result<()> {
    let client = crate::cli::client::Client::connect(&socket.unwrap_or_else(crate::cli::client::default_socket))?;
    let req = api::StreamRequest {
        pod: protobuf::MessageField::some(api::PodRef { namespace: ns.into(), name: pod.into(), ..Default::default() }),
        container: container.unwrap_or_default(),
        ports: vec![u32::from(remote)],
        ..Default::default()
    };
    let url = client.stream("portforward", &req)?.url;
    let mut conn = Conn::open(&url, &format!("?port={remote}"))?;
    pump(&mut conn, local)?;
    conn.close();
    Ok(())
}

/// Copy between a port-forward stream and its local connection: channel
/// 0 both ways (the runtime's first message on each channel is the port:
/// dropped), channel 1 the runtime's error. Ends when either side closes,
/// after what the other sent is delivered.
pub(super) fn pump(conn: &mut Conn, mut local: TcpStream) -> Result<()> {
    local.set_nonblocking(true).map_err(|e| stream_err(format!("local connection: {e}")))?;
    let _ = local.set_nodelay(true);
    let mut pending: Vec<u8> = Vec::new();
    let mut seen = [false; 2];
    let mut buf = vec![0u8; CHUNK];
    let mut remote_closed = false;
    loop {
        while pending.len() < MAX_PENDING && !remote_closed {
            match conn.recv()? {
                None => break,
                Some(Event::Closed) => remote_closed = true,
                Some(Event::Data(ch @ (0 | 1), d)) => {
                    let first = !std::mem::replace(&mut seen[ch as usize], true);
                    let d = if first { d.get(2..).unwrap_or_default().to_vec() } else { d };
                    if ch == 0 {
                        pending.extend_from_slice(&d);
                    } else if !d.is_empty() {
                        return Err(stream_err(String::from_utf8_lossy(&d).into_owned()));
                    }
                }
                Some(Event::Data(..)) => {}
            }
        }
        while !pending.is_empty() {
            match local.write(&pending) {
                Ok(0) => return Ok(()),
                Ok(n) => {
                    pending.drain(..n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Ok(()), // the local side went away
            }
        }
        if remote_closed && pending.is_empty() {
            let _ = local.shutdown(std::net::Shutdown::Both);
            return Ok(());
        }
        let read_local = !conn.unflushed && !remote_closed;
        let mut fds = [
            libc::pollfd {
                fd: conn.fd(),
                events: (if pending.len() < MAX_PENDING && !remote_closed { libc::POLLIN } else { 0 })
                    | if conn.unflushed { libc::POLLOUT } else { 0 },
                revents: 0,
            },
            libc::pollfd {
                fd: local.as_raw_fd(),
                events: (if read_local { libc::POLLIN } else { 0 })
                    | if pending.is_empty() { 0 } else { libc::POLLOUT },
                revents: 0,
            },
        ];
        match crate::sys::poll(&mut fds, -1) {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(stream_err(format!("poll: {e}"))),
        }
        if conn.unflushed && fds[0].revents & (libc::POLLOUT | libc::POLLERR | libc::POLLHUP) != 0 {
            conn.flush()?;
        }
        if read_local && fds[1].revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0 {
            match local.read(&mut buf) {
                Ok(0) => {
                    // the local side is done sending: deliver and close
                    while conn.unflushed {
                        let mut f = [libc::pollfd { fd: conn.fd(), events: libc::POLLOUT, revents: 0 }];
                        let _ = crate::sys::poll(&mut f, 1000);
                        conn.flush()?;
                    }
                    return Ok(());
                }
                Ok(n) => conn.send(0, &buf[..n])?,
                Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted) => {}
                Err(_) => return Ok(()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exit_status_comes_from_the_final_status() {
        assert_eq!(exit_status(br#"{"metadata":{},"status":"Success"}"#).unwrap(), 0);
        let failed = br#"{"metadata":{},"status":"Failure","message":"command terminated with non-zero exit code: error executing command [sh -c exit 3], exit code 3","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"3"}]}}"#;
        assert_eq!(exit_status(failed).unwrap(), 3);
        let other = br#"{"metadata":{},"status":"Failure","message":"failed to exec in container: no such file","reason":"InternalError"}"#;
        let e = exit_status(other).unwrap_err();
        assert!(e.to_string().contains("no such file"), "{e}");
        assert!(exit_status(b"not json").unwrap_err().to_string().contains("not JSON"));
    }

    #[test]
    fn port_specs_as_kubectl_takes_them() {
        assert_eq!(port_spec("8080").unwrap(), (8080, 8080));
        assert_eq!(port_spec("9000:80").unwrap(), (9000, 80));
        assert_eq!(port_spec(":80").unwrap(), (0, 80));
        assert_eq!(port_spec("0:80").unwrap(), (0, 80));
        for bad in ["", "x", "80:0", "70000", "1:2:3"] {
            assert!(port_spec(bad).unwrap_err().to_string().contains(&format!("{bad:?}")), "{bad}");
        }
    }
}
