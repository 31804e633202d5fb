/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The one kernel <-> user ABI of the wirelab switch. Every struct shared with
 * user space lives here; the Rust side gets them from the generated skeleton
 * (libbpf-cargo), never from a hand-written copy.
 */
#ifndef WIRELAB_H
#define WIRELAB_H

#include "wirelab_ext.h"

/* Limits, as an enum rather than #defines so that they reach BTF: the Rust
 * side reads them from the generated skeleton (crates/dataplane/src/lib.rs),
 * never from a copy. switch.bpf.c anchors the enums no field refers to. */
enum wl_limits {
	WL_MAX_PORTS = 64,
	/* Devices with an ifindex below this are found in an array (a load,
	 * inlined), the rest in a hash map (a call); a lab's switch namespace
	 * numbers its devices from 1. */
	WL_NEAR_IFINDEX = 4096,
	WL_MAX_CONNS = 1024,
	/* Benchmarks only: the `bench_cut` that runs the least a switch with
	 * a complete capture must do (switch.bpf.c, capture_floor). */
	WL_BENCH_FLOOR = 255,
	/* Largest snap length a spec may ask for: a full 1500-byte-MTU frame
	 * + VLAN. */
	WL_MAX_SNAP = 1518,
	/* Virtual queues of the vAQM stage (NetBump §3.1), numbered
	 * 1..WL_MAX_VQS; 0 = the packet is in none. */
	WL_MAX_VQS = 64,
	/* Entries of icrc_migreq: one per count of ICRC-covered bytes after
	 * the BTH's MigReq byte (path MTU 4096 + RETH + immediate + pad,
	 * rounded up). */
	WL_ICRC_SHIFTS = 4224,
	/* First transmissions remembered per connection to index
	 * retransmissions: slot conn * WL_SEG_WINDOW + (index % WL_SEG_WINDOW)
	 * holds the relative sequence number where data packet `index`
	 * started. A power of two. */
	WL_SEG_WINDOW = 4096,
	/* The eSwitch stage (stage_eswitch.h, ScalaCN's flow tables): tables,
	 * masks per table (powers of two), entries in all, and tables one
	 * packet may pass through (a chain of gotos). */
	WL_ES_MAX_TABLES = 4,
	WL_ES_MAX_MASKS = 256,
	WL_ES_MAX_ENTRIES = 65536,
	WL_ES_MAX_CHAIN = 4,
	/* Flows a table with a hyper mask has seen hit its other masks, not
	 * yet activated (ScalaCN §4.3); least recently updated go first. */
	WL_ES_MAX_LEARNED = 4096,
};

/* Wildcards in event keys: index 0 = `packet: all`, iter 0 = any iteration. */
#define WL_ANY 0

/* Which key shapes a connection has events for (ev_mask map), so a data
 * packet is looked up only under shapes that can match. */
enum wl_evk {
	WL_EVK_EXACT = 1,     /* (index, iter) */
	WL_EVK_ANY_ITER = 2,  /* (index, any) */
	WL_EVK_ALL_PKTS = 4,  /* (all, iter) */
	WL_EVK_ALL_ALL = 8,   /* (all, any) */
	/* (n, WL_WIRE_ITER + side): the n-th TCP packet one side sent on the
	 * connection, data or not, SYN and RST excepted. DETER's logical
	 * packet (seed 004 §4): Linux numbers a connected socket's packets
	 * consecutively by IP-ID, so a recorded drop at ID offset k is wire
	 * packet k + 1 of that side in a replay (issue 21). */
	WL_EVK_WIRE = 16,
};

/* The iteration field of a wire event's key: WL_WIRE_ITER + side (0 = the
 * requester's packets, 1 = the responder's); no real iteration gets this
 * high. */
enum wl_wire {
	WL_WIRE_ITER = 0xfffffff0u,
};

/* What a connection's armed events can match, checked before the event
 * table is: most data packets match no event, and each hash lookup they
 * skip is a cache line the forwarding path does not touch. */
