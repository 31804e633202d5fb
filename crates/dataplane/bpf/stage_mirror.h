/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Stage: mirror the packet into the capture ring, as the receiver will get
 * it and before any drop (Lumina §3.4), with the pipeline's metadata
 * (wl_mirror_hdr). Sequence numbers have no gaps: a record the ring has no
 * room for is counted (mirror_lost), and the run is INVALID.
 */
#ifndef WL_STAGE_MIRROR_H
#define WL_STAGE_MIRROR_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "wl_ctx.h"
#include "wl_ports.h"

/* Bytes of each packet kept. */
const volatile __u32 snap_len = 128;
/* The smallest power of two >= snap_len: the bytes reserved per record. */
const volatile __u32 snap_room = 128;
/* Wake the dumper when this much is waiting (it also drains on a short
 * timer): a wakeup per packet costs the forwarding path a context switch. */
const volatile __u64 wake_bytes = 1 << 20;

/* Set when the mirror forced a wakeup of the dumper, cleared when the
 * ring's fill is next seen under wake_bytes. */
__u8 mirror_woke = 0;

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} mirror_seq SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 24); /* resized by the control plane */
} ring SEC(".maps");

WL_CORE_STAGE(wl_stage_mirror)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	__u32 zero = 0, cap = skb->len, port = ctx->in_port;
	__u64 *seqp = bpf_map_lookup_elem(&mirror_seq, &zero);
	struct wl_counters *c = port_counters(port);
	struct wl_mirror_hdr *r;
	__u64 seq, avail, wake = BPF_RB_NO_WAKEUP;

	if (!seqp || !c)
		return WL_CONTINUE;
	seq = __sync_fetch_and_add(seqp, 1);
	r = bpf_ringbuf_reserve(&ring, sizeof(*r) + snap_room, 0);
	if (!r) {
		c->mirror_lost++;
		return WL_CONTINUE;
	}
	if (cap > snap_len)
		cap = snap_len;
	r->seq = seq;
	r->ts_ns = ctx->now;
	/* Linux TCP stamps every segment with its departure time
	 * (__tcp_transmit_skb: skb_set_delivery_time(tcp_wstamp_ns,
	 * CLOCK_MONOTONIC), the EDT model), and since 5.18 a veth keeps a
	 * delivery time across namespaces (skb_scrub_packet). The switch
	 * receives the packet later, when the host's softirq hands it on:
	 * on a loaded two-core machine, milliseconds later (up to 3.5 ms
	 * beside six busy loops; a CI run's doubled RTO measured 19.8, then
	 * 22.8 ms at the switch, and was judged kept). Reading
	 * tstamp_type is what makes tc ingress show the delivery time
	 * instead of 0 (bpf_convert_tstamp_read). A time after ours is a
	 * pacing release time, not when it left: not known. */
	r->sent_ns = 0;
	if (skb->tstamp_type == BPF_SKB_TSTAMP_DELIVERY_MONO && skb->tstamp &&
	    skb->tstamp <= ctx->now)
		r->sent_ns = skb->tstamp;
	r->pkt_len = ctx->len;
	r->cap_len = cap;
	r->port = port;
	r->action = ctx->action;
	r->event_id = ctx->event_id;
	r->conn = ctx->conn;
	r->data_dir = ctx->data_dir;
	r->index = ctx->index;
	r->iter = ctx->iter;
	r->first_tx = ctx->first_tx;
	r->vq = ctx->vq;
	r->vq_bytes = ctx->vq_bytes;
	r->aqm = ctx->aqm;
	r->qcn_fb = ctx->qcn_fb;
	r->es_visited = ctx->es_visited;
	r->es_drop = ctx->es_drop;
	/* cap is in [1, snap_len] and snap_len <= snap_room (a power of two),
	 * so this mask changes nothing at run time; it shows the verifier a lower
	 * bound of 1 that survives clang's register copies. */
	cap = ((cap - 1) & (snap_room - 1)) + 1;
	/* A full 128-byte snap from the linear data (a lab's veths carry
	 * linear frames: offloads off, so no scatter-gather) is copied
	 * inline; anything else (a shorter frame, another snap length, data
	 * in fragments) through bpf_skb_load_bytes, a helper call. */
	if (cap == 128 && data + 128 <= data_end)
		__builtin_memcpy((void *)(r + 1), data, 128);
	else if (bpf_skb_load_bytes(skb, 0, (void *)(r + 1), cap))
		r->cap_len = 0;
	/* Wake the dumper once when the waiting data goes past wake_bytes,
	 * not on every record above it: a forced wakeup is an irq_work
	 * self-IPI, about 3.5 us in these VMs. With no reader draining,
	 * 20,000 records paid 140 ns more each for it (`wirelab bench
	 * stages`: 205 against 62 ns), and in a lab whose dumper fell
	 * behind, every packet would pay it while the dumper needed the CPU
	 * to catch up. The fill is looked at on every 64th record only (a
	 * helper call; the dumper drains on its own timer anyway), and
	 * mirror_woke remembers the wakeup until the fill is seen under the
	 * mark again (a race between CPUs costs one more wakeup, no more). */
	if (!(seq & 63)) {
		avail = bpf_ringbuf_query(&ring, BPF_RB_AVAIL_DATA);
		if (avail < wake_bytes) {
			mirror_woke = 0;
		} else if (!mirror_woke) {
			mirror_woke = 1;
			wake = BPF_RB_FORCE_WAKEUP;
		}
	}
	bpf_ringbuf_submit(r, wake);
	c->mirrored++;
	return WL_CONTINUE;
}

#endif
