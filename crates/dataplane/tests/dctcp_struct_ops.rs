//! The DCTCP struct_ops congestion control registers, is selectable by a
//! socket, and is gone when the guard drops. Needs root. What it does to a
//! window under marking is the lab's to show (specs/vaqm/).

#[allow(dead_code)]
mod common;
use common::have_bpf;
use wirelab_dataplane::dctcp::{registered, Dctcp, NAME};

#[test]
fn wl_dctcp_registers_is_selectable_and_unregisters() {
    if !have_bpf() {
        return;
    }
    assert!(!registered());
    let guard = Dctcp::register().expect("wl_dctcp loads");
    assert!(registered());
    // A socket can select it by name (root: CAP_NET_ADMIN).
    let s = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let fd = std::os::fd::AsFd::as_fd(&s);
    nix::sys::socket::setsockopt(
        &fd,
        nix::sys::socket::sockopt::TcpCongestion,
        &std::ffi::OsString::from(NAME),
    )
    .expect("TCP_CONGESTION wl_dctcp");
    let got = nix::sys::socket::getsockopt(&fd, nix::sys::socket::sockopt::TcpCongestion).unwrap();
    assert_eq!(got.to_string_lossy().trim_end_matches('\0'), NAME);
    drop(s);
    drop(guard);
    assert!(!registered());
}