struct wl_ev_filter {
	__u32 shapes;   /* enum wl_evk bits */
	/* Iterations the events with a specific iteration name, lo..hi
	 * (0..0 = none); packets of other iterations can only match an
	 * event of any iteration (WL_EVK_ANY_ITER, WL_EVK_ALL_ALL). */
	__u32 iter_lo;
	__u32 iter_hi;
	__u32 pad;
};

enum wl_action {
	WL_EV_NONE = 0,
	WL_EV_DROP = 1,
	WL_EV_ECN = 2,
	WL_EV_CORRUPT = 3,
	/* An `ecn` event hit a packet that was not ECN-capable (Not-ECT): RFC 3168
	 * §5 forbids setting CE on it, so the switch forwards it unchanged and
	 * says so in the trace. */
	WL_EV_ECN_NOT_ECT = 4,
	/* `edit` events on RoCE (Lumina §6.2.3): set or clear MigReq, the ICRC
	 * patched so the packet stays valid. */
	WL_EV_MIGREQ_SET = 5,
	WL_EV_MIGREQ_CLEAR = 6,
	/* `reorder` events (DETER §5.2): the forward stage holds the frame
	 * and sends it right after the event's `after`-th next packet of its
	 * connection and direction (stage_forward.h). */
	WL_EV_REORDER = 7,
};

/* A switch port, keyed by the ifindex of its device in the switch namespace. */
struct wl_port {
	__u32 port; /* 1-based port number, as in the plan */
};

/* Static forwarding: destination MAC (in the low 48 bits) -> egress port. */
struct wl_fwd {
	__u32 ifindex;
	__u32 port;
};

/* One direction of a connection, as the control plane armed it. TCP:
 * addresses, ports, proto 6. RoCEv2 (UDP 4791): addresses, ports 0 and
 * proto = 17 | destination QPN << 8, because a QP, not a UDP port pair,
 * is the connection (Lumina Fig. 2 matches srcIP, dstIP, dstQPN). */
struct wl_flow_key {
	__u32 saddr; /* network byte order */
	__u32 daddr;
	__u16 sport; /* network byte order */
	__u16 dport;
	__u32 proto;
};

#define WL_ROCE_PORT 4791

struct wl_flow {
	__u32 conn;     /* 1-based connection index from the spec */
	/* 0: no message data this way. 1: data, tracked in the connection's
	 * state slot conn_state[conn]. 2: data too, in its second slot
	 * conn_state[conn + WL_STATE_SECOND]: a RoCE QP that mixes verbs
	 * (send + read) carries data both ways, and Lumina's ITER rule (§3.3)
	 * compares a PSN with the last one sent the same way. */
	__u32 data_dir;
	/* 0: the requester sent it; 1: the responder (wire events). */
	__u32 side;
	/* Where its packets go, as the route stage last found it in the MAC
	 * table (or a bump's default port), for the destination MAC and
	 * ingress port in route_key (the MAC's 48 bits | the port << 48; 0:
	 * none yet). A packet of the flow with the same two is routed from
	 * here, by the flow lookup the track stage makes anyway: the MAC
	 * table's lookup, 18-20 ns a packet (`wirelab bench stages`), is made
	 * once a flow. The tables are static during a run, so the verdict is
	 * the MAC table's. */
	__u64 route_key;
	__u32 out_ifindex;
	__u32 out_port;
};
/* Offset of a connection's second tracking slot in conn_state. */
#define WL_STATE_SECOND (WL_MAX_CONNS + 1)

/* Per-connection state of the data direction (Lumina §3.3). */
struct wl_conn_state {
	struct bpf_spin_lock lock;
	__u32 synced;    /* ISN learnt from this direction's SYN / SYN-ACK */
	__u32 isn;
	__u32 seen_data; /* a data packet has passed: last_rel is meaningful */
	__u32 last_rel;  /* relative seq of the previous data packet (Lumina's Last_PSN) */
	__u32 next_new;  /* relative seq of the first byte never sent (snd_nxt max) */
	__u32 iter;      /* ITER: rounds of (re)transmissions, starts at 1 */
	__u32 first_tx;  /* data packets transmitted for the first time so far */
	__u32 roce;      /* RoCEv2: isn is the initial PSN, set by the control plane */
	/* CPU of the last update + 1 (0 = none), and updates from another
	 * CPU than the one before: with the lock off (track_lock) the state
	 * is only safe on one CPU, and this says when that broke. */
	__u32 cpu;
	__u32 cpu_moves;
};

