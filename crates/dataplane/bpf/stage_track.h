/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Stage: classify a packet to a connection of the spec, and in the data
 * direction track its data packet index and iteration (Lumina §3.3).
 */
#ifndef WL_STAGE_TRACK_H
#define WL_STAGE_TRACK_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <bpf/bpf_helpers.h>
#include "wl_ctx.h"

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 2 * WL_MAX_CONNS);
	__type(key, struct wl_flow_key);
	__type(value, struct wl_flow);
} flows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2 * WL_STATE_SECOND);
	__type(key, __u32);
	__type(value, struct wl_conn_state);
} conn_state SEC(".maps");

/* A dense array, not a hash: the first-transmission path is one sequential
 * store (no hashing, no locks; as a hash map it cost ~300 ns per packet).
 * Sized by the control plane to (connections + 1) * WL_SEG_WINDOW. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, (WL_MAX_CONNS + 1) * WL_SEG_WINDOW);
	__type(key, __u32);
	__type(value, __u32);
} seg_start SEC(".maps");

#define TCP_FLAG_SYN 0x02

/* The frame's destination MAC in the low 48 bits (the MAC table's key),
 * or 0 for a runt. */
static __always_inline __u64 frame_dmac(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	__u64 dmac = 0;

	if (data + ETH_ALEN > end)
		return 0;
	__builtin_memcpy(&dmac, data, ETH_ALEN);
	return dmac;
}

/* What a flow's egress is kept for (wl_flow.route_key): the frame's
 * destination MAC | its ingress port << 48; 0 for a runt. */
static __always_inline __u64 route_key(struct __sk_buff *skb, __u32 in_port)
{
	__u64 dmac = frame_dmac(skb);

	return dmac ? dmac | (__u64)in_port << 48 : 0;
}

/* Serialize a connection's state with its spin lock, for switch ports
 * whose packets are processed on several CPUs. Off in the lab, which steers
 * every switch port to one CPU (netns steer_rx), so the pipeline is serial
 * like a hardware one: the lock is two helper calls per data packet
 * (`wirelab bench stages`). wl_conn_state.cpu_moves shows when the one-CPU
 * assumption broke, in the run summary, instead of racing silently. */
const volatile __u8 track_lock = 1;

static __always_inline void st_lock(struct wl_conn_state *st)
{
	if (track_lock)
		bpf_spin_lock(&st->lock);
}

static __always_inline void st_unlock(struct wl_conn_state *st)
{
	if (track_lock)
		bpf_spin_unlock(&st->lock);
}

/* Slot of data packet `idx` of `conn` in seg_start. */
static __always_inline __u32 seg_slot(__u32 conn, __u32 idx)
{
	return conn * WL_SEG_WINDOW + (idx & (WL_SEG_WINDOW - 1));
}

/*
 * The data packet that holds relative sequence `rel`: the largest index in
 * the window whose first transmission started at or before `rel`. Start
 * sequences grow with the index, so this is a binary search; 13 steps cover
 * WL_SEG_WINDOW = 4096. Older packets than the window get index 0 (unknown).
 *
 * A global function, verified once on its own: inlined, its 13 steps were
 * walked with every state the stages around it reach, which was 618,922 of
 * the 1,000,000 instructions the verifier allows the pipeline and 0.47 s of
 * every run's start (a call costs about 11 ns, wl_ctx.h, and only a
 * retransmission makes it). Weak for the reason WL_STAGE is.
 */
__weak __noinline __u32 index_of(__u32 conn, __u32 rel, __u32 first_tx)
{
	__u32 lo = first_tx > WL_SEG_WINDOW ? first_tx - WL_SEG_WINDOW + 1 : 1;
	__u32 hi = first_tx, found = 0, slot, mid;
	__u32 *start;

	for (int k = 0; k < 13; k++) {
		if (lo > hi)
			break;
		mid = lo + (hi - lo) / 2;
		slot = seg_slot(conn, mid);
		start = bpf_map_lookup_elem(&seg_start, &slot);
		if (!start)
			break;
		if ((__s32)(*start - rel) <= 0) {
			found = mid;
			lo = mid + 1;
		} else {
			hi = mid - 1;
		}
	}
	return found;
}

/*
 * RoCE: the data packet index is the relative PSN + 1 (Lumina §3.3: "relative
 * QPNs and PSNs"; Fig. 2 maps the 4th packet to IPSN + 3), so no window of
 * first transmissions is needed. ITER follows the same Last_PSN rule; PSNs
 * are compared relative to the initial PSN, so a 24-bit wrap inside a
 * connection does not start a new iteration.
 */
