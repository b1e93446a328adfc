//! The gate: connections that have not shown a client certificate yet.
//!
//! A connection is *unverified* from its accept until its TLS handshake
//! ends with a certificate of the node CA. Unverified connections live in a
//! small budget of their own, so that clients that never finish a handshake
//! (or finish it without a certificate) cannot fill the server's connection
//! bound and keep the node's operators out:
//! - at most [`PER_ADDRESS`] from one IP address: one more from that
//!   address drops that address's oldest;
//! - at most [`BUDGET`] in all: one more drops the oldest of the address
//!   that holds the most (a flood from one address churns its own
//!   connections, not everybody's);
//! - a dropped connection's socket is shut down, which ends its thread's
//!   blocking read at once.
//!
//! Verified connections leave the gate and count only against the server's
//! total bound.

use std::collections::VecDeque;
use std::net::{IpAddr, Shutdown, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// Unverified connections at once.
pub const BUDGET: usize = 64;
/// Unverified connections from one address at once.
pub const PER_ADDRESS: usize = 16;

/// The unverified connections, oldest first.
#[derive(Default)]
pub struct Gate {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    next: u64,
    waiting: VecDeque<Waiting>,
    dropped: u64,
    last_log: Option<Instant>,
}

struct Waiting {
    id: u64,
    addr: IpAddr,
    /// A handle on the connection's socket, to shut it down.
    sock: TcpStream,
}

/// A connection's place in the gate: it leaves when verified or dropped.
pub struct Ticket {
    gate: Arc<Gate>,
    id: u64,
}

impl Gate {
    /// Let `sock` (from `addr`) in, dropping whom the budget says. `None`
    /// when the socket cannot be shared with the gate (closed at once).
    pub fn enter(self: &Arc<Self>, addr: IpAddr, sock: &TcpStream) -> Option<Ticket> {
        let handle = sock.try_clone().ok()?;
        let mut g = self.inner.lock();
        let from_addr = g.waiting.iter().filter(|w| w.addr == addr).count();
        let victim = if from_addr >= PER_ADDRESS {
            Some(addr)
        } else if g.waiting.len() >= BUDGET {
            busiest(&g.waiting)
        } else {
            None
        };
        if let Some(v) = victim
            && let Some(i) = g.waiting.iter().position(|w| w.addr == v)
            && let Some(old) = g.waiting.remove(i)
        {
            let _ = old.sock.shutdown(Shutdown::Both);
            g.dropped += 1;
            if g.last_log.is_none_or(|t| t.elapsed() >= Duration::from_secs(60)) {
                log::warn!(
                    "Kubernetes API: {} connection(s) without a client certificate dropped to make room \
                     (at most {PER_ADDRESS} from one address, {BUDGET} in all; the last from {v})",
                    g.dropped
                );
                g.dropped = 0;
                g.last_log = Some(Instant::now());
            }
        }
        g.next += 1;
        let id = g.next;
        g.waiting.push_back(Waiting { id, addr, sock: handle });
        Some(Ticket { gate: self.clone(), id })
    }

    /// Unverified connections now.
    pub fn len(&self) -> usize {
        self.inner.lock().waiting.len()
    }

    /// Whether no connection is waiting.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn leave(&self, id: u64) {
        let mut g = self.inner.lock();
        if let Some(i) = g.waiting.iter().position(|w| w.id == id) {
            g.waiting.remove(i);
        }
    }
}

/// The address with the most waiting connections (the older one on a tie).
fn busiest(waiting: &VecDeque<Waiting>) -> Option<IpAddr> {
    let mut best: Option<(IpAddr, usize)> = None;
    for w in waiting {
        let n = waiting.iter().filter(|o| o.addr == w.addr).count();
        if best.is_none_or(|(_, m)| n > m) {
            best = Some((w.addr, n));
        }
    }
    best.map(|(a, _)| a)
}

impl Ticket {
    /// The connection showed a certificate of the node CA: it leaves the gate.
    pub fn verified(self) {}
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.gate.leave(self.id);
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read;
    use std::net::{Ipv4Addr, TcpListener};

    use super::*;

    /// A connected pair: (the client's end, the server's end).
    fn pair(l: &TcpListener) -> (TcpStream, TcpStream) {
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        (c, s)
    }

    fn closed(s: &mut TcpStream) -> bool {
        s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        matches!(s.read(&mut [0u8; 1]), Ok(0))
    }

    #[test]
    fn one_address_over_its_share_loses_its_oldest_not_others() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let gate = Arc::new(Gate::default());
        let (flood, other) = (IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)), IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)));
        let (mut oc, os) = pair(&l);
        let _ot = gate.enter(other, &os).unwrap();
        let mut held = Vec::new();
        for _ in 0..PER_ADDRESS + 3 {
            let (c, s) = pair(&l);
            let t = gate.enter(flood, &s).unwrap();
            held.push((c, s, t));
        }
        assert_eq!(gate.len(), PER_ADDRESS + 1, "the flood holds its share, the other its one");
        for (c, _, _) in held.iter_mut().take(3) {
            assert!(closed(c), "the flood's oldest are shut down");
        }
        oc.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
        assert!(oc.read(&mut [0u8; 1]).is_err(), "the other address's connection is untouched");
    }

    #[test]
    fn over_the_budget_the_busiest_address_gives_way() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let gate = Arc::new(Gate::default());
        let mut held = Vec::new();
        // BUDGET spread over addresses, the first (its full share) holding the most
        for i in 0..BUDGET {
            let a = IpAddr::V4(Ipv4Addr::new(10, 0, 0, if i < PER_ADDRESS { 9 } else { 1 + (i % 4) as u8 }));
            let (c, s) = pair(&l);
            let t = gate.enter(a, &s).unwrap();
            held.push((a, c, s, t));
        }
        assert_eq!(gate.len(), BUDGET);
        let busy = held[0].0;
        let (_c, s) = pair(&l);
        let _t = gate.enter(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)), &s).unwrap();
        assert_eq!(gate.len(), BUDGET, "one in, one out");
        let first_of_busy = held.iter_mut().find(|h| h.0 == busy).unwrap();
        assert!(closed(&mut first_of_busy.1), "the busiest address's oldest was dropped");
    }

    #[test]
    fn a_verified_or_ended_connection_leaves_the_gate() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let gate = Arc::new(Gate::default());
        let a = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let (_c1, s1) = pair(&l);
        let (_c2, s2) = pair(&l);
        let t1 = gate.enter(a, &s1).unwrap();
        let t2 = gate.enter(a, &s2).unwrap();
        assert_eq!(gate.len(), 2);
        t1.verified();
        drop(t2);
        assert!(gate.is_empty());
    }
}
