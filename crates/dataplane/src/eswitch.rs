//! The eSwitch stage's tables from user space (bpf/stage_eswitch.h):
//! ScalaCN's flow tables (seed 001 Fig. 8), each an ordered list of masks
//! with their entries, searched one mask after another.

use libbpf_rs::{MapCore, MapFlags};

use crate::{bytes_of, from_bytes, map_err, types, Error, Switch};

/// Tables, masks per table, entries in all, tables a packet may pass:
/// the program's own limits (the `wl_limits` enum, through BTF).
pub const MAX_TABLES: u32 = types::wl_limits::WL_ES_MAX_TABLES.0 as u32;
pub const MAX_MASKS: u32 = types::wl_limits::WL_ES_MAX_MASKS.0 as u32;
pub const MAX_ENTRIES: u32 = types::wl_limits::WL_ES_MAX_ENTRIES.0 as u32;
pub const MAX_CHAIN: u32 = types::wl_limits::WL_ES_MAX_CHAIN.0 as u32;

/// The wide match: a mask's bits, or an entry's key (before masking).
/// Addresses and ports as on the wire.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Match {
    pub dmac: [u8; 6],
    pub smac: [u8; 6],
    pub saddr: [u8; 4],
    pub daddr: [u8; 4],
    pub sport: u16,
    pub dport: u16,
    pub proto: u8,
    pub in_port: u8,
    pub vlan: u16,
    pub vni: u32,
}

impl Match {
    /// Every bit of every field: an exact-match mask.
    pub fn all() -> Match {
        Match {
            dmac: [0xff; 6],
            smac: [0xff; 6],
            saddr: [0xff; 4],
            daddr: [0xff; 4],
            sport: 0xffff,
            dport: 0xffff,
            proto: 0xff,
            in_port: 0xff,
            vlan: 0xffff,
            vni: u32::MAX,
        }
    }

    /// The first `len` bits of an IPv4 address (a prefix mask).
    pub fn prefix(len: u8) -> [u8; 4] {
        let m = if len == 0 {
            0
        } else {
            u32::MAX << (32 - u32::from(len.min(32)))
        };
        m.to_be_bytes()
    }

    /// The fields under mask `m` (what an entry of that mask compares).
    pub fn and(&self, m: &Match) -> Match {
        let b6 = |a: [u8; 6], b: [u8; 6]| std::array::from_fn(|i| a[i] & b[i]);
        let b4 = |a: [u8; 4], b: [u8; 4]| std::array::from_fn(|i| a[i] & b[i]);
        Match {
            dmac: b6(self.dmac, m.dmac),
            smac: b6(self.smac, m.smac),
            saddr: b4(self.saddr, m.saddr),
            daddr: b4(self.daddr, m.daddr),
            sport: self.sport & m.sport,
            dport: self.dport & m.dport,
            proto: self.proto & m.proto,
            in_port: self.in_port & m.in_port,
            vlan: self.vlan & m.vlan,
            vni: self.vni & m.vni,
        }
    }

    fn of_key(k: &types::wl_es_key) -> Match {
        Match {
            dmac: k.dmac,
            smac: k.smac,
            saddr: k.saddr.to_ne_bytes(),
            daddr: k.daddr.to_ne_bytes(),
            sport: u16::from_be(k.sport),
            dport: u16::from_be(k.dport),
            proto: k.proto,
            in_port: k.in_port,
            vlan: k.vlan,
            vni: k.vni,
        }
    }

    /// How many bits the mask compares: ScalaCN's mask length LM (§4.3).
    pub fn bits(&self) -> u32 {
        let ones = |b: &[u8]| b.iter().map(|x| x.count_ones()).sum::<u32>();
        ones(&self.dmac)
            + ones(&self.smac)
            + ones(&self.saddr)
            + ones(&self.daddr)
            + self.sport.count_ones()
            + self.dport.count_ones()
            + self.proto.count_ones()
            + self.in_port.count_ones()
            + self.vlan.count_ones()
            + self.vni.count_ones()
    }

