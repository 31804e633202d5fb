/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Stage: an RNIC's eSwitch, as ScalaCN (seed 001) abstracts it (§2, Fig. 8):
 * chained flow tables, each an ordered list of masks (flow groups); each
 * mask a hash of masked keys. A packet visits a table's masks one after
 * another until one holds its masked key, so its cost grows with the masks
 * before the one that matches: ScalaCN's "scalability wall" (§3, S1-S2),
 * and Open vSwitch's dpcls subtable search. The masks visited are counted
 * per packet (ctx->es_visited) and per mask (lookups, hits), as OVS's
 * `pmd-stats-show` counts "subtable lookups/hit".
 *
 * A hit's action: forward to a port, drop, go to another table, or count
 * and leave the packet to the MAC table. A table miss leaves it to the MAC
 * table too (an RNIC's miss goes to the slow path). Masks and entries are
 * filled from user space; the search order can be changed while traffic
 * runs (ScalaCN's optimiser, §4.3) without a packet ever seeing half an
 * order: the order lives in two copies and one word says which is live.
 *
 * A global stage (wl_ctx.h): the search loop is verified once, on its own.
 */
#ifndef WL_STAGE_ESWITCH_H
#define WL_STAGE_ESWITCH_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include "wl_ctx.h"
#include "wl_hist.h"
#include "stage_route.h" /* mac_lookup: a rewritten destination MAC */

/* The stage is in the pipeline only when a spec has flow tables. */
const volatile __u8 eswitch_on = 0;

/* The wide match: what a mask selects bits of, and an entry's key. */
struct wl_es_key {
	__u32 table;    /* set by the stage, not masked */
	__u32 mask;     /* the mask's id, not masked */
	__u8 dmac[6];
	__u8 smac[6];
	__u32 saddr;    /* network byte order */
	__u32 daddr;
	__u16 sport;    /* network byte order */
	__u16 dport;
	__u8 proto;
	__u8 in_port;
	__u16 vlan;     /* VLAN id; 0 until the parse stage reads tags */
	__u32 vni;      /* VXLAN VNI; 0 until decap reads it */
} __attribute__((aligned(8)));

enum wl_es_kind {
	WL_ES_COUNT = 0,   /* count; the MAC table forwards */
	WL_ES_FORWARD = 1, /* to port/ifindex */
	WL_ES_DROP = 2,
	WL_ES_GOTO = 3,    /* search table goto_table next */
	/* VXLAN (RFC 7348), then out of port/ifindex. */
	WL_ES_ENCAP = 4,   /* add the outer headers below */
	WL_ES_DECAP = 5,   /* strip a VXLAN packet's outer headers */
	/* Encapsulate, then search goto_table with the outer headers as the
	 * key: one switch plays the sender's eSwitch (local encap) and the
	 * receiver's (remote decap), ScalaCN's overlay (§2, Fig. 1). */
	WL_ES_ENCAP_GOTO = 6,
};

/* An encapsulation's outer headers: Ethernet, IPv4, UDP to 4789, VXLAN. */
struct wl_es_tunnel {
	__u8 dmac[6];
	__u8 smac[6];
	__u32 saddr;       /* network byte order */
	__u32 daddr;
	__u32 vni;         /* 24 bits */
	__u16 sport;       /* network byte order; 0: from the flow's hash */
	__u8 ttl;
	__u8 pad;
};

/* Header fields an entry rewrites before its action (OpenFlow's
 * set_field, ovs-actions(7); an RNIC's "modify header" action). */
enum wl_es_set_field {
	WL_ES_SET_DMAC = 1,
	WL_ES_SET_SMAC = 2,
	WL_ES_SET_SADDR = 4,
	WL_ES_SET_DADDR = 8,
	WL_ES_SET_SPORT = 16,
	WL_ES_SET_DPORT = 32,
};

struct wl_es_set {
	__u32 fields;      /* enum wl_es_set_field bits; 0: none */
	__u8 dmac[6];
	__u8 smac[6];
	__u32 saddr;       /* network byte order */
	__u32 daddr;
	__u16 sport;       /* network byte order */
	__u16 dport;
};

struct wl_es_action {
	__u32 kind;        /* enum wl_es_kind */
	__u32 ifindex;
	__u32 port;
	__u32 goto_table;
	__u64 pkts;        /* hits, updated atomically */
	__u64 bytes;
	struct wl_es_tunnel tun;
	struct wl_es_set set;
};

#define WL_VXLAN_PORT 4789
/* Outer IPv4 (20) + UDP (8) + VXLAN (8) + the inner Ethernet header (14):
 * what encapsulation inserts after the outer Ethernet header. */
#define WL_VXLAN_ROOM 50

/* A table's search order: mask ids, searched from order[0]. */
struct wl_es_order {
	__u32 n;
	__u16 order[WL_ES_MAX_MASKS];
};

struct wl_es_mask_stats {
	__u64 lookups;     /* packets that searched this mask */
	__u64 hits;
};

struct wl_es_stats {
	__u64 pkts;        /* packets that entered table 0 */
	__u64 visited;     /* masks searched, over all packets and tables */
	__u64 misses;      /* packets no table matched */
	__u64 drops;
	__u64 loops;       /* packets that went past WL_ES_MAX_CHAIN tables */
	__u64 encaps;
	__u64 decaps;
	/* Encapsulations or decapsulations that failed (not VXLAN, no room):
	 * the packet is dropped. */
	__u64 tunnel_errors;
	/* Packets an entry rewrote (set), and rewrites that could not be
	 * made (an address on a packet that is not IPv4): dropped. */
	__u64 rewrites;
	__u64 rewrite_errors;
	/* Per table: packets that searched it and the masks they searched
	 * there (ScalaCN's Q_l and Q_r: local egress and remote ingress). */
	__u64 table_pkts[WL_ES_MAX_TABLES];
	__u64 table_visited[WL_ES_MAX_TABLES];
	/* Per table: nanoseconds its mask search took, summed (bpf_ktime_get_ns
	 * around the search). The device's own latency, which ScalaCN's Eq. 2
	 * models (§4.2), without the end hosts' scheduling around it. */
	__u64 table_ns[WL_ES_MAX_TABLES];
	/* Scratch for the timed search (this CPU's, not touched by anyone
	 * between the clock reads; no stack slot is left for them): the
	 * current table search's start, the current packet's total. */
	__u64 search_start;
	__u64 packet_ns;
	/* With a slow path (es_slow_gap_ns): misses it forwarded, and misses
	 * past its budget, dropped. */
	__u64 slow_pkts;
	__u64 slow_drops;
};

/* Mask bits, by (table * WL_ES_MAX_MASKS + id). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, WL_ES_MAX_TABLES * WL_ES_MAX_MASKS);
	__type(key, __u32);
	__type(value, struct wl_es_key);
} es_masks SEC(".maps");

/* Entries: the masked key (with its table and mask id) -> action. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, WL_ES_MAX_ENTRIES);
	__type(key, struct wl_es_key);
	__type(value, struct wl_es_action);
} es_entries SEC(".maps");

/* Search orders, two copies per table: (copy * WL_ES_MAX_TABLES + table). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2 * WL_ES_MAX_TABLES);
	__type(key, __u32);
	__type(value, struct wl_es_order);
} es_order SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, WL_ES_MAX_TABLES * WL_ES_MAX_MASKS);
	__type(key, __u32);
	__type(value, struct wl_es_mask_stats);
} es_mask_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct wl_es_stats);
} es_stats SEC(".maps");

/* The timed searches' distribution (`flowtables.timed`): per table and,
 * at WL_ES_MAX_TABLES, per packet over every table, a log-linear
 * histogram (wl_hist.h) of the nanoseconds, so a run reports its median
 * as perftest reports t_typical (ScalaCN's LAT, §4.2) and its tail beside
 * the mean table_ns gives. One array value per histogram (an
 * atomic add: the lab steers a switch's ports to one CPU, so it is
 * uncontended), read in one lookup each. */
struct wl_es_hist {
	__u64 b[WL_HIST_BUCKETS];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, WL_ES_MAX_TABLES + 1);
	__type(key, __u32);
	__type(value, struct wl_es_hist);
} es_hist SEC(".maps");

static __always_inline void es_hist_add(__u32 slot, __u64 ns)
{
	struct wl_es_hist *h = bpf_map_lookup_elem(&es_hist, &slot);
	__u32 b = hist_bucket(ns);

	if (h && b < WL_HIST_BUCKETS)
		__sync_fetch_and_add(&h->b[b], 1);
}

/* ScalaCN's hyper mask (§4.3): per table, the id + 1 of its exact-match
 * mask (0: none). A packet of a table with one that hits another mask is
 * a flow the control plane may "activate" into the hyper mask: it is
 * reported in es_learned with the action it hit, and the control plane
 * decides (capacity, LRU). The data plane only reports, as the RNIC only
 * tells OVS: the first packets of a flow search the cascading masks. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, WL_ES_MAX_TABLES);
	__type(key, __u32);
	__type(value, __u32);
} es_hyper SEC(".maps");

struct wl_es_learned {
	__u64 first_ns;
	__u64 last_ns;
	__u64 pkts;
	__u32 mask;        /* the mask it hit */
	__u32 pad;
	struct wl_es_action action; /* as the entry was; its counters unused */
};

