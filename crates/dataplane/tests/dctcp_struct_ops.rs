//! The DCTCP struct_ops congestion control registers under this process's
//! name, is selectable by a socket, is shared by the process's runs, and is
//! gone when the last guard drops. Needs root. What it does to a window
//! under marking is the lab's to show (specs/vaqm/); two processes at once
//! are the lab tests' (`two_processes_run_dctcp_at_once`).

#[allow(dead_code)]
mod common;
use common::have_bpf;
use wirelab_dataplane::dctcp::{name, registered, registered_names, Dctcp};

#[test]
fn wl_dctcp_registers_is_selectable_is_shared_and_unregisters() {
    if !have_bpf() {
        return;
    }
    assert!(!registered());
    let pid = name().strip_prefix("wl_dctcp_").expect("the prefix");
    assert_eq!(u32::from_str_radix(pid, 36).unwrap(), std::process::id());
    let first = Dctcp::shared().expect("wl_dctcp loads");
    assert!(registered());
    assert!(registered_names().iter().any(|n| n == name()));
    // A second run of the process shares the registration.
    let second = Dctcp::shared().expect("shared");
    assert!(std::sync::Arc::ptr_eq(&first, &second));
    // A socket can select it by name (root: CAP_NET_ADMIN).
    let s = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let fd = std::os::fd::AsFd::as_fd(&s);
    nix::sys::socket::setsockopt(
        &fd,
        nix::sys::socket::sockopt::TcpCongestion,
        &std::ffi::OsString::from(name()),
    )
    .expect("TCP_CONGESTION wl_dctcp_<pid>");
    let got = nix::sys::socket::getsockopt(&fd, nix::sys::socket::sockopt::TcpCongestion).unwrap();
    assert_eq!(got.to_string_lossy().trim_end_matches('\0'), name());
    drop(s);
    drop(first);
    assert!(registered(), "the second run still holds it");
    drop(second);
    assert!(!registered());
    // And the next run registers it afresh.
    let again = Dctcp::shared().expect("registers again");
    assert!(registered());
    drop(again);
    assert!(!registered());
}
