/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Setting CE, for the events stage and the vAQM stage alike. */
#ifndef WL_ECN_H
#define WL_ECN_H

#include <stddef.h>
#include <linux/bpf.h>
#include <linux/ip.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "wl_ctx.h"

/* RFC 3168 §5: CE may only be set on an ECN-capable (ECT(0)/ECT(1))
 * packet. Returns 1 if it was set (the IP checksum patched, RFC 1624). */
static __always_inline int mark_ce(struct __sk_buff *skb, struct wl_pkt *p)
{
	__u8 old = p->tos, new = p->tos | 0x3;
	__u16 old_w, new_w;
	__u8 first;

	if (!p->l3_off || (old & 0x3) == 0)
		return 0;
	if (bpf_skb_load_bytes(skb, p->l3_off, &first, 1))
		return 0;
	old_w = bpf_htons(((__u16)first << 8) | old);
	new_w = bpf_htons(((__u16)first << 8) | new);
	bpf_skb_store_bytes(skb, p->l3_off + 1, &new, 1, 0);
	bpf_l3_csum_replace(skb, p->l3_off + offsetof(struct iphdr, check), old_w, new_w, 2);
	p->tos = new;
	return 1;
}

#endif