/* The packet's full key (table set, mask 0) -> what it hit. An LRU hash:
 * when the control plane falls behind, the oldest reports go. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, WL_ES_MAX_LEARNED);
	__type(key, struct wl_es_key);
	__type(value, struct wl_es_learned);
} es_learned SEC(".maps");

/* es_learn's key and value, off the stack (the call chain's 512 bytes). */
struct es_learn_scratch {
	struct wl_es_key key;
	struct wl_es_learned v;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct es_learn_scratch);
} es_scratch SEC(".maps");

/* The slow path (ScalaCN §2-3): with a virtual switch offloading flows
 * into the eSwitch, a miss is a packet for software. It is reported in
 * es_upcalls, for the control plane to offload its flow, and forwarded by
 * the MAC table as software would, within the software path's capacity:
 * one packet per es_slow_gap_ns, with bursts queued (the generic cell
 * rate algorithm, ITU-T I.371: a packet conforms when the theoretical
 * arrival time es_slow_tat is at most es_slow_tolerance_ns ahead of now,
 * (burst - 1) gaps). Past it, the packet is dropped, as an
 * overloaded vswitch's queue drops (ScalaCN S1: a flow back in software
 * runs >18x slower). es_slow_gap_ns 0: no slow path; a miss goes to the
 * MAC table unreported and unlimited. */
