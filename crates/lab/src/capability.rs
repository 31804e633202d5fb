//! Switch-side capabilities: what a run adds to the plain lab, each one a
//! `Capability` that the engine calls at fixed points of the run. The
//! engine knows none of them by name; `for_plan` picks the ones a plan
//! uses.
//!
//! | hook | when | events | vAQM | QCN reaction points | flow tables | OVS as the DUT (`ovs.rs`) | DETER's recording (`record.rs`) |
//! |---|---|---|---|---|---|---|---|
//! | `configure` | before the switch loads | — | the stage, truth probes, a linked discipline | — | the stage | the DUT links | — |
//! | `arm` | switch loaded, not attached | — | queues, classification, qdisc watches | — | masks, entries, orders | daemons, bridge, OpenFlow rules | — |
//! | `start` | just before the workload | — | the truth ring's drain | the limiters | — | its statistics cleared | recorders on every host |
//! | `connected` | runtime metadata known (Lumina §3.3) | events armed at logical packets | — | — | — | — | — |
//! | `during` | while the workload runs, a thread each | — | — | — | the optimiser's control loop | — | records of idle connections written |
//! | `collect` | workload over | — | the ground truth into the facts | rate changes into the facts | — | statistics and dumps, daemons stopped | every record written, recorders gone |
//! | `summarize` | analysis done | hits with their evidence | each queue as the switch left it | what each point did | masks searched, per mask | what OVS reported | records written |

use std::sync::atomic::AtomicBool;

use wirelab_analyze::report::Report;
use wirelab_analyze::truth::{TruthEvent, TruthPoint, VqFacts};
use wirelab_analyze::{Evidence, RunFacts};
use wirelab_capture::TruthDumper;
use wirelab_dataplane::{Action, Config, Switch};
use wirelab_netns::Lab;
use wirelab_plan::{ConnPlan, EventPlan, Plan, Target};
use wirelab_workload::{ConnMeta, Stop};

use crate::summary::{
    EsMaskSummary, EsOffloadSummary, EsOptimiserSummary, EsSummary, EsTableSummary, EventSummary,
    Summary, VqSummary,
};
use crate::{During, Error};

/// What a capability sees of the run.
pub struct Cx<'a> {
    pub plan: &'a Plan,
    pub lab: &'a Lab,
    pub switch: &'a Switch,
    /// Add to the pipeline's clock (CLOCK_MONOTONIC) for the trace's
    /// (ns since the epoch).
    pub clock_offset: i128,
    /// The run's results folder, where a capability may keep files of its
    /// own (None: a benchmark's run, which keeps none).
    pub results: Option<&'a std::path::Path>,
}

/// One capability of a run. Every hook has a default that does nothing.
pub trait Capability: Send {
    fn name(&self) -> &'static str;
    /// What it needs loaded into the switch.
    fn configure(&self, _config: &mut Config) {}
    /// The switch is loaded and not yet attached: fill this stage's tables.
    fn arm(&mut self, _cx: &Cx) -> Result<(), Error> {
        Ok(())
    }
    /// Just before the workload's first packet.
    fn start(&mut self, _cx: &Cx, _stop: &Stop) -> Result<(), Error> {
        Ok(())
    }
    /// The workload reported its runtime metadata (Lumina §3.3): arm what
    /// is addressed by it. Lines for `workload.log` go to `log`.
    fn connected(&mut self, _cx: &Cx, _meta: &[ConnMeta], _log: &mut String) -> Result<(), Error> {
        Ok(())
    }
    /// Whether `during` has work: the engine gives it a thread only then.
    fn acts_during(&self) -> bool {
        false
    }
    /// While the workload runs, on a thread of its own: act on the switch
    /// as traffic flows (a control loop) until `done` is set, soon after
    /// the workload's last packet. An error ends the run.
    fn during(&mut self, _cx: &Cx, _done: &AtomicBool) -> Result<(), Error> {
        Ok(())
    }
    /// The workload is over and the capture drained: add what this
    /// capability observed to the facts the analysis reads.
    fn collect(&mut self, _cx: &Cx, _facts: &mut RunFacts, _log: &mut String) -> Result<(), Error> {
        Ok(())
    }
    /// The analysis is done: fill this capability's part of the summary.
    fn summarize(
        &mut self,
        _cx: &Cx,
        _meta: &[ConnMeta],
        _analysis: &Report,
        _summary: &mut Summary,
    ) -> Result<(), Error> {
        Ok(())
    }
}

