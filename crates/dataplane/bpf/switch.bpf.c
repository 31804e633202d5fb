// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * The wirelab switch: one tc ingress program on every switch port, one
 * pipeline of stages that share a context (wl_ctx.h):
 *
 *   1 ingress  the port, its counters, the clock       (here)
 *   2 parse    Ethernet / IPv4 / TCP or RoCEv2          stage_parse.h
 *   3 track    connection, data index, ITER (Lumina)   stage_track.h
 *   4 events   the event table, its action applied     stage_events.h
 *   5 route    the egress port                          stage_route.h
 *   6 eswitch  flow tables searched mask by mask        stage_eswitch.h
 *              (ScalaCN)
 *   7 vaqm     virtual queues (NetBump)                 stage_vaqm.h
 *   8 mirror   the capture ring                         stage_mirror.h
 *   9 forward  the verdict: drop, redirect, CNM         stage_forward.h
 *
 * A capability's stage (eSwitch, vAQM) is a global function the verifier checks
 * once, on its own; the stages every packet runs are inlined (wl_ctx.h says
 * why). A stage a spec does not use is switched off by a `const volatile`
 * setting before load, and the verifier removes it (DESIGN.md: stages a spec turns
 * on, not separate programs that parse the packet again). The ground-truth
 * probes are another object (truth.bpf.c) that shares maps by fd.
 */
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include "wirelab.h"
#include "wl_ctx.h"
#include "wl_clock.h"
#include "wl_ports.h"
#include "wl_ext_hooks.h"
#include "stage_parse.h"
#include "stage_track.h"
#include "stage_events.h"
#include "stage_route.h"
#include "stage_eswitch.h"
#include "stage_vaqm.h"
#include "stage_mirror.h"
#include "stage_forward.h"

/* Benchmarks only (`wirelab bench switch-overhead`, its per-stage
 * breakdown): stop after this many stages and forward the frame as the
 * forward-only baseline does; 0 = the whole pipeline. The verifier removes
 * the cut when it is 0, so a lab switch carries none of it. */
const volatile __u8 bench_cut = 0;

/* Benchmarks only (`wirelab bench switch-overhead`'s paired comparison):
 * while user space sets bench_forward_now, every frame is forwarded as the
 * forward-only baseline forwards it, so the two datapaths take turns on
 * one connection in one lab, period by period, and the machine's drift
 * falls on both. The verifier removes the check unless bench_alternate is
 * set at load. */
const volatile __u8 bench_alternate = 0;
__u32 bench_forward_now = 0;

/* Never read: these globals put the ABI enums no map value refers to into
 * BTF, so the generated skeleton carries them and the Rust side takes the
 * limits from there (crates/dataplane/src/lib.rs) instead of a copy. */
const volatile enum wl_limits wl_abi_limits;
const volatile enum wl_evk wl_abi_evk;
const volatile enum wl_wire wl_abi_wire;
const volatile enum wl_ext_limits wl_abi_ext_limits;
const volatile enum wl_aqm_verdict wl_abi_aqm_verdict;
const volatile enum wl_es_kind wl_abi_es_kind;
const volatile enum wl_hist_limits wl_abi_hist_limits;
const volatile enum wl_es_set_field wl_abi_es_set_field;
/* Makes the ring record's header part of the BTF so the skeleton exports
 * its type. */
struct wl_mirror_hdr mirror_hdr_abi = {};
/* A held frame, by pointer (a 9 KB value would sit in .bss). */
struct wl_held *held_abi = 0;

/* Forwarding alone, on the MAC table: the benchmarks' baseline. */
static __always_inline int forward_only(struct __sk_buff *skb)
{
	struct wl_fwd *out = mac_lookup(skb);

	return out ? bpf_redirect(out->ifindex, 0) : TC_ACT_SHOT;
}

/*
 * Benchmarks only (bench_cut == WL_BENCH_FLOOR): the least any switch
 * that captures every packet, timestamped and numbered, must do on this
 * kernel: the ingress stage (its port, counters and the clock), one
 * capture record, and forwarding. No parse, classification, events or
 * route. The pipeline's own cost is what it adds to this floor; what the
 * floor adds to forwarding is the kernel's (bpf_ktime_get_ns, the ring's
 * reserve and commit), which no stage can take off. `wirelab bench
 * stages` and `switch-overhead` print both.
 */
static __always_inline int capture_floor(struct __sk_buff *skb, struct wl_ctx *ctx)
{
	wl_stage_mirror(skb, ctx);
	return forward_only(skb);
}

/* Stage n of the pipeline: its verdict ends the run, or the bench's cut. */
#define STAGE(n, stage)                            \
	do {                                       \
		if (bench_cut && bench_cut < (n))  \
			return forward_only(skb);  \
		v = stage(skb, &ctx);              \
		if (v != WL_CONTINUE)              \
			return v;                  \
	} while (0)

SEC("tc")
int wl_switch(struct __sk_buff *skb)
{
	__u32 ifindex = skb->ifindex, port_no;
	struct wl_ctx ctx = {};
	struct wl_counters *c;
	int v;

	if (bench_alternate && bench_forward_now)
		return forward_only(skb);

	/* 1: ingress. */
	port_no = port_of(ifindex);
	if (!port_no)
		return TC_ACT_OK; /* not a switch port */
	c = port_counters(port_no);
	if (!c)
		return TC_ACT_SHOT;
	c->rx_pkts++;
	c->rx_bytes += skb->len;
	ctx.now = pipeline_now();
	ctx.ifindex = ifindex;
	ctx.in_port = port_no;
	ctx.len = skb->len;
	if (bench_cut == WL_BENCH_FLOOR)
		return capture_floor(skb, &ctx);

	STAGE(2, wl_stage_parse);
	STAGE(3, wl_stage_track);
	STAGE(4, wl_stage_events);
	STAGE(5, wl_stage_route);
	if (eswitch_on)
		STAGE(6, wl_stage_eswitch);
	if (vaqm_on)
		STAGE(7, wl_stage_vaqm);
	STAGE(8, wl_stage_mirror);
	STAGE(9, wl_stage_forward);
	return TC_ACT_SHOT; /* the forward stage always decides */
}

/*
 * Baseline for `wirelab bench switch-overhead`: forwarding alone, on the same
 * static table, so the pipeline's own cost can be measured against it.
 */
SEC("tc")
int wl_forward_only(struct __sk_buff *skb)
{
	return forward_only(skb);
}

/*
 * On each link back from a device under test (`dut_on`): what the DUT sent
 * out of its port k goes to host k. Not a switch port, so not traced: the
 * trace is the switch's ingress, before the DUT.
 */
SEC("tc")
int wl_from_dut(struct __sk_buff *skb)
{
	__u32 in = skb->ifindex;
	__u32 *out = bpf_map_lookup_elem(&dut_back, &in);

	return out ? bpf_redirect(*out, 0) : TC_ACT_SHOT;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