__u64 es_slow_gap_ns = 0;

/* Nonzero: each table's search is timed into table_ns (the device's own
 * latency, `flowtables.timed`). Off by default: the two clock reads cost
 * about 85 ns a table searched per packet here (`wirelab bench eswitch`,
 * 421 -> 509 ns with one mask). */
__u32 es_timed = 0;
__u64 es_slow_tolerance_ns = 0;
__u64 es_slow_tat = 0;

struct wl_es_upcall {
	__u64 first_ns;
	__u64 last_ns;
	__u64 pkts;
};

/* The missed packet's full key (its table set, mask 0) -> its reports.
 * An LRU hash: when the control plane falls behind, the oldest go. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, WL_ES_MAX_LEARNED);
	__type(key, struct wl_es_key);
	__type(value, struct wl_es_upcall);
} es_upcalls SEC(".maps");

/* Which copy of es_order is live; user space writes the other copy, then
 * flips this word (one aligned store: a packet sees one order or the
 * other). */
__u32 es_live = 0;

/* What the search loop shares with its callback (bpf_loop). */
struct es_search {
	struct wl_es_key key;      /* the packet's fields */
	struct wl_es_order *order;
	__u32 table;
	__u32 visited;
	struct wl_es_action *hit;
	__u32 hit_mask;            /* the id of the mask that hit */
	struct wl_es_stats *st;
};

static __always_inline void es_apply_mask(struct wl_es_key *out, const struct wl_es_key *k,
					  const struct wl_es_key *m)
{
	__u64 *o = (__u64 *)out;
	const __u64 *a = (const __u64 *)k, *b = (const __u64 *)m;

	/* 40 bytes, five words; the table and mask words are set after. */
	o[0] = 0;
	o[1] = a[1] & b[1];
	o[2] = a[2] & b[2];
	o[3] = a[3] & b[3];
	o[4] = a[4] & b[4];
}

