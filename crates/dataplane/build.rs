use std::env;
use std::path::PathBuf;

use libbpf_cargo::SkeletonBuilder;

/// The skeleton opens the object it embeds; a pipeline linked with a user
/// discipline (src/ext.rs) must open through the same typed skeleton, so
/// the embedded bytes are routed through `crate::skel_object`, which hands
/// back either them or the linked pipeline.
const SKEL_OPEN: &str = "ObjectSkeletonConfigBuilder::new(DATA)";
const SKEL_OPEN_ROUTED: &str = "ObjectSkeletonConfigBuilder::new(crate::skel_object(DATA))";

fn main() {
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR is set by cargo"));
    let arch = env::var("CARGO_CFG_TARGET_ARCH").expect("target arch is set by cargo");
    let multiarch = match arch.as_str() {
        "x86_64" => "x86_64-linux-gnu",
        "aarch64" => "aarch64-linux-gnu",
        other => other,
    };
    for name in ["switch", "dctcp"] {
        let skel = out.join(format!("{name}.skel.rs"));
        SkeletonBuilder::new()
            .source(format!("bpf/{name}.bpf.c"))
            // Kept: the switch object is what a user discipline links with.
            .obj(out.join(format!("{name}.bpf.o")))
            .clang_args([
                "-I".to_string(),
                format!("/usr/include/{multiarch}"),
                "-Wall".to_string(),
            ])
            .build_and_generate(&skel)
            .unwrap_or_else(|e| {
                panic!("compiling bpf/{name}.bpf.c (is clang installed? `make deps`): {e}")
            });
        if name == "switch" {
            let text = std::fs::read_to_string(&skel).expect("reading the generated skeleton");
            assert!(
                text.matches(SKEL_OPEN).count() == 1,
                "the generated skeleton no longer opens its object with `{SKEL_OPEN}` \
                 (libbpf-cargo changed): update build.rs"
            );
            std::fs::write(&skel, text.replace(SKEL_OPEN, SKEL_OPEN_ROUTED))
                .expect("writing the skeleton");
        }
    }
    println!("cargo:rerun-if-changed=bpf");
}
