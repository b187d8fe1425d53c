//! Connections per client address: a bound on those not yet authenticated, a separate bound
//! on authenticated WebSockets, and eviction of idle strangers so they never lock out a real
//! client from the same address.
//!
//! Every local client is 127.0.0.1, so a plain per-address cap would let anyone on the host
//! (or any web page, through a browser) hold every slot with idle sockets. Here a newcomer that
//! finds the unauthenticated slots full takes the place of the oldest connection that has not
//! sent a request yet; a connection that authenticates a WebSocket moves to its own pool.
//!
//! A trusted reverse proxy's connection is not counted under the proxy's address: each of its
//! requests counts under the client address it forwards, and only while that request (or the
//! WebSocket or stream it became) is live. An idle keep-alive connection counts under nobody,
//! so a client that made many requests at once through the proxy is not refused afterwards for
//! connections the proxy merely keeps open. The proxy's own address has a bound of its own
//! on its connections (`[proxy] max_connections`), so a trusted peer is not unbounded either.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;

/// The connection table of the daemon.
#[derive(Debug)]
pub struct Connections {
    table: Mutex<HashMap<IpAddr, PerAddress>>,
    /// Most unauthenticated connections per address, and most authenticated WebSockets.
    limit: usize,
    /// Most connections from one trusted proxy address.
    proxy_limit: usize,
    next_id: AtomicU64,
}

#[derive(Debug, Default)]
struct PerAddress {
    unauthenticated: usize,
    authenticated: usize,
    /// Connections from this address as a trusted proxy.
    proxied: usize,
    /// Connections that have not sent a request yet, oldest first: the ones to evict.
    waiting: VecDeque<(u64, CancellationToken)>,
}

impl PerAddress {
    /// Whether nothing is counted here any more (the entry can go).
    fn is_empty(&self) -> bool {
        self.unauthenticated == 0 && self.authenticated == 0 && self.proxied == 0
    }
}

/// Where a connection stands; decides what its slot gives back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Accepted, no request yet: evictable.
    Waiting,
    /// Has sent a request, not (yet) an authenticated WebSocket.
    Requested,
    /// An authenticated WebSocket.
    Authenticated,
    /// Evicted: its place was already given to another.
    Evicted,
    /// From a trusted proxy, between clients: counted nowhere.
    Proxied,
}

/// One connection's place; gives it back when dropped.
#[derive(Debug)]
pub struct Slot {
    conns: Arc<Connections>,
    /// The address it is counted under (a proxied connection's changes with its requests;
    /// locked after `state`).
    ip: Mutex<IpAddr>,
    id: u64,
    state: Mutex<State>,
    evicted: CancellationToken,
    /// The trusted proxy's address, for a connection from one (its requests name their
    /// clients): counted there for the connection's whole life.
    proxy: Option<IpAddr>,
    /// Whether a request has begun on it.
    began: AtomicBool,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Every critical section leaves the table consistent, so poisoning is harmless.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Connections {
    /// A table allowing `limit` connections of each kind per address, and `proxy_limit` from
    /// each trusted proxy address.
    pub fn new(limit: usize, proxy_limit: usize) -> Arc<Self> {
        Arc::new(Self {
            table: Mutex::new(HashMap::new()),
            limit: limit.max(1),
            proxy_limit: proxy_limit.max(1),
            next_id: AtomicU64::new(1),
        })
    }

    /// A place for a new connection from `ip`, evicting the oldest connection from there that
    /// has sent nothing yet if the unauthenticated places are taken; `None` when all of them
    /// are busy with requests.
    pub fn admit(self: &Arc<Self>, ip: IpAddr) -> Option<Slot> {
        let mut table = lock(&self.table);
        let entry = table.entry(ip).or_default();
        if entry.unauthenticated >= self.limit {
            let (_, token) = entry.waiting.pop_front()?;
            // Its slot sees the token and gives nothing back when dropped.
            token.cancel();
            entry.unauthenticated -= 1;
        }
        entry.unauthenticated += 1;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let evicted = CancellationToken::new();
        entry.waiting.push_back((id, evicted.clone()));
        Some(Slot {
            conns: self.clone(),
            ip: Mutex::new(ip),
            id,
            state: Mutex::new(State::Waiting),
            evicted,
            proxy: None,
            began: AtomicBool::new(false),
        })
    }

    /// A place for a connection from a trusted proxy at `ip`: counted under no client until a
    /// request names one ([`Slot::from_client`]); `None` when the proxy has its most
    /// connections open.
    pub fn admit_proxied(self: &Arc<Self>, ip: IpAddr) -> Option<Slot> {
        let mut table = lock(&self.table);
        let entry = table.entry(ip).or_default();
        if entry.proxied >= self.proxy_limit {
            return None;
        }
        entry.proxied += 1;
        Some(Slot {
            conns: self.clone(),
            ip: Mutex::new(ip),
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            state: Mutex::new(State::Proxied),
            evicted: CancellationToken::new(),
            proxy: Some(ip),
            began: AtomicBool::new(false),
        })
    }

    /// Connections open from `ip`: (unauthenticated, authenticated).
    pub fn count(&self, ip: IpAddr) -> (usize, usize) {
        lock(&self.table)
            .get(&ip)
            .map_or((0, 0), |e| (e.unauthenticated, e.authenticated))
    }
}

impl Slot {
    /// Cancelled when this connection was evicted for a newcomer.
    pub fn evicted(&self) -> CancellationToken {
        self.evicted.clone()
    }