static long es_search_one(__u64 i, void *data)
{
	struct es_search *s = data;
	struct wl_es_mask_stats *ms;
	struct wl_es_key *m, masked;
	__u32 id, slot;

	if (i >= s->order->n || i >= WL_ES_MAX_MASKS)
		return 1;
	id = s->order->order[i & (WL_ES_MAX_MASKS - 1)];
	if (id >= WL_ES_MAX_MASKS)
		return 1;
	slot = s->table * WL_ES_MAX_MASKS + id;
	m = bpf_map_lookup_elem(&es_masks, &slot);
	if (!m)
		return 1;
	s->visited++;
	s->st->table_visited[s->table & (WL_ES_MAX_TABLES - 1)]++;
	es_apply_mask(&masked, &s->key, m);
	masked.table = s->table;
	masked.mask = id;
	ms = bpf_map_lookup_elem(&es_mask_stats, &slot);
	if (ms)
		ms->lookups++;
	s->hit = bpf_map_lookup_elem(&es_entries, &masked);
	if (s->hit) {
		if (ms)
			ms->hits++;
		s->hit_mask = id;
		return 1;
	}
	return 0;
}

_Static_assert(sizeof(struct wl_es_key) == 40, "five words: es_apply_mask");

/* The per-CPU scratch, its key set to the packet's whole key in `table`
 * (mask 0): how es_learned and es_upcalls key a flow. */
static __always_inline struct es_learn_scratch *es_report_key(const struct wl_es_key *k,
							     __u32 table)
{
	__u32 zero = 0;
	struct es_learn_scratch *sc = bpf_map_lookup_elem(&es_scratch, &zero);

	if (!sc)
		return 0;
	sc->key = *k;
	sc->key.table = table;
	sc->key.mask = 0;
	return sc;
}

/* Reports a flow that hit a cascading mask of a table with a hyper mask
 * (see es_hyper). Out of line, its key and value in a per-CPU scratch:
 * nothing of it on the stage's frame. */
static __noinline void es_learn(const struct wl_es_key *k, __u32 table, __u32 mask,
				const struct wl_es_action *a)
{
	struct es_learn_scratch *sc;
	struct wl_es_learned *l;
	__u64 now = bpf_ktime_get_ns();

	sc = es_report_key(k, table);
	if (!sc)
		return;
	l = bpf_map_lookup_elem(&es_learned, &sc->key);
	if (l) {
		l->last_ns = now;
		__sync_fetch_and_add(&l->pkts, 1);
		return;
	}
	sc->v.first_ns = now;
	sc->v.last_ns = now;
	sc->v.pkts = 1;
	sc->v.mask = mask;
	sc->v.pad = 0;
	sc->v.action = *a;
	sc->v.action.pkts = 0;
	sc->v.action.bytes = 0;
	bpf_map_update_elem(&es_learned, &sc->key, &sc->v, BPF_ANY);
}

/* A miss on a switch with a slow path: reported, then forwarded within
 * its capacity or dropped. Whether to drop. Out of line, its key in the
 * per-CPU scratch. Two CPUs may race on es_slow_tat and let a packet more
 * by, which a software path's capacity is not exact enough to mind. */
static __noinline int es_slow_path(const struct wl_es_key *k, __u32 table)
{
	struct es_learn_scratch *sc;
	struct wl_es_upcall *u, v = {};
	__u64 now = bpf_ktime_get_ns(), tat;

	sc = es_report_key(k, table);
	if (!sc)
		return 0;
	u = bpf_map_lookup_elem(&es_upcalls, &sc->key);
	if (u) {
		u->last_ns = now;
		__sync_fetch_and_add(&u->pkts, 1);
	} else {
		v.first_ns = now;
		v.last_ns = now;
		v.pkts = 1;
		bpf_map_update_elem(&es_upcalls, &sc->key, &v, BPF_ANY);
	}
	tat = es_slow_tat;
	if (tat < now)
		tat = now;
	if (tat - now > es_slow_tolerance_ns)
		return 1;
	es_slow_tat = tat + es_slow_gap_ns;
	return 0;
}

