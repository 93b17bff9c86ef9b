//! How many connections each client holds at once (pure bookkeeping; unit-tested).
//!
//! The server's slots (`http::MAX_CONNECTIONS`) are shared by everyone who can reach the
//! port: without a share per client, one client that opens connections and sends nothing
//! holds every slot until the timeouts cut them, and Prometheus's scrapes wait behind it.
//! A client is its source address; IPv6 clients by their /64, since one host commonly holds a
//! whole /64 and could otherwise take a new address per connection.

use std::{
    collections::HashMap,
    net::{IpAddr, Ipv6Addr},
    sync::{Arc, Mutex, PoisonError},
};

/// Connections one client may hold at once. Prometheus opens one per scrape target and
/// reuses it; eight leave room for a second Prometheus (a high-availability pair), `curl` by
/// hand and a retry or two, and still let 32 clients share the 256 slots.
pub const MAX_PER_CLIENT: usize = 8;

/// Who a connection counts against.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Client(IpAddr);

impl Client {
    /// The client `ip` counts as: IPv4 as it is (an IPv4-mapped IPv6 address too, as a
    /// dual-stack socket reports IPv4 peers), IPv6 by its /64.
    #[must_use]
    pub fn of(ip: IpAddr) -> Self {
        match ip {
            IpAddr::V4(_) => Self(ip),
            IpAddr::V6(v6) => {
                if let Some(v4) = v6.to_ipv4_mapped() {
                    return Self(IpAddr::V4(v4));
                }
                let s = v6.segments();
                Self(IpAddr::V6(Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0)))
            }
        }
    }
}

/// The connections each client holds now. An entry lives only while its client holds a
/// connection, and each connection holds one of the server's slots, so the map never holds
/// more than `http::MAX_CONNECTIONS` entries.
#[derive(Debug)]
pub struct Clients {
    cap: usize,
    held: Mutex<HashMap<Client, usize>>,
}

/// One connection counted against its client; dropping it gives the share back.
#[derive(Debug)]
pub struct Ticket {
    clients: Arc<Clients>,
    client: Client,
}

impl Clients {
    /// At most `cap` connections per client.
    #[must_use]
    pub fn new(cap: usize) -> Arc<Self> {
        Arc::new(Self { cap, held: Mutex::new(HashMap::new()) })
    }

    /// Count one more connection from `ip`, or None if its client holds `cap` already.
    #[must_use]
    pub fn enter(self: &Arc<Self>, ip: IpAddr) -> Option<Ticket> {
        let client = Client::of(ip);
        // A poisoned lock only means a holder panicked mid-update of one counter: go on.
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        let n = held.entry(client).or_insert(0);
        if *n >= self.cap {
            return None;
        }
        *n += 1;
        Some(Ticket { clients: self.clone(), client })
    }

    /// Connections `ip`'s client holds now.
    #[must_use]
    pub fn holding(&self, ip: IpAddr) -> usize {
        self.held.lock().unwrap_or_else(PoisonError::into_inner).get(&Client::of(ip)).copied().unwrap_or(0)
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut held = self.clients.held.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(n) = held.get_mut(&self.client) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                held.remove(&self.client);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("an address")
    }

    #[test]
    fn one_client_cannot_take_more_than_its_share() {
        let clients = Clients::new(MAX_PER_CLIENT);
        let mut hog: Vec<Ticket> = (0..MAX_PER_CLIENT).map(|_| clients.enter(ip("10.0.0.9")).expect("within the share")).collect();
        assert!(clients.enter(ip("10.0.0.9")).is_none(), "a ninth connection from the same client");
        // Prometheus, from elsewhere, still gets in.
        let scrape = clients.enter(ip("10.0.0.1")).expect("another client");
        assert_eq!(clients.holding(ip("10.0.0.1")), 1);
        // One of the hog's connections ends: it may open one more, and no more.
        drop(hog.pop());
        let again = clients.enter(ip("10.0.0.9")).expect("a share given back");
        assert!(clients.enter(ip("10.0.0.9")).is_none());
        drop((again, scrape, hog));
        assert_eq!(clients.holding(ip("10.0.0.1")), 0);
        assert_eq!(clients.held.lock().expect("a lock").len(), 0, "no entry outlives its connections");
    }

    #[test]
    fn ipv6_clients_count_by_their_64_and_mapped_ipv4_as_ipv4() {
        let clients = Clients::new(2);
        let _a = clients.enter(ip("2001:db8:1:2::1")).expect("first");
        let _b = clients.enter(ip("2001:db8:1:2:ffff::7")).expect("second");
        assert!(clients.enter(ip("2001:db8:1:2::99")).is_none(), "the same /64");
        assert!(clients.enter(ip("2001:db8:1:3::1")).is_some(), "another /64");
        let _c = clients.enter(ip("192.0.2.1")).expect("IPv4");
        let _d = clients.enter(ip("::ffff:192.0.2.1")).expect("the same client, through a dual-stack socket");
        assert!(clients.enter(ip("192.0.2.1")).is_none());
    }
}
