//! The client connection the stream relay serves (`api::stream`) and its
//! WebSocket end (`api::websocket`): plain TCP or TLS over TCP, with the
//! socket for `poll`.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::fd::{AsRawFd, RawFd};

/// A client connection the relay serves: plain TCP or TLS over TCP.
pub trait Duplex: Read + Write + Send {
    /// The socket, for `poll`.
    fn fd(&self) -> RawFd;
    fn set_nonblocking(&self, on: bool) -> io::Result<()>;
    /// Send small writes at once (`TCP_NODELAY`): a stream's round trips
    /// must not wait for Nagle's algorithm.
    fn set_nodelay(&self) -> io::Result<()>;
    /// Bytes written but still held back (TLS records not yet on the
    /// socket): `flush` must be retried when the socket is writable.
    fn wants_write(&self) -> bool {
        false
    }
}

impl Duplex for TcpStream {
    fn fd(&self) -> RawFd {
        self.as_raw_fd()
    }
    fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        TcpStream::set_nonblocking(self, on)
    }
    fn set_nodelay(&self) -> io::Result<()> {
        TcpStream::set_nodelay(self, true)
    }
}

impl Duplex for rustls::StreamOwned<rustls::ServerConnection, TcpStream> {
    fn fd(&self) -> RawFd {
        self.sock.as_raw_fd()
    }
    fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        self.sock.set_nonblocking(on)
    }
    fn set_nodelay(&self) -> io::Result<()> {
        self.sock.set_nodelay(true)
    }
    fn wants_write(&self) -> bool {
        self.conn.wants_write()
    }
}
