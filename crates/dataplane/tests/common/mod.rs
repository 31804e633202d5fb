//! What every `BPF_PROG_TEST_RUN` fixture file needs: the root check and
//! one frame through the switch with the mirror records it produced.

use std::cell::RefCell;
use std::rc::Rc;

use wirelab_dataplane::{parse_mirror_record, wl_mirror_hdr, Switch};

pub fn have_bpf() -> bool {
    if nix::unistd::Uid::effective().is_root() {
        return true;
    }
    eprintln!("SKIPPED: BPF_PROG_TEST_RUN needs root (CAP_BPF + CAP_NET_ADMIN)");
    false
}

/// Runs one frame: (verdict, output bytes, the mirror records waiting in
/// the ring afterwards, oldest first).
pub fn run_frame(sw: &Switch, input: &[u8]) -> (u32, Vec<u8>, Vec<(wl_mirror_hdr, Vec<u8>)>) {
    let (v, out) = sw.test_run(input).expect("test run");
    let got: Rc<RefCell<Vec<(wl_mirror_hdr, Vec<u8>)>>> = Rc::default();
    let sink = got.clone();
    let mut b = libbpf_rs::RingBufferBuilder::new();
    b.add(sw.ring(), move |d: &[u8]| {
        let (h, data) = parse_mirror_record(d).expect("record parses");
        sink.borrow_mut().push((h, data.to_vec()));
        0
    })
    .unwrap();
    // Records are submitted without a wakeup; consume() reads them anyway.
    b.build().unwrap().consume().unwrap();
    let records = got.take();
    (v, out, records)
}
