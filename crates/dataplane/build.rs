use std::env;
use std::path::PathBuf;

use libbpf_cargo::SkeletonBuilder;

fn main() {
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR is set by cargo"));
    let arch = env::var("CARGO_CFG_TARGET_ARCH").expect("target arch is set by cargo");
    let multiarch = match arch.as_str() {
        "x86_64" => "x86_64-linux-gnu",
        "aarch64" => "aarch64-linux-gnu",
        other => other,
    };
    for name in ["switch", "truth", "dctcp", "recorder", "load", "efsm"] {
        let skel = out.join(format!("{name}.skel.rs"));
        SkeletonBuilder::new()
            .source(format!("bpf/{name}.bpf.c"))
            // Kept: the objects are loaded from these bytes (src/object.rs),
            // and a user discipline links with the switch's.
            .obj(out.join(format!("{name}.bpf.o")))
            .clang_args([
                "-I".to_string(),
                format!("/usr/include/{multiarch}"),
                "-Wall".to_string(),
            ])
            .build_and_generate(&skel)
            .unwrap_or_else(|e| {
                panic!("compiling bpf/{name}.bpf.c (is clang installed? `make deps`): {e:#}")
            });
    }
    println!("cargo:rerun-if-changed=bpf");
}
