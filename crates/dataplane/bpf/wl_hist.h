/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * A latency histogram's buckets, HdrHistogram's log-linear layout with two
 * significant decimal digits: values below 2^WL_HIST_BITS ns are exact;
 * above, each octave has 2^WL_HIST_BITS buckets (every bucket under 1.6%
 * of its value wide), up to 2^40 ns (18 minutes). The load sink's latency
 * (load.bpf.c) and the eSwitch's search time (stage_eswitch.h) count into
 * it; wirelab_load::hist is the same function, for reading them.
 */
#ifndef WL_HIST_H
#define WL_HIST_H

#include <linux/types.h>

enum wl_hist_limits {
	WL_HIST_BITS = 6,
	WL_HIST_BUCKETS = 64 + (40 - 6) * 64,
};

/* The bucket of a value of v ns. */
static __always_inline __u32 hist_bucket(__u64 v)
{
	__u32 p = 0;
	__u64 x = v;

	if (v < (1 << WL_HIST_BITS))
		return v;
	/* p = floor(log2 v), by halving (BPF has no count-leading-zeros). */
	if (x >> 32) { p += 32; x >>= 32; }
	if (x >> 16) { p += 16; x >>= 16; }
	if (x >> 8) { p += 8; x >>= 8; }
	if (x >> 4) { p += 4; x >>= 4; }
	if (x >> 2) { p += 2; x >>= 2; }
	if (x >> 1) { p += 1; }
	if (p >= 40)
		return WL_HIST_BUCKETS - 1;
	return (1 << WL_HIST_BITS) + (p - WL_HIST_BITS) * (1 << WL_HIST_BITS) +
	       ((v >> (p - WL_HIST_BITS)) - (1 << WL_HIST_BITS));
}

#endif
