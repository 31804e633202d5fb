//! `events:`: the faults the switch injects, addressed as in Lumina §3.3.

use std::collections::BTreeSet;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{err, Index, IndexOrAll, Invalid, Spec, Transport};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    Drop,
    /// Set CE on an ECN-capable packet (RFC 3168).
    Ecn,
    /// Flip a payload bit; the receiver's checksum must catch it.
    Corrupt,
    /// Rewrite a header field (the event's `edit`), keeping the packet
    /// valid: RoCE's ICRC is patched (Lumina §6.2.3 set MigReq).
    Edit,
    /// Hold the packet until the event's `after` next packets of its
    /// connection and direction have gone through, and send it right
    /// after the last of them: reordering, exactly where asked (DETER
    /// §5.2; a replay's late arrivals).
    Reorder,
}

impl Action {
    pub fn name(self) -> &'static str {
        match self {
            Action::Drop => "drop",
            Action::Ecn => "ecn",
            Action::Corrupt => "corrupt",
            Action::Edit => "edit",
            Action::Reorder => "reorder",
        }
    }
}

/// An end of a connection.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Side {
    /// The connection's `from:` host.
    Requester,
    /// Its `to:` host.
    Responder,
}

impl Side {
    pub fn name(self) -> &'static str {
        match self {
            Side::Requester => "requester",
            Side::Responder => "responder",
        }
    }
}

/// An injected event, addressed as in Lumina §3.3: a connection by its index,
/// a data packet by its index among the connection's first transmissions
/// (or within a message), and an iteration (1 = first transmission round).
/// With `sent_by`, `packet` is instead the n-th TCP packet that end sent,
/// data or ACK (DETER's logical packet, seed 004 §4).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Event {
    pub connection: Index,
    /// With `message`, the packet index within that message.
    pub packet: IndexOrAll,
    /// Count `packet` among every TCP packet this end of the connection
    /// sent after the handshake (data or not; SYN and RST are not
    /// counted), as DETER's IP-ID offsets do, instead of among data
    /// packets: `{sent_by: responder, packet: 3}` is the responder's third
    /// packet, typically an ACK. TCP only; no `message` or `iteration`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sent_by: Option<Side>,
    #[serde(default)]
    pub message: Option<Index>,
    #[serde(default = "iter_one")]
    pub iteration: IndexOrAll,
    pub action: Action,
    /// With `action: edit`: the field to rewrite and its new value.
    #[serde(default)]
    pub edit: Option<Edit>,
    /// With `action: reorder`: how many of the packets its end sends next
    /// overtake it (1 to 64). Fewer never come: the packet is not
    /// delivered, and the run's summary says so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<u32>,
}

/// The most packets a `reorder` event lets overtake its packet.
pub const MAX_REORDER_AFTER: u32 = 64;

/// A header field an `edit` event rewrites. RoCE only for now: MigReq (BTH,
/// IBTA §9.2.4), which Lumina §6.2.3 set to 1 on an E810's packets to show
/// a CX5 dropped them for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Edit {
    /// 0 or 1.
    pub migreq: u8,
}

fn iter_one() -> IndexOrAll {
    IndexOrAll::One(Index(1))
}