struct wl_event_key {
	__u32 conn;
	__u32 index; /* WL_ANY = every data packet */
	__u32 iter;  /* WL_ANY = every iteration */
};

struct wl_event {
	enum wl_action action;
	__u32 id;     /* 1-based index of the event in the spec */
	__u64 hits;
	__u32 after; /* WL_EV_REORDER: packets that overtake this one */
	__u32 pad;
};

/* The vAQM stage's disciplines (NetBump §4). */
enum wl_aqm {
	WL_AQM_NONE = 0,  /* estimate the queue only */
	WL_AQM_DCTCP = 1, /* mark above K on the instantaneous queue (§4.2) */
	WL_AQM_RED = 2,   /* Floyd & Jacobson's RED on the average (§4.1) */
	WL_AQM_EXT = 3,   /* the user's discipline (wirelab_ext.h hooks) */
	WL_AQM_QCN = 4,   /* an 802.1Qau congestion point: CNMs upstream (§4.3) */
};


/* The verdicts (enum wl_aqm_verdict) are in wirelab_ext.h, shared with
 * user disciplines. */

/*
 * One virtual queue: NetBump's "virtual queue table" entry (§3.1: size in
 * bytes, last arrival time, drain rate) plus its discipline's parameters and
 * state. The control plane writes the configuration once; the stage updates
 * the state under the lock, so every CPU sees one queue.
 */
/* The estimate is capped here (16 GiB), so bytes × 1e9 fits in 64 bits. */
#define WL_VQ_MAX_BYTES (1ULL << 34)

struct wl_vq {
	struct bpf_spin_lock lock;
	enum wl_aqm discipline;
	__u32 red_drop;   /* RED: drop (1) or mark (0) between the thresholds */
	__u64 rate_Bps;   /* drain rate, bytes per second */
	__u64 k_bytes;    /* DCTCP marking threshold K */
	__u64 min_th;     /* RED thresholds, bytes */
	__u64 max_th;
	__u64 w_q;        /* RED EWMA weight, in 2^-16 */
	__u64 max_p;      /* RED max_p, in 2^-32 */
	__u64 max_gap_ns; /* longest gap whose drain fits 64 bits in byte/1e9 */
	__u64 buffer;     /* the emulated port's buffer, bytes; 0 = unbounded */
	/* QCN congestion point (802.1Qau; crates/qcn/src/cp.rs is the
	 * reference): equilibrium, weight, quantisation, sampling in 2^-32. */
	__u64 q_eq;
	__u64 qcn_w;
	__u64 fb_max;
	__u64 fb_range;   /* |Fb| that quantises to fb_max: q_eq (1 + 2w) */
	__u64 p_min;
	__u64 p_max;
	/* State. */
	__u64 q_old;      /* QCN: the queue at the previous sample */
	__u64 last_qfb;   /* QCN: the previous sample's quantised |Fb| */
	__u64 bytes;      /* VQ->tokens: the estimated occupancy */
	__u64 last_ns;    /* VQ->lastUpdate; 0 = no packet yet */
	__u64 frac;       /* drain not yet a whole byte, in byte/1e9 */
	__u64 avg;        /* RED average, bytes in 2^-16 */
	__s64 count;      /* RED: packets since the last mark, -1 below min_th */
	__u64 rng;        /* RED: xorshift64 state, seeded by set_vq (never 0) */
	/* Statistics. */
	__u64 pkts;
	__u64 marks;
	__u64 drops;
	__u64 unmarkable; /* marks that fell on Not-ECT packets (RED drops them) */
	__u64 cpu_moves;  /* updates from another CPU than the previous one */
	__u64 overflows;  /* packets the emulated port's full buffer tail-drops */
	__u64 samples;    /* QCN: frames sampled (CNMs: the ports' cnm_sent) */
	__u32 cpu;        /* CPU of the last update */
	__u32 pad;
	/* WL_AQM_EXT: the user discipline's view (wirelab_ext.h). */
	struct wl_ext_vq ext;
};