/// The capabilities `plan` uses; `extension`: a user discipline is linked.
pub fn for_plan(plan: &Plan, extension: bool) -> Vec<Box<dyn Capability>> {
    let mut caps: Vec<Box<dyn Capability>> = vec![Box::new(Events)];
    if !plan.vaqm.is_empty() {
        caps.push(Box::new(Vaqm::new(plan, extension)));
    }
    if !plan.reaction_points.is_empty() {
        caps.push(Box::new(ReactionPoints::default()));
    }
    if let Some(r) = &plan.record {
        caps.push(Box::new(crate::record::Recording::new(r)));
    }
    match plan.flowtables.as_ref().map(|f| f.dut) {
        Some(wirelab_spec::flowtables::Dut::Eswitch) => caps.push(Box::new(FlowTables::default())),
        Some(wirelab_spec::flowtables::Dut::Ovs) => caps.push(Box::new(crate::ovs::Ovs::default())),
        None => {}
    }
    caps
}

/// ScalaCN's eSwitch (seed 001 Fig. 8): the plan's tables in the switch's
/// eSwitch stage, masks in search order; while traffic runs, the search
/// order kept by the plan's policy (ScalaCN §4.3, or a baseline); the
/// masks searched in the summary.
#[derive(Default)]
pub struct FlowTables {
    /// One per table, made when the tables are armed.
    optimisers: Vec<wirelab_flowopt::Optimiser<wirelab_dataplane::eswitch::Match>>,
    /// The optimisers' clock starts with them.
    started: Option<std::time::Instant>,
    /// Encap entries the device installed past its encap contexts (its
    /// profile's `encap_contexts`), which drop what they match.
    encaps_over_contexts: u64,
    /// Encap entries installed so far, in the order they were installed.
    encaps: u32,
    /// Per table, the entries installed from the start (generated,
    /// overlay, and without `offload` every one).
    static_entries: [usize; wirelab_spec::flowtables::MAX_TABLES],
    /// The virtual switch's offload state (`flowtables.offload`).
    offloader: Option<wirelab_flowopt::offload::Offloader<Rule>>,
    /// The device's counter readout when its profile has late counters.
    late: Option<wirelab_flowopt::offload::LateCounters<Rule>>,
    /// Time the control plane waited on deletions (ScalaCN S4).
    deleting_ns: u64,
}

/// The hyper mask's id in a table of `masks` masks: the next one.
fn hyper_id(masks: usize) -> u16 {
    masks as u16
}

/// The order the device searches when `order` is set: the device's
/// profile may not follow its control plane. Mask ids are given in the
/// order the masks were added (the hyper mask last).
fn device_order(d: &wirelab_spec::flowtables::EsDevice, order: &[u16]) -> Vec<u16> {
    use wirelab_spec::flowtables::SearchOrder;
    let mut o = order.to_vec();
    if d.search_order == SearchOrder::Insertion {
        // ScalaCN S6: a new mask after every older one, never moved forward.
        o.sort_unstable();
    }
    o
}

/// A rule of the plan's tables: (table, mask, entry).
type Rule = (usize, usize, usize);

impl FlowTables {
    /// Installs rule `r` of the plan in the eSwitch.
    fn install(&mut self, cx: &Cx, ft: &wirelab_plan::EsPlan, r: Rule) -> Result<(), Error> {
        use wirelab_dataplane::eswitch::Action as Es;
        use wirelab_plan::{EsActionPlan as P, EsNext};
        let (t, id, e) = r;
        let e = &ft.tables[t][id].entries[e];
        let port = |host: usize| (cx.lab.switch_ifindex[host], cx.plan.hosts[host].port);
        let mut action = match e.action {
            P::Count => Es::Count,
            P::Drop => Es::Drop,
            P::Goto(n) => Es::Goto(n),
            P::Forward { host } => {
                let (ifindex, port) = port(host);
                Es::Forward { ifindex, port }
            }
            P::Decap { host } => {
                let (ifindex, port) = port(host);
                Es::Decap { ifindex, port }
            }
            P::Encap { vni, remote, next } => {
                let tunnel = es_tunnel(vni, remote);
                match next {
                    EsNext::Table(table) => Es::EncapGoto { tunnel, table },
                    EsNext::Host(host) => {
                        let (ifindex, port) = port(host);
                        Es::Encap {
                            ifindex,
                            port,
                            tunnel,
                        }
                    }
                }
            }
        };
        if matches!(action, Es::Encap { .. } | Es::EncapGoto { .. }) {
            self.encaps += 1;
            // ScalaCN S8: the device accepts the entry, but has no
            // context left to encapsulate with.
            if ft.device.encap_contexts.is_some_and(|n| self.encaps > n) {
                action = Es::Drop;
                self.encaps_over_contexts += 1;
            }
        }
        cx.switch
            .add_es_entry_rewriting(
                t as u32,
                id as u32,
                &es_match(e),
                action,
                &es_rewrite(&e.set),
            )
            .during(format!("adding an entry to flow table {t} mask {id}"))
    }

