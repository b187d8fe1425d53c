//! A test client's view of the wire below WebSocket libraries: client frames built by hand,
//! and the kernel's queues of a loopback connection (`/proc/net/tcp`).

/// A client frame: `first` is the FIN/RSV/opcode byte; masked unless told otherwise.
pub fn frame(first: u8, payload: &[u8], masked: bool) -> Vec<u8> {
    let mut f = vec![first];
    let mask_bit = if masked { 0x80 } else { 0 };
    match payload.len() {
        n if n < 126 => f.push(mask_bit | n as u8),
        n => {
            f.push(mask_bit | 126);
            f.extend_from_slice(&(n as u16).to_be_bytes());
        }
    }
    if masked {
        let key = [1u8, 2, 3, 4];
        f.extend_from_slice(&key);
        f.extend(payload.iter().enumerate().map(|(i, b)| b ^ key[i % 4]));
    } else {
        f.extend_from_slice(payload);
    }
    f
}

/// One IPv4 TCP socket of this host: its ports and what its kernel holds.
pub struct TcpQueues {
    pub local_port: u16,
    pub remote_port: u16,
    /// Written, not yet acknowledged by the peer (`tx_queue`).
    pub unsent: u64,
    /// Received, not yet read by its owner (`rx_queue`).
    pub unread: u64,
}

/// Every IPv4 TCP socket of this host, from `/proc/net/tcp`.
pub fn tcp_sockets() -> Vec<TcpQueues> {
    let table = std::fs::read_to_string("/proc/net/tcp").expect("/proc/net/tcp");
    let port = |addr: &str| u16::from_str_radix(addr.rsplit_once(':')?.1, 16).ok();
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let (tx, rx) = f.get(4)?.split_once(':')?;
            Some(TcpQueues {
                local_port: port(f.get(1)?)?,
                remote_port: port(f.get(2)?)?,
                unsent: u64::from_str_radix(tx, 16).ok()?,
                unread: u64::from_str_radix(rx, 16).ok()?,
            })
        })
        .collect()
}
