/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Stage: Lumina's event injector (§3.3). A data packet's (connection,
 * index, iteration) is looked up in the event table, and the event's action
 * is applied here, all of it: CE set, a payload bit flipped, MigReq edited.
 * A drop is only decided here; the packet is still mirrored (Lumina §3.4:
 * the trace holds every packet, dropped ones too) and the forward stage
 * drops it.
 */
#ifndef WL_STAGE_EVENTS_H
#define WL_STAGE_EVENTS_H

#include <linux/bpf.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include "wl_ctx.h"
#include "wl_ecn.h"

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, struct wl_event_key);
	__type(value, struct wl_event);
} events SEC(".maps");

/* What each connection's events can match (struct wl_ev_filter). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, WL_MAX_CONNS + 1);
	__type(key, __u32);
	__type(value, struct wl_ev_filter);
} ev_filter SEC(".maps");

/* wire_count[conn * 2 + side]: TCP packets that side of the connection
 * has sent through the switch, SYN and RST excepted (WL_EVK_WIRE). Counted
 * only for connections with wire events. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, (WL_MAX_CONNS + 1) * 2);
	__type(key, __u32);
	__type(value, __u32);
} wire_count SEC(".maps");

/* icrc_migreq[k]: what flipping MigReq changes in the ICRC of a packet with
 * k covered bytes after the BTH byte that holds it. Filled by the control
 * plane (wirelab_roce::packet::migreq_icrc_delta) before an edit event is
 * armed; 0 means not filled, and the edit is refused. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, WL_ICRC_SHIFTS);
	__type(key, __u32);
	__type(value, __u32);
} icrc_migreq SEC(".maps");

/* The exact key first, then the wildcards; only the key shapes this
 * connection has events under, at iterations it has them, are looked up. */
static __always_inline struct wl_event *match_event(struct wl_ev_filter *f, __u32 conn,
						       __u32 idx, __u32 iter)
{
	struct wl_event_key k = { .conn = conn, .index = idx, .iter = iter };
	struct wl_event *ev;
	__u32 mask;

	mask = f->shapes;
	if (iter < f->iter_lo || iter > f->iter_hi)
		mask &= WL_EVK_ANY_ITER | WL_EVK_ALL_ALL;
	if (!mask)
		return 0;
	if (idx && (mask & WL_EVK_EXACT)) {
		ev = bpf_map_lookup_elem(&events, &k);
		if (ev)
			return ev;
	}
	if (idx && (mask & WL_EVK_ANY_ITER)) {
		k.iter = WL_ANY;
		ev = bpf_map_lookup_elem(&events, &k);
		if (ev)
			return ev;
	}
	k.index = WL_ANY;
	if (mask & WL_EVK_ALL_PKTS) {
		k.iter = iter;
		ev = bpf_map_lookup_elem(&events, &k);
		if (ev)
			return ev;
	}
	if (mask & WL_EVK_ALL_ALL) {
		k.iter = WL_ANY;
		return bpf_map_lookup_elem(&events, &k);
	}
	return 0;
}

/*
 * A bit error in one payload byte (TCP: the first; RoCE: the last before the
 * ICRC), checksums left as they were, so the receiver's TCP checksum (RFC 793
 * §3.1) or ICRC check must discard it.
 */
static __always_inline void corrupt(struct __sk_buff *skb, struct wl_pkt *p)
{
	__u8 b;

	if (bpf_skb_load_bytes(skb, p->payload_off, &b, 1))
		return;
	b ^= 0x01;
	bpf_skb_store_bytes(skb, p->payload_off, &b, 1, 0);
}

/*
 * Lumina §6.2.3's edit: MigReq (BTH byte 1, bit 0x40; IBTA §9.2.4) set or
 * cleared, and the ICRC patched rather than recomputed. CRC-32 is linear:
 * for messages of one length crc(m ^ d) = crc(m) ^ crc(d) ^ crc(0), and
 * crc(d) ^ crc(0) for a one-bit d depends only on how many bytes follow
 * that bit, so a table lookup replaces a pass over up to 4 KiB. Returns 0
 * when the packet was left as it was (not RoCE, table not filled).
 */