    fn key(&self, table: u32, mask: u32) -> types::wl_es_key {
        types::wl_es_key {
            table,
            mask,
            dmac: self.dmac,
            smac: self.smac,
            saddr: u32::from_ne_bytes(self.saddr),
            daddr: u32::from_ne_bytes(self.daddr),
            sport: self.sport.to_be(),
            dport: self.dport.to_be(),
            proto: self.proto,
            in_port: self.in_port,
            vlan: self.vlan,
            vni: self.vni,
        }
    }
}

/// What an entry does with a packet it matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Count it; the MAC table forwards it.
    Count,
    Forward {
        ifindex: u32,
        port: u32,
    },
    Drop,
    /// Search this table next.
    Goto(u32),
    /// VXLAN-encapsulate (RFC 7348), then out of this port.
    Encap {
        ifindex: u32,
        port: u32,
        tunnel: Tunnel,
    },
    /// Strip a VXLAN packet's outer headers, then out of this port.
    Decap {
        ifindex: u32,
        port: u32,
    },
    /// VXLAN-encapsulate, then search this table with the outer headers
    /// (local encap and remote decap in one switch).
    EncapGoto {
        tunnel: Tunnel,
        table: u32,
    },
}

/// An encapsulation's outer headers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tunnel {
    pub dmac: [u8; 6],
    pub smac: [u8; 6],
    pub saddr: [u8; 4],
    pub daddr: [u8; 4],
    /// 24 bits.
    pub vni: u32,
    /// The outer UDP source port; 0: from the flow's hash (RFC 7348 §5).
    pub sport: u16,
    /// 0: 64.
    pub ttl: u8,
}

/// Header fields an entry rewrites before its action (OpenFlow's
/// set_field): on the packet as it matched, and on the key a later table
/// searches with. Addresses and ports as on the wire; checksums are
/// patched (RFC 1624). Ports are rewritten on TCP and UDP packets only.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Rewrite {
    pub dmac: Option<[u8; 6]>,
    pub smac: Option<[u8; 6]>,
    pub saddr: Option<[u8; 4]>,
    pub daddr: Option<[u8; 4]>,
    pub sport: Option<u16>,
    pub dport: Option<u16>,
}

impl Rewrite {
    pub const NONE: Rewrite = Rewrite {
        dmac: None,
        smac: None,
        saddr: None,
        daddr: None,
        sport: None,
        dport: None,
    };

    fn raw(&self) -> types::wl_es_set {
        use types::wl_es_set_field as F;
        let mut fields = 0u32;
        let mut bit = |on: bool, f: F| {
            if on {
                fields |= f.0;
            }
        };
        bit(self.dmac.is_some(), F::WL_ES_SET_DMAC);
        bit(self.smac.is_some(), F::WL_ES_SET_SMAC);
        bit(self.saddr.is_some(), F::WL_ES_SET_SADDR);
        bit(self.daddr.is_some(), F::WL_ES_SET_DADDR);
        bit(self.sport.is_some(), F::WL_ES_SET_SPORT);
        bit(self.dport.is_some(), F::WL_ES_SET_DPORT);
        types::wl_es_set {
            fields,
            dmac: self.dmac.unwrap_or_default(),
            smac: self.smac.unwrap_or_default(),
            saddr: u32::from_ne_bytes(self.saddr.unwrap_or_default()),
            daddr: u32::from_ne_bytes(self.daddr.unwrap_or_default()),
            sport: self.sport.unwrap_or(0).to_be(),
            dport: self.dport.unwrap_or(0).to_be(),
        }
    }

    fn of(w: &types::wl_es_set) -> Rewrite {
        use types::wl_es_set_field as F;
        let on = |f: F| w.fields & f.0 != 0;
        Rewrite {
            dmac: on(F::WL_ES_SET_DMAC).then_some(w.dmac),
            smac: on(F::WL_ES_SET_SMAC).then_some(w.smac),
            saddr: on(F::WL_ES_SET_SADDR).then_some(w.saddr.to_ne_bytes()),
            daddr: on(F::WL_ES_SET_DADDR).then_some(w.daddr.to_ne_bytes()),
            sport: on(F::WL_ES_SET_SPORT).then_some(u16::from_be(w.sport)),
            dport: on(F::WL_ES_SET_DPORT).then_some(u16::from_be(w.dport)),
        }
    }
}

