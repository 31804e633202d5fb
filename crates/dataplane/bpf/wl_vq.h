/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The virtual queues of the vAQM stage (NetBump §3.1) and their leaky
 * bucket's drain, shared by the stage (stage_vaqm.h) and the ground-truth
 * probes (truth.bpf.c), which reach the switch's `vqs` map by fd.
 */
#ifndef WL_VQ_H
#define WL_VQ_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "wirelab.h"

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, WL_MAX_VQS + 1);
	__type(key, __u32);
	__type(value, struct wl_vq);
} vqs SEC(".maps");

#define NS_PER_S 1000000000ULL

/*
 * NetBump Fig. 5 lines 1-6: the queue drained from its last update to
 * `now` at its rate, never below empty. The drain is kept exact across
 * packets: the part of a byte not yet drained carries over in `*frac`
 * (byte/1e9), so many small gaps drain as much as one long one. One
 * division per packet (the stage's hot path; bench vaqm). Also used
 * read-only by the ground-truth probes (truth.bpf.c).
 */
static __always_inline __u64 vq_drained(const struct wl_vq *q, __u64 now, __u64 *frac)
{
	__u64 num, drained;

	*frac = q->frac;
	if (!q->last_ns || now <= q->last_ns || !q->rate_Bps)
		return q->bytes; /* first packet, an earlier clock, or no drain */
	/* Gaps past max_gap_ns drain more than the capped queue holds, and
	 * below it elapsed × rate + frac cannot overflow. */
	if (now - q->last_ns > q->max_gap_ns)
		goto empty;
	num = (now - q->last_ns) * q->rate_Bps + q->frac;
	if (num >= q->bytes * NS_PER_S)
		goto empty;
	drained = num / NS_PER_S;
	*frac = num - drained * NS_PER_S;
	return q->bytes - drained; /* < bytes: checked above */
empty:
	*frac = 0;
	return 0;
}

#endif
