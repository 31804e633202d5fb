//! Points of the search space: random ones for the initial pool (Lumina §4
//! step 1) and mutations of a pool member (step 2). Every candidate is a
//! spec that validates: a mutant is written as YAML and parsed back as
//! `wirelab check` would, and one that fails is drawn again.

use rand::seq::SliceRandom;
use rand::Rng;
use sha2::{Digest, Sha256};
use wirelab_spec::{Bytes, Catalog, Event, Index, IndexOrAll, Nanos, Spec, Verb, Verbs};

use crate::target::{Range, Space};

/// Draws from a space with one random stream (the campaign's).
pub struct Mutator<'a> {
    pub space: &'a Space,
    pub catalog: &'a Catalog,
    /// Fields changed per mutation, at most.
    pub max_changes: u32,
}

/// One mutable field of a candidate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    Connections(usize),
    Verb(usize),
    MessageSize(usize),
    Messages(usize),
    TxDepth(usize),
    Mtu(usize),
    RetransmitTimeout(usize),
    Barrier,
    AddEvent,
    RemoveEvent,
    MoveEvent,
    CongestionControl,
    RtoMin,
    Sack,
    CnpInterval,
    DcqcnRp,
    Adaptive,
}

/// Attempts at a valid mutant before the parent is kept as it is.
const TRIES: usize = 32;

/// A stable short name of a spec: the first 12 hex digits of the SHA-256
/// of its YAML (what the campaign folder files it under).
pub fn hash(spec: &Spec) -> String {
    let text = yaml(spec);
    let d = Sha256::digest(text.as_bytes());
    d.iter().take(6).map(|b| format!("{b:02x}")).collect()
}

/// The spec as YAML.
pub fn yaml(spec: &Spec) -> String {
    serde_yaml::to_string(spec).expect("a spec serialises")
}

/// Total connections of a spec.
pub fn connections(spec: &Spec) -> u32 {
    spec.traffic.connections.iter().map(|g| g.count.0).sum()
}