    /// The rule of the plan's own masks in `table` that a packet with
    /// these fields matches, masks in their written order (the virtual
    /// switch's software classifier).
    fn software_rule(
        ft: &wirelab_plan::EsPlan,
        table: u32,
        fields: &wirelab_dataplane::eswitch::Match,
    ) -> Option<Rule> {
        let t = table as usize;
        ft.tables.get(t)?.iter().enumerate().find_map(|(id, m)| {
            if m.generated {
                return None;
            }
            let bits = es_bits(&m.fields);
            let key = fields.and(&bits);
            m.entries
                .iter()
                .position(|e| es_match(e).and(&bits) == key)
                .map(|e| (t, id, e))
        })
    }

    /// One look of the offloading virtual switch (ScalaCN §2-3): idle rules
    /// deleted, then the slow path's flows offloaded. Deletions first: the
    /// device takes one command at a time, and the virtual switch's
    /// revalidation (OVS's revalidator threads) runs ahead of its offload
    /// queue, so a slow deletion (S4) holds up the next offloads.
    fn tick_offload(&mut self, cx: &Cx, ft: &wirelab_plan::EsPlan) -> Result<(), Error> {
        let now = || self.started.map_or(0, |s| s.elapsed().as_nanos() as u64);
        let sw = cx.switch;
        let Some(off) = self.offloader.as_mut() else {
            return Ok(());
        };
        let installed = off.installed();
        let mut live = std::collections::BTreeMap::new();
        for &(t, id, e) in &installed {
            let hits = sw
                .es_entry_hits(t as u32, id as u32, &es_match(&ft.tables[t][id].entries[e]))
                .during("reading an offloaded rule's counter")?;
            live.insert((t, id, e), hits.map_or(0, |h| h.0));
        }
        let held: usize = self.static_entries.iter().sum::<usize>() + installed.len();
        let t_look = now();
        let seen = match self.late.as_mut() {
            Some(l) => l.read(t_look, held, &live),
            None => live,
        };
        let delete = off.age(t_look, &seen);
        for (t, id, e) in delete {
            sw.remove_es_entry(t as u32, id as u32, &es_match(&ft.tables[t][id].entries[e]))
                .during("deleting an aged rule")?;
            // ScalaCN S4: the device searches the table for what depends
            // on the entry; the virtual switch waits for its answer, and
            // offloads nothing meanwhile.
            if let Some(per) = ft.device.delete_per_entry {
                let in_table = self.static_entries[t]
                    + off.installed().iter().filter(|r| r.0 == t).count()
                    + 1;
                let cost = per.0.saturating_mul(in_table as u64);
                std::thread::sleep(std::time::Duration::from_nanos(cost));
                self.deleting_ns += cost;
            }
        }
        let ups = sw.es_upcalls().during("reading the slow path's flows")?;
        let rules: Vec<Option<Rule>> = ups
            .iter()
            .map(|u| Self::software_rule(ft, u.table, &u.fields))
            .collect();
        for u in &ups {
            sw.forget_es_upcall(u.table, &u.fields)
                .during("forgetting a slow-path flow")?;
        }
        let install = off.upcalls(now(), rules);
        for r in install {
            self.install(cx, ft, r)?;
        }
        Ok(())
    }

    /// One look at every table: the policy's changes, applied.
    fn tick(&mut self, cx: &Cx, ft: &wirelab_plan::EsPlan) -> Result<(), Error> {
        use wirelab_flowopt::{MaskView, TableView};
        let now = self.started.map_or(0, |s| s.elapsed().as_nanos() as u64);
        let sw = cx.switch;
        let learned = if ft.optimise.hyper() {
            sw.es_learned().during("reading the learned flows")?
        } else {
            Vec::new()
        };
        let misses = sw.es_stats().during("reading the eSwitch counters")?.misses;
        for (t, masks) in ft.tables.iter().enumerate() {
            let table = t as u32;
            let hyper = hyper_id(masks.len());
            let mut view = TableView {
                masks: Vec::with_capacity(masks.len()),
                learned: learned
                    .iter()
                    .filter(|l| l.table == table)
                    .map(|l| l.fields)
                    .collect(),
                hyper_hits: Vec::new(),
                // The stage counts misses over all tables: a miss anywhere
                // counts for each (what restores removed masks).
                misses,
            };
            let stats = sw
                .es_table_mask_stats(table, masks.len() as u32)
                .during("reading the eSwitch's mask counters")?;
            for ((id, m), (_, hits)) in masks.iter().enumerate().zip(stats) {
                view.masks.push(MaskView {
                    id: id as u16,
                    len: es_bits(&m.fields).bits(),
                    hits,
                });
            }
            if ft.optimise.hyper() {
                let active = self.optimisers[t].active();
                let hits = sw
                    .es_entries_hits(table, hyper.into(), &active)
                    .during("reading the hyper mask's entries")?;
                view.hyper_hits = active
                    .into_iter()
                    .zip(hits)
                    .map(|(k, h)| (k, h.map_or(0, |h| h.0)))
                    .collect();
            }
            let ch = self.optimisers[t].tick(now, &view);
            for k in &ch.evict {
                sw.remove_es_entry(table, hyper.into(), k)
                    .during("evicting a flow from the hyper mask")?;
            }
            if !ch.activate.is_empty() {
                let action: std::collections::HashMap<_, _> = learned
                    .iter()
                    .filter(|l| l.table == table)
                    .map(|l| (l.fields, (l.action, l.set)))
                    .collect();
                for k in &ch.activate {
                    let (a, set) = action[k]; // activations come from the learned flows
                    sw.add_es_entry_rewriting(table, hyper.into(), k, a, &set)
                        .during("activating a flow into the hyper mask")?;
                }
            }
            for k in &ch.forget {
                sw.forget_es_learned(table, k)
                    .during("forgetting a learned flow")?;
            }
            if let Some(order) = &ch.order {
                sw.set_es_order(table, &device_order(&ft.device, order))
                    .during(format!("ordering flow table {t}"))?;
            }
        }
        Ok(())
    }
}

