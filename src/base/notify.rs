//! systemd readiness notification (`Type=notify`): a datagram to
//! `$NOTIFY_SOCKET`, no dependency needed (`READY=1`, `STOPPING=1`; the
//! watchdog's `WATCHDOG=1` comes from `base::watchdog`).

use std::ffi::OsStr;
use std::os::unix::net::UnixDatagram;
use std::time::Duration;

/// Send `state` (e.g. `READY=1`) to systemd if it asked for notifications.
/// Returns whether a message was sent.
pub fn notify(state: &str) -> bool {
    notify_to(std::env::var_os("NOTIFY_SOCKET").as_deref(), state)
}

/// Send `state` to the socket `$NOTIFY_SOCKET` names (`@` for an abstract
/// name), if any.
fn notify_to(socket: Option<&OsStr>, state: &str) -> bool {
    send(socket, state, None)
}

/// Send `state` to `socket` (a `$NOTIFY_SOCKET` value), waiting at most
/// `timeout` (if any) for room in the socket's queue.
pub fn send(socket: Option<&OsStr>, state: &str, timeout: Option<Duration>) -> bool {
    let Some(path) = socket else { return false };
    let Ok(sock) = UnixDatagram::unbound() else { return false };
    if timeout.is_some() && sock.set_write_timeout(timeout).is_err() {
        return false;
    }
    let bytes = path.as_encoded_bytes();
    let sent = if let Some(abstract_name) = bytes.strip_prefix(b"@") {
        use std::os::linux::net::SocketAddrExt;
        std::os::unix::net::SocketAddr::from_abstract_name(abstract_name)
            .and_then(|addr| sock.send_to_addr(state.as_bytes(), &addr))
    } else {
        sock.send_to(state.as_bytes(), path)
    };
    match sent {
        Ok(_) => true,
        Err(e) => {
            log::warn!("sd_notify {state}: {e}");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::linux::net::SocketAddrExt;

    #[test]
    fn sends_to_the_socket_systemd_names() {
        let dir = std::env::temp_dir().join(format!("pw-notify-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let path = dir.join("notify.sock");
        let _ = std::fs::remove_file(&path);
        let rx = std::os::unix::net::UnixDatagram::bind(&path).unwrap();
        assert!(super::notify_to(Some(path.as_os_str()), "READY=1"));
        let mut buf = [0u8; 64];
        let n = rx.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1");
        assert!(!super::notify_to(None, "READY=1"));
        // an abstract socket: `@name`
        let name = format!("pw-notify-{}", std::process::id());
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let rx = std::os::unix::net::UnixDatagram::bind_addr(&addr).unwrap();
        assert!(super::notify_to(Some(std::ffi::OsStr::new(&format!("@{name}"))), "STOPPING=1"));
        let n = rx.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"STOPPING=1");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
