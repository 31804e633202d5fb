/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Stage: the verdict. What the stages before decided is done here, after
 * the mirror: an event's or the vAQM's drop, no route, or out through the
 * egress port; and for a QCN congestion point the notification back.
 */
#ifndef WL_STAGE_FORWARD_H
#define WL_STAGE_FORWARD_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include "wl_ctx.h"
#include "wl_ports.h"

/* The bytes of a sampled frame's MSDU a CNM carries (802.1Qau §33.4). */
#define WL_CNM_MSDU 64
#define WL_CNM_HDR 38
#define WL_ETH_P_CN 0x22E9

/*
 * A QCN congestion point's notification (802.1Qau §33.4; NetBump §4.3:
 * "This QCN frame is destined to the upstream reaction point from which the
 * just-added frame was received"). The sampled frame is cloned out of its
 * egress port as usual, then this skb becomes the CNM: addressed to the
 * frame's source MAC, from the switch (02:77:6c:00:00:<egress port>),
 * carrying |Fb| and the frame's first 64 MSDU bytes so the reaction point
 * knows the flow, and sent back out of the ingress port. Returns the tc
 * verdict for the CNM; CNM_NOT_CLONED if the frame could not be cloned
 * (the caller forwards it as usual), CNM_LOST if it was but the CNM could
 * not be built (the skb is then dropped: the frame already went).
 */
#define CNM_NOT_CLONED -2
#define CNM_LOST -3
/* Out of line: its two frame buffers (102 bytes) would otherwise sit in the
 * main program's frame on every packet, and the eSwitch stage's encapsulation
 * needs that stack (the verifier allows 512 bytes over the whole call chain). */
static __noinline int send_cnm(struct __sk_buff *skb, struct wl_ctx *ctx)
{
	__u8 h[WL_CNM_HDR] = {}, msdu[WL_CNM_MSDU];
	__u32 len = skb->len, carried;

	if (len <= ETH_HLEN)
		return CNM_NOT_CLONED;
	carried = len - ETH_HLEN;
	if (carried > WL_CNM_MSDU)
		carried = WL_CNM_MSDU;
	/* carried is in [1, 64]: the mask changes nothing at run time and
	 * shows the verifier bounds that survive clang's register copies. */
	carried = ((carried - 1) & (WL_CNM_MSDU - 1)) + 1;
	if (bpf_skb_load_bytes(skb, ETH_HLEN, msdu, carried))
		return CNM_NOT_CLONED;
	/* DA <- the frame's SA; the encapsulated DA <- the frame's DA. */
	if (bpf_skb_load_bytes(skb, ETH_ALEN, h, ETH_ALEN) ||
	    bpf_skb_load_bytes(skb, 0, h + 30, ETH_ALEN))
		return CNM_NOT_CLONED;
	if (bpf_clone_redirect(skb, ctx->out_ifindex, 0))
		return CNM_NOT_CLONED;
	h[6] = 0x02; h[7] = 0x77; h[8] = 0x6c; h[11] = ctx->out_port;
	h[12] = WL_ETH_P_CN >> 8; h[13] = WL_ETH_P_CN & 0xff;
	h[14] = 0; /* version 0 */
	h[15] = ctx->qcn_fb & 0x3f;
	/* CPID: the switch port's MAC and the virtual queue. */
	__builtin_memcpy(h + 16, h + 6, ETH_ALEN);
	h[22] = ctx->vq >> 8; h[23] = ctx->vq;
	h[24] = (__u16)ctx->qcn_off >> 8; h[25] = ctx->qcn_off;
	h[26] = (__u16)ctx->qcn_delta >> 8; h[27] = ctx->qcn_delta;
	h[36] = (len - ETH_HLEN) >> 8; h[37] = len - ETH_HLEN;
	if (bpf_skb_change_tail(skb, WL_CNM_HDR + carried, 0) ||
	    bpf_skb_store_bytes(skb, 0, h, WL_CNM_HDR, 0) ||
	    bpf_skb_store_bytes(skb, WL_CNM_HDR, msdu, carried, 0))
		return CNM_LOST;
	return bpf_redirect(ctx->ifindex, 0);
}

/*
 * Reordering (a `reorder` event; DETER §5.2, and a replay's late arrivals):
 * the packet is held here, and counts down the packets of its connection
 * and direction that go through after it (held ones do not go through).
 * The packet that brings a count to zero carries the frame out: it is
 * cloned out of the port first, then its own skb is rewritten into the
 * held frame and sent right behind it. Several frames due on the same
 * packet leave in the order they were held, each but the last as a clone
 * of the rewritten skb. So the order is exact and no timer is involved:
 * this kernel has neither netem nor fq, BPF cannot keep an skb, and a
 * user-space delay line woke up to 2 ms late beside a transfer on two
 * cores. Up to WL_HOLD_SLOTS frames per direction are held at once (a
 * run of late arrivals overtaken by the same packet, as a router's
 * reordering of ACKs gives).
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, __u32); /* (connection * 2 + side) * WL_HOLD_SLOTS + slot */
	__type(value, struct wl_held);
} held SEC(".maps");