fn es_match(e: &wirelab_plan::EsEntryPlan) -> wirelab_dataplane::eswitch::Match {
    wirelab_dataplane::eswitch::Match {
        saddr: e.src.map_or([0; 4], |a| a.octets()),
        daddr: e.dst.map_or([0; 4], |a| a.octets()),
        sport: e.sport.unwrap_or(0),
        dport: e.dport.unwrap_or(0),
        proto: e.proto.unwrap_or(0),
        vni: e.vni.unwrap_or(0),
        ..Default::default()
    }
}

fn es_rewrite(w: &wirelab_plan::EsSetPlan) -> wirelab_dataplane::eswitch::Rewrite {
    wirelab_dataplane::eswitch::Rewrite {
        dmac: w.dmac,
        smac: w.smac,
        saddr: w.src.map(|a| a.octets()),
        daddr: w.dst.map(|a| a.octets()),
        sport: w.sport,
        dport: w.dport,
    }
}

/// The outer headers of the switch's encapsulations: from its own VTEP
/// (`LOCAL_VTEP`, a fixed locally administered MAC) to the remote's. The
/// outer UDP source port comes from the flow's hash (RFC 7348 §5).
fn es_tunnel(vni: u32, remote: std::net::Ipv4Addr) -> wirelab_dataplane::eswitch::Tunnel {
    wirelab_dataplane::eswitch::Tunnel {
        smac: [0x02, 0, 0, 0xff, 0xff, 0x01],
        dmac: [0x02, 0, 0, 0xff, 0xff, 0x02],
        saddr: wirelab_spec::flowtables::LOCAL_VTEP.octets(),
        daddr: remote.octets(),
        vni,
        sport: 0,
        ttl: 0,
    }
}

fn es_bits(f: &wirelab_spec::flowtables::MaskFields) -> wirelab_dataplane::eswitch::Match {
    use wirelab_dataplane::eswitch::Match;
    let ports = |on: bool| if on { 0xffff } else { 0 };
    Match {
        saddr: Match::prefix(f.src),
        daddr: Match::prefix(f.dst),
        sport: ports(f.sport),
        dport: ports(f.dport),
        proto: if f.proto { 0xff } else { 0 },
        vni: if f.vni { 0x00ff_ffff } else { 0 },
        ..Default::default()
    }
}

