/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Stage: vAQM, NetBump (Shieh et al.) as a stage of the switch pipeline.
 * A packet is classified to a virtual queue, the queue's occupancy is
 * estimated with the leaky bucket of NetBump Fig. 5, and the queue's
 * discipline marks or drops it as if the downstream port ran that
 * discipline. Packets are never held here; only the estimate is kept.
 * Integer arithmetic throughout, ns timestamps.
 */
#ifndef WL_STAGE_VAQM_H
#define WL_STAGE_VAQM_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "wl_ctx.h"
#include "wl_ecn.h"
#include "wl_vq.h"
#include "wl_ext_hooks.h"

/* The stage is in the pipeline only when a spec has virtual queues: with 0
 * the verifier removes it, and the switch pays nothing for it. */
const volatile __u8 vaqm_on = 0;
/* Serialize vAQM updates with the queue's spin lock. Off in the lab, where
 * every switch port is steered to one CPU (netns steer_rx) and the
 * pipeline is serial like a hardware one: the lock (it disables interrupts)
 * costs more than the whole rest of the stage (bench vaqm). Each queue
 * counts updates that arrive from a different CPU, so a broken assumption
 * shows in the run summary instead of silently racing. */
const volatile __u8 vaqm_lock = 0;

/* The default classifier: the egress port towards the destination (NetBump
 * §3.1 "map packets to virtual queues corresponding to the downstream
 * physical switch output buffer"). Indexed by switch port number. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, WL_MAX_PORTS + 1);
	__type(key, __u32);
	__type(value, __u32);
} vq_of_port SEC(".maps");

/* The user's classifier: destination IPv4 address -> queue, looked up
 * first (NetBump: "can be overridden by a user as needed"). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, __u32);
} vq_of_dst SEC(".maps");

/* Set by userspace once vq_of_dst has an entry: until then the hash lookup
 * (the stage's most expensive step) is skipped. */
__u32 vq_dst_used = 0;

static __always_inline __u32 vq_classify(struct wl_pkt *p, __u32 out_port)
{
	__u32 *v, daddr = p->daddr;

	if (vq_dst_used && p->l3_off) {
		v = bpf_map_lookup_elem(&vq_of_dst, &daddr);
		if (v)
			return *v;
	}
	v = bpf_map_lookup_elem(&vq_of_port, &out_port);
	return v ? *v : 0;
}

/*
 * A user discipline on queue q, after the leaky bucket: Table 1's init
 * (once), vAQM and process. Returns the verdict; estimateQlen runs once the
 * stage has applied it (wl_stage_vaqm).
 */
static __always_inline __u32 vq_ext(struct __sk_buff *skb, struct wl_ext_pkt *x, struct wl_vq *q)
{
	struct wl_ext_vq *e = &q->ext;
	__u32 v;

	e->bytes = q->bytes;
	e->last_ns = q->last_ns;
	if (!e->inited) {
		wl_ext_init(e);
		e->inited = 1;
	}
	wl_ext_vaqm(x, e);
	v = wl_ext_process(skb, x, e);
	return v == WL_AQM_MARK || v == WL_AQM_DROP ? v : WL_AQM_PASS;
}

/* Fig. 5 lines 1-8: drain, then add this packet. Returns 0 when the
 * emulated port's buffer cannot take it (it is not added). */
static __always_inline int vq_update(struct wl_vq *q, __u64 now, __u32 len)
{
	q->bytes = vq_drained(q, now, &q->frac);
	if (now > q->last_ns)
		q->last_ns = now;
	/* A bounded port tail-drops what does not fit (NetBump §3.1: "if we
	 * knew the size of the downstream queue, then we could set the
	 * maximum allowed occupancy of the virtual queue accordingly"). */
	if (q->buffer && q->bytes + len > q->buffer) {
		q->overflows++;
		return 0;
	}
	q->bytes += len;
	if (q->bytes > WL_VQ_MAX_BYTES)
		q->bytes = WL_VQ_MAX_BYTES;
	return 1;
}

/* DCTCP (NetBump §4.2, Alizadeh et al. §3.1): mark when the instantaneous
 * queue exceeds K. */
