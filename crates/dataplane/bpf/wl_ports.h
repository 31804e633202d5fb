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

/* ifindex -> switch port (port 0: not a switch port). Two maps for one
 * table: the array for ifindex < WL_NEAR_IFINDEX, whose lookup the JIT
 * inlines, and the hash for the rest (`wirelab bump` on a host's existing
 * devices); a helper call costs ~25 ns here (`wirelab bench stages`). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, WL_NEAR_IFINDEX);
	__type(key, __u32);
	__type(value, struct wl_port);
} ports SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, WL_MAX_PORTS);
	__type(key, __u32);
	__type(value, struct wl_port);
} ports_far SEC(".maps");

/* The switch port of device `ifindex`, 0 = none. */
static __always_inline __u32 port_of(__u32 ifindex)
{
	struct wl_port *p;

	if (ifindex < WL_NEAR_IFINDEX)
		p = bpf_map_lookup_elem(&ports, &ifindex);
	else
		p = bpf_map_lookup_elem(&ports_far, &ifindex);
	return p ? p->port : 0;
}

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
