/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The vAQM extension API: NetBump's Table 1 (seed 003 §3.1) for the
 * wirelab switch. A discipline is a C file that includes this header and
 * defines any of the six hooks below with the WL_* macros; `wirelab`
 * compiles it with clang and links it with the switch object, its hooks
 * in place of the switch's defaults, so it runs inside the one switch
 * pipeline, on the pipeline's clock, after the virtual queue's leaky
 * bucket (Fig. 5). The kernel verifies the whole pipeline on load.
 *
 *   Table 1                       here
 *   init(vq, drainRate)           WL_INIT(vq)            once, before the queue's first packet
 *   classify(p)                   WL_CLASSIFY(skb, p)    queue number, 0 = the spec's classifier
 *   vAQM(p, vq)                   WL_VAQM(p, vq)         update the discipline's state
 *   process(p, vq)                WL_PROCESS(skb, p, vq) WL_AQM_PASS, _MARK or _DROP
 *   estimateQlen(vq)              WL_ESTIMATE_QLEN(vq)   the length the trace reports
 *   forward(p)                    WL_FORWARD(p)          switch port, 0 = the MAC table's
 *
 * A hook a file does not define keeps its default (below). Hooks run for
 * the queues whose spec says `extension:`; classify and forward run for
 * every packet. The hooks are verified by the kernel like any BPF program:
 * bounded loops, checked memory, the helpers of a tc program.
 */
#ifndef WIRELAB_EXT_H
#define WIRELAB_EXT_H

#include <linux/types.h>
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

/* What the stage does with a packet (the trace's `aqm`). */
enum wl_aqm_verdict {
	WL_AQM_PASS = 0,
	/* Set CE. A Not-ECT packet cannot be marked (RFC 3168 §5): the
	 * stage forwards it unchanged and counts it `unmarkable`. */
	WL_AQM_MARK = 1,
	/* Drop; the packet leaves the estimate again (Fig. 5 line 11). */
	WL_AQM_DROP = 2,
	/* Forwarded, but the emulated port's buffer is full: the downstream
	 * queue will tail-drop it, so the estimate does not count it. The
	 * stage decides this one before process() runs. */
	WL_AQM_OVERFLOW = 3,
};

/* A packet as the stage sees it. Addresses and ports are in network byte
 * order, 0 where the packet has none (not IPv4, not TCP or UDP). */
struct wl_ext_pkt {
	__u64 now_ns;   /* the pipeline's clock (the trace's timestamp) */
	__u32 len;      /* bytes on the wire, Ethernet header included */
	__u32 in_port;  /* switch port it came in on (1-based, as in the plan) */
	__u32 out_port; /* switch port the MAC table sends it to, 0 = none */
	__u32 saddr;
	__u32 daddr;
	__u16 sport;
	__u16 dport;
	__u8 proto;     /* IP protocol */
	__u8 ecn;       /* IP ECN field: 0 Not-ECT, 1 ECT(1), 2 ECT(0), 3 CE */
	__u8 dscp;
	__u8 pad;
};

/* An enum, so the numbers reach BTF and the Rust side reads them there. */
enum wl_ext_limits {
	WL_EXT_PARAMS = 8,
	WL_EXT_STATE = 8,
};

/* A virtual queue as a discipline sees it. */
struct wl_ext_vq {
	__u32 id;        /* 1-based queue number, in spec order */
	__u32 inited;    /* the stage's: init() has run */
	__u64 rate_Bps;  /* drain rate from the spec, bytes per second */
	__u64 buffer;    /* the emulated port's buffer, bytes; 0 = unbounded */
	/* The leaky bucket's estimate including this packet (Fig. 5 lines 1-8),
	 * and the time of its last update. Written by the stage before each
	 * hook (estimateQlen sees a dropped packet taken out again); changing
	 * them has no effect. */
	__u64 bytes;
	__u64 last_ns;
	/* The queue's `extension: [...]` numbers from the spec, in order. */
	__u64 param[WL_EXT_PARAMS];
	/* Yours: zero until init(), kept across packets. */
	__u64 state[WL_EXT_STATE];
};

/*
 * The hooks. Define them with these macros: wirelab links the file with
 * the switch, and a definition replaces the switch's default (weak) one.
 * Pointer arguments are never NULL (BTF decl tag "arg:nonnull"). Put
 * nothing else at global scope but helper functions and maps of your own:
 * no LICENSE (the switch's applies) and no SEC() programs.
 */
#define __wl_nonnull __attribute__((btf_decl_tag("arg:nonnull")))

#define WL_INIT(vq) int wl_ext_init(struct wl_ext_vq *vq __wl_nonnull)
#define WL_CLASSIFY(skb, p) \
	__u32 wl_ext_classify(struct __sk_buff *skb, struct wl_ext_pkt *p __wl_nonnull)
#define WL_VAQM(p, vq) \
	int wl_ext_vaqm(struct wl_ext_pkt *p __wl_nonnull, struct wl_ext_vq *vq __wl_nonnull)
#define WL_ESTIMATE_QLEN(vq) __u64 wl_ext_estimate_qlen(struct wl_ext_vq *vq __wl_nonnull)
#define WL_PROCESS(skb, p, vq)                                                     \
	__u32 wl_ext_process(struct __sk_buff *skb, struct wl_ext_pkt *p __wl_nonnull, \
			     struct wl_ext_vq *vq __wl_nonnull)
#define WL_FORWARD(p) __u32 wl_ext_forward(struct wl_ext_pkt *p __wl_nonnull)

#endif
