/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Stage: parse Ethernet / IPv4 / TCP or RoCEv2 (UDP 4791) once, into the
 * context's offsets and flow key. Anything else goes on unparsed: the
 * switch forwards every frame, it only acts on what it understands.
 */
#ifndef WL_STAGE_PARSE_H
#define WL_STAGE_PARSE_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/in.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "wl_ctx.h"

/*
 * RoCEv2 data packets (IBTA Table 38): requests that carry message data
 * (send/write, opcodes 0x00-0x0b) and read responses (0x0d-0x10). Read
 * requests, ACKs and CNPs are not data (Lumina §3.3 injects on data only).
 */
static __always_inline int roce_is_data(__u8 opcode)
{
	return opcode <= 0x0b || (opcode >= 0x0d && opcode <= 0x10);
}

/* RoCEv2 over UDP 4791 (IBTA Annex A17): the BTH follows the UDP header. */
static __always_inline void parse_roce(struct __sk_buff *skb, struct wl_pkt *p, __u32 ihl,
				       __u32 tot_len)
{
	__u8 bth[12];

	p->l4_off = p->l3_off + ihl;
	if (bpf_skb_load_bytes(skb, p->l4_off + sizeof(struct udphdr), bth, sizeof(bth)))
		return;
	p->is_roce = 1;
	/* For RoCE the byte a corruption flips: the last one before the ICRC,
	 * payload for every data packet, so only the ICRC (IBTA Annex A17.8)
	 * can catch it, as with Lumina's corruption event (§3.3). */
	p->payload_off = p->l3_off + tot_len - 4 - 1;
	p->payload_len = roce_is_data(bth[0]);
	p->seq = ((__u32)bth[9] << 16) | ((__u32)bth[10] << 8) | bth[11];
	p->key.saddr = p->saddr;
	p->key.daddr = p->daddr;
	/* A QP, not a UDP port pair, is the connection (wirelab.h). */
	p->key.proto = IPPROTO_UDP | ((__u32)bth[5] << 24) | ((__u32)bth[6] << 16) |
		       ((__u32)bth[7] << 8);
}

WL_CORE_STAGE(wl_stage_parse)
{
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	struct wl_pkt *p = &ctx->pkt;
	struct ethhdr *eth = data;
	struct iphdr *ip;
	struct tcphdr *tcp;
	struct udphdr *udp;
	__u32 ihl, doff, tot;

	if ((void *)(eth + 1) > end || eth->h_proto != bpf_htons(ETH_P_IP))
		return WL_CONTINUE;
	ip = (void *)(eth + 1);
	if ((void *)(ip + 1) > end)
		return WL_CONTINUE;
	ihl = ip->ihl * 4;
	if (ihl < sizeof(*ip))
		return WL_CONTINUE;
	p->l3_off = sizeof(*eth);
	p->tos = ip->tos;
	p->daddr = ip->daddr;
	p->saddr = ip->saddr;
	p->ip_proto = ip->protocol;
	tot = bpf_ntohs(ip->tot_len);
	if (ip->frag_off & bpf_htons(0x3fff))
		return WL_CONTINUE;
	if (ip->protocol == IPPROTO_UDP) {
		udp = (void *)ip + ihl;
		if ((void *)(udp + 1) > end)
			return WL_CONTINUE;
		p->l4_off = p->l3_off + ihl;
		p->sport = udp->source;
		p->dport = udp->dest;
		if (udp->dest == bpf_htons(WL_ROCE_PORT))
			parse_roce(skb, p, ihl, tot);
		return WL_CONTINUE;
	}
	if (ip->protocol != IPPROTO_TCP)
		return WL_CONTINUE;
	p->l4_off = p->l3_off + ihl;
	tcp = data + p->l4_off;
	if ((void *)(tcp + 1) > end)
		return WL_CONTINUE;
	doff = tcp->doff * 4;
	if (doff < sizeof(*tcp) || tot < ihl + doff)
		return WL_CONTINUE;
	p->is_tcp = 1;
	p->sport = tcp->source;
	p->dport = tcp->dest;
	p->payload_off = p->l4_off + doff;
	p->payload_len = tot - ihl - doff;
	p->tcp_flags = ((__u8 *)tcp)[13];
	p->seq = bpf_ntohl(tcp->seq);
	p->key.saddr = ip->saddr;
	p->key.daddr = ip->daddr;
	p->key.sport = tcp->source;
	p->key.dport = tcp->dest;
	p->key.proto = IPPROTO_TCP;
	return WL_CONTINUE;
}

#endif
