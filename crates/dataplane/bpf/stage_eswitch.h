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
};

struct wl_es_action {
	__u32 kind;        /* enum wl_es_kind */
	__u32 ifindex;
	__u32 port;
	__u32 goto_table;
	__u64 pkts;        /* hits, updated atomically */
	__u64 bytes;
};

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
		return 1;
	}
	return 0;
}

_Static_assert(sizeof(struct wl_es_key) == 40, "five words: es_apply_mask");

WL_STAGE(wl_stage_eswitch)
{
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	struct es_search s = {};
	struct wl_es_stats *st;
	__u32 zero = 0, t, slot;

	st = bpf_map_lookup_elem(&es_stats, &zero);
	if (!st)
		return WL_CONTINUE;
	st->pkts++;
	if (data + 2 * ETH_ALEN > end)
		return WL_CONTINUE;
	__builtin_memcpy(s.key.dmac, data, ETH_ALEN);
	__builtin_memcpy(s.key.smac, data + ETH_ALEN, ETH_ALEN);
	s.key.in_port = ctx->in_port;
	if (ctx->pkt.l3_off) {
		s.key.saddr = ctx->pkt.saddr;
		s.key.daddr = ctx->pkt.daddr;
		s.key.proto = ctx->pkt.ip_proto;
		s.key.sport = ctx->pkt.sport;
		s.key.dport = ctx->pkt.dport;
	}
	for (t = 0; t < WL_ES_MAX_CHAIN; t++) {
		slot = (es_live & 1) * WL_ES_MAX_TABLES + (s.table & (WL_ES_MAX_TABLES - 1));
		s.order = bpf_map_lookup_elem(&es_order, &slot);
		if (!s.order)
			break;
		s.hit = 0;
		bpf_loop(WL_ES_MAX_MASKS, es_search_one, &s, 0);
		if (!s.hit)
			break;
		__sync_fetch_and_add(&s.hit->pkts, 1);
		__sync_fetch_and_add(&s.hit->bytes, ctx->len);
		if (s.hit->kind != WL_ES_GOTO)
			break;
		s.table = s.hit->goto_table & (WL_ES_MAX_TABLES - 1);
	}
	ctx->es_visited = s.visited > 0xffff ? 0xffff : s.visited;
	st->visited += s.visited;
	if (!s.hit) {
		st->misses++;
		return WL_CONTINUE;
	}
	switch (s.hit->kind) {
	case WL_ES_FORWARD:
		ctx->out_ifindex = s.hit->ifindex;
		ctx->out_port = s.hit->port;
		break;
	case WL_ES_DROP:
		st->drops++;
		ctx->es_drop = 1;
		break;
	case WL_ES_GOTO:
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