impl Action {
    fn of(a: &types::wl_es_action) -> Option<Action> {
        use types::wl_es_kind as K;
        let t = &a.tun;
        Some(match K(a.kind as _) {
            K::WL_ES_COUNT => Action::Count,
            K::WL_ES_FORWARD => Action::Forward {
                ifindex: a.ifindex,
                port: a.port,
            },
            K::WL_ES_DROP => Action::Drop,
            K::WL_ES_GOTO => Action::Goto(a.goto_table),
            K::WL_ES_ENCAP => Action::Encap {
                ifindex: a.ifindex,
                port: a.port,
                tunnel: Tunnel {
                    dmac: t.dmac,
                    smac: t.smac,
                    saddr: t.saddr.to_ne_bytes(),
                    daddr: t.daddr.to_ne_bytes(),
                    vni: t.vni,
                    sport: u16::from_be(t.sport),
                    ttl: t.ttl,
                },
            },
            K::WL_ES_DECAP => Action::Decap {
                ifindex: a.ifindex,
                port: a.port,
            },
            K::WL_ES_ENCAP_GOTO => Action::EncapGoto {
                tunnel: Tunnel {
                    dmac: t.dmac,
                    smac: t.smac,
                    saddr: t.saddr.to_ne_bytes(),
                    daddr: t.daddr.to_ne_bytes(),
                    vni: t.vni,
                    sport: u16::from_be(t.sport),
                    ttl: t.ttl,
                },
                table: a.goto_table,
            },
            _ => return None,
        })
    }
}

/// A flow that hit a cascading mask of a table with a hyper mask, as the
/// stage reported it (ScalaCN §4.3: a candidate for activation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Learned {
    pub table: u32,
    /// The packet's whole key.
    pub fields: Match,
    /// The mask it hit, and that entry's action.
    pub mask: u32,
    pub action: Action,
    /// And the fields it rewrites.
    pub set: Rewrite,
    /// CLOCK_MONOTONIC ns of its first and latest report, and packets.
    pub first_ns: u64,
    pub last_ns: u64,
    pub pkts: u64,
}

/// A flow the slow path saw (a table miss on a switch with one): the
/// control plane's cue to offload it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Upcall {
    /// The table it missed in.
    pub table: u32,
    /// The packet's whole key, as that table saw it.
    pub fields: Match,
    /// CLOCK_MONOTONIC ns of its first and latest miss, and misses.
    pub first_ns: u64,
    pub last_ns: u64,
    pub pkts: u64,
}

impl Tunnel {
    fn raw(&self) -> Result<types::wl_es_tunnel, Error> {
        if self.vni >= 1 << 24 {
            return Err(Error::Config(format!("VNI {}: 24 bits", self.vni)));
        }
        Ok(types::wl_es_tunnel {
            dmac: self.dmac,
            smac: self.smac,
            saddr: u32::from_ne_bytes(self.saddr),
            daddr: u32::from_ne_bytes(self.daddr),
            vni: self.vni,
            sport: self.sport.to_be(),
            ttl: self.ttl,
            ..Default::default()
        })
    }
}

/// One table's totals over every CPU.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TableStats {
    pub pkts: u64,
    pub visited: u64,
    /// The searches' time, measured in the stage (`table_ns`).
    pub search_ns: u64,
}

/// The distribution of the timed searches' nanoseconds (log-linear
/// buckets, `wirelab_load::hist`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SearchHist {
    /// Per table, each search of it.
    pub tables: Vec<Vec<u64>>,
    /// Per packet, its searches over every table.
    pub packet: Vec<u64>,
}