impl Capability for FlowTables {
    fn name(&self) -> &'static str {
        "flowtables"
    }
    fn configure(&self, config: &mut Config) {
        config.eswitch = true;
    }
    fn arm(&mut self, cx: &Cx) -> Result<(), Error> {
        let Some(ft) = &cx.plan.flowtables else {
            return Ok(());
        };
        let offload = ft.offload.is_some();
        for (t, masks) in ft.tables.iter().enumerate() {
            let t = t as u32;
            for (id, m) in masks.iter().enumerate() {
                cx.switch
                    .set_es_mask(t, id as u32, &es_bits(&m.fields))
                    .during(format!("setting flow table {t} mask {id}"))?;
                // With an offloading virtual switch the spec's own rules
                // wait in software for their flows (`tick_offload`).
                if offload && !m.generated {
                    continue;
                }
                for e in 0..m.entries.len() {
                    self.install(cx, ft, (t as usize, id, e))?;
                }
                self.static_entries[t as usize] += m.entries.len();
            }
            let hyper = ft.optimise.hyper().then(|| hyper_id(masks.len()));
            if let Some(h) = hyper {
                // ScalaCN §4.3: an exact-match mask ahead of every other.
                cx.switch
                    .set_es_mask(t, h.into(), &wirelab_dataplane::eswitch::Match::all())
                    .during(format!("setting flow table {t}'s hyper mask"))?;
                cx.switch
                    .set_es_hyper(t, Some(h.into()))
                    .during(format!("setting flow table {t}'s hyper mask"))?;
            }
            let opt = wirelab_flowopt::Optimiser::new(
                ft.optimise,
                (0..masks.len() as u16).collect(),
                hyper,
                0,
            );
            cx.switch
                .set_es_order(t, &device_order(&ft.device, &opt.order()))
                .during(format!("ordering flow table {t}"))?;
            self.optimisers.push(opt);
        }
        if let Some(o) = ft.offload {
            self.offloader = Some(wirelab_flowopt::offload::Offloader::new(o.idle_ns));
            self.late = ft.device.late_counters.map(|l| {
                wirelab_flowopt::offload::LateCounters::new(l.entries_over as usize, l.refresh.0)
            });
            cx.switch
                .set_es_slow_path(Some((o.slow_path_pps, o.slow_path_burst)))
                .during("giving the eSwitch a slow path")?;
        }
        cx.switch.set_es_timed(ft.timed);
        self.started = Some(std::time::Instant::now());
        Ok(())
    }
    fn acts_during(&self) -> bool {
        self.offloader.is_some()
            || !matches!(
                self.optimisers.first().map(|o| o.policy()),
                None | Some(wirelab_flowopt::Policy::Insertion)
            )
    }
    fn during(&mut self, cx: &Cx, done: &AtomicBool) -> Result<(), Error> {
        let Some(ft) = &cx.plan.flowtables else {
            return Ok(());
        };
        // Validation keeps `offload` and `optimise` apart: one loop.
        let interval = match ft.offload {
            Some(o) => o.interval_ns,
            None => ft.optimise.interval_ns().unwrap_or(1_000_000_000),
        };
        let mut next = std::time::Instant::now();
        while !done.load(std::sync::atomic::Ordering::SeqCst) {
            let now = std::time::Instant::now();
            if now >= next {
                if ft.offload.is_some() {
                    self.tick_offload(cx, ft)?;
                } else {
                    self.tick(cx, ft)?;
                }
                next = now + std::time::Duration::from_nanos(interval);
            }
            // Wake at the next look, or within 5 ms to see `done`.
            std::thread::sleep(
                next.saturating_duration_since(std::time::Instant::now())
                    .min(std::time::Duration::from_millis(5)),
            );
        }
        Ok(())
    }
    fn summarize(
        &mut self,
        cx: &Cx,
        _meta: &[ConnMeta],
        _analysis: &Report,
        summary: &mut Summary,
    ) -> Result<(), Error> {
        let Some(ft) = &cx.plan.flowtables else {
            return Ok(());
        };
        let st = cx
            .switch
            .es_stats()
            .during("reading the eSwitch counters")?;
        let hist = if ft.timed {
            Some(
                cx.switch
                    .es_search_hist()
                    .during("reading the eSwitch's search times")?,
            )
        } else {
            None
        };
        let pct = |h: Option<&Vec<u64>>, q| h.and_then(|h| wirelab_load::hist::interpolated(h, q));
        let mut masks = Vec::new();
        let mut orders = Vec::new();
        let mut tally = wirelab_flowopt::Tally::default();
        for (t, ms) in ft.tables.iter().enumerate() {
            for (id, m) in ms.iter().enumerate() {
                let (lookups, hits) = cx
                    .switch
                    .es_mask_stats(t as u32, id as u32)
                    .during("reading the eSwitch's mask counters")?;
                masks.push(EsMaskSummary {
                    table: t as u32,
                    mask: id as u32,
                    generated: m.generated,
                    hyper: false,
                    entries: m.entries.len(),
                    lookups,
                    hits,
                });
            }
            if let Some(o) = self.optimisers.get(t) {
                if ft.optimise.hyper() {
                    let id = hyper_id(ms.len()).into();
                    let (lookups, hits) = cx
                        .switch
                        .es_mask_stats(t as u32, id)
                        .during("reading the eSwitch's mask counters")?;
                    masks.push(EsMaskSummary {
                        table: t as u32,
                        mask: id,
                        generated: false,
                        hyper: true,
                        entries: o.active().len(),
                        lookups,
                        hits,
                    });
                }
                tally = tally.add(o.tally());
            }
            orders.push(
                cx.switch
                    .es_order(t as u32)
                    .during("reading the search order")?,
            );
        }
        summary.flowtables = Some(EsSummary {
            packets: st.pkts,
            masks_searched: st.visited,
            masks_per_packet: st.visited as f64 / st.pkts.max(1) as f64,
            search_ns_per_packet: ft.timed.then(|| {
                st.tables.iter().map(|t| t.search_ns).sum::<u64>() as f64 / st.pkts.max(1) as f64
            }),
            search_ns_p50: pct(hist.as_ref().map(|h| &h.packet), 0.5),
            search_ns_p99: pct(hist.as_ref().map(|h| &h.packet), 0.99),
            misses: st.misses,
            drops: st.drops,
            loops: st.loops,
            encaps: st.encaps,
            decaps: st.decaps,
            encaps_over_contexts: self.encaps_over_contexts,
            offload: self.offloader.as_ref().map(|o| EsOffloadSummary {
                tally: o.tally(),
                installed: o.installed().len(),
                slow_path_packets: st.slow_pkts,
                slow_path_drops: st.slow_drops,
                deleting_ms: self.deleting_ns as f64 / 1e6,
            }),
            tunnel_errors: st.tunnel_errors,
            rewrites: st.rewrites,
            rewrite_errors: st.rewrite_errors,
            tables: (0..ft.tables.len())
                .map(|t| {
                    let ts = st.tables[t];
                    EsTableSummary {
                        table: t as u32,
                        packets: ts.pkts,
                        masks_per_packet: ts.visited as f64 / ts.pkts.max(1) as f64,
                        search_ns_per_packet: ft
                            .timed
                            .then(|| ts.search_ns as f64 / ts.pkts.max(1) as f64),
                        search_ns_p50: pct(hist.as_ref().and_then(|h| h.tables.get(t)), 0.5),
                        search_ns_p99: pct(hist.as_ref().and_then(|h| h.tables.get(t)), 0.99),
                        order: std::mem::take(&mut orders[t]),
                    }
                })
                .collect(),
            masks,
            device: ft.device.name.clone(),
            optimiser: EsOptimiserSummary {
                policy: ft.optimise,
                tally,
            },
        });
        Ok(())
    }
}

