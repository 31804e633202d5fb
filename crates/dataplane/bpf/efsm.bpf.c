// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Norma's stateful responder in software (seed 002 §4; issue 20): a tc
 * program on a tester port's ingress that runs a user's EFSM per flow and
 * answers the DUT's real TCP from templates. wirelab_load::efsm is the
 * same executor without I/O; the fixtures compare the two byte for byte.
 *
 * One arriving IPv4 TCP packet for the side's address:
 *   1. the flow's register (Norma's state register, §4.2) and TCP's
 *      variables: an in-order segment moves RCV.NXT, an ACK of new data
 *      SND.UNA (RFC 793 §3.2); an unknown flow starts from the packet;
 *   2. the first row of the flow's state whose condition holds (flags,
 *      payload, its first bytes, whether all we sent is acknowledged);
 *   3. the row's reply, built in the packet itself (Norma builds it from
 *      template packets, §4.3: here the arriving skb is the template, its
 *      length changed to the reply's): headers from the variables,
 *      payload from the side's chunks, checksums computed. A data reply
 *      of several segments sends all but the last as clones;
 *   4. the next state stored, or the flow forgotten.
 * Everything else (ARP, other addresses) goes to the stack; TCP for the
 * side's address never does (the tester's kernel would reset it).
 *
 * tc rather than XDP: one arriving ACK must be able to answer with two
 * segments (slow start's ACK clocking; a delayed-ACK receiver given one
 * segment at a time waits 40 ms per ACK), and only an skb can be cloned
 * out. The register update is not atomic across CPUs, as Norma's is not
 * (its Appendix A): one flow's packets come from one DUT socket.
 */
#include <stddef.h>
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/in.h>
#include <linux/tcp.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "wl_clock.h"

enum wl_efsm_limits {
	WL_EFSM_ROWS = 32,
	WL_EFSM_STATES = 16,
	WL_EFSM_PREFIX = 8,
	WL_EFSM_FLOWS = 65536,
	/* A chunk's bytes: an MSS up to a 9000-byte MTU's. */
	WL_EFSM_SEG = 8960,
	WL_EFSM_SEGMENTS = 4,
	/* Counters: one per row, then enum wl_efsm_count. */
	WL_EFSM_COUNTS = WL_EFSM_ROWS + 8,
};

enum wl_efsm_reply {
	WL_REPLY_NONE = 0,
	WL_REPLY_RST = 1,
	WL_REPLY_SYNACK = 2,
	WL_REPLY_ACK = 3,
	WL_REPLY_FIN = 4,
	WL_REPLY_DATA = 5,
	WL_REPLY_REOPEN = 6,
};

/* wirelab_load::efsm::Count, after the rows' counters. */
enum wl_efsm_count {
	WL_COUNT_UNMATCHED = 0,
	WL_COUNT_OOO = 1,
	WL_COUNT_CREATED = 2,
	WL_COUNT_ENDED = 3,
	WL_COUNT_RX_BYTES = 4,
	WL_COUNT_SEGMENTS = 5,
	WL_COUNT_TX_BYTES = 6,
	WL_COUNT_FULL = 7,
};

#define F_FIN 0x01
#define F_SYN 0x02
#define F_RST 0x04
#define F_PSH 0x08
#define F_ACK 0x10

struct wl_efsm_row {
	__u8 from;
	__u8 flags_mask;
	__u8 flags_value;
	__u8 payload; /* 0 any, 1 empty, 2 data */
	__u8 prefix_len;
	__u8 all_acked; /* 0 not compared, 1 must, 2 must not */
	__u8 next;
	__u8 reply; /* enum wl_efsm_reply */
	__u8 forget;
	__u8 pad[7];
	__u8 prefix[WL_EFSM_PREFIX];
};