static __always_inline int edit_migreq(struct __sk_buff *skb, struct wl_pkt *p, int set)
{
	__u32 bth1 = p->l4_off + sizeof(struct udphdr) + 1, icrc_off, k, icrc, *delta;
	__u8 b;

	if (!p->is_roce)
		return 0;
	if (bpf_skb_load_bytes(skb, bth1, &b, 1))
		return 0;
	if (!!(b & 0x40) == set)
		return 1; /* already so */
	/* parse_roce put payload_off on the last byte before the ICRC. */
	icrc_off = p->payload_off + 1;
	k = icrc_off - bth1 - 1;
	delta = bpf_map_lookup_elem(&icrc_migreq, &k);
	if (!delta || !*delta)
		return 0;
	if (bpf_skb_load_bytes(skb, icrc_off, &icrc, sizeof(icrc)))
		return 0;
	/* The ICRC goes least significant byte first (Annex A17.8). */
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
	icrc ^= __builtin_bswap32(*delta);
#else
	icrc ^= *delta;
#endif
	b ^= 0x40;
	bpf_skb_store_bytes(skb, bth1, &b, 1, 0);
	bpf_skb_store_bytes(skb, icrc_off, &icrc, sizeof(icrc), 0);
	return 1;
}

/*
 * A wire event (WL_EVK_WIRE): the packet's number among those its side sent,
 * data or not. SYN and RST are not numbered: the SYN-ACK's IP-ID is 0 and a
 * RST comes from the stack's control socket, so neither is in the
 * connection's IP-ID series DETER's recorder follows (recorder.bpf.c).
 */
static __always_inline struct wl_event *match_wire(struct wl_ctx *ctx, struct wl_ev_filter *f)
{
	struct wl_event_key k = { .conn = ctx->conn };
	__u32 slot, *n;

	if (!(f->shapes & WL_EVK_WIRE) || !ctx->pkt.is_tcp || (ctx->pkt.tcp_flags & 0x06))
		return 0;
	slot = ctx->conn * 2 + (ctx->side & 1);
	n = bpf_map_lookup_elem(&wire_count, &slot);
	if (!n)
		return 0;
	/* One end's packets enter by its host's port, which the lab steers to
	 * one CPU (netns steer_rx), so a plain increment is serial here. */
	k.index = *n + 1;
	*n = k.index;
	k.iter = WL_WIRE_ITER + (ctx->side & 1);
	return bpf_map_lookup_elem(&events, &k);
}

WL_CORE_STAGE(wl_stage_events)
{
	struct wl_ev_filter *f;
	struct wl_event *ev;
	enum wl_action a;
	__u32 conn = ctx->conn;

	/* One look at what the connection's events can match, for both
	 * addressings; packets of no connection stop here. */
	if (!conn)
		return WL_CONTINUE;
	f = bpf_map_lookup_elem(&ev_filter, &conn);
	if (!f)
		return WL_CONTINUE;
	ev = match_wire(ctx, f);
	if (!ev) {
		if (!ctx->data_dir || !(ctx->index || ctx->iter))
			return WL_CONTINUE;
		ev = match_event(f, conn, ctx->index, ctx->iter);
	}
	if (!ev)
		return WL_CONTINUE;
	__sync_fetch_and_add(&ev->hits, 1);
	a = ev->action;
	ctx->event_id = ev->id;
	/* The trace shows the packet as the receiver gets it: CE set, a bit
	 * flipped, so anyone recomputing a checksum or ICRC on the capture
	 * sees what the receiver saw. */
	if (a == WL_EV_ECN && !mark_ce(skb, &ctx->pkt))
		a = WL_EV_ECN_NOT_ECT;
	else if (a == WL_EV_CORRUPT)
		corrupt(skb, &ctx->pkt);
	else if ((a == WL_EV_MIGREQ_SET || a == WL_EV_MIGREQ_CLEAR) &&
		 !edit_migreq(skb, &ctx->pkt, a == WL_EV_MIGREQ_SET))
		a = WL_EV_NONE;
	if (a == WL_EV_REORDER)
		ctx->reorder_after = ev->after;
	ctx->action = a;
	return WL_CONTINUE;
}

#endif