/// The stage's totals over every CPU.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Packets that entered the first table.
    pub pkts: u64,
    /// Masks searched, over all packets and tables.
    pub visited: u64,
    /// Packets no table matched (left to the MAC table).
    pub misses: u64,
    pub drops: u64,
    /// Packets still going to another table after `MAX_CHAIN`.
    pub loops: u64,
    pub encaps: u64,
    pub decaps: u64,
    /// Encapsulations or decapsulations that failed (dropped).
    pub tunnel_errors: u64,
    /// Packets an entry rewrote, and rewrites that could not be made (an
    /// address on a packet that is not IPv4; dropped).
    pub rewrites: u64,
    pub rewrite_errors: u64,
    /// Per table: packets that searched it, masks they searched there, and
    /// the nanoseconds the searches took.
    pub tables: [TableStats; MAX_TABLES as usize],
    /// With a slow path: misses it forwarded, and misses past its
    /// capacity (dropped).
    pub slow_pkts: u64,
    pub slow_drops: u64,
}

/// Every (key, report) of a map of flows the stage reports (`es_learned`,
/// `es_upcalls`: LRU hashes keyed by the packet's whole key). A key gone
/// between the walk and its lookup (evicted) is skipped.
fn flow_reports<V: Copy>(
    map: &impl MapCore,
    what: &'static str,
) -> Result<Vec<(types::wl_es_key, V)>, Error> {
    let mut out = Vec::new();
    for k in map.keys() {
        let Some(v) = map.lookup(&k, MapFlags::ANY).map_err(map_err(what))? else {
            continue;
        };
        if let (Some(key), Some(v)) = (from_bytes(&k), from_bytes(&v)) {
            out.push((key, v));
        }
    }
    Ok(out)
}

/// Deletes a flow's report; one already gone is no error.
fn forget_flow(
    map: &impl MapCore,
    table: u32,
    fields: &Match,
    what: &'static str,
) -> Result<(), Error> {
    match map.delete(bytes_of(&fields.key(table, 0))) {
        Err(e) if e.kind() == libbpf_rs::ErrorKind::NotFound => Ok(()),
        r => r.map_err(map_err(what)),
    }
}

/// (lookups, hits) of one mask: its per-CPU counters summed.
fn mask_stats_sum<'a>(per_cpu: impl Iterator<Item = &'a [u8]>) -> (u64, u64) {
    per_cpu
        .filter_map(from_bytes::<types::wl_es_mask_stats>)
        .fold((0, 0), |(l, h), s| (l + s.lookups, h + s.hits))
}

fn check(table: u32, mask: u32) -> Result<u32, Error> {
    if table >= MAX_TABLES || mask >= MAX_MASKS {
        return Err(Error::Config(format!(
            "flow table {table} mask {mask}: the eSwitch has tables 0..{MAX_TABLES}, masks 0..{MAX_MASKS}"
        )));
    }
    Ok(table * MAX_MASKS + mask)
}

impl Switch {
    /// Mask `id` of `table` selects these bits (a mask not in the table's
    /// order is never searched).
    pub fn set_es_mask(&self, table: u32, id: u32, bits: &Match) -> Result<(), Error> {
        let slot = check(table, id)?;
        self.maps
            .es_masks
            .update(
                &slot.to_ne_bytes(),
                bytes_of(&bits.key(0, 0)),
                MapFlags::ANY,
            )
            .map_err(map_err(format!("setting flow table {table} mask {id}")))
    }

    fn mask_bits(&self, table: u32, id: u32) -> Result<Match, Error> {
        let slot = check(table, id)?;
        let v = self
            .maps
            .es_masks
            .lookup(&slot.to_ne_bytes(), MapFlags::ANY)
            .map_err(map_err(format!("reading flow table {table} mask {id}")))?;
        let k: types::wl_es_key = v.and_then(|b| from_bytes(&b)).unwrap_or_default();
        Ok(Match::of_key(&k))
    }