/* RFC 1071: the one's complement sum of the header's 16-bit words. */
static __always_inline __u16 ipv4_csum(const __u16 *h)
{
	__u32 sum = 0;
	int i;

	for (i = 0; i < 10; i++)
		sum += h[i];
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return ~sum;
}

/* VXLAN encapsulation (RFC 7348 §5): [outer eth][outer IPv4][UDP 4789]
 * [VXLAN, I flag, VNI][the original frame]. The room goes in after the MAC
 * header, so the original Ethernet header is written back after the new
 * ones. UDP checksum 0 (allowed over IPv4, RFC 7348 §5); DF set, as VTEPs
 * do; the source port from the flow's hash unless the entry fixes it. */
static __noinline int es_encap(struct __sk_buff *skb, const struct wl_es_tunnel *t)
{
	__u8 inner[ETH_HLEN];
	struct {
		__u8 eth[ETH_HLEN];
		__u16 ip[10];
		__u16 udp[4];
		__u8 vx[8];
	} __attribute__((packed)) h = {};
	__u32 len = skb->len, sport = t->sport;

	if (bpf_skb_load_bytes(skb, 0, inner, ETH_HLEN))
		return -1;
	if (!sport)
		sport = bpf_htons(49152 | (bpf_get_hash_recalc(skb) & 0x3fff));
	if (bpf_skb_adjust_room(skb, WL_VXLAN_ROOM, BPF_ADJ_ROOM_MAC,
				BPF_F_ADJ_ROOM_ENCAP_L3_IPV4 | BPF_F_ADJ_ROOM_ENCAP_L4_UDP |
					BPF_F_ADJ_ROOM_ENCAP_L2_ETH |
					BPF_F_ADJ_ROOM_ENCAP_L2(ETH_HLEN)))
		return -1;
	__builtin_memcpy(h.eth, t->dmac, 6);
	__builtin_memcpy(h.eth + 6, t->smac, 6);
	h.eth[12] = 0x08; /* IPv4 */
	/* IPv4: version 4, IHL 5; total length; DF; TTL; UDP. */
	h.ip[0] = bpf_htons(0x4500);
	h.ip[1] = bpf_htons(len - ETH_HLEN + WL_VXLAN_ROOM);
	h.ip[3] = bpf_htons(0x4000);
	h.ip[4] = bpf_htons(((__u16)(t->ttl ? t->ttl : 64) << 8) | IPPROTO_UDP);
	__builtin_memcpy(&h.ip[6], &t->saddr, 4);
	__builtin_memcpy(&h.ip[8], &t->daddr, 4);
	h.ip[5] = ipv4_csum(h.ip);
	h.udp[0] = sport;
	h.udp[1] = bpf_htons(WL_VXLAN_PORT);
	h.udp[2] = bpf_htons(len - ETH_HLEN + WL_VXLAN_ROOM - 20);
	h.vx[0] = 0x08; /* I: the VNI is valid */
	h.vx[4] = t->vni >> 16;
	h.vx[5] = t->vni >> 8;
	h.vx[6] = t->vni;
	if (bpf_skb_store_bytes(skb, 0, &h, sizeof(h), 0) ||
	    bpf_skb_store_bytes(skb, sizeof(h), inner, ETH_HLEN, 0))
		return -1;
	return 0;
}

/* The key of a packet just encapsulated: its outer headers, which the
 * tunnel gave (the outer source port, from the flow's hash, is left 0: a
 * remote decap rule does not match on it). The ingress port stays. */
static __always_inline void es_outer_key(struct wl_es_key *k, const struct wl_es_tunnel *t)
{
	__builtin_memcpy(k->dmac, t->dmac, 6);
	__builtin_memcpy(k->smac, t->smac, 6);
	k->saddr = t->saddr;
	k->daddr = t->daddr;
	k->sport = 0;
	k->dport = bpf_htons(WL_VXLAN_PORT);
	k->proto = IPPROTO_UDP;
	k->vlan = 0;
	k->vni = t->vni;
}

/* Strips a VXLAN packet's outer Ethernet/IPv4/UDP/VXLAN headers, leaving
 * the inner frame: the room after the outer MAC header goes, and the inner
 * Ethernet header is written where the outer one was. Only a plain IPv4
 * outer header (IHL 5) to UDP 4789 is decapsulated. */
