/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The switch's side of the extension API (wirelab_ext.h): the default
 * hooks a user discipline replaces, and what the stages hand them.
 */
#ifndef WL_EXT_HOOKS_H
#define WL_EXT_HOOKS_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "wl_ctx.h"

/* A user discipline is linked in (src/ext.rs): the stages call the hooks,
 * whose weak defaults below the discipline's definitions replace. With 0
 * the calls are removed and the built-in stages run as they are. */
const volatile __u8 vaqm_ext = 0;

/* Switch port -> its device, for a discipline's forward() (Table 1). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, WL_MAX_PORTS + 1);
	__type(key, __u32);
	__type(value, struct wl_fwd);
} port_dev SEC(".maps");

/*
 * The default hooks. Weak: a user discipline is compiled on its own and
 * statically linked with this object (src/ext.rs), and its strong
 * definitions replace these. Weak also keeps clang from inlining them or
 * deducing anything about them for the callers. Only called when
 * vaqm_ext is set.
 */
__weak __noinline int wl_ext_init(struct wl_ext_vq *vq __wl_nonnull)
{
	return 0;
}

__weak __noinline __u32 wl_ext_classify(struct __sk_buff *skb, struct wl_ext_pkt *p __wl_nonnull)
{
	return 0; /* the spec's classifier */
}

__weak __noinline int wl_ext_vaqm(struct wl_ext_pkt *p __wl_nonnull,
				  struct wl_ext_vq *vq __wl_nonnull)
{
	return 0;
}

__weak __noinline __u64 wl_ext_estimate_qlen(struct wl_ext_vq *vq __wl_nonnull)
{
	return vq->bytes; /* the leaky bucket's */
}

__weak __noinline __u32 wl_ext_process(struct __sk_buff *skb, struct wl_ext_pkt *p __wl_nonnull,
				       struct wl_ext_vq *vq __wl_nonnull)
{
	return WL_AQM_PASS;
}

__weak __noinline __u32 wl_ext_forward(struct wl_ext_pkt *p __wl_nonnull)
{
	return 0; /* the MAC table's port */
}

/* The packet as a discipline sees it (struct wl_ext_pkt). */
static __always_inline void ext_pkt(struct wl_ctx *ctx)
{
	struct wl_ext_pkt *x = &ctx->ext;
	struct wl_pkt *p = &ctx->pkt;

	x->now_ns = ctx->now;
	x->len = ctx->len;
	x->in_port = ctx->in_port;
	x->out_port = ctx->out_port;
	if (!p->l3_off)
		return;
	x->saddr = p->saddr;
	x->daddr = p->daddr;
	x->sport = p->sport;
	x->dport = p->dport;
	x->proto = p->ip_proto;
	x->ecn = p->tos & 3;
	x->dscp = p->tos >> 2;
}

/* A discipline's forward(): the port it names, if the switch has it. */
static __always_inline void ext_forward(struct wl_ctx *ctx)
{
	__u32 port = wl_ext_forward(&ctx->ext);
	struct wl_fwd *o;

	if (!port || port > WL_MAX_PORTS)
		return;
	o = bpf_map_lookup_elem(&port_dev, &port);
	if (!o || !o->ifindex)
		return;
	ctx->ext.out_port = port;
	ctx->out_port = port;
	ctx->out_ifindex = o->ifindex;
}

#endif
