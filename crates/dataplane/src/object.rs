//! Opening the pipeline's BPF objects from their bytes, with maps and
//! programs found by name and the `const volatile` / global sections
//! typed by the skeleton's BTF-generated structs.
//!
//! Why not the generated skeleton's own `open`: it can only open the
//! object it embeds, and a switch linked with a user discipline (src/ext.rs)
//! is another object with the same maps and programs. One open path serves
//! both, with no edit to generated code: the skeleton is used for its
//! types (`skel::types`), which are what must never be hand-copied.

use libbpf_rs::{AsRawLibbpf, MapCore};

use crate::Error;

/// Opens `bytes` as object `name` (libbpf prefixes its section maps with it).
pub(crate) fn open(name: &str, bytes: &[u8]) -> libbpf_rs::Result<libbpf_rs::OpenObject> {
    let mut b = libbpf_rs::ObjectBuilder::default();
    b.name(name)?;
    b.open_memory(bytes)
}

/// The open map called `name`, or the one whose name ends with it (a
/// section map: `<object>.rodata`).
pub(crate) fn open_map<'o>(
    obj: &'o mut libbpf_rs::OpenObject,
    name: &str,
) -> Result<libbpf_rs::OpenMapMut<'o>, Error> {
    obj.maps_mut()
        .find(|m| is_named(&m.name().to_string_lossy(), name))
        .ok_or_else(|| missing("map", name))
}

fn is_named(map: &str, name: &str) -> bool {
    map == name || (name.starts_with('.') && map.ends_with(name))
}

fn missing(what: &str, name: &str) -> Error {
    Error::Config(format!(
        "the BPF object has no {what} `{name}` (built from other sources than this crate?)"
    ))
}

/// Edits an open object's section (`.rodata`) as the skeleton's type `T`
/// for it. The section may be shorter than `T` by `T`'s trailing padding,
/// or longer when a linked user discipline's globals follow the switch's.
pub(crate) fn edit_section<T: Copy>(
    obj: &mut libbpf_rs::OpenObject,
    section: &str,
    edit: impl FnOnce(&mut T),
) -> Result<(), Error> {
    let mut map = open_map(obj, section)?;
    let bytes = map
        .initial_value_mut()
        .ok_or_else(|| Error::Config(format!("{section} has no initial value")))?;
    check_section_size::<T>(section, bytes.len())?;
    // SAFETY: T is a plain-data skeleton type (integers and arrays of them,
    // explicit padding), so any bytes, zeros too, are a valid T; at most
    // size_of::<T>() bytes are written into it.
    unsafe {
        let mut v: T = std::mem::zeroed();
        let n = bytes.len().min(std::mem::size_of::<T>());
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), (&mut v as *mut T).cast::<u8>(), n);
        edit(&mut v);
        std::ptr::copy_nonoverlapping((&v as *const T).cast::<u8>(), bytes.as_mut_ptr(), n);
    }
    Ok(())
}

fn check_section_size<T>(section: &str, len: usize) -> Result<(), Error> {
    let want = std::mem::size_of::<T>();
    if len + std::mem::align_of::<T>() <= want {
        return Err(Error::Config(format!(
            "{section} is {len} bytes, its generated type {want}: the object and the skeleton differ"
        )));
    }
    Ok(())
}

/// Opens and loads object `name` from `bytes`, its `.rodata` set by
/// `rodata` (the skeleton's type for it); if it fails, the error carries
/// libbpf's log (the verifier's).
pub(crate) fn load_with_rodata<R: Copy>(
    name: &str,
    bytes: &[u8],
    rodata: impl FnOnce(&mut R),
) -> Result<libbpf_rs::Object, Error> {
    let (res, log) = crate::with_libbpf_log(|| {
        let load = |source| Error::Load {
            source,
            log: String::new(),
        };
        let mut open = open(name, bytes).map_err(load)?;
        edit_section(&mut open, ".rodata", rodata)?;
        open.load().map_err(load)
    });
    res.map_err(|e| match e {
        Error::Load { source, .. } => Error::Load { source, log },
        e => e,
    })
}

/// A loaded object's writable global section (`.bss`), shared with the
/// kernel through the mmap libbpf keeps for it, as the skeleton's type.
/// Reads and writes are volatile: the programs change it under us.
pub(crate) struct Section<T> {
    ptr: std::ptr::NonNull<T>,
}

// SAFETY: the memory is a shared mapping of a BPF map, alive as long as
// the Object that owns the Section's pointer (the owner keeps both and
// drops the Section first); accesses are single volatile field reads and
// writes of plain integers.
unsafe impl<T> Send for Section<T> {}
unsafe impl<T> Sync for Section<T> {}

impl<T> Section<T> {
    pub(crate) fn of(obj: &libbpf_rs::Object, section: &str) -> Result<Section<T>, Error> {
        let map = obj
            .maps()
            .find(|m| is_named(&m.name().to_string_lossy(), section))
            .ok_or_else(|| missing("map", section))?;
        let mut size = 0;
        // SAFETY: a valid map of a loaded object; libbpf returns its mmap
        // (live after load for a global section) and its size.
        let p = unsafe {
            libbpf_rs::libbpf_sys::bpf_map__initial_value(
                map.as_libbpf_object().as_ptr(),
                &mut size,
            )
        };
        check_section_size::<T>(section, size as usize)?;
        let ptr = std::ptr::NonNull::new(p.cast::<T>())
            .ok_or_else(|| Error::Config(format!("{section} is not memory-mapped")))?;
        Ok(Section { ptr })
    }