/// Lumina's event injector (§3.3): each event armed at the data packet
/// index its logical address resolves to with the runtime MSS.
pub struct Events;

/// The switch's action for a spec's.
pub fn action(a: wirelab_spec::Action, edit: Option<wirelab_spec::Edit>) -> Action {
    match a {
        wirelab_spec::Action::Drop => Action::Drop,
        wirelab_spec::Action::Ecn => Action::Ecn,
        wirelab_spec::Action::Corrupt => Action::Corrupt,
        wirelab_spec::Action::Reorder => Action::Reorder,
        // Validation made sure an edit names its field.
        wirelab_spec::Action::Edit => match edit.map(|e| e.migreq) {
            Some(0) => Action::MigReq(false),
            _ => Action::MigReq(true),
        },
    }
}

fn data_mss(meta: &[ConnMeta], conn: u32) -> Result<u32, Error> {
    meta.iter()
        .find(|m| m.id == conn)
        .map(|m| m.data_mss)
        .ok_or_else(|| {
            Error::BadInput(format!(
                "an event names connection {conn}, which the workload did not report"
            ))
        })
}

fn target_text(t: Target) -> String {
    match t {
        Target::All => "all".into(),
        Target::Index(i) => format!("packet {i}"),
        Target::InMessage { message, packet } => format!("message {message} packet {packet}"),
        Target::Sent { by, packet } => format!("packet {packet} sent by the {}", by.name()),
    }
}

/// A wire event's (index, iteration) key in the switch: the iteration
/// names the end whose packets it counts. None for the other events.
fn wire_key(e: &EventPlan) -> Option<(u32, u32)> {
    match e.target {
        Target::Sent { by, packet } => Some((
            packet,
            wirelab_dataplane::wire_iter(by == wirelab_spec::Side::Responder),
        )),
        _ => None,
    }
}

/// The switch's (index, iteration) key of an event.
fn switch_key(e: &EventPlan, conn: &ConnPlan, mss: u32) -> (u32, u32) {
    wire_key(e).unwrap_or_else(|| (e.resolve_index(conn, mss), e.iteration))
}

