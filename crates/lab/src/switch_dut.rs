//! wirelab's own switch as a load test's DUT (`dut: {kind: switch}`;
//! issue 20): the switch pipeline on the DUT namespace's two ports, each
//! forwarding to the other as `wirelab bump` does, capturing every frame
//! as it does in a run. The tester measures what the switch forwards; the
//! switch's own account is its capture, written to `dut/trace.pcapng`,
//! and the integrity check of that capture against its port counters and
//! the kernel's (Lumina §3.5): whether the capture was complete at the
//! rate the tester offered.

use std::path::Path;
use std::time::Duration;

use serde::Serialize;
use wirelab_capture::Dumper;
use wirelab_dataplane::{Config, Switch};
use wirelab_netns::tester::{TesterLab, DUT_IN, DUT_OUT};

use crate::{During, Error};

/// Bytes of each frame the switch keeps (its default snap length).
const SNAP: u32 = 128;
/// The capture ring: 64 MiB, room for a burst the drain falls behind on.
const RING: u32 = 64 << 20;

pub struct SwitchDut {
    switch: Switch,
    dumper: Option<Dumper>,
    ns: String,
    rx_before: Vec<u64>,
    clock_offset: i128,
}

/// What the switch said of the run (`summary.json`'s `switch`).
#[derive(Debug, Clone, Serialize)]
pub struct SwitchDutSummary {
    pub integrity: wirelab_capture::Integrity,
    pub trace: String,
}

impl SwitchDut {
    /// Loads the switch, makes d0 and d1 its ports 1 and 2 forwarding to
    /// each other, starts draining its capture and attaches it.
    pub fn start(lab: &TesterLab) -> Result<SwitchDut, Error> {
        let switch = Switch::load(Config {
            snap_len: SNAP,
            ring_bytes: RING,
            max_conn: 1,
            ..Config::default()
        })
        .during("loading the switch")?;
        let ns = lab.dut_ns.clone();
        let idx = [DUT_IN, DUT_OUT]
            .iter()
            .map(|d| wirelab_netns::ifindex(&ns, d).during(format!("finding {d}")))
            .collect::<Result<Vec<_>, _>>()?;
        for i in 0..2 {
            let at = format!("adding port {}", i + 1);
            switch.add_port(idx[i], i as u32 + 1).during(at.clone())?;
            switch
                .set_default_out(i as u32 + 1, idx[1 - i], 2 - i as u32)
                .during(at)?;
        }
        let rx_before = rx(&ns)?;
        let clock_offset = wirelab_capture::monotonic_to_realtime_ns();
        let dumper = Dumper::start(&switch, Duration::ZERO).during("starting the capture")?;
        for (i, d) in [DUT_IN, DUT_OUT].iter().enumerate() {
            wirelab_netns::in_netns(&ns, || switch.attach_ingress(idx[i] as i32))
                .during(format!("entering {ns}"))?
                .during(format!("attaching the switch to {d}"))?;
        }
        Ok(SwitchDut {
            switch,
            dumper: Some(dumper),
            ns,
            rx_before,
            clock_offset,
        })
    }

    /// After the stream: the capture drained and written to `dir`, checked
    /// against the switch's and the kernel's counters.
    pub fn finish(mut self, dir: &Path) -> Result<SwitchDutSummary, Error> {
        // Whatever was in flight has arrived by now.
        std::thread::sleep(Duration::from_millis(20));
        let after = rx(&self.ns)?;
        let (counts, info) = crate::switch::port_records(
            &self.switch,
            [DUT_IN, DUT_OUT].iter().enumerate().map(|(i, d)| {
                let n = after[i] - self.rx_before[i];
                (i as u32 + 1, d.to_string(), n, n)
            }),
        )?;
        let seq = self
            .switch
            .mirror_seq()
            .during("reading the mirror sequence")?;
        let records = self
            .dumper
            .take()
            .expect("started with a dumper")
            .finish()
            .during("draining the capture")?;
        let integrity = wirelab_capture::check_integrity(&records, &counts, seq);
        let path = dir.join("trace.pcapng");
        wirelab_capture::write_pcapng(&path, &records, &info, SNAP, self.clock_offset)
            .during(format!("writing {}", path.display()))?;
        Ok(SwitchDutSummary {
            integrity,
            trace: path.display().to_string(),
        })
    }
}

/// Packets the kernel counted into d0 and d1: the capture's independent
/// witness.
fn rx(ns: &str) -> Result<Vec<u64>, Error> {
    [DUT_IN, DUT_OUT]
        .iter()
        .map(|d| wirelab_netns::link_rx_packets(ns, d))
        .collect::<Result<_, _>>()
        .during("reading the DUT's interface counters")
}
