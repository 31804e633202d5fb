/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Stage: the egress port. Static forwarding on the destination MAC; a
 * bump's default port for the rest; a user discipline's forward() over
 * both. Needed before vAQM, whose default classifier is the egress port
 * (NetBump §3.1).
 */
#ifndef WL_STAGE_ROUTE_H
#define WL_STAGE_ROUTE_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include "wl_ctx.h"
#include "wl_ext_hooks.h"
/* The flow table, where a flow's egress is kept once found. */
#include "stage_track.h"

/* Static forwarding: destination MAC (low 48 bits) -> egress port. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, WL_MAX_PORTS);
	__type(key, __u64);
	__type(value, struct wl_fwd);
} fwd SEC(".maps");

/* Where a frame whose destination MAC is not in `fwd` goes, by ingress
 * port: `wirelab bump` between two interfaces forwards each one's frames
 * to the other, whatever their addresses (a bump on the wire). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, WL_MAX_PORTS + 1);
	__type(key, __u32);
	__type(value, struct wl_fwd);
} default_out SEC(".maps");

/* A device under test between the switch's ports (Open vSwitch, ScalaCN's
 * DUT 2): set, every frame leaves towards the DUT by its ingress port's
 * link, and the DUT decides where it goes; the MAC table still names the
 * frame's destination port for the stages that classify by it (vAQM). */
const volatile __u8 dut_on = 0;

/* Host port -> ifindex of its link to the DUT (the DUT's port of the same
 * number). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, WL_MAX_PORTS + 1);
	__type(key, __u32);
	__type(value, __u32);
} dut_link SEC(".maps");

/* Ifindex of a link from the DUT -> ifindex of the host port it leads to:
 * what the DUT sends out of its port k goes to host k, whatever the
 * frame's address (a DUT that misroutes is seen misrouting). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, WL_MAX_PORTS);
	__type(key, __u32);
	__type(value, __u32);
} dut_back SEC(".maps");

/* The MAC table's entry for this frame, or NULL. */
static __always_inline struct wl_fwd *mac_lookup(struct __sk_buff *skb)
{
	__u64 dmac = frame_dmac(skb);

	return dmac ? bpf_map_lookup_elem(&fwd, &dmac) : 0;
}

WL_CORE_STAGE(wl_stage_route)
{
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	__u32 in = ctx->in_port;
	struct wl_fwd *out;

	if (data + ETH_ALEN > end)
		return TC_ACT_SHOT; /* a runt: no destination to read */
	/* A flow of the spec whose entry kept the egress of this MAC from
	 * this port (wl_flow.route_key) was routed by the track stage; the
	 * rest look it up here, and a flow keeps what it found. */
	if (!ctx->out_ifindex) {
		out = mac_lookup(skb);
		if (!out) {
			out = bpf_map_lookup_elem(&default_out, &in);
			if (out && !out->ifindex)
				out = 0;
		}
		if (out) {
			ctx->out_ifindex = out->ifindex;
			ctx->out_port = out->port;
			if (ctx->conn) {
				struct wl_flow *flow = bpf_map_lookup_elem(&flows, &ctx->pkt.key);

				if (flow) {
					flow->out_port = out->port;
					flow->out_ifindex = out->ifindex;
					flow->route_key = route_key(skb, in);
				}
			}
		}
	}
	if (dut_on) {
		__u32 *link = bpf_map_lookup_elem(&dut_link, &in);

		ctx->out_ifindex = link ? *link : 0;
	}
	if (vaqm_ext) {
		ext_pkt(ctx);
		ext_forward(ctx);
	}
	return WL_CONTINUE;
}

#endif