impl Capability for Events {
    fn name(&self) -> &'static str {
        "events"
    }
    /// Wire events need no runtime metadata, and go in before the
    /// handshake: the switch numbers an end's packets only once the
    /// connection has one, and the first is the handshake's ACK.
    fn arm(&mut self, cx: &Cx) -> Result<(), Error> {
        for e in &cx.plan.events {
            if let Some((index, iter)) = wire_key(e) {
                cx.switch
                    .add_event_held(
                        e.conn,
                        index,
                        iter,
                        action(e.action, e.edit),
                        e.id,
                        e.after.unwrap_or(0),
                    )
                    .during(format!("arming event {}", e.id))?;
            }
        }
        Ok(())
    }
    fn connected(&mut self, cx: &Cx, meta: &[ConnMeta], log: &mut String) -> Result<(), Error> {
        let plan = cx.plan;
        if plan.events.iter().any(|e| e.edit.is_some()) {
            let deltas: Vec<u32> = (0..wirelab_dataplane::ICRC_SHIFTS)
                .map(wirelab_roce::packet::migreq_icrc_delta)
                .collect();
            cx.switch
                .set_icrc_migreq_table(&deltas)
                .during("filling the switch's ICRC table")?;
        }
        for e in &plan.events {
            if wire_key(e).is_some() {
                log.push_str(&format!(
                    "event {} armed: conn {} {} {}\n",
                    e.id,
                    e.conn,
                    target_text(e.target),
                    e.action.name()
                ));
                continue;
            }
            let conn = &plan.conns[e.conn as usize - 1];
            let index = e.resolve_index(conn, data_mss(meta, e.conn)?);
            cx.switch
                .add_event_held(
                    e.conn,
                    index,
                    e.iteration,
                    action(e.action, e.edit),
                    e.id,
                    e.after.unwrap_or(0),
                )
                .during(format!("arming event {}", e.id))?;
            log.push_str(&format!(
                "event {} armed: conn {} index {} iteration {} {}\n",
                e.id,
                e.conn,
                index,
                e.iteration,
                e.action.name()
            ));
        }
        Ok(())
    }
    fn summarize(
        &mut self,
        cx: &Cx,
        meta: &[ConnMeta],
        analysis: &Report,
        summary: &mut Summary,
    ) -> Result<(), Error> {
        for e in &cx.plan.events {
            let conn = &cx.plan.conns[e.conn as usize - 1];
            let (index, iter) = switch_key(e, conn, data_mss(meta, e.conn)?);
            let hit: Vec<Evidence> = analysis
                .analysis
                .connections
                .iter()
                .filter(|c| c.id == e.conn)
                .flat_map(|c| c.events.iter().filter(|a| a.event_id == e.id).map(|a| a.at))
                .collect();
            summary.events.push(EventSummary {
                id: e.id,
                conn: e.conn,
                target: target_text(e.target),
                iteration: if e.iteration == 0 {
                    "all".into()
                } else {
                    e.iteration.to_string()
                },
                action: e.action.name().into(),
                armed_index: index,
                hits: cx
                    .switch
                    .event_hits(e.conn, index, iter)
                    .during(format!("reading the hits of event {}", e.id))?,
                hit,
            });
        }
        if cx
            .plan
            .events
            .iter()
            .any(|e| e.action == wirelab_spec::Action::Reorder)
        {
            let mut r = crate::summary::ReorderSummary {
                never_released: cx.switch.held_frames() as u64,
                ..Default::default()
            };
            for port in 1..=cx.plan.hosts.len() as u32 {
                let c = cx
                    .switch
                    .counters(port)
                    .during("reading the switch's counters")?;
                r.held += c.held;
                r.released += c.released;
                r.failed += c.hold_failed;
            }
            summary.reorder = Some(r);
        }
        Ok(())
    }
}

/// NetBump's virtual queues (seed 003 §3–4) with their ground truth: the
/// real queue behind a port with a bottleneck, sampled by qdisc
/// tracepoints next to the estimate (§6.2.2).
pub struct Vaqm {
    extension: bool,
    /// (host index, virtual queue) of each queue with a real queue to
    /// compare with.
    watches: Vec<(usize, u32)>,
    truth: Option<TruthDumper>,
}

impl Vaqm {
    pub fn new(plan: &Plan, extension: bool) -> Vaqm {
        let watches = plan
            .vaqm
            .iter()
            .filter_map(|q| {
                let (port, _) = q.port.as_ref()?;
                let h = plan.hosts.iter().position(|h| h.port == *port)?;
                plan.hosts[h].bottleneck.as_ref()?;
                Some((h, q.id))
            })
            .collect();
        Vaqm {
            extension,
            watches,
            truth: None,
        }
    }
}

/// What the `vaqm` analyzer needs about each queue.
pub fn vq_facts(queues: &[wirelab_plan::VqPlan], truth: &[TruthPoint]) -> Vec<VqFacts> {
    queues
        .iter()
        .map(|q| VqFacts {
            id: q.id,
            port: q.port.as_ref().map(|p| p.1.clone()),
            rate_bps: q.rate.0,
            dctcp: q.dctcp.clone(),
            red: q.red.clone(),
            qcn: q.qcn.clone(),
            buffer_bytes: q.buffer.map_or(0, |b| b.0),
            distributed: q.distributed.clone(),
            truth: truth.iter().filter(|p| p.vq == q.id).copied().collect(),
        })
        .collect()
}

/// Ground-truth samples in the trace's clock (ns since the epoch).
fn truth_points(samples: &[wirelab_dataplane::TruthSample], clock_offset: i128) -> Vec<TruthPoint> {
    samples
        .iter()
        .map(|s| TruthPoint {
            ts_ns: (i128::from(s.ts_ns) + clock_offset) as u64,
            vq: s.vq,
            event: if s.enqueue {
                TruthEvent::Enqueue
            } else {
                TruthEvent::Dequeue
            },
            actual_bytes: u64::from(s.actual),
            actual_packets: s.qlen,
            virtual_bytes: s.virt,
            packet_bytes: s.len,
            packets: s.packets,
        })
        .collect()
}