/* Ground truth (truth.bpf.c): a watched qdisc, and one sample of it. */
struct wl_truth_port {
	__u32 netns;   /* inode of the network namespace */
	__u32 ifindex;
};

enum wl_truth_kind {
	WL_TRUTH_ENQUEUE = 1,
	WL_TRUTH_DEQUEUE = 2,
};

struct wl_truth_sample {
	__u64 ts_ns;   /* the pipeline's clock */
	__u64 virt;    /* the virtual queue's estimate at ts_ns, bytes */
	__u32 actual;  /* the qdisc's backlog after the operation, bytes */
	__u32 qlen;    /* and its packets */
	__u32 vq;
	__u32 len;     /* the (first) packet enqueued or dequeued, bytes */
	__u8 kind;     /* enum wl_truth_kind */
	__u8 pad;
	__u16 packets; /* a dequeue can take a bulk of them (xmit_more) */
};

struct wl_counters {
	__u64 rx_pkts;
	__u64 rx_bytes;
	__u64 tx_pkts;
	__u64 tx_bytes;
	__u64 mirrored;
	__u64 mirror_lost; /* ring full: the run is INVALID */
	__u64 event_drops;
	__u64 no_route;
	__u64 aqm_drops;
	__u64 aqm_marks;
	/* QCN: notifications sent back out of this (ingress) port, and
	 * those that were not (the frame could not be cloned and went on
	 * alone, or the CNM could not be built after the clone). */
	__u64 cnm_sent;
	__u64 cnm_failed;
	/* Dropped by a flow-table entry (the eSwitch stage). */
	__u64 es_drops;
	/* `reorder` events: packets held, sent on after the packets that
	 * overtake them, and those that could not be held (WL_HOLD_SLOTS of
	 * the same direction were held already: sent on in order) or not
	 * rebuilt. */
	__u64 held;
	__u64 released;
	__u64 hold_failed;
};

/* Room for one held frame: the largest lab MTU (9000) with its Ethernet
 * and VLAN headers. */
#define WL_HOLD_ROOM 9216
/* Frames held at once per connection and direction (at most 32: the
 * release marks them in a u32). A router overtook a run of 9 ACKs with
 * one in a CI run, and with 8 slots the replay sent the 9th on in order
 * and released the 8 after two packets, not one. */
#define WL_HOLD_SLOTS 32

/* A frame a `reorder` event holds (`held`, stage_forward.h): `after`
 * more packets of its connection and direction go first. */
struct wl_held {
	__u32 after;
	__u32 len;
	__u32 event_id;
	__u32 pad;
	__u8 frame[WL_HOLD_ROOM];
};

/* Header of one mirrored packet in the capture ring; cap_len bytes follow. */
struct wl_mirror_hdr {
	__u64 seq; /* global mirror sequence number, from 0, no gaps */
	__u64 ts_ns; /* bpf_ktime_get_ns() at ingress: one clock for all ports */
	/* When the sending host's stack released the packet, on the same
	 * clock, where the packet says (a TCP segment's delivery time, see
	 * stage_mirror.h); 0 = not known. */
	__u64 sent_ns;
	__u32 pkt_len;
	__u32 cap_len;
	__u32 port;   /* ingress port */
	enum wl_action action; /* applied to this packet */
	__u32 event_id;
	__u32 conn;   /* 0 = not a connection of the spec */
	__u32 data_dir;
	__u32 index;  /* data packet index, 0 = not a data packet / unknown */
	__u32 iter;
	__u32 first_tx; /* 1 if a first transmission */
	__u32 vq;       /* virtual queue, 0 = none */
	__u32 vq_bytes; /* its estimated occupancy after this packet */
	enum wl_aqm_verdict aqm;
	/* QCN: the quantised |Fb| of the CNM this packet caused to be sent
	 * back towards its source, 0 = none. */
	__u32 qcn_fb;
	/* The eSwitch stage: masks this packet searched (ScalaCN's cost, per
	 * packet), and 1 if a flow table dropped it (a drop entry, a failed
	 * encap or rewrite, or the slow path past its capacity). */
	__u16 es_visited;
	__u16 es_drop;
};

#endif