static __always_inline __u32 vq_dctcp(struct wl_vq *q)
{
	return q->bytes > q->k_bytes ? WL_AQM_MARK : WL_AQM_PASS;
}

/*
 * RED (Floyd & Jacobson 1993, Fig. 2; NetBump §4.1 and Fig. 5 lines 9-17):
 *   avg <- (1 - w_q) avg + w_q q
 *   min_th <= avg < max_th: count++, p_b = max_p (avg - min_th)/(max_th - min_th),
 *     p_a = p_b / (1 - count p_b); with probability p_a mark, count <- 0
 *   avg >= max_th: drop (NetBump Fig. 5 line 12), count <- 0
 *   else count <- -1
 * avg is in 2^-16 bytes and probabilities in 2^-32, so the test
 * rand < p_a becomes rand (2^32 - count p_b) < p_b 2^32, no division.
 * Floyd's idle-time decay of avg is not applied: the leaky bucket has
 * already drained the queue estimate over the idle time.
 */
static __always_inline __u32 vq_red(struct wl_vq *q)
{
	__u64 qb = q->bytes << 16, pb, denom, cpb;
	__u32 rnd;

	if (qb >= q->avg)
		q->avg += ((qb - q->avg) * q->w_q) >> 16;
	else
		q->avg -= ((q->avg - qb) * q->w_q) >> 16;
	if (q->avg >= q->max_th << 16) {
		q->count = 0;
		return WL_AQM_DROP;
	}
	if (q->avg < q->min_th << 16) {
		q->count = -1;
		return WL_AQM_PASS;
	}
	q->count++;
	/* The random draw: Marsaglia's xorshift64 (J. Stat. Softw. 8(14),
	 * 2003) kept in the queue, not bpf_get_prandom_u32(): no helper call
	 * on the hot path, and a run's marks repeat for the same arrivals. */
	q->rng ^= q->rng << 13;
	q->rng ^= q->rng >> 7;
	q->rng ^= q->rng << 17;
	rnd = q->rng >> 32;
	/* (avg - min) / (max - min) in 2^-32, times max_p in 2^-32. */
	pb = (((q->avg - (q->min_th << 16)) << 16) / (q->max_th - q->min_th)) * (q->max_p >> 16);
	pb >>= 16;
	if (pb >= 1ULL << 32)
		pb = (1ULL << 32) - 1;
	cpb = (__u64)q->count * pb;
	if (q->count > 0 && cpb >= 1ULL << 32)
		goto hit; /* count p_b >= 1: p_a is 1 */
	denom = (1ULL << 32) - cpb;
	if ((__u64)rnd * denom >= pb << 32)
		return WL_AQM_PASS;
hit:
	q->count = 0;
	return q->red_drop ? WL_AQM_DROP : WL_AQM_MARK;
}

/* 64-byte units, rounded down, saturated to 16 bits (cnmQOffset,
 * cnmQDelta). A shift, not a division: signed division needs BPF ISA v4. */
static __always_inline __s16 units64(__s64 bytes)
{
	bytes >>= 6;
	if (bytes > 0x7fff)
		return 0x7fff;
	if (bytes < -0x8000)
		return -0x8000;
	return bytes;
}

/*
 * IEEE 802.1Qau congestion point (NetBump §4.3; Alizadeh et al., Allerton
 * 2008 §3): each frame is sampled with a probability that grows linearly
 * from p_min to p_max with the last sample's quantised |Fb|; a sample
 * computes Fb = -(Q_off + w Q_delta) with Q_off = Q - Q_eq and Q_delta =
 * Q - Q_old (the queue at the previous sample), and Fb < 0 asks for a
 * CNM carrying |Fb| quantised to 1..fb_max. Returns that value, 0 = none.
 * crates/qcn/src/cp.rs computes the same, integer for integer.
 */