static __noinline int es_decap(struct __sk_buff *skb)
{
	__u8 outer[ETH_HLEN + 20 + 8], inner[ETH_HLEN];

	if (bpf_skb_load_bytes(skb, 0, outer, sizeof(outer)))
		return -1;
	if (outer[12] != 0x08 || outer[13] != 0 || outer[14] != 0x45 ||
	    outer[ETH_HLEN + 9] != IPPROTO_UDP ||
	    outer[ETH_HLEN + 20 + 2] != (WL_VXLAN_PORT >> 8) ||
	    outer[ETH_HLEN + 20 + 3] != (WL_VXLAN_PORT & 0xff))
		return -1;
	if (bpf_skb_load_bytes(skb, ETH_HLEN + 36, inner, ETH_HLEN))
		return -1;
	if (bpf_skb_adjust_room(skb, -WL_VXLAN_ROOM, BPF_ADJ_ROOM_MAC, 0))
		return -1;
	if (bpf_skb_store_bytes(skb, 0, inner, ETH_HLEN, 0))
		return -1;
	return 0;
}

/* Rewrites 4 or 2 bytes at `off`, patching the IPv4 header checksum
 * (addresses) and the TCP or UDP checksum at `csum` (0: none) by RFC 1624's
 * incremental update, which the kernel's csum_replace helpers do: an
 * address is in the L4 pseudo-header (RFC 793 §3.1, RFC 768). A UDP
 * checksum of 0 (none sent) stays 0. */
static __always_inline int es_set_bytes(struct __sk_buff *skb, __u32 off, const void *to,
					__u32 size, __u32 l3, __u32 csum, __u64 udp)
{
	__u32 old = 0, new = 0;

	if (bpf_skb_load_bytes(skb, off, &old, size))
		return -1;
	__builtin_memcpy(&new, to, size);
	if (size == 4 && bpf_l3_csum_replace(skb, l3 + 10, old, new, 4))
		return -1;
	if (csum && bpf_l4_csum_replace(skb, csum, old, new,
					(size == 4 ? BPF_F_PSEUDO_HDR : 0) | udp | size))
		return -1;
	return bpf_skb_store_bytes(skb, off, to, size, 0);
}

/* An entry's set_field, applied to the packet as it matched (the inner
 * frame, or after an encapsulation the outer headers at `l3`/`l4`), and to
 * the key, so a later table matches the rewritten fields as an OpenFlow
 * pipeline does. Ports are rewritten on TCP and UDP packets only. */
static __noinline int es_rewrite(struct __sk_buff *skb, const struct wl_es_set *w,
				 struct wl_es_key *k, __u32 l3, __u32 l4)
{
	__u32 f = w->fields, csum = 0;
	__u64 udp = 0;

	if ((f & WL_ES_SET_DMAC) && bpf_skb_store_bytes(skb, 0, w->dmac, ETH_ALEN, 0))
		return -1;
	if ((f & WL_ES_SET_SMAC) && bpf_skb_store_bytes(skb, ETH_ALEN, w->smac, ETH_ALEN, 0))
		return -1;
	if (f & WL_ES_SET_DMAC)
		__builtin_memcpy(k->dmac, w->dmac, ETH_ALEN);
	if (f & WL_ES_SET_SMAC)
		__builtin_memcpy(k->smac, w->smac, ETH_ALEN);
	if (!(f & (WL_ES_SET_SADDR | WL_ES_SET_DADDR | WL_ES_SET_SPORT | WL_ES_SET_DPORT)))
		return 0;
	if (!l3)
		return -1;
	/* l4 is 0 for a fragment (the parse stage reads no L4 header there):
	 * its addresses are rewritten, its ports and L4 checksum left. */
	if (l4 && k->proto == IPPROTO_TCP) {
		csum = l4 + 16;
	} else if (l4 && k->proto == IPPROTO_UDP) {
		csum = l4 + 6;
		udp = BPF_F_MARK_MANGLED_0;
	}
	if (f & WL_ES_SET_SADDR) {
		if (es_set_bytes(skb, l3 + 12, &w->saddr, 4, l3, csum, udp))
			return -1;
		k->saddr = w->saddr;
	}
	if (f & WL_ES_SET_DADDR) {
		if (es_set_bytes(skb, l3 + 16, &w->daddr, 4, l3, csum, udp))
			return -1;
		k->daddr = w->daddr;
	}
	if (!csum)
		return 0;
	if (f & WL_ES_SET_SPORT) {
		if (es_set_bytes(skb, l4, &w->sport, 2, l3, csum, udp))
			return -1;
		k->sport = w->sport;
	}
	if (f & WL_ES_SET_DPORT) {
		if (es_set_bytes(skb, l4 + 2, &w->dport, 2, l3, csum, udp))
			return -1;
		k->dport = w->dport;
	}
	return 0;
}