    /// Whether the connection comes from a trusted proxy.
    pub fn is_proxied(&self) -> bool {
        self.proxy.is_some()
    }

    /// Whether the connection has begun a request.
    pub fn has_requested(&self) -> bool {
        self.began.load(Ordering::Relaxed)
    }

    /// A request from `client` (a proxied connection's forwarded address; for any other the
    /// peer itself) began: a proxied connection moves to that address's count. False when
    /// that address has no place left (the request is refused; the connection stays).
    pub fn from_client(&self, client: IpAddr) -> bool {
        self.began.store(true, Ordering::Relaxed);
        let mut state = lock(&self.state);
        let mut ip = lock(&self.ip);
        match *state {
            State::Proxied => {}
            // Only a proxied connection's requests name another address than its own.
            State::Requested if *ip != client => {}
            State::Requested | State::Authenticated | State::Evicted => return true,
            State::Waiting => {
                drop((state, ip));
                self.requested();
                return true;
            }
        }
        let mut table = lock(&self.conns.table);
        if *state == State::Requested {
            // Leaving the previous client's count.
            give_back(&mut table, *ip, State::Requested);
            *state = State::Proxied;
        }
        let entry = table.entry(client).or_default();
        if entry.unauthenticated >= self.conns.limit {
            if entry.is_empty() {
                table.remove(&client);
            }
            return false;
        }
        entry.unauthenticated += 1;
        *ip = client;
        *state = State::Requested;
        true
    }

    /// The request that began with [`Slot::from_client`] is over (its response sent, or its
    /// stream ended) and the connection is not an upgraded WebSocket: a proxied connection
    /// stops counting under that client until its next request names one. Nothing for any
    /// other connection, which counts under its own peer for its whole life.
    pub fn request_done(&self) {
        if self.proxy.is_none() {
            return;
        }
        let mut state = lock(&self.state);
        if !matches!(*state, State::Requested | State::Authenticated) {
            return;
        }
        let ip = *lock(&self.ip);
        give_back(&mut lock(&self.conns.table), ip, *state);
        *state = State::Proxied;
    }

    /// The connection sent a request: it is no longer idle, so no longer evictable.
    pub fn requested(&self) {
        let mut state = lock(&self.state);
        if *state != State::Waiting {
            return;
        }
        let ip = *lock(&self.ip);
        let mut table = lock(&self.conns.table);
        if let Some(entry) = table.get_mut(&ip) {
            entry.waiting.retain(|(id, _)| *id != self.id);
        }
        *state = State::Requested;
    }