/// Checks `events:`; `groups` is each connection's group (`traffic::validate`).
pub(crate) fn validate(s: &Spec, groups: &[usize]) -> Result<(), Invalid> {
    let total = groups.len() as u32;
    let per_conn_group = groups;
    let mut seen = BTreeSet::new();
    for (i, e) in s.events.iter().enumerate() {
        let at = format!("events[{i}]");
        if s.traffic.transport == Transport::Udp {
            return err(
                at,
                "UDP datagrams carry no sequence numbers to address; events need TCP or RoCE",
            );
        }
        if e.connection.0 > total {
            return err(
                format!("{at}.connection"),
                format!(
                    "connection {} does not exist (the spec has {total})",
                    e.connection.0
                ),
            );
        }
        let g = &s.traffic.connections[per_conn_group[e.connection.0 as usize - 1]];
        if let Some(side) = e.sent_by {
            if s.traffic.transport != Transport::Tcp {
                return err(
                    format!("{at}.sent_by"),
                    "packets are counted per end for TCP (its IP-IDs); RoCE events address packets by PSN",
                );
            }
            if e.packet == IndexOrAll::All {
                return err(
                    format!("{at}.packet"),
                    format!(
                        "`sent_by: {}` counts packets: give a number, not `all`",
                        side.name()
                    ),
                );
            }
            if e.message.is_some() {
                return err(
                    format!("{at}.message"),
                    "`sent_by` counts the end's packets from the handshake on, not within a message",
                );
            }
            if e.iteration != iter_one() {
                return err(
                    format!("{at}.iteration"),
                    "`sent_by` counts every packet, retransmissions included: it has no iteration",
                );
            }
        }
        if let Some(m) = e.message {
            if m.0 > g.messages.0 {
                return err(
                    format!("{at}.message"),
                    format!(
                        "message {} does not exist (the connection sends {})",
                        m.0, g.messages.0
                    ),
                );
            }
            // RoCE assigns each message its PSNs when posted, so any depth works.
            if g.tx_depth.0 != 1 && s.traffic.transport == Transport::Tcp {
                return err(
                    format!("{at}.message"),
                    "message-relative packets need tx_depth: 1 (otherwise messages share segments)",
                );
            }
            if e.packet == IndexOrAll::All {
                return err(
                    format!("{at}.packet"),
                    "`all` cannot be combined with `message`",
                );
            }
        }
        match (e.action, e.edit) {
            (Action::Edit, None) => {
                return err(
                    format!("{at}.edit"),
                    "`action: edit` needs `edit:` naming the field, e.g. `edit: {migreq: 1}`",
                )
            }
            (Action::Edit, Some(ed)) => {
                if ed.migreq > 1 {
                    return err(
                        format!("{at}.edit.migreq"),
                        format!("MigReq is one bit: 0 or 1, got {}", ed.migreq),
                    );
                }
                if s.traffic.transport != Transport::Roce {
                    return err(
                        format!("{at}.edit"),
                        "MigReq is a RoCE header field: `edit` needs `transport: roce`",
                    );
                }
            }
            (_, Some(_)) => {
                return err(
                    format!("{at}.edit"),
                    format!("`edit` goes with `action: edit`, not `{}`", e.action.name()),
                )
            }
            (_, None) => {}
        }
        match (e.action, e.after) {
            (Action::Reorder, None) => {
                return err(
                    format!("{at}.after"),
                    "`action: reorder` needs `after:`, how many later packets overtake it, e.g. `after: 3`",
                )
            }
            (Action::Reorder, Some(k)) if k == 0 || k > MAX_REORDER_AFTER => {
                return err(
                    format!("{at}.after"),
                    format!("1 to {MAX_REORDER_AFTER} packets may overtake it, got {k}"),
                )
            }
            (Action::Reorder, Some(_)) => {
                if s.traffic.transport != Transport::Tcp {
                    return err(
                        format!("{at}.action"),
                        "`reorder` holds TCP packets (RoCE's are numbered by PSN: reordering them is not built)",
                    );
                }
                if e.packet == IndexOrAll::All {
                    return err(
                        format!("{at}.packet"),
                        "`reorder` holds one packet at a time per end: give a number, not `all`",
                    );
                }
            }
            (_, Some(_)) => {
                return err(
                    format!("{at}.after"),
                    format!("`after` goes with `action: reorder`, not `{}`", e.action.name()),
                )
            }
            (_, None) => {}
        }
        let key = (e.connection, e.sent_by, e.message, e.packet, e.iteration);
        if !seen.insert(format!("{key:?}")) {
            return err(
                at,
                "the same packet and iteration is already addressed by an earlier event",
            );
        }
    }
    Ok(())
}