struct wl_efsm_conf {
	__u32 local_ip; /* network order */
	__u32 ifindex; /* replies leave here (0: fixtures, no clone) */
	__u16 mss;
	__u8 segments; /* per arriving packet */
	__u8 fin_after_data;
	__u16 port_base; /* a client's slots */
	__u16 pad;
	__u32 connections;
	__u32 port_range;
	__u32 rows;
	__u64 payload_len; /* 0: no payload */
	__u64 payload_chunks;
	struct wl_efsm_row row[WL_EFSM_ROWS];
};

struct wl_efsm_key {
	__u32 peer_ip; /* network order */
	__u16 peer_port; /* host order */
	__u16 local_port;
};

struct wl_efsm_flow {
	__u32 state;
	__u32 isn;
	__u32 snd_una;
	__u32 snd_nxt;
	__u32 rcv_nxt;
	__u32 wnd;
};

/* A chunk of the payload and its RFC 1071 sum (folded, not complemented). */
struct wl_efsm_chunk {
	__u32 len;
	__u32 sum;
	__u8 bytes[WL_EFSM_SEG];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct wl_efsm_conf);
} efsm_conf SEC(".maps");

/* [first, middle, last] (wirelab_load::efsm::Payload). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 3);
	__type(key, __u32);
	__type(value, struct wl_efsm_chunk);
} efsm_chunks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, WL_EFSM_FLOWS);
	__type(key, struct wl_efsm_key);
	__type(value, struct wl_efsm_flow);
} efsm_flows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, WL_EFSM_COUNTS);
	__type(key, __u32);
	__type(value, __u64);
} efsm_counts SEC(".maps");

/* Force the enums into BTF, for the skeleton's types. */
const volatile enum wl_efsm_limits wl_efsm_limits_btf = WL_EFSM_ROWS;
const volatile enum wl_efsm_reply wl_efsm_reply_btf = WL_REPLY_NONE;
const volatile enum wl_efsm_count wl_efsm_count_btf = WL_COUNT_UNMATCHED;

static __always_inline void bump(__u32 k, __u64 by)
{
	__u64 *c = bpf_map_lookup_elem(&efsm_counts, &k);

	if (c)
		*c += by;
}

/* The reply's headers, built on the stack; `eth` two bytes in so the IP
 * and TCP headers are 4-byte aligned for bpf_csum_diff. */
struct reply {
	__u8 pad[2];
	struct ethhdr eth;
	struct iphdr ip;
	struct tcphdr tcp;
	__u8 opt[4];
} __attribute__((packed));

struct pseudo {
	__u32 src;
	__u32 dst;
	__u8 zero;
	__u8 proto;
	__u16 len;
};

static __always_inline __u16 fold(__u64 s)
{
	s = (s & 0xffffffff) + (s >> 32);
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return s;
}

/* Rewrites the skb into one reply and returns 0, or a negative errno.
 * `chunk` (may be NULL) gives the payload, `plen` bytes of it. A global
 * function, verified once. */
__noinline int wl_build(struct __sk_buff *skb, struct reply *r, __u32 tcp_len,
			const struct wl_efsm_chunk *chunk, __u32 plen)
{
	struct pseudo ph = {};
	__u32 tot, hdr;
	__s64 s;

	if (!skb || !r)
		return -1;
	tcp_len = tcp_len == 24 ? 24 : 20;
	plen &= 0x3fff;
	if (plen > WL_EFSM_SEG || (plen && !chunk))
		return -1;
	tot = 20 + tcp_len + plen;
	r->ip.tot_len = bpf_htons(tot);
	r->ip.check = 0;
	s = bpf_csum_diff(NULL, 0, (__be32 *)&r->ip, 20, 0);
	if (s < 0)
		return -1;
	r->ip.check = ~fold(s);
	r->tcp.doff = tcp_len / 4;
	r->tcp.check = 0;
	ph.src = r->ip.saddr;
	ph.dst = r->ip.daddr;
	ph.proto = IPPROTO_TCP;
	ph.len = bpf_htons(tcp_len + plen);
	s = bpf_csum_diff(NULL, 0, (__be32 *)&ph, sizeof(ph), 0);
	if (s < 0)
		return -1;
	if (tcp_len == 24)
		s = bpf_csum_diff(NULL, 0, (__be32 *)&r->tcp, 24, s);
	else
		s = bpf_csum_diff(NULL, 0, (__be32 *)&r->tcp, 20, s);
	if (s < 0)
		return -1;
	if (plen)
		s += chunk->sum;
	r->tcp.check = ~fold(s);
	hdr = 14 + 20 + tcp_len;
	if (bpf_skb_change_tail(skb, hdr + plen, 0))
		return -1;
	if (tcp_len == 24) {
		if (bpf_skb_store_bytes(skb, 0, &r->eth, 14 + 20 + 24, 0))
			return -1;
	} else {
		if (bpf_skb_store_bytes(skb, 0, &r->eth, 14 + 20 + 20, 0))
			return -1;
	}
	if (plen && chunk) {
		if (plen < 1 || plen > WL_EFSM_SEG)
			return -1;
		if (bpf_skb_store_bytes(skb, hdr & 0x3f, chunk->bytes, plen, 0))
			return -1;
	}
	return 0;
}

