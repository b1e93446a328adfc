//! systemd readiness notification (`Type=notify`): a datagram to
//! `$NOTIFY_SOCKET`, no dependency needed.

use std::os::unix::net::UnixDatagram;

/// Send `state` (e.g. `READY=1`) to systemd if it asked for notifications.
/// Returns whether a message was sent.
pub fn notify(state: &str) -> bool {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else { return false };
    let Ok(sock) = UnixDatagram::unbound() else { return false };
    let bytes = path.as_encoded_bytes();
    let sent = if let Some(abstract_name) = bytes.strip_prefix(b"@") {
        use std::os::linux::net::SocketAddrExt;
        std::os::unix::net::SocketAddr::from_abstract_name(abstract_name)
            .and_then(|addr| sock.send_to_addr(state.as_bytes(), &addr))
    } else {
        sock.send_to(state.as_bytes(), &path)
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
    #[test]
    fn sends_to_the_socket_systemd_names() {
        let dir = std::env::temp_dir().join(format!("pw-notify-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let path = dir.join("notify.sock");
        let _ = std::fs::remove_file(&path);
        let rx = std::os::unix::net::UnixDatagram::bind(&path).unwrap();
        // SAFETY: test-only; no other test reads NOTIFY_SOCKET.
        unsafe { std::env::set_var("NOTIFY_SOCKET", &path) };
        assert!(super::notify("READY=1"));
        let mut buf = [0u8; 64];
        let n = rx.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1");
        // SAFETY: as above.
        unsafe { std::env::remove_var("NOTIFY_SOCKET") };
        assert!(!super::notify("READY=1"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