/* Per direction (connection * 2 + side): frames held, and the hold
 * order's next number. A frame's slot is its number % WL_HOLD_SLOTS, and
 * a slot is taken only when free, so every held frame's number is in
 * [next - WL_HOLD_SLOTS, next): slots read from next % WL_HOLD_SLOTS on
 * are in hold order, whichever frames left before. */
struct wl_held_dir {
	__u32 n;
	__u32 next;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, (WL_MAX_CONNS + 1) * 2);
	__type(key, __u32);
	__type(value, struct wl_held_dir);
} held_dirs SEC(".maps");

/* Where a frame is built before it goes into `held` (too big for the
 * stack). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct wl_held);
} held_scratch SEC(".maps");

/* Ports (bit p & 63 for port p) whose egress holds a queue of the lab's
 * own, a bottleneck's tbf. A frame crossing namespaces keeps its sender's
 * socket reference (skb_scrub_packet() has not orphaned it since Linux
 * 4.19), so a frame waiting in that queue still counts against the
 * sender's write memory and TCP Small Queues, as no frame that left a
 * real NIC does. In fig15's baseline the senders carried up to 190 KB of
 * the bottleneck's queue in sk_wmem_alloc (ss -m), and held back the
 * retransmission of segments already marked lost for 30-80 ms while new
 * data went out. Such frames leave as clones (`wl_stage_forward`). */
const volatile __u64 release_ports = 0;

/* Frames held over all directions: packets skip the release check while
 * it is 0 (every run without reorder events). */
__u64 wl_held_total = 0;

/*
 * The three below are global functions (WL_STAGE's linkage, wl_ctx.h): the
 * verifier checks each once, on its own; inlined, their loops multiplied
 * the paths through the whole pipeline past its million instructions.
 */

/* Holds the packet; 0 on success. One direction's packets enter by one
 * port, steered to one CPU (netns steer_rx): plain updates per direction. */
__weak __noinline int wl_reorder_hold(struct __sk_buff *skb, struct wl_ctx *ctx __wl_nonnull)
{
	__u32 dir, key, zero = 0, len = skb->len;
	struct wl_held_dir *hd;
	struct wl_held *h;

	if (!ctx->conn || len == 0 || len > WL_HOLD_ROOM)
		return -1;
	dir = ctx->conn * 2 + (ctx->side & 1);
	hd = bpf_map_lookup_elem(&held_dirs, &dir);
	if (!hd || hd->n >= WL_HOLD_SLOTS)
		return -1;
	key = dir * WL_HOLD_SLOTS + hd->next % WL_HOLD_SLOTS;
	h = bpf_map_lookup_elem(&held_scratch, &zero);
	if (!h)
		return -1;
	if (bpf_skb_load_bytes(skb, 0, h->frame, len))
		return -1;
	h->after = ctx->reorder_after;
	h->len = len;
	h->event_id = ctx->event_id;
	h->pad = 0;
	if (bpf_map_update_elem(&held, &key, h, BPF_NOEXIST))
		return -1;
	hd->n++;
	hd->next++;
	__sync_fetch_and_add(&wl_held_total, 1);
	return 0;
}

/* The skb becomes held frame `key` (which is then forgotten); 0 on
 * success. */
__weak __noinline int wl_reorder_become(struct __sk_buff *skb, __u32 key)
{
	struct wl_held *h = bpf_map_lookup_elem(&held, &key);
	__u32 len;
	int err;

	if (!h)
		return -1;
	len = h->len;
	if (len == 0 || len > WL_HOLD_ROOM) {
		bpf_map_delete_elem(&held, &key);
		return -1;
	}
	err = bpf_skb_change_tail(skb, len, 0) ||
	      bpf_skb_store_bytes(skb, 0, h->frame, len, BPF_F_RECOMPUTE_CSUM);
	bpf_map_delete_elem(&held, &key);
	return err ? -1 : 0;
}

struct release_cx {
	__u32 dir;
	__u32 first;
	__u32 due;
};

/* Slot `i` in hold order: one packet fewer to wait for, or due now. */
static long count_down(__u32 i, void *data)
{
	struct release_cx *r = data;
	__u32 key = r->dir * WL_HOLD_SLOTS + (r->first + i) % WL_HOLD_SLOTS;
	struct wl_held *h = bpf_map_lookup_elem(&held, &key);

	if (!h)
		return 0;
	if (h->after > 1)
		h->after--;
	else
		r->due |= 1u << (i & (WL_HOLD_SLOTS - 1));
	return 0;
}