    /// The connection is becoming an authenticated WebSocket: it moves to that pool. False
    /// when that pool is full for this address.
    pub fn authenticate(&self) -> bool {
        let mut state = lock(&self.state);
        if *state == State::Authenticated {
            return true;
        }
        if matches!(*state, State::Evicted | State::Proxied) {
            return false;
        }
        let ip = *lock(&self.ip);
        let mut table = lock(&self.conns.table);
        let entry = table.entry(ip).or_default();
        if entry.authenticated >= self.conns.limit {
            return false;
        }
        if *state == State::Waiting {
            entry.waiting.retain(|(id, _)| *id != self.id);
        }
        entry.unauthenticated = entry.unauthenticated.saturating_sub(1);
        entry.authenticated += 1;
        *state = State::Authenticated;
        true
    }
}

/// Gives back the place a connection in `state` holds under `ip`.
fn give_back(table: &mut HashMap<IpAddr, PerAddress>, ip: IpAddr, state: State) {
    let Some(entry) = table.get_mut(&ip) else {
        return;
    };
    match state {
        State::Requested => entry.unauthenticated = entry.unauthenticated.saturating_sub(1),
        State::Authenticated => entry.authenticated = entry.authenticated.saturating_sub(1),
        State::Waiting | State::Evicted | State::Proxied => return,
    }
    if entry.is_empty() {
        table.remove(&ip);
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let state = *lock(&self.state);
        let ip = *lock(&self.ip);
        let mut table = lock(&self.conns.table);
        if let Some(proxy) = self.proxy {
            if let Some(entry) = table.get_mut(&proxy) {
                entry.proxied = entry.proxied.saturating_sub(1);
                if entry.is_empty() {
                    table.remove(&proxy);
                }
            }
        }
        let Some(entry) = table.get_mut(&ip) else {
            return;
        };
        let evicted = self.evicted.is_cancelled() || state == State::Evicted;
        match state {
            _ if evicted => {}
            State::Waiting => {
                entry.waiting.retain(|(id, _)| *id != self.id);
                entry.unauthenticated = entry.unauthenticated.saturating_sub(1);
            }
            State::Requested => entry.unauthenticated = entry.unauthenticated.saturating_sub(1),
            State::Authenticated => entry.authenticated = entry.authenticated.saturating_sub(1),
            State::Evicted | State::Proxied => {}
        }
        if entry.is_empty() {
            table.remove(&ip);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip() -> IpAddr {
        IpAddr::from([127, 0, 0, 1])
    }

    #[test]
    fn idle_strangers_are_evicted_for_a_newcomer() {
        let conns = Connections::new(2, 8);
        let a = conns.admit(ip()).expect("first");
        let b = conns.admit(ip()).expect("second");
        let c = conns.admit(ip()).expect("third evicts the oldest idle one");
        assert!(a.evicted().is_cancelled());
        assert!(!b.evicted().is_cancelled());
        assert_eq!(conns.count(ip()), (2, 0));
        drop(a);
        assert_eq!(
            conns.count(ip()),
            (2, 0),
            "an evicted slot gives nothing back"
        );
        drop((b, c));
        assert_eq!(conns.count(ip()), (0, 0));
    }

    #[test]
    fn busy_connections_are_not_evicted() {
        let conns = Connections::new(2, 8);
        let a = conns.admit(ip()).expect("first");
        let b = conns.admit(ip()).expect("second");
        a.requested();
        b.requested();
        assert!(conns.admit(ip()).is_none());
        drop(a);
        assert!(conns.admit(ip()).is_some());
    }

    #[test]
    fn authenticated_websockets_have_their_own_pool() {
        let conns = Connections::new(1, 8);
        let ws = conns.admit(ip()).expect("first");
        ws.requested();
        assert!(ws.authenticate());
        assert_eq!(conns.count(ip()), (0, 1));
        let other = conns
            .admit(ip())
            .expect("the unauthenticated pool is free again");
        other.requested();
        assert!(!other.authenticate(), "the authenticated pool is full");
        drop(ws);
        assert!(other.authenticate());
        drop(other);
        assert_eq!(conns.count(ip()), (0, 0));
    }

    #[test]
    fn a_proxied_connection_counts_under_each_request_s_client() {
        let conns = Connections::new(1, 8);
        let proxy = ip();
        let a = IpAddr::from([192, 0, 2, 1]);
        let b = IpAddr::from([192, 0, 2, 2]);
        let first = conns.admit_proxied(proxy).expect("under the proxy cap");
        assert_eq!(
            conns.count(proxy),
            (0, 0),
            "the proxy itself is not counted"
        );
        assert!(first.from_client(a));
        assert_eq!(conns.count(a), (1, 0));
        let second = conns.admit_proxied(proxy).expect("under the proxy cap");
        assert!(!second.from_client(a), "a's one place is taken");
        assert!(second.from_client(b), "b is another client");
        // The next request on the first connection is b's: it moves, and b is full.
        assert!(!first.from_client(b));
        assert_eq!(conns.count(a), (0, 0));
        assert!(first.from_client(a));
        assert!(first.authenticate());
        assert_eq!(conns.count(a), (0, 1));
        drop((first, second));
        assert_eq!((conns.count(a), conns.count(b)), ((0, 0), (0, 0)));
    }

    #[test]
    fn an_idle_proxied_connection_counts_under_nobody() {
        let conns = Connections::new(1, 8);
        let a = IpAddr::from([192, 0, 2, 1]);
        let first = conns.admit_proxied(ip()).expect("under the proxy cap");
        assert!(first.from_client(a));
        first.request_done();
        assert_eq!(conns.count(a), (0, 0), "its request is over");
        let second = conns.admit_proxied(ip()).expect("under the proxy cap");
        assert!(second.from_client(a), "a's place is free again");
        assert!(second.authenticate());
        second.request_done();
        assert_eq!(conns.count(a), (0, 0), "its stream is over");
        assert!(first.from_client(a));
        assert!(
            !second.from_client(a),
            "while that request is live, a's place is taken"
        );
        assert_eq!(conns.count(a), (1, 0));
        drop((first, second));
        assert_eq!(conns.count(a), (0, 0));
    }

    #[test]
    fn a_trusted_proxy_has_a_cap_of_its_own() {
        let conns = Connections::new(1, 2);
        let a = IpAddr::from([192, 0, 2, 1]);
        let first = conns.admit_proxied(ip()).expect("first");
        let second = conns.admit_proxied(ip()).expect("second");
        assert!(
            conns.admit_proxied(ip()).is_none(),
            "the proxy's two are open"
        );
        // Its clients' counts are apart from it.
        assert!(first.from_client(a));
        assert_eq!(conns.count(a), (1, 0));
        drop(first);
        let third = conns.admit_proxied(ip()).expect("a place again");
        drop((second, third));
        assert!(lock(&conns.table).is_empty(), "nothing left counted");
    }
}