    /// Reads one field (`|s| addr_of!((*s).field)`).
    pub(crate) fn read<F: Copy>(&self, field: impl FnOnce(*const T) -> *const F) -> F {
        // SAFETY: the field lies inside the section (size checked in `of`,
        // the mapping is page-sized), which lives as long as self.
        unsafe { std::ptr::read_volatile(field(self.ptr.as_ptr())) }
    }

    /// Writes one field.
    pub(crate) fn write<F: Copy>(&self, field: impl FnOnce(*mut T) -> *mut F, v: F) {
        // SAFETY: as in `read`.
        unsafe { std::ptr::write_volatile(field(self.ptr.as_ptr()), v) }
    }
}

/// An owned handle (a dup'ed fd) on a loaded object's map.
pub(crate) fn map_handle(
    obj: &libbpf_rs::Object,
    name: &str,
) -> Result<libbpf_rs::MapHandle, Error> {
    let map = obj
        .maps()
        .find(|m| m.name() == name)
        .ok_or_else(|| missing("map", name))?;
    libbpf_rs::MapHandle::try_from(&map).map_err(|source| Error::Map {
        what: format!("duplicating the fd of map `{name}`"),
        source,
    })
}

/// A loaded object's program, by name (mutable: attaching and test runs
/// need it).
pub(crate) fn program<'o>(obj: &'o libbpf_rs::Object, name: &str) -> libbpf_rs::ProgramMut<'o> {
    obj.progs_mut()
        .find(|p| p.name() == name)
        .unwrap_or_else(|| panic!("program `{name}` was checked when the object loaded"))
}

/// The kernel's `bpf_prog_info` of a loaded program (BPF_OBJ_GET_INFO_BY_FD):
/// its runs and run time (counted while stats are on), recursion misses,
/// the instructions the verifier walked. None if the call fails.
pub(crate) fn prog_info(
    prog: &libbpf_rs::ProgramMut<'_>,
) -> Option<libbpf_rs::libbpf_sys::bpf_prog_info> {
    use std::os::fd::{AsFd, AsRawFd};
    // SAFETY: a zeroed bpf_prog_info is valid plain data; the kernel writes
    // at most `len` bytes of it, for the fd of a loaded program.
    let mut info: libbpf_rs::libbpf_sys::bpf_prog_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of_val(&info) as u32;
    let rc = unsafe {
        libbpf_rs::libbpf_sys::bpf_prog_get_info_by_fd(
            prog.as_fd().as_raw_fd(),
            &mut info,
            &mut len,
        )
    };
    (rc == 0).then_some(info)
}

/// Checks that a loaded object has these programs.
pub(crate) fn check_programs(obj: &libbpf_rs::Object, names: &[&str]) -> Result<(), Error> {
    for n in names {
        if !obj.progs().any(|p| p.name() == *n) {
            return Err(missing("program", n));
        }
    }
    Ok(())
}

/// A set of maps of a loaded object, one owned handle per field, found by
/// the field's name when the object loads (cilium/ebpf's `LoadAndAssign`).
macro_rules! maps {
    ($(#[$m:meta])* $vis:vis struct $name:ident { $($(#[$fm:meta])* $field:ident),* $(,)? }) => {
        $(#[$m])*
        $vis struct $name { $($(#[$fm])* pub(crate) $field: libbpf_rs::MapHandle,)* }
        impl $name {
            pub(crate) fn find(obj: &libbpf_rs::Object) -> Result<$name, $crate::Error> {
                Ok($name { $($field: $crate::object::map_handle(obj, stringify!($field))?,)* })
            }
        }
    };
}
pub(crate) use maps;

/// A per-CPU array's `u64` at `key`, summed over CPUs (`what` names it
/// in an error).
pub(crate) fn per_cpu_sum(
    map: &libbpf_rs::MapHandle,
    key: u32,
    what: &str,
) -> Result<u64, crate::Error> {
    let per_cpu = map
        .lookup_percpu(&key.to_ne_bytes(), libbpf_rs::MapFlags::ANY)
        .map_err(crate::map_err(what))?
        .unwrap_or_default();
    Ok(per_cpu
        .iter()
        .filter_map(|c| c.get(..8))
        .map(|b| u64::from_ne_bytes(b.try_into().expect("8 bytes")))
        .sum())
}

/// Attaches `prog` to tc ingress of `ifindex` (handle 1, priority 1,
/// replacing what is there), creating the clsact qdisc if needed. The
/// caller must be in the device's namespace.
pub(crate) fn attach_tc_ingress(
    prog: &libbpf_rs::ProgramMut<'_>,
    ifindex: i32,
) -> Result<(), crate::Error> {
    use std::os::fd::AsFd;
    let mut hook = libbpf_rs::TcHookBuilder::new(prog.as_fd())
        .ifindex(ifindex)
        .replace(true)
        .handle(1)
        .priority(1)
        .hook(libbpf_rs::TC_INGRESS);
    hook.create()
        .and_then(|mut h| h.attach())
        .map_err(|source| crate::Error::Attach { ifindex, source })?;
    Ok(())
}
