/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The pipeline's clock: CLOCK_MONOTONIC (bpf_ktime_get_ns), one clock for
 * every port and for the ground-truth probes (truth.bpf.c), which share the
 * fake_clock map with the switch by fd.
 */
#ifndef WL_CLOCK_H
#define WL_CLOCK_H

#include <linux/types.h>
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

/* Tests: the clock can be set through the fake_clock map. */
const volatile __u8 test_clock = 0;

/* Tests only: a non-zero value replaces bpf_ktime_get_ns() as the
 * pipeline's clock, so BPF_PROG_TEST_RUN fixtures can craft timestamps. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} fake_clock SEC(".maps");

static __always_inline __u64 pipeline_now(void)
{
	__u32 zero = 0;
	__u64 *f;

	if (!test_clock)
		return bpf_ktime_get_ns();
	f = bpf_map_lookup_elem(&fake_clock, &zero);
	return f && *f ? *f : bpf_ktime_get_ns();
}

#endif