static __always_inline void track_roce(struct wl_ctx *ctx, struct wl_conn_state *st)
{
	__u32 rel, first = 0, iter;

	if (!ctx->pkt.payload_len)
		return;
	st_lock(st);
	if (!st->synced) {
		st_unlock(st);
		return;
	}
	rel = (ctx->pkt.seq - st->isn) & 0xffffff;
	if (st->seen_data && rel <= st->last_rel)
		st->iter++;
	st->seen_data = 1;
	st->last_rel = rel;
	if (rel >= st->next_new) {
		first = 1;
		st->first_tx++;
		st->next_new = rel + 1;
	}
	iter = st->iter;
	st_unlock(st);
	ctx->index = rel + 1;
	ctx->iter = iter;
	ctx->first_tx = first;
}

/*
 * TCP. Lumina §3.3: "If its PSN is not larger than Last_PSN, the event
 * injector identifies this as a new round of transmissions and increases
 * ITER by 1 ... Regardless of the comparison result, the event injector
 * always updates Last_PSN". For TCP the PSN is the segment's sequence
 * number relative to the ISN, and the packet index counts first
 * transmissions (segments that start at or beyond the highest byte sent).
 */
static __always_inline void track_tcp(struct wl_ctx *ctx, struct wl_conn_state *st)
{
	__u32 seq = ctx->pkt.seq, len = ctx->pkt.payload_len, conn = ctx->conn;
	__u32 rel, idx = 0, first = 0, iter, first_tx, slot;

	if (ctx->pkt.tcp_flags & TCP_FLAG_SYN) {
		st_lock(st);
		st->synced = 1;
		st->isn = seq;
		st->seen_data = 0;
		st->last_rel = 0;
		st->next_new = 1; /* the SYN consumes one sequence number */
		st->iter = 1;
		st->first_tx = 0;
		st_unlock(st);
		return;
	}
	if (len == 0)
		return;
	st_lock(st);
	if (!st->synced) {
		st_unlock(st);
		return;
	}
	rel = seq - st->isn;
	if (st->seen_data && rel <= st->last_rel)
		st->iter++;
	st->seen_data = 1;
	st->last_rel = rel;
	if ((__s32)(rel - st->next_new) >= 0) {
		first = 1;
		idx = ++st->first_tx;
	}
	if ((__s32)(rel + len - st->next_new) > 0)
		st->next_new = rel + len;
	iter = st->iter;
	first_tx = st->first_tx;
	st_unlock(st);

	if (first) {
		__u32 *start;

		/* A store through the array lookup the JIT inlines, not
		 * bpf_map_update_elem: a helper call per new data packet. */
		slot = seg_slot(conn, idx);
		start = bpf_map_lookup_elem(&seg_start, &slot);
		if (start)
			*start = rel;
	} else {
		idx = index_of(conn, rel, first_tx);
	}
	ctx->index = idx;
	ctx->iter = iter;
	ctx->first_tx = first;
}

WL_CORE_STAGE(wl_stage_track)
{
	struct wl_flow_key key = ctx->pkt.key;
	struct wl_conn_state *st;
	struct wl_flow *flow;
	__u32 slot, cpu;

	if (!ctx->pkt.is_tcp && !ctx->pkt.is_roce)
		return WL_CONTINUE;
	flow = bpf_map_lookup_elem(&flows, &key);
	if (!flow)
		return WL_CONTINUE;
	ctx->conn = flow->conn;
	ctx->side = flow->side;
	ctx->data_dir = !!flow->data_dir;
	if (flow->route_key && flow->route_key == route_key(skb, ctx->in_port)) {
		ctx->out_ifindex = flow->out_ifindex;
		ctx->out_port = flow->out_port;
	}
	if (!flow->data_dir)
		return WL_CONTINUE;
	slot = flow->data_dir == 2 ? flow->conn + WL_STATE_SECOND : flow->conn;
	st = bpf_map_lookup_elem(&conn_state, &slot);
	if (!st)
		return WL_CONTINUE;
	cpu = bpf_get_smp_processor_id() + 1; /* inlined by the JIT */
	if (st->cpu && st->cpu != cpu)
		__sync_fetch_and_add(&st->cpu_moves, 1);
	st->cpu = cpu;
	if (ctx->pkt.is_roce)
		track_roce(ctx, st);
	else
		track_tcp(ctx, st);
	return WL_CONTINUE;
}

#endif