    /// An entry of mask `id`: packets whose fields, under the mask, equal
    /// `fields` under it.
    pub fn add_es_entry(
        &self,
        table: u32,
        id: u32,
        fields: &Match,
        action: Action,
    ) -> Result<(), Error> {
        self.add_es_entry_rewriting(table, id, fields, action, &Rewrite::NONE)
    }

    /// An entry that rewrites `set` before its action.
    pub fn add_es_entry_rewriting(
        &self,
        table: u32,
        id: u32,
        fields: &Match,
        action: Action,
        set: &Rewrite,
    ) -> Result<(), Error> {
        let key = fields.and(&self.mask_bits(table, id)?).key(table, id);
        use types::wl_es_kind as K;
        let mut tun = types::wl_es_tunnel::default();
        let (kind, ifindex, port, goto_table) = match action {
            Action::Count => (K::WL_ES_COUNT, 0, 0, 0),
            Action::Forward { ifindex, port } => (K::WL_ES_FORWARD, ifindex, port, 0),
            Action::Drop => (K::WL_ES_DROP, 0, 0, 0),
            Action::Goto(t) => {
                check(t, 0)?;
                (K::WL_ES_GOTO, 0, 0, t)
            }
            Action::Encap {
                ifindex,
                port,
                tunnel: t,
            } => {
                tun = t.raw()?;
                (K::WL_ES_ENCAP, ifindex, port, 0)
            }
            Action::EncapGoto { tunnel: t, table } => {
                check(table, 0)?;
                tun = t.raw()?;
                (K::WL_ES_ENCAP_GOTO, 0, 0, table)
            }
            Action::Decap { ifindex, port } => (K::WL_ES_DECAP, ifindex, port, 0),
        };
        let v = types::wl_es_action {
            kind: kind.0 as u32,
            ifindex,
            port,
            goto_table,
            tun,
            set: set.raw(),
            ..Default::default()
        };
        self.maps
            .es_entries
            .update(bytes_of(&key), bytes_of(&v), MapFlags::ANY)
            .map_err(map_err(format!(
                "adding an entry to flow table {table} mask {id}"
            )))
    }

    /// Removes an entry (as an idle-flow reaper or the control plane does).
    pub fn remove_es_entry(&self, table: u32, id: u32, fields: &Match) -> Result<(), Error> {
        let key = fields.and(&self.mask_bits(table, id)?).key(table, id);
        self.maps
            .es_entries
            .delete(bytes_of(&key))
            .map_err(map_err(format!(
                "removing an entry of flow table {table} mask {id}"
            )))
    }

    /// An entry's hits: (packets, bytes); None if there is no such entry.
    pub fn es_entry_hits(
        &self,
        table: u32,
        id: u32,
        fields: &Match,
    ) -> Result<Option<(u64, u64)>, Error> {
        Ok(self.es_entries_hits(table, id, std::slice::from_ref(fields))?[0])
    }

    /// Several entries' hits of one mask, its bits read once (a control
    /// loop reads every flow of a hyper mask at each look).
    pub fn es_entries_hits(
        &self,
        table: u32,
        id: u32,
        fields: &[Match],
    ) -> Result<Vec<Option<(u64, u64)>>, Error> {
        let bits = self.mask_bits(table, id)?;
        fields
            .iter()
            .map(|f| {
                let key = f.and(&bits).key(table, id);
                let v = self
                    .maps
                    .es_entries
                    .lookup(bytes_of(&key), MapFlags::ANY)
                    .map_err(map_err("reading a flow-table entry"))?;
                Ok(v.and_then(|b| from_bytes::<types::wl_es_action>(&b))
                    .map(|a| (a.pkts, a.bytes)))
            })
            .collect()
    }

