/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * What the stages of the switch pipeline pass each other: one context per
 * packet, on the main program's stack, handed to every stage.
 *
 * Katran's and cilium's shape: small stages, one context. A capability's
 * stage is a global BPF function (WL_STAGE below), which sees its pointer
 * arguments as plain memory of the pointee's size, so the context carries
 * numbers (offsets, ids, verdicts), never pointers into maps or the
 * packet; a stage looks up what it needs again (array lookups are inlined
 * by the JIT).
 */
#ifndef WL_CTX_H
#define WL_CTX_H

#include <linux/types.h>
#include "wirelab.h"

/* A stage's return: go on to the next stage, or this tc verdict ends the
 * pipeline. */
#define WL_CONTINUE -1

/* What the parse stage found. Offsets are from the start of the frame;
 * l3_off == 0: not IPv4, nothing else below is meaningful. */
struct wl_pkt {
	__u32 l3_off;
	__u32 l4_off;
	/* The byte a corruption flips (TCP: the first of the payload; RoCE:
	 * the last before the ICRC). */
	__u32 payload_off;
	/* TCP: payload bytes. RoCE: 1 for a data packet, else 0. */
	__u32 payload_len;
	__u32 seq;      /* TCP sequence number or RoCE PSN */
	__u32 saddr;    /* network byte order */
	__u32 daddr;
	__u16 sport;    /* TCP and UDP, network byte order */
	__u16 dport;
	__u8 is_tcp;
	__u8 is_roce;
	__u8 tcp_flags;
	__u8 tos;
	__u8 ip_proto;
	__u8 pad[3];
	/* The key of the connection this packet would belong to (wirelab.h). */
	struct wl_flow_key key;
};

struct wl_ctx {
	/* Ingress. */
	__u64 now;         /* the pipeline's clock at ingress (wl_clock.h) */
	__u32 ifindex;
	__u32 in_port;     /* 1-based switch port */
	__u32 len;         /* skb->len at ingress */
	/* Route: where the packet goes; out_ifindex 0 = nowhere (set by
	 * track from the flow's entry when it holds them, wl_flow). */
	__u32 out_ifindex;
	__u32 out_port;
	/* Classify and track (Lumina §3.3). */
	__u32 conn;        /* 0 = not a connection of the spec */
	__u32 side;        /* 0: from the requester, 1: from the responder */
	__u32 data_dir;
	__u32 index;       /* data packet index, 0 = not a data packet / unknown */
	__u32 iter;
	__u32 first_tx;
	/* Events: the action applied and the event that asked for it, and
	 * for a reorder how many later packets overtake this one. */
	enum wl_action action;
	__u32 event_id;
	__u32 reorder_after;
	/* vAQM (NetBump): queue, its estimate after this packet, the verdict,
	 * and for a QCN congestion point the CNM to send back: |Fb|
	 * quantised (0 = none) and the sample's Q - Q_eq and Q - Q_old in
	 * 64-byte units (802.1Qau cnmQOffset, cnmQDelta). */
	__u32 vq;
	__u32 vq_bytes;
	enum wl_aqm_verdict aqm;
	__u32 qcn_fb;
	__s16 qcn_off;
	__s16 qcn_delta;
	/* eSwitch (ScalaCN): masks this packet searched, and a drop entry's
	 * verdict, applied by the forward stage after the capture. */
	__u16 es_visited;
	__u16 es_drop;
	struct wl_pkt pkt;
	/* The packet as a user discipline sees it (wirelab_ext.h); filled by
	 * the route stage when one is linked. */
	struct wl_ext_pkt ext;
};

/*
 * Two linkages, one interface (skb, ctx) -> WL_CONTINUE or a verdict:
 *
 * WL_STAGE: a capability's stage (vAQM now; a load responder, a replay
 * corrector, flow tables to come), a global function the verifier checks
 * on its own, once, so adding one does not multiply the paths the verifier
 * walks through the rest. Weak, so that clang assumes nothing about it at
 * the call: it would otherwise pass an argument the stage does not read as
 * undefined, and the verifier checks every argument of a global function
 * against its type.
 *
 * WL_CORE_STAGE: the stages every packet runs (parse, track, events, route,
 * mirror, forward), inlined. A call is not free here: inlining these six
 * saved 68-69 ns per packet (`wirelab bench stages`), about 11 ns a stage,
 * against 72-78 ns for forwarding alone; the kernel's return-thunk
 * mitigation (AMD's SRSO "Safe RET", on in the project's machines) makes
 * every return pay, the likely reason.
 * Moving a stage between the two is a change of this one word.
 */
#define WL_STAGE(name) \
	__weak __noinline int name(struct __sk_buff *skb, struct wl_ctx *ctx __wl_nonnull)
#define WL_CORE_STAGE(name) \
	static __always_inline int name(struct __sk_buff *skb, struct wl_ctx *ctx)

#endif