/* What the chain's loop shares with its callback (bpf_loop): the search,
 * the packet, and what the tables did to it. */
struct es_chain {
	struct es_search s;
	struct __sk_buff *skb;
	struct wl_ctx *ctx;
	/* Where the packet's IPv4 and L4 headers are: moved by an encap. */
	__u32 l3, l4;
	__u8 new_dmac;
	/* A rewrite or an encap failed: the packet is dropped. */
	__u8 failed;
};

/* One table of the chain: search its masks in order, count the hit, learn
 * it into the hyper mask, rewrite, encap; 0 to go on to the table the hit
 * names. A bpf_loop callback, not a loop in the stage: the verifier then
 * walks one table's paths, not every table's after every state of the
 * ones before (WL_ES_MAX_CHAIN tables unrolled in the stage: 166,378
 * instructions walked on this kernel, over the pipeline's budget of
 * 100,000). */
static long es_chain_one(__u64 i, void *data)
{
	struct es_chain *c = data;
	struct wl_es_stats *st = c->s.st;
	__u32 slot, table = c->s.table & (WL_ES_MAX_TABLES - 1);

	slot = (es_live & 1) * WL_ES_MAX_TABLES + table;
	c->s.order = bpf_map_lookup_elem(&es_order, &slot);
	if (!c->s.order)
		return 1;
	c->s.hit = 0;
	st->table_pkts[table]++;
	if (es_timed)
		st->search_start = bpf_ktime_get_ns();
	bpf_loop(WL_ES_MAX_MASKS, es_search_one, &c->s, 0);
	if (es_timed) {
		__u64 ns = bpf_ktime_get_ns() - st->search_start;

		st->table_ns[table] += ns;
		st->packet_ns += ns;
		es_hist_add(table, ns);
	}
	if (!c->s.hit)
		return 1;
	__sync_fetch_and_add(&c->s.hit->pkts, 1);
	__sync_fetch_and_add(&c->s.hit->bytes, c->ctx->len);
	{
		__u32 *hyper = bpf_map_lookup_elem(&es_hyper, &c->s.table);

		if (hyper && *hyper && *hyper != c->s.hit_mask + 1)
			es_learn(&c->s.key, c->s.table, c->s.hit_mask, c->s.hit);
	}
	if (c->s.hit->set.fields) {
		if (es_rewrite(c->skb, &c->s.hit->set, &c->s.key, c->l3, c->l4)) {
			st->rewrite_errors++;
			c->failed = 1;
			return 1;
		}
		st->rewrites++;
		c->new_dmac |= c->s.hit->set.fields & WL_ES_SET_DMAC;
	}
	if (c->s.hit->kind == WL_ES_ENCAP_GOTO) {
		if (es_encap(c->skb, &c->s.hit->tun)) {
			st->tunnel_errors++;
			c->failed = 1;
			return 1;
		}
		st->encaps++;
		es_outer_key(&c->s.key, &c->s.hit->tun);
		c->l3 = ETH_HLEN;
		c->l4 = ETH_HLEN + 20;
	} else if (c->s.hit->kind != WL_ES_GOTO) {
		return 1;
	}
	c->s.table = c->s.hit->goto_table & (WL_ES_MAX_TABLES - 1);
	return 0;
}