/* The chunk a segment at payload offset `off` starts (aligned: every
 * segment but the last is a full MSS). */
static __always_inline const struct wl_efsm_chunk *chunk_at(const struct wl_efsm_conf *c,
							     __u64 off)
{
	__u64 k = c->mss ? off / c->mss : 0;
	__u32 i = k == 0 ? 0 : (k + 1 == c->payload_chunks ? 2 : 1);

	return bpf_map_lookup_elem(&efsm_chunks, &i);
}

SEC("tc")
int wl_efsm(struct __sk_buff *skb)
{
	struct { struct ethhdr eth; struct iphdr ip; struct tcphdr tcp; } __attribute__((packed)) in;
	struct wl_efsm_flow f = {}, *known;
	struct wl_efsm_key key = {};
	const struct wl_efsm_row *row = 0;
	struct wl_efsm_conf *c;
	struct reply r = {};
	__u8 prefix[WL_EFSM_PREFIX] = {};
	__u32 zero = 0, i, plen, syn, fin, doff, tot, hit = WL_EFSM_ROWS, nsent = 0;
	__u32 rows, all_acked, ahead, broken = 0;
	__u64 now, bytes = 0;
	__u8 flags;
	int keep;

	c = bpf_map_lookup_elem(&efsm_conf, &zero);
	if (!c)
		return TC_ACT_OK;
	if (bpf_skb_load_bytes(skb, 0, &in, sizeof(in)))
		return TC_ACT_OK;
	if (in.eth.h_proto != bpf_htons(ETH_P_IP) || in.ip.ihl != 5 ||
	    in.ip.protocol != IPPROTO_TCP || in.ip.daddr != c->local_ip)
		return TC_ACT_OK;
	now = pipeline_now();
	tot = bpf_ntohs(in.ip.tot_len);
	doff = in.tcp.doff * 4;
	if (doff < 20 || tot < 20 + doff || 14 + tot > skb->len) {
		bump(WL_EFSM_ROWS + WL_COUNT_UNMATCHED, 1);
		return TC_ACT_SHOT;
	}
	plen = tot - 20 - doff;
	flags = ((__u8 *)&in.tcp)[13];
	syn = !!(flags & F_SYN);
	fin = !!(flags & F_FIN);
	if (plen) {
		/* 1..8 bytes, in a form whose bounds the verifier keeps. */
		__u32 n = plen < WL_EFSM_PREFIX ? plen : WL_EFSM_PREFIX;

		if (bpf_skb_load_bytes(skb, (14 + 20 + doff) & 0xff, prefix, ((n - 1) & 7) + 1))
			return TC_ACT_SHOT;
	}
	key.peer_ip = in.ip.saddr;
	key.peer_port = bpf_ntohs(in.tcp.source);
	key.local_port = bpf_ntohs(in.tcp.dest);

	/* 1. The variables. */
	known = bpf_map_lookup_elem(&efsm_flows, &key);
	if (known) {
		f = *known;
		if (bpf_ntohl(in.tcp.seq) == f.rcv_nxt) {
			f.rcv_nxt += plen + fin;
			bump(WL_EFSM_ROWS + WL_COUNT_RX_BYTES, plen);
		} else if (plen + fin) {
			bump(WL_EFSM_ROWS + WL_COUNT_OOO, 1);
		}
		ahead = bpf_ntohl(in.tcp.ack_seq) - f.snd_una;
		if ((flags & F_ACK) && ahead > 0 && ahead <= f.snd_nxt - f.snd_una)
			f.snd_una = bpf_ntohl(in.tcp.ack_seq);
		f.wnd = bpf_ntohs(in.tcp.window);
	} else {
		if ((flags & (F_SYN | F_ACK)) == F_SYN)
			f.isn = now >> 12; /* wirelab_load::efsm::clock_isn */
		else
			f.isn = bpf_ntohl(in.tcp.ack_seq) - 1;
		f.snd_una = (flags & F_ACK) ? bpf_ntohl(in.tcp.ack_seq) : f.isn;
		f.snd_nxt = f.snd_una;
		f.rcv_nxt = bpf_ntohl(in.tcp.seq) + plen + syn + fin;
		f.wnd = bpf_ntohs(in.tcp.window);
		if ((flags & (F_SYN | F_ACK)) != F_SYN)
			bump(WL_EFSM_ROWS + WL_COUNT_RX_BYTES, plen);
	}

	/* 2. The first row of the state that matches. */
	all_acked = (flags & F_ACK) && bpf_ntohl(in.tcp.ack_seq) == f.snd_nxt;
	rows = c->rows;
	for (i = 0; i < WL_EFSM_ROWS; i++) {
		const struct wl_efsm_row *w = &c->row[i];
		__u32 k, ok = 1;

		if (i >= rows)
			break;
		if (w->from != f.state || (flags & w->flags_mask) != w->flags_value)
			continue;
		if ((w->payload == 1 && plen) || (w->payload == 2 && !plen))
			continue;
		if ((w->all_acked == 1 && !all_acked) || (w->all_acked == 2 && all_acked))
			continue;
		if (w->prefix_len > plen)
			continue;
		for (k = 0; k < WL_EFSM_PREFIX; k++)
			if (k < w->prefix_len && prefix[k] != w->prefix[k])
				ok = 0;
		if (!ok)
			continue;
		hit = i;
		row = w;
		break;
	}
	if (!row) {
		bump(WL_EFSM_ROWS + WL_COUNT_UNMATCHED, 1);
		return TC_ACT_SHOT;
	}
	bump(hit, 1);

	/* 4 (before 3: the replies leave from here on). The register. */
	keep = row->next != 0 && !row->forget;
	r.eth.h_proto = bpf_htons(ETH_P_IP);
	__builtin_memcpy(r.eth.h_dest, in.eth.h_source, ETH_ALEN);
	__builtin_memcpy(r.eth.h_source, in.eth.h_dest, ETH_ALEN);
	r.ip.version = 4;
	r.ip.ihl = 5;
	r.ip.frag_off = bpf_htons(0x4000);
	r.ip.ttl = 64;
	r.ip.protocol = IPPROTO_TCP;
	r.ip.saddr = in.ip.daddr;
	r.ip.daddr = in.ip.saddr;
	r.tcp.source = in.tcp.dest;
	r.tcp.dest = in.tcp.source;
	r.tcp.window = 0xffff;

	/* 3. The reply. */
	switch (row->reply) {
	case WL_REPLY_RST:
		if (flags & F_ACK) {
			r.tcp.seq = in.tcp.ack_seq;
			((__u8 *)&r.tcp)[13] = F_RST;
		} else {
			r.tcp.ack_seq = bpf_htonl(bpf_ntohl(in.tcp.seq) + plen + syn + fin);
			((__u8 *)&r.tcp)[13] = F_RST | F_ACK;
		}
		break;
	case WL_REPLY_SYNACK:
		r.tcp.seq = bpf_htonl(f.isn);
		r.tcp.ack_seq = bpf_htonl(f.rcv_nxt);
		((__u8 *)&r.tcp)[13] = F_SYN | F_ACK;
		f.snd_nxt = f.isn + 1;
		break;
	case WL_REPLY_ACK:
	case WL_REPLY_FIN:
		r.tcp.seq = bpf_htonl(f.snd_nxt);
		r.tcp.ack_seq = bpf_htonl(f.rcv_nxt);
		((__u8 *)&r.tcp)[13] = row->reply == WL_REPLY_FIN ? F_FIN | F_ACK : F_ACK;
		if (row->reply == WL_REPLY_FIN)
			f.snd_nxt++;
		break;
	case WL_REPLY_REOPEN: {
		__u32 slot = (__u16)(key.local_port - c->port_base);
		__u32 range = c->port_range ? c->port_range : 1;

		r.tcp.source = bpf_htons((__u16)(c->port_base + (slot + c->connections) % range));
		r.tcp.seq = bpf_htonl(now >> 12);
		((__u8 *)&r.tcp)[13] = F_SYN;
		break;
	}
	default:
		break;
	}
	if (keep) {
		if (!known)
			bump(WL_EFSM_ROWS + WL_COUNT_CREATED, 1);
		f.state = row->next;
	} else if (known) {
		bump(WL_EFSM_ROWS + WL_COUNT_ENDED, 1);
	}

	if (row->reply == WL_REPLY_DATA) {
		__u64 off, len_all = c->payload_len, mss = c->mss;
		__u32 s, len, last, fl, segs = c->segments;
		const struct wl_efsm_chunk *ch;

		for (s = 0; s < WL_EFSM_SEGMENTS; s++) {
			if (s >= segs || !mss)
				break;
			off = (__u32)(f.snd_nxt - (f.isn + 1));
			if (off >= len_all)
				break;
			len = len_all - off < mss ? len_all - off : mss;
			if (f.snd_nxt + len - f.snd_una > f.wnd)
				break;
			ch = chunk_at(c, off);
			if (!ch || len > ch->len)
				break;
			/* The segment before this one leaves as a clone. */
			if (nsent) {
				if (c->ifindex)
					bpf_clone_redirect(skb, c->ifindex, 0);
			}
			last = off + len == len_all;
			fl = F_ACK | F_PSH | (last && c->fin_after_data ? F_FIN : 0);
			r.tcp.seq = bpf_htonl(f.snd_nxt);
			r.tcp.ack_seq = bpf_htonl(f.rcv_nxt);
			((__u8 *)&r.tcp)[13] = fl;
			if (wl_build(skb, &r, 20, ch, len)) {
				/* The skb is half written, and the segment
				 * before it (if any) has left as a clone. */
				broken = 1;
				break;
			}
			f.snd_nxt += len + !!(fl & F_FIN);
			bytes += len;
			nsent++;
		}
	} else if (row->reply != WL_REPLY_NONE) {
		__u32 opt = row->reply == WL_REPLY_SYNACK || row->reply == WL_REPLY_REOPEN;

		if (opt) {
			r.opt[0] = 2;
			r.opt[1] = 4;
			r.opt[2] = c->mss >> 8;
			r.opt[3] = c->mss & 0xff;
		}
		if (!wl_build(skb, &r, opt ? 24 : 20, NULL, 0))
			nsent = 1;
	}

	if (keep) {
		if (bpf_map_update_elem(&efsm_flows, &key, &f, BPF_ANY))
			bump(WL_EFSM_ROWS + WL_COUNT_FULL, 1);
	} else if (known) {
		bpf_map_delete_elem(&efsm_flows, &key);
	}
	bump(WL_EFSM_ROWS + WL_COUNT_SEGMENTS, nsent);
	bump(WL_EFSM_ROWS + WL_COUNT_TX_BYTES, bytes);
	if (!nsent || broken)
		return TC_ACT_SHOT;
	/* Back out of the port it came in by, to the DUT. */
	return bpf_redirect(c->ifindex, 0);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
