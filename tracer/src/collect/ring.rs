//! The ring-buffer reader: an `AsyncFd` over aya's `RingBuf`, woken by the kernel's epoll
//! notification — no polling thread.

use aya::maps::{MapData, RingBuf};
use tokio::io::unix::AsyncFd;

use crate::decode::{decode, DecodeError, Event};

/// Reads the eBPF ring buffer of events as they arrive, on the async runtime.
pub struct RingReader {
    fd: AsyncFd<RingBuf<MapData>>,
}

impl std::fmt::Debug for RingReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RingReader").finish_non_exhaustive()
    }
}

impl RingReader {
    /// Registers the ring's descriptor with the runtime; fails where it cannot be polled.
    pub fn new(ring: RingBuf<MapData>) -> std::io::Result<Self> {
        // SAFETY: the map's descriptor is owned by `ring`, which the AsyncFd owns for its whole
        // life, so it stays open and names the same map until both are dropped together.
        let fd = unsafe { AsyncFd::register(ring) }.map_err(std::io::Error::from)?;
        Ok(Self { fd })
    }

    /// Wait until records are available.
    pub async fn readable(&mut self) -> std::io::Result<()> {
        let mut guard = self.fd.readable_mut().await?;
        guard.clear_ready();
        Ok(())
    }

    /// Decode every record available now, in order; the sink gets the raw bytes too (for a
    /// recording).
    pub fn drain(&mut self, mut sink: impl FnMut(&[u8], Result<Event, DecodeError>)) -> usize {
        let ring = self.fd.get_mut();
        let mut n = 0;
        while let Some(item) = ring.next() {
            sink(&item, decode(&item));
            n += 1;
        }
        n
    }
}