    /// Sets the search order of `table` (mask ids, searched first to last),
    /// also while traffic runs: the other copy of every table's order is
    /// written, then made live with one store (stage_eswitch.h), so no
    /// packet sees half an order.
    pub fn set_es_order(&self, table: u32, order: &[u16]) -> Result<(), Error> {
        check(table, 0)?;
        if order.len() > MAX_MASKS as usize || order.iter().any(|&m| u32::from(m) >= MAX_MASKS) {
            return Err(Error::Config(format!(
                "flow table {table}: at most {MAX_MASKS} masks, ids below {MAX_MASKS}"
            )));
        }
        let _one_writer = self.es_order_lock.lock().expect("not poisoned");
        // SAFETY (the closures): field addresses inside the section.
        let live = self
            .bss
            .read(|b| unsafe { std::ptr::addr_of!((*b).es_live) })
            & 1;
        let other = 1 - live;
        for t in 0..MAX_TABLES {
            let v = if t == table {
                let mut o = types::wl_es_order {
                    n: order.len() as u32,
                    ..Default::default()
                };
                o.order[..order.len()].copy_from_slice(order);
                o
            } else {
                self.es_order_of(live, t)?
            };
            let slot = other * MAX_TABLES + t;
            self.maps
                .es_order
                .update(&slot.to_ne_bytes(), bytes_of(&v), MapFlags::ANY)
                .map_err(map_err(format!("setting flow table {t}'s order")))?;
        }
        self.bss
            .write(|b| unsafe { std::ptr::addr_of_mut!((*b).es_live) }, other);
        Ok(())
    }

    fn es_order_of(&self, copy: u32, table: u32) -> Result<types::wl_es_order, Error> {
        let slot = copy * MAX_TABLES + table;
        let v = self
            .maps
            .es_order
            .lookup(&slot.to_ne_bytes(), MapFlags::ANY)
            .map_err(map_err(format!("reading flow table {table}'s order")))?;
        Ok(v.and_then(|b| from_bytes(&b)).unwrap_or_default())
    }

    /// The live search order of `table`.
    pub fn es_order(&self, table: u32) -> Result<Vec<u16>, Error> {
        check(table, 0)?;
        // SAFETY (the closure): a field address inside the section.
        let live = self
            .bss
            .read(|b| unsafe { std::ptr::addr_of!((*b).es_live) })
            & 1;
        let o = self.es_order_of(live, table)?;
        Ok(o.order[..(o.n as usize).min(MAX_MASKS as usize)].to_vec())
    }

    /// (lookups, hits) of mask `id` of `table`, over every CPU: "subtable
    /// lookups" as OVS's pmd-stats-show counts them.
    pub fn es_mask_stats(&self, table: u32, id: u32) -> Result<(u64, u64), Error> {
        let slot = check(table, id)?;
        let per_cpu = self
            .maps
            .es_mask_stats
            .lookup_percpu(&slot.to_ne_bytes(), MapFlags::ANY)
            .map_err(map_err("reading flow-table mask counters"))?
            .unwrap_or_default();
        Ok(mask_stats_sum(per_cpu.iter().map(Vec::as_slice)))
    }