/* A packet that goes through: counts its direction's held frames down
 * and carries out those it brings to zero. Returns how many frames it
 * carried out (the skb is then the last of them), 0 when it is still
 * itself, -1 when a frame could not be rebuilt (the skb is then dropped:
 * its own clone already went). */
__weak __noinline int wl_reorder_release(struct __sk_buff *skb, struct wl_ctx *ctx __wl_nonnull)
{
	__u32 dir, first, i, key, due, out = 0, sent = 0;
	struct release_cx r;
	struct wl_held_dir *hd;

	if (!ctx->conn)
		return 0;
	dir = ctx->conn * 2 + (ctx->side & 1);
	hd = bpf_map_lookup_elem(&held_dirs, &dir);
	if (!hd || !hd->n)
		return 0;
	/* Oldest first: the hold order (see wl_held_dir). `due` marks the
	 * slots, by their place in that order, that this packet brings to
	 * zero. A bpf_loop: its callback is verified once, where an unrolled
	 * loop's three ways per slot multiplied past the verifier's limit. */
	r.dir = dir;
	r.first = first = hd->next;
	r.due = 0;
	bpf_loop(WL_HOLD_SLOTS, count_down, &r, 0);
	due = r.due;
	if (!due)
		return 0;
	if (bpf_clone_redirect(skb, ctx->out_ifindex, 0))
		return 0; /* nothing went: the next packet tries again */
	for (i = 0; i < WL_HOLD_SLOTS; i++) {
		if (!(due & (1u << i)))
			continue;
		/* The one sent before this (a frame, not the packet) goes
		 * as a clone first. */
		if (sent && bpf_clone_redirect(skb, ctx->out_ifindex, 0))
			return -1;
		key = dir * WL_HOLD_SLOTS + (first + i) % WL_HOLD_SLOTS;
		hd->n--;
		__sync_fetch_and_add(&wl_held_total, -1);
		if (wl_reorder_become(skb, key))
			return -1;
		sent = 1;
		out++;
	}
	return out;
}

/* A `reorder` event's packet held, or a held frame carried out: the tc
 * verdict, or WL_CONTINUE when the packet goes on as usual. */
__weak __noinline int wl_reorder(struct __sk_buff *skb, struct wl_ctx *ctx __wl_nonnull)
{
	struct wl_counters *c = port_counters(ctx->in_port);
	int v;

	if (!c)
		return TC_ACT_SHOT;
	if (ctx->action == WL_EV_REORDER) {
		if (!wl_reorder_hold(skb, ctx)) {
			c->held++;
			return TC_ACT_SHOT;
		}
		c->hold_failed++;
		return WL_CONTINUE;
	}
	v = wl_reorder_release(skb, ctx);
	if (v < 0) {
		c->hold_failed++;
		return TC_ACT_SHOT;
	}
	if (!v)
		return WL_CONTINUE;
	c->released += v;
	return bpf_redirect(ctx->out_ifindex, 0);
}

WL_CORE_STAGE(wl_stage_forward)
{
	struct wl_counters *c = port_counters(ctx->in_port), *oc;
	__u32 out = ctx->out_port;
	int v;

	if (!c)
		return TC_ACT_SHOT;
	if (ctx->action == WL_EV_DROP) {
		c->event_drops++;
		return TC_ACT_SHOT;
	}
	if (ctx->es_drop) {
		c->es_drops++;
		return TC_ACT_SHOT;
	}
	if (ctx->aqm == WL_AQM_DROP) {
		c->aqm_drops++;
		return TC_ACT_SHOT;
	}
	if (ctx->aqm == WL_AQM_MARK)
		c->aqm_marks++;
	if (!ctx->out_ifindex) {
		c->no_route++;
		return TC_ACT_SHOT;
	}
	oc = port_counters(out);
	if (oc) {
		oc->tx_pkts++;
		oc->tx_bytes += skb->len;
	}
	/* One test on the common path: no reorder event, nothing held. */
	if (ctx->action == WL_EV_REORDER || wl_held_total) {
		v = wl_reorder(skb, ctx);
		if (v != WL_CONTINUE)
			return v;
	}
	if (ctx->qcn_fb) {
		v = send_cnm(skb, ctx);
		if (v >= 0) {
			c->cnm_sent++;
			return v;
		}
		c->cnm_failed++;
		if (v == CNM_LOST)
			return TC_ACT_SHOT;
	}
	if (release_ports & (1ULL << (out & 63))) {
		/* A clone leaves and the frame itself is consumed here: that
		 * frees it as a NIC's transmit completion would, so its
		 * sender's socket stops paying for it (skb_clone() takes no
		 * socket reference). */
		if (bpf_clone_redirect(skb, ctx->out_ifindex, 0)) {
			c->no_route++;
			return TC_ACT_SHOT;
		}
		return TC_ACT_STOLEN;
	}
	return bpf_redirect(ctx->out_ifindex, 0);
}

#endif