impl Mutator<'_> {
    fn fields(&self, spec: &Spec) -> Vec<Field> {
        let s = self.space;
        let mut f = Vec::new();
        for g in 0..spec.traffic.connections.len() {
            if s.connections.is_some() {
                f.push(Field::Connections(g));
            }
            if !s.verbs.is_empty() {
                f.push(Field::Verb(g));
            }
            if s.message_size.is_some() {
                f.push(Field::MessageSize(g));
            }
            if s.messages.is_some() {
                f.push(Field::Messages(g));
            }
            if s.tx_depth.is_some() {
                f.push(Field::TxDepth(g));
            }
            if !s.mtu.is_empty() {
                f.push(Field::Mtu(g));
            }
            if s.stack.min_retransmit_timeout.is_some() {
                f.push(Field::RetransmitTimeout(g));
            }
        }
        if s.barrier {
            f.push(Field::Barrier);
        }
        if let Some(e) = &s.events {
            if e.count.max > 0 {
                // Events are where anomalies hide (Lumina §4): they get
                // three draws to every other field's one.
                f.extend([Field::AddEvent, Field::RemoveEvent, Field::MoveEvent]);
            }
        }
        let st = &s.stack;
        for (on, field) in [
            (!st.congestion_control.is_empty(), Field::CongestionControl),
            (st.rto_min.is_some(), Field::RtoMin),
            (st.sack, Field::Sack),
            (st.min_time_between_cnps.is_some(), Field::CnpInterval),
            (st.dcqcn_rp, Field::DcqcnRp),
            (st.adaptive_retransmission, Field::Adaptive),
        ] {
            if on {
                f.push(field);
            }
        }
        f
    }

    /// A random point of the space around `seed`: every mutable field
    /// drawn afresh (the initial pool, and random search).
    pub fn random(&self, seed: &Spec, rng: &mut impl Rng) -> Spec {
        for _ in 0..TRIES {
            let mut s = seed.clone();
            s.events.clear();
            for f in self.fields(&s) {
                match f {
                    Field::AddEvent | Field::RemoveEvent | Field::MoveEvent => {}
                    f => self.draw(&mut s, f, rng),
                }
            }
            if let Some(e) = &self.space.events {
                for _ in 0..draw_u32(&e.count, rng) {
                    self.add_event(&mut s, rng);
                }
            }
            if let Some(v) = self.valid(s) {
                return v;
            }
        }
        seed.clone()
    }

    /// Algorithm 1 line 5: `parent` with 1..=max_changes fields changed.
    pub fn mutate(&self, parent: &Spec, rng: &mut impl Rng) -> Spec {
        let fields = self.fields(parent);
        if fields.is_empty() {
            return parent.clone();
        }
        for _ in 0..TRIES {
            let mut s = parent.clone();
            let n = rng.gen_range(1..=self.max_changes);
            for _ in 0..n {
                let f = *fields.choose(rng).expect("not empty");
                self.tweak(&mut s, f, rng);
            }
            if s == *parent {
                continue;
            }
            if let Some(v) = self.valid(s) {
                return v;
            }
        }
        parent.clone()
    }

    /// Half the time a fresh draw, half a step from the current value (a
    /// local search the pool's selection can climb).
    fn tweak(&self, s: &mut Spec, f: Field, rng: &mut impl Rng) {
        let local = rng.gen_bool(0.5);
        match f {
            Field::AddEvent => self.add_event(s, rng),
            Field::RemoveEvent => {
                if !s.events.is_empty() {
                    let i = rng.gen_range(0..s.events.len());
                    s.events.remove(i);
                }
            }
            Field::MoveEvent => {
                let Some(e) = &self.space.events else { return };
                if s.events.is_empty() {
                    return;
                }
                let total = connections(s);
                let i = rng.gen_range(0..s.events.len());
                let ev = &mut s.events[i];
                match rng.gen_range(0..4) {
                    0 => ev.connection = Index(rng.gen_range(1..=total.max(1))),
                    1 => ev.packet = self.packet(ev.packet, local, rng),
                    2 => ev.iteration = draw_index_or_all(&e.iteration, e.every_packet, rng),
                    _ => ev.action = *e.actions.choose(rng).expect("validated"),
                }
            }
            Field::Connections(i) | Field::Messages(i) | Field::TxDepth(i) if local => {
                let sp = self.space;
                let g = &mut s.traffic.connections[i];
                let (v, r) = match f {
                    Field::Connections(_) => (&mut g.count.0, &sp.connections),
                    Field::Messages(_) => (&mut g.messages.0, &sp.messages),
                    _ => (&mut g.tx_depth.0, &sp.tx_depth),
                };
                *v = step_u32(*v, r.as_ref().expect("in fields"), rng);
            }
            Field::MessageSize(i) if local => {
                let r = self.space.message_size.as_ref().expect("in fields");
                let b = &mut s.traffic.connections[i].message_size.0;
                *b = step_u64(
                    *b,
                    &Range {
                        min: r.min.0,
                        max: r.max.0,
                    },
                    rng,
                );
            }
            f => self.draw(s, f, rng),
        }
        repair(s);
    }

    /// A fresh value for a field (not events).
    fn draw(&self, s: &mut Spec, f: Field, rng: &mut impl Rng) {
        let sp = self.space;
        match f {
            Field::Connections(i) => {
                s.traffic.connections[i].count =
                    Index(draw_u32(sp.connections.as_ref().expect("in fields"), rng))
            }
            Field::Messages(i) => {
                s.traffic.connections[i].messages =
                    Index(draw_u32(sp.messages.as_ref().expect("in fields"), rng))
            }
            Field::TxDepth(i) => {
                s.traffic.connections[i].tx_depth =
                    Index(draw_u32(sp.tx_depth.as_ref().expect("in fields"), rng))
            }
            Field::MessageSize(i) => {
                let r = sp.message_size.as_ref().expect("in fields");
                s.traffic.connections[i].message_size = Bytes(draw_u64(
                    &Range {
                        min: r.min.0,
                        max: r.max.0,
                    },
                    rng,
                ));
            }
            Field::Verb(i) => s.traffic.connections[i].verb = self.verbs(rng),
            Field::Mtu(i) => s.traffic.connections[i].mtu = sp.mtu.choose(rng).copied(),
            Field::RetransmitTimeout(i) => {
                let r = sp.stack.min_retransmit_timeout.as_ref().expect("in fields");
                s.traffic.connections[i].min_retransmit_timeout =
                    Some(rng.gen_range(r.min..=r.max));
            }
            Field::Barrier => s.traffic.barrier = rng.gen_bool(0.5),
            Field::CongestionControl => {
                s.stack.congestion_control = sp.stack.congestion_control.choose(rng).copied()
            }
            Field::RtoMin => {
                let r = sp.stack.rto_min.as_ref().expect("in fields");
                s.stack.rto_min = Some(Nanos(draw_u64(
                    &Range {
                        min: r.min.0,
                        max: r.max.0,
                    },
                    rng,
                )));
            }
            Field::Sack => s.stack.sack = Some(rng.gen_bool(0.5)),
            Field::CnpInterval => {
                let r = sp.stack.min_time_between_cnps.as_ref().expect("in fields");
                let v = Nanos(rng.gen_range(r.min.0..=r.max.0));
                s.stack
                    .roce
                    .get_or_insert_with(Default::default)
                    .min_time_between_cnps = Some(v);
            }
            Field::DcqcnRp => {
                s.stack.roce.get_or_insert_with(Default::default).dcqcn_rp = Some(rng.gen_bool(0.5))
            }
            Field::Adaptive => {
                s.stack
                    .roce
                    .get_or_insert_with(Default::default)
                    .adaptive_retransmission = Some(rng.gen_bool(0.5))
            }
            Field::AddEvent | Field::RemoveEvent | Field::MoveEvent => {}
        }
        repair(s);
    }

    fn verbs(&self, rng: &mut impl Rng) -> Verbs {
        let v = &self.space.verbs;
        if self.space.verb_combinations && rng.gen_bool(0.3) {
            let mut two: Vec<Verb> = v.choose_multiple(rng, 2).copied().collect();
            two.shuffle(rng);
            return Verbs::new(two).expect("two verbs");
        }
        Verbs::single(*v.choose(rng).expect("in fields"))
    }

    fn packet(&self, now: IndexOrAll, local: bool, rng: &mut impl Rng) -> IndexOrAll {
        let e = self.space.events.as_ref().expect("events in the space");
        match now {
            IndexOrAll::One(Index(p)) if local => {
                IndexOrAll::One(Index(step_u32(p, &e.packet, rng)))
            }
            _ => draw_index_or_all(&e.packet, e.every_packet, rng),
        }
    }

    fn add_event(&self, s: &mut Spec, rng: &mut impl Rng) {
        let Some(e) = &self.space.events else { return };
        if s.events.len() as u32 >= e.count.max {
            return;
        }
        let total = connections(s).max(1);
        let action = *e.actions.choose(rng).expect("validated");
        s.events.push(Event {
            connection: Index(rng.gen_range(1..=total)),
            packet: draw_index_or_all(&e.packet, e.every_packet, rng),
            sent_by: None,
            message: None,
            iteration: draw_index_or_all(&e.iteration, e.every_packet, rng),
            action,
            edit: None,
            after: (action == wirelab_spec::Action::Reorder).then(|| rng.gen_range(1..=5)),
        });
        repair(s);
    }

    /// The spec if it validates as `wirelab check` would.
    pub fn valid(&self, s: Spec) -> Option<Spec> {
        if let Some(e) = &self.space.events {
            if (s.events.len() as u32) < e.count.min {
                return None;
            }
        }
        wirelab_spec::parse(&yaml(&s), self.catalog).ok()
    }
}

