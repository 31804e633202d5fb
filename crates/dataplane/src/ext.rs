//! User vAQM disciplines: NetBump's Table 1 API (seed 003 §3.1) as C hooks
//! (`bpf/wirelab_ext.h`). `build` compiles a discipline with clang and
//! statically links it with the switch's own object (libbpf's BPF linker),
//! its hooks in place of the switch's weak defaults; `Switch::load_with`
//! loads that pipeline through the same path as the built-in one
//! (src/object.rs), and the kernel verifies it, so a broken discipline
//! fails with the verifier's log and nothing is loaded.
//!
//! Why not BPF freplace (replacing the hooks of a loaded switch): these
//! machines' kernel refuses every trampoline-attached program type with
//! EPERM (fentry and freplace alike, measured), and linking costs no
//! trampoline jump per call either. Why not recompile the switch from its
//! sources: linking uses the very object that was built and tested, and
//! the user's globals land after the switch's own, so the skeleton's types
//! for .rodata and .bss still describe the switch's part of them.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The header a discipline includes (`#include "wirelab_ext.h"`).
pub const HEADER: &str = include_str!("../bpf/wirelab_ext.h");

/// The hooks a discipline may define: Table 1's init, classify, vAQM,
/// estimateQlen, process, forward.
pub const HOOKS: [&str; 6] = [
    "wl_ext_init",
    "wl_ext_classify",
    "wl_ext_vaqm",
    "wl_ext_estimate_qlen",
    "wl_ext_process",
    "wl_ext_forward",
];

#[derive(Debug, thiserror::Error)]
pub enum CompileError {
    #[error("reading the discipline {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "running clang for {}: {source} (is clang installed? `make deps` installs it)",
        path.display()
    )]
    Clang {
        path: PathBuf,
        source: std::io::Error,
    },
    /// clang's own diagnostics, which name file, line and column.
    #[error("{} does not compile:\n{diagnostics}", path.display())]
    Diagnostics { path: PathBuf, diagnostics: String },
    #[error("{}: {problem}", path.display())]
    Hooks { path: PathBuf, problem: String },
    #[error("linking {} with the switch: {detail}", path.display())]
    Link { path: PathBuf, detail: String },
}

/// A user discipline linked into the switch pipeline, ready to load.
#[derive(Debug, Clone)]
pub struct Extension {
    /// The discipline's source, for messages.
    pub source: PathBuf,
    /// The hooks it defines, in `HOOKS` order.
    pub hooks: Vec<&'static str>,
    /// The linked pipeline object.
    pub object: Vec<u8>,
}

/// Compiles `source`, checks the hooks it defines and links it with the
/// switch, working in `work` (which must exist; nothing outside it is
/// written).
pub fn build(source: &Path, work: &Path) -> Result<Extension, CompileError> {
    let obj = compile(source, work)?;
    let hooks = hooks_defined(source, &obj)?;
    let switch = work.join("switch.bpf.o");
    let linked = work.join("pipeline.bpf.o");
    let link_err = |detail: String| CompileError::Link {
        path: source.to_path_buf(),
        detail,
    };
    std::fs::write(&switch, crate::SWITCH_OBJECT).map_err(|e| link_err(e.to_string()))?;
    let log = crate::with_libbpf_log(|| -> libbpf_rs::Result<()> {
        // The switch first: its sections come first in the output, so its
        // globals keep the offsets the skeleton was generated with.
        let mut l = libbpf_rs::Linker::new(&linked)?;
        l.add_file(&switch)?;
        l.add_file(&obj)?;
        l.link()
    });
    if let (Err(e), log) = log {
        return Err(link_err(format!("{e}\n{log}")));
    }
    let object = std::fs::read(&linked).map_err(|e| link_err(e.to_string()))?;
    Ok(Extension {
        source: source.to_path_buf(),
        hooks,
        object,
    })
}

/// The hooks `obj` defines, by its BTF: global functions named like a hook
/// must be one, and there must be at least one.
fn hooks_defined(source: &Path, obj: &Path) -> Result<Vec<&'static str>, CompileError> {
    use libbpf_rs::btf::{types::Func, types::Linkage, Btf};
    let problem = |problem: String| CompileError::Hooks {
        path: source.to_path_buf(),
        problem,
    };
    let none = || {
        problem(format!(
            "defines no hook: define one with the WL_* macros of wirelab_ext.h ({})",
            HOOKS.join(", ")
        ))
    };
    // clang -g writes no BTF for a file that defines nothing.
    let btf = Btf::from_path(obj).map_err(|_| none())?;
    let mut found = Vec::new();
    for f in btf.type_by_kind::<Func<'_>>() {
        if !matches!(f.linkage(), Linkage::Global) {
            continue;
        }
        let name = f
            .name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        match HOOKS.iter().find(|h| **h == name) {
            Some(h) => found.push(*h),
            // The switch's own functions (its stages are weak too) are
            // not for a discipline to replace.
            None if name.starts_with("wl_") => {
                return Err(problem(format!(
                    "defines `{name}`, which is no hook (names starting wl_ are the \
                     switch's); the hooks are {} (wirelab_ext.h)",
                    HOOKS.join(", ")
                )))
            }
            None => {}
        }
    }
    if found.is_empty() {
        return Err(none());
    }
    found.sort_by_key(|h| HOOKS.iter().position(|x| x == h));
    Ok(found)
}

fn multiarch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "x86_64-linux-gnu",
        "aarch64" => "aarch64-linux-gnu",
        other => other,
    }
}

/// Compiles the discipline `source` into `<work>/discipline.bpf.o`, with
/// the header written next to it.
fn compile(source: &Path, work: &Path) -> Result<PathBuf, CompileError> {
    // Read first: a missing file is the user's mistake, not clang's.
    std::fs::metadata(source).map_err(|e| CompileError::Read {
        path: source.to_path_buf(),
        source: e,
    })?;
    let include = work.join("include");
    let io = |e| CompileError::Read {
        path: include.join("wirelab_ext.h"),
        source: e,
    };
    std::fs::create_dir_all(&include).map_err(io)?;
    std::fs::write(include.join("wirelab_ext.h"), HEADER).map_err(io)?;
    let out = work.join("discipline.bpf.o");
    // -g: BTF, which the linker merges and the verifier checks global
    // functions by; -O2: the verifier needs clang's optimised code.
    let res = Command::new("clang")
        .args([
            "-O2",
            "-g",
            "-Wall",
            "-target",
            "bpf",
            "-fno-color-diagnostics",
        ])
        .arg("-I")
        .arg(&include)
        .arg("-I")
        .arg(format!("/usr/include/{}", multiarch()))
        .arg("-c")
        .arg(source)
        .arg("-o")
        .arg(&out)
        .output()
        .map_err(|e| CompileError::Clang {
            path: source.to_path_buf(),
            source: e,
        })?;
    if !res.status.success() {
        return Err(CompileError::Diagnostics {
            path: source.to_path_buf(),
            diagnostics: String::from_utf8_lossy(&res.stderr).trim_end().to_string(),
        });
    }
    Ok(out)
}