    /// (lookups, hits) of masks `0..n` of `table`, as `es_mask_stats`
    /// gives each, in one system call (BPF_MAP_LOOKUP_BATCH): the flow
    /// optimiser reads every mask each interval, and one lookup a mask
    /// was 500 system calls a millisecond for two tables of 251 masks, a
    /// core's worth on a 2-core machine, taken from the traffic it
    /// measures (the default device's latency rose 10% with 250 masks).
    /// libbpf-rs's batch iterator sizes values without the per-CPU copies,
    /// so the call is made here.
    pub fn es_table_mask_stats(&self, table: u32, n: u32) -> Result<Vec<(u64, u64)>, Error> {
        use std::os::fd::{AsFd, AsRawFd};
        if n == 0 {
            return Ok(Vec::new());
        }
        let first = check(table, 0)?;
        check(table, n - 1)?;
        let cpus = libbpf_rs::num_possible_cpus().map_err(map_err("counting the CPUs"))?;
        let one = std::mem::size_of::<types::wl_es_mask_stats>().next_multiple_of(8);
        let mut keys = vec![0u32; n as usize];
        let mut values = vec![0u8; n as usize * cpus * one];
        // Array batches resume after the key given: the one before the
        // table's first slot, or the start of the map.
        let mut prev = first.wrapping_sub(1);
        let mut out = 0u32;
        let mut count = n;
        let opts = libbpf_rs::libbpf_sys::bpf_map_batch_opts {
            sz: std::mem::size_of::<libbpf_rs::libbpf_sys::bpf_map_batch_opts>() as _,
            ..Default::default()
        };
        // SAFETY: keys holds `count` u32 keys and values `count` per-CPU
        // values of the map's size; the batch tokens are u32 array keys.
        let rc = unsafe {
            libbpf_rs::libbpf_sys::bpf_map_lookup_batch(
                self.maps.es_mask_stats.as_fd().as_raw_fd(),
                if first == 0 {
                    std::ptr::null_mut()
                } else {
                    (&mut prev as *mut u32).cast()
                },
                (&mut out as *mut u32).cast(),
                keys.as_mut_ptr().cast(),
                values.as_mut_ptr().cast(),
                &mut count,
                &opts,
            )
        };
        // ENOENT: the map's end came first; `count` says how many came.
        if rc != 0
            && std::io::Error::last_os_error().raw_os_error()
                != Some(nix::errno::Errno::ENOENT as i32)
        {
            return Err(map_err("reading flow-table mask counters")(
                libbpf_rs::Error::from(std::io::Error::last_os_error()),
            ));
        }
        if count != n {
            return Err(Error::Config(format!(
                "flow table {table}: {count} of {n} mask counters read"
            )));
        }
        Ok(values
            .chunks_exact(cpus * one)
            .map(|per_cpu| mask_stats_sum(per_cpu.chunks_exact(one)))
            .collect())
    }

    /// Makes mask `id` of `table` its hyper mask (ScalaCN §4.3), or none:
    /// with one, the stage reports every flow that hits another mask of
    /// the table (`es_learned`). The mask should compare every bit
    /// (`Match::all()`) and lead the order; that is the caller's choice.
    pub fn set_es_hyper(&self, table: u32, id: Option<u32>) -> Result<(), Error> {
        let v = match id {
            Some(id) => check(table, id).map(|_| id + 1)?,
            None => check(table, 0).map(|_| 0)?,
        };
        self.maps
            .es_hyper
            .update(&table.to_ne_bytes(), &v.to_ne_bytes(), MapFlags::ANY)
            .map_err(map_err(format!("setting flow table {table}'s hyper mask")))
    }

    /// The flows reported since they were last forgotten (`forget_es_learned`).
    pub fn es_learned(&self) -> Result<Vec<Learned>, Error> {
        let flows = flow_reports::<types::wl_es_learned>(
            &self.maps.es_learned,
            "reading the learned flows",
        )?;
        Ok(flows
            .into_iter()
            .filter_map(|(key, l)| {
                Some(Learned {
                    table: key.table,
                    fields: Match::of_key(&key),
                    mask: l.mask,
                    action: Action::of(&l.action)?,
                    set: Rewrite::of(&l.action.set),
                    first_ns: l.first_ns,
                    last_ns: l.last_ns,
                    pkts: l.pkts,
                })
            })
            .collect())
    }

    /// Forgets a reported flow (activated, or not worth it).
    pub fn forget_es_learned(&self, table: u32, fields: &Match) -> Result<(), Error> {
        forget_flow(
            &self.maps.es_learned,
            table,
            fields,
            "forgetting a learned flow",
        )
    }

    /// Gives the switch a slow path that forwards `pps` packets per
    /// second with bursts of up to `burst` queued (None: none, a miss goes
    /// to the MAC table unreported): a miss is reported (`es_upcalls`) and
    /// forwarded within that capacity, dropped past it.
    pub fn set_es_slow_path(&self, capacity: Option<(u32, u32)>) -> Result<(), Error> {
        let (gap, tolerance) = match capacity {
            Some((pps, burst)) if pps > 0 => {
                let gap = (1e9 / f64::from(pps)).round().max(1.0) as u64;
                (gap, gap * u64::from(burst.max(1) - 1))
            }
            Some(_) => {
                return Err(Error::Config(
                    "a slow path forwards at least 1 packet per second".into(),
                ))
            }
            None => (0, 0),
        };
        // SAFETY (the closures): field addresses inside the section.
        self.bss.write(
            |b| unsafe { std::ptr::addr_of_mut!((*b).es_slow_tolerance_ns) },
            tolerance,
        );
        self.bss.write(
            |b| unsafe { std::ptr::addr_of_mut!((*b).es_slow_gap_ns) },
            gap,
        );
        Ok(())
    }