static __always_inline __u32 vq_qcn(struct wl_vq *q, struct wl_ctx *ctx)
{
	__u64 p, qlen = q->bytes, mag;
	__s64 fb;
	__u32 rnd;

	p = q->p_min + (q->p_max - q->p_min) * q->last_qfb / q->fb_max;
	q->rng ^= q->rng << 13;
	q->rng ^= q->rng >> 7;
	q->rng ^= q->rng << 17;
	rnd = q->rng >> 32;
	if ((__u64)rnd >= p)
		return 0;
	q->samples++;
	ctx->qcn_off = units64((__s64)qlen - (__s64)q->q_eq);
	ctx->qcn_delta = units64((__s64)qlen - (__s64)q->q_old);
	fb = -(((__s64)qlen - (__s64)q->q_eq) + (__s64)q->qcn_w * ((__s64)qlen - (__s64)q->q_old));
	q->q_old = qlen;
	if (fb >= 0) {
		q->last_qfb = 0;
		return 0;
	}
	mag = (__u64)(-fb) * q->fb_max / q->fb_range;
	if (mag < 1)
		mag = 1;
	if (mag > q->fb_max)
		mag = q->fb_max;
	q->last_qfb = mag;
	return mag;
}

/*
 * The stage, on what the events let through to a known port: classify,
 * update the queue, apply its discipline's verdict (CE set here; a drop
 * decided here and done by the forward stage, after the mirror). A dropped
 * packet leaves the queue again (Fig. 5 line 11: it never reaches the
 * downstream buffer).
 */
WL_STAGE(wl_stage_vaqm)
{
	__u32 id = 0, verdict = WL_AQM_PASS, cpu, len = ctx->len;
	struct wl_pkt *p = &ctx->pkt;
	__u64 qlen;
	struct wl_vq *q;

	if (!ctx->out_ifindex || ctx->action == WL_EV_DROP)
		return WL_CONTINUE;
	if (vaqm_ext)
		id = wl_ext_classify(skb, &ctx->ext);
	if (!id)
		id = vq_classify(p, ctx->out_port);
	if (!id || id > WL_MAX_VQS)
		return WL_CONTINUE;
	q = bpf_map_lookup_elem(&vqs, &id);
	if (!q)
		return WL_CONTINUE;
	cpu = bpf_get_smp_processor_id(); /* not under the lock: a helper */
	if (vaqm_lock)
		bpf_spin_lock(&q->lock);
	if (q->pkts && q->cpu != cpu)
		q->cpu_moves++;
	q->cpu = cpu;
	if (!vq_update(q, ctx->now, len))
		/* The port will tail-drop it; the discipline never sees it. */
		verdict = WL_AQM_OVERFLOW;
	else if (q->discipline == WL_AQM_DCTCP)
		verdict = vq_dctcp(q);
	else if (q->discipline == WL_AQM_RED)
		verdict = vq_red(q);
	else if (q->discipline == WL_AQM_QCN)
		/* The packet passes; the forward stage sends the CNM. */
		ctx->qcn_fb = vq_qcn(q, ctx);
	else if (vaqm_ext && q->discipline == WL_AQM_EXT)
		/* Not under the lock: Switch::load refuses the lock with an
		 * extension (no calls while a BPF spin lock is held). */
		verdict = vq_ext(skb, &ctx->ext, q);
	if (verdict == WL_AQM_MARK && (!p->l3_off || (p->tos & 3) == 0)) {
		/* A Not-ECT packet (SYN, pure ACK, non-ECN flow): RED drops
		 * it instead (RFC 3168 §7); a DCTCP switch only marks, so the
		 * packet is queued as it is (Alizadeh et al. §3.1). */
		verdict = q->discipline == WL_AQM_RED ? WL_AQM_DROP : WL_AQM_PASS;
		q->unmarkable++;
	}
	if (verdict == WL_AQM_DROP) {
		if (q->bytes > len) {
			q->bytes -= len;
		} else {
			q->bytes = 0;
			q->frac = 0;
		}
		q->drops++;
	} else if (verdict == WL_AQM_MARK) {
		q->marks++;
	}
	q->pkts++;
	qlen = q->bytes;
	if (vaqm_ext && q->discipline == WL_AQM_EXT) {
		q->ext.bytes = q->bytes;
		qlen = wl_ext_estimate_qlen(&q->ext);
	}
	ctx->vq = id;
	ctx->vq_bytes = qlen > 0xffffffffULL ? 0xffffffff : qlen;
	if (vaqm_lock)
		bpf_spin_unlock(&q->lock);
	ctx->aqm = verdict;
	if (verdict == WL_AQM_MARK)
		mark_ce(skb, p);
	return WL_CONTINUE;
}
#endif