impl Capability for Vaqm {
    fn name(&self) -> &'static str {
        "vaqm"
    }
    fn configure(&self, config: &mut Config) {
        config.vaqm = true;
        // Every switch port is steered to one CPU (Lab::up), so the
        // pipeline is serial; VqState::cpu_moves verifies it per run.
        config.vaqm_lock = false;
        config.truth = !self.watches.is_empty();
        config.extension = self.extension;
    }
    fn arm(&mut self, cx: &Cx) -> Result<(), Error> {
        let (plan, switch) = (cx.plan, cx.switch);
        if !self.watches.is_empty() {
            let netns = wirelab_netns::netns_inode(&plan.switch_ns)
                .during("reading the switch namespace's inode")?;
            for (h, vq) in &self.watches {
                switch
                    .watch_qdisc(netns, cx.lab.switch_ifindex[*h], *vq)
                    .during(format!("watching the real queue of virtual queue {vq}"))?;
            }
        }
        for q in &plan.vaqm {
            let at = format!("setting up virtual queue {}", q.id);
            switch
                .set_vq(q.id, &crate::switch::vq_config(q))
                .during(at.clone())?;
            if let Some((port, _)) = &q.port {
                switch.vq_for_port(*port, q.id).during(at.clone())?;
            }
            for d in &q.destinations {
                switch.vq_for_dst(*d, q.id).during(at.clone())?;
            }
        }
        Ok(())
    }
    fn start(&mut self, cx: &Cx, _stop: &Stop) -> Result<(), Error> {
        if cx.switch.config().truth {
            self.truth =
                Some(TruthDumper::start(cx.switch).during("starting the ground-truth drain")?);
        }
        Ok(())
    }
    fn collect(&mut self, cx: &Cx, facts: &mut RunFacts, log: &mut String) -> Result<(), Error> {
        let truth = match self.truth.take() {
            Some(t) => {
                let lost = cx.switch.truth_lost().during("reading the truth ring")?;
                if lost > 0 {
                    log.push_str(&format!(
                        "ground truth: {lost} samples lost to a full ring; the comparison is partial\n"
                    ));
                }
                truth_points(
                    &t.finish().during("draining the ground truth")?,
                    cx.clock_offset,
                )
            }
            None => Vec::new(),
        };
        facts.vaqm = vq_facts(&cx.plan.vaqm, &truth);
        Ok(())
    }
    fn summarize(
        &mut self,
        cx: &Cx,
        _meta: &[ConnMeta],
        _analysis: &Report,
        summary: &mut Summary,
    ) -> Result<(), Error> {
        let ext = cx
            .plan
            .vaqm_extension
            .as_deref()
            .and_then(|p| p.file_name())
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        summary.vaqm = cx
            .plan
            .vaqm
            .iter()
            .map(|q| VqSummary::of(q, cx.switch, &ext))
            .collect::<Result<_, _>>()?;
        Ok(())
    }
}

/// QCN reaction points (NetBump §6.3.3, 802.1Qau RP): hosts whose sending
/// the CNMs they receive slow down, from before the first packet.
#[derive(Default)]
pub struct ReactionPoints {
    running: Option<wirelab_workload::qcn::ReactionPoints>,
    reports: Vec<wirelab_workload::qcn::RpReport>,
}

impl Capability for ReactionPoints {
    fn name(&self) -> &'static str {
        "qcn-reaction-points"
    }
    fn start(&mut self, cx: &Cx, stop: &Stop) -> Result<(), Error> {
        self.running = Some(
            wirelab_workload::qcn::start(cx.plan, stop)
                .during("starting the QCN reaction points")?,
        );
        Ok(())
    }
    fn collect(&mut self, cx: &Cx, facts: &mut RunFacts, _log: &mut String) -> Result<(), Error> {
        if let Some(r) = self.running.take() {
            self.reports = r.finish().during("stopping the QCN reaction points")?;
        }
        facts.qcn = self
            .reports
            .iter()
            .zip(&cx.plan.reaction_points)
            .map(|(r, p)| wirelab_analyze::rp::RpFacts {
                host: r.host.clone(),
                cnms: r.cnms,
                line_rate_bps: p.params.line_rate,
                points: r
                    .changes
                    .iter()
                    .map(|c| wirelab_analyze::rp::RpPoint {
                        host: r.host.clone(),
                        ts_ns: (i128::from(c.now_ns) + cx.clock_offset) as u64,
                        current_bps: c.current_bps,
                        target_bps: c.target_bps,
                        fb: c.fb,
                    })
                    .collect(),
            })
            .collect();
        Ok(())
    }
    fn summarize(
        &mut self,
        _cx: &Cx,
        _meta: &[ConnMeta],
        _analysis: &Report,
        summary: &mut Summary,
    ) -> Result<(), Error> {
        summary.reaction_points = std::mem::take(&mut self.reports);
        Ok(())
    }
}