    /// Times each table's mask search in the stage (`Stats::tables`'
    /// `search_ns`), at the cost of two clock reads a table searched.
    pub fn set_es_timed(&self, on: bool) {
        // SAFETY (the closure): a field address inside the section.
        self.bss.write(
            |b| unsafe { std::ptr::addr_of_mut!((*b).es_timed) },
            u32::from(on),
        );
    }

    /// The flows the slow path saw since they were last forgotten.
    pub fn es_upcalls(&self) -> Result<Vec<Upcall>, Error> {
        let flows = flow_reports::<types::wl_es_upcall>(
            &self.maps.es_upcalls,
            "reading the slow path's flows",
        )?;
        Ok(flows
            .into_iter()
            .map(|(key, u)| Upcall {
                table: key.table,
                fields: Match::of_key(&key),
                first_ns: u.first_ns,
                last_ns: u.last_ns,
                pkts: u.pkts,
            })
            .collect())
    }

    /// Forgets a flow the slow path saw (offloaded, or not offloadable).
    pub fn forget_es_upcall(&self, table: u32, fields: &Match) -> Result<(), Error> {
        forget_flow(
            &self.maps.es_upcalls,
            table,
            fields,
            "forgetting a slow-path flow",
        )
    }

    /// The timed searches' histograms (`set_es_timed`), buckets as
    /// `wirelab_load::hist`: one per table, and one of each packet's time
    /// over every table it searched.
    pub fn es_search_hist(&self) -> Result<SearchHist, Error> {
        let read = |slot: u32| -> Result<Vec<u64>, Error> {
            let v = self
                .maps
                .es_hist
                .lookup(&slot.to_ne_bytes(), MapFlags::ANY)
                .map_err(map_err("reading the eSwitch's search times"))?
                .unwrap_or_default();
            Ok(v.chunks_exact(8)
                .map(|b| u64::from_ne_bytes(b.try_into().expect("8 bytes")))
                .collect())
        };
        Ok(SearchHist {
            tables: (0..MAX_TABLES).map(read).collect::<Result<_, _>>()?,
            packet: read(MAX_TABLES)?,
        })
    }

    pub fn es_stats(&self) -> Result<Stats, Error> {
        let per_cpu = self
            .maps
            .es_stats
            .lookup_percpu(&0u32.to_ne_bytes(), MapFlags::ANY)
            .map_err(map_err("reading the eSwitch counters"))?
            .unwrap_or_default();
        Ok(per_cpu
            .iter()
            .filter_map(|b| from_bytes::<types::wl_es_stats>(b))
            .fold(Stats::default(), |a, s| Stats {
                pkts: a.pkts + s.pkts,
                visited: a.visited + s.visited,
                misses: a.misses + s.misses,
                drops: a.drops + s.drops,
                loops: a.loops + s.loops,
                encaps: a.encaps + s.encaps,
                decaps: a.decaps + s.decaps,
                tunnel_errors: a.tunnel_errors + s.tunnel_errors,
                rewrites: a.rewrites + s.rewrites,
                rewrite_errors: a.rewrite_errors + s.rewrite_errors,
                slow_pkts: a.slow_pkts + s.slow_pkts,
                slow_drops: a.slow_drops + s.slow_drops,
                tables: std::array::from_fn(|t| TableStats {
                    pkts: a.tables[t].pkts + s.table_pkts[t],
                    visited: a.tables[t].visited + s.table_visited[t],
                    search_ns: a.tables[t].search_ns + s.table_ns[t],
                }),
            }))
    }
}