/// Drops events that address connections or messages no longer there, and
/// repeats of the same address (the spec refuses both).
pub fn repair(s: &mut Spec) {
    let total = connections(s);
    let mut seen = std::collections::HashSet::new();
    s.events.retain(|e| {
        e.connection.0 <= total && seen.insert((e.connection, e.packet, e.message, e.iteration))
    });
}

/// Uniform over the decades of a range (sizes and counts span several):
/// log-uniform, rounded. A range from 0 is drawn as 1..=max+1, less one,
/// so 0 is drawn too.
fn draw_u64(r: &Range<u64>, rng: &mut impl Rng) -> u64 {
    if r.min == r.max {
        return r.min;
    }
    if r.min == 0 {
        let shifted = Range {
            min: 1,
            max: r.max.saturating_add(1),
        };
        return draw_u64(&shifted, rng) - 1;
    }
    let (lo, hi) = ((r.min as f64).ln(), (r.max as f64).ln());
    let v = rng.gen_range(lo..=hi).exp().round() as u64;
    v.clamp(r.min, r.max)
}

fn draw_u32(r: &Range<u32>, rng: &mut impl Rng) -> u32 {
    draw_u64(
        &Range {
            min: r.min.into(),
            max: r.max.into(),
        },
        rng,
    ) as u32
}

/// Doubled, halved, or one up or down, within the range.
fn step_u64(v: u64, r: &Range<u64>, rng: &mut impl Rng) -> u64 {
    let n = match rng.gen_range(0..4) {
        0 => v.saturating_mul(2),
        1 => v / 2,
        2 => v.saturating_add(1),
        _ => v.saturating_sub(1),
    };
    n.clamp(r.min, r.max)
}

fn step_u32(v: u32, r: &Range<u32>, rng: &mut impl Rng) -> u32 {
    step_u64(
        v.into(),
        &Range {
            min: r.min.into(),
            max: r.max.into(),
        },
        rng,
    ) as u32
}

fn draw_index_or_all(r: &Range<u32>, all: bool, rng: &mut impl Rng) -> IndexOrAll {
    if all && rng.gen_bool(0.2) {
        IndexOrAll::All
    } else {
        IndexOrAll::One(Index(rng.gen_range(r.min..=r.max)))
    }
}