WL_STAGE(wl_stage_eswitch)
{
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	struct es_chain c = {};
	struct wl_es_stats *st;
	__u32 zero = 0;

	st = bpf_map_lookup_elem(&es_stats, &zero);
	if (!st)
		return WL_CONTINUE;
	st->pkts++;
	if (es_timed)
		st->packet_ns = 0;
	c.s.st = st;
	c.skb = skb;
	c.ctx = ctx;
	c.l3 = ctx->pkt.l3_off;
	c.l4 = ctx->pkt.l4_off;
	if (data + 2 * ETH_ALEN > end)
		return WL_CONTINUE;
	__builtin_memcpy(c.s.key.dmac, data, ETH_ALEN);
	__builtin_memcpy(c.s.key.smac, data + ETH_ALEN, ETH_ALEN);
	c.s.key.in_port = ctx->in_port;
	if (ctx->pkt.l3_off) {
		c.s.key.saddr = ctx->pkt.saddr;
		c.s.key.daddr = ctx->pkt.daddr;
		c.s.key.proto = ctx->pkt.ip_proto;
		c.s.key.sport = ctx->pkt.sport;
		c.s.key.dport = ctx->pkt.dport;
		/* A VXLAN packet's VNI (a remote decap rule matches on it). */
		if (ctx->pkt.ip_proto == IPPROTO_UDP &&
		    ctx->pkt.dport == bpf_htons(WL_VXLAN_PORT)) {
			__u8 ihl, vni[3];

			if (!bpf_skb_load_bytes(skb, ctx->pkt.l3_off, &ihl, 1) &&
			    !bpf_skb_load_bytes(skb, ctx->pkt.l3_off + (ihl & 0xf) * 4 + 8 + 4,
						vni, 3))
				c.s.key.vni = ((__u32)vni[0] << 16) | ((__u32)vni[1] << 8) | vni[2];
		}
	}
	bpf_loop(WL_ES_MAX_CHAIN, es_chain_one, &c, 0);
	if (c.failed) {
		ctx->es_drop = 1;
		ctx->es_visited = c.s.visited > 0xffff ? 0xffff : c.s.visited;
		st->visited += c.s.visited;
		return WL_CONTINUE;
	}
	ctx->es_visited = c.s.visited > 0xffff ? 0xffff : c.s.visited;
	st->visited += c.s.visited;
	if (es_timed)
		es_hist_add(WL_ES_MAX_TABLES, st->packet_ns);
	/* A destination MAC rewritten and no entry forwarding: the MAC table
	 * forwards by the new one (OpenFlow: set_field, then the next table). */
	if (c.new_dmac && (!c.s.hit || c.s.hit->kind == WL_ES_COUNT || c.s.hit->kind == WL_ES_GOTO)) {
		struct wl_fwd *out = mac_lookup(skb);

		ctx->out_ifindex = out ? out->ifindex : 0;
		ctx->out_port = out ? out->port : 0;
	}
	if (!c.s.hit) {
		st->misses++;
		if (es_slow_gap_ns) {
			if (es_slow_path(&c.s.key, c.s.table)) {
				st->slow_drops++;
				ctx->es_drop = 1;
			} else {
				st->slow_pkts++;
			}
		}
		return WL_CONTINUE;
	}
	switch (c.s.hit->kind) {
	case WL_ES_ENCAP:
		if (es_encap(skb, &c.s.hit->tun)) {
			st->tunnel_errors++;
			ctx->es_drop = 1;
			break;
		}
		st->encaps++;
		ctx->out_ifindex = c.s.hit->ifindex;
		ctx->out_port = c.s.hit->port;
		break;
	case WL_ES_DECAP:
		if (es_decap(skb)) {
			st->tunnel_errors++;
			ctx->es_drop = 1;
			break;
		}
		st->decaps++;
		/* fall through: out of the entry's port */
	case WL_ES_FORWARD:
		ctx->out_ifindex = c.s.hit->ifindex;
		ctx->out_port = c.s.hit->port;
		break;
	case WL_ES_DROP:
		st->drops++;
		ctx->es_drop = 1;
		break;
	case WL_ES_GOTO:
	case WL_ES_ENCAP_GOTO:
		/* Still going to a table after WL_ES_MAX_CHAIN: a loop the
		 * compiler let through. Left to the MAC table, counted. */
		st->loops++;
		break;
	default:
		break;
	}
	return WL_CONTINUE;
}

#endif
