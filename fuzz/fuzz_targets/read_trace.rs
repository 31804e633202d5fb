//! Any bytes as a pcap/pcapng file, then every analyzer over what was read.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    wirelab_analyze::fuzzing::read_and_analyze(data);
});
