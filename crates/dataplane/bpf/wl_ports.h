/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The switch's ports and their counters: the maps every stage may touch.
 */
#ifndef WL_PORTS_H
#define WL_PORTS_H

#include <linux/types.h>
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "wirelab.h"

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, WL_MAX_PORTS);
	__type(key, __u32); /* ifindex */
	__type(value, struct wl_port);
} ports SEC(".maps");

/* Per port, per CPU: no atomics on the forwarding path. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, WL_MAX_PORTS + 1);
	__type(key, __u32);
	__type(value, struct wl_counters);
} counters SEC(".maps");

/* This CPU's counters of switch port `port` (never NULL for a port the
 * control plane added: the array has every index up to WL_MAX_PORTS). */
static __always_inline struct wl_counters *port_counters(__u32 port)
{
	return bpf_map_lookup_elem(&counters, &port);
}

#endif
