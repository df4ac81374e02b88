//! Waiting and liveness: a blocking receive spins, then arms the doorbell and looks once
//! more, then sleeps on the doorbell, the shm peers' pidfds and the network transports'
//! descriptors; periodic liveness looks notice peers that exited or stopped.

use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use quiver_transport::sys;

use super::Endpoint;
use crate::error::Result;
use crate::transport::wait::{Wait, SLEEP_SLICE};

impl Endpoint {
    /// One step of a blocking receive-side wait: spin, then arm the doorbell and re-check,
    /// then sleep on the doorbell and the peers' pidfds.
    pub(super) fn idle(&mut self, wait: &mut Wait, what: &'static str) -> Result<()> {
        let (spinning, periodic) = wait.spinning();
        if periodic {
            self.flush_inbound();
            let detect = self.config.detect;
            if detect.is_some_and(|detect| wait.liveness_due(&mut self.detection, detect)) {
                self.check_liveness();
            }
            wait.check_deadline(what)?;
        }
        if spinning {
            wait.pause();
            return Ok(());
        }
        if !wait.armed {
            // Arm, then let the caller look once more before we sleep.
            self.flush_inbound();
            self.doorbell.drain();
            self.doorbell.arm();
            wait.armed = true;
            return Ok(());
        }
        let deadline = wait.deadline();
        self.sleep(deadline);
        wait.armed = false;
        self.doorbell.drain();
        self.check_liveness();
        self.verify_inbound();
        wait.check_deadline(what)?;
        // Spin again after a wake-up: more traffic usually follows.
        wait.restart();
        Ok(())
    }

    /// Sleeps until the doorbell rings, an edge's descriptor is ready, the datagram
    /// engine's next timer, [`SLEEP_SLICE`] or `deadline`, whichever comes first.
    fn sleep(&mut self, deadline: Option<Instant>) {
        self.pollfds.clear();
        self.pollfds.push(libc::pollfd {
            fd: self.doorbell.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        });
        for fd in self.inbound.iter().filter_map(|inb| inb.wake_fd()) {
            self.pollfds.push(libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            });
        }
        self.pollfds
            .extend(self.outbound.iter().filter_map(|out| out.wake_fd()));
        self.local.rma.wake_fds(&mut self.pollfds);
        self.pollfds
            .extend(self.outbound.iter().filter_map(|out| out.rma_wake()));
        let mut slice = SLEEP_SLICE;
        if let Some(engine) = &self.local.dgram {
            self.pollfds.push(libc::pollfd {
                fd: engine.raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            });
            slice = slice.min(engine.timeout_within(SLEEP_SLICE));
        }
        if let Some(d) = deadline {
            slice = slice.min(d.saturating_duration_since(Instant::now()));
        }
        let _ = sys::poll(&mut self.pollfds, Some(slice));
    }

    /// Publishes consumed ring space to every shm sender.
    pub(super) fn flush_inbound(&mut self) {
        for inb in &mut self.inbound {
            inb.publish_consumed();
        }
    }

    pub(super) fn check_liveness_throttled(&mut self) {
        if self.last_liveness_check.elapsed() >= Duration::from_millis(10) {
            self.check_liveness();
        }
    }

    /// Notices peers that exited or stopped: inbound edges are drained and then report it;
    /// outbound edges fail their pending sends.
    fn check_liveness(&mut self) {
        let now = Instant::now();
        self.last_liveness_check = now;
        let detect = self.config.detect;
        for inb in &mut self.inbound {
            inb.check_liveness(now, detect, self.addr);
        }
        let super::Parts {
            outbound, mut cx, ..
        } = self.parts();
        for out in outbound.iter_mut() {
            out.check_liveness(now, &mut cx);
        }
        self.detection.record(now);
    }

    /// Re-reads the shared rings' headers while idle: a scribbled ring becomes an error on
    /// its connection now rather than a silent hang later.
    fn verify_inbound(&mut self) {
        for inb in &mut self.inbound {
            inb.verify();
        }
    }
}
