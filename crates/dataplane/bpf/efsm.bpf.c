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
 *      SND.UNA (RFC 793 §3.2); an unknown flow starts from the packet.
 *      The first segment of the peer's message (an HTTP request or
 *      response) gives its end, from its head (RFC 9112 §6.3), so the
 *      segment that completes it is known (keep-alive's next request);
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
	WL_EFSM_COUNTS = WL_EFSM_ROWS + 10,
	/* A message's first bytes read for its head (wirelab_load::efsm::SCAN). */
	WL_EFSM_SCAN = 512,
};

enum wl_efsm_reply {
	WL_REPLY_NONE = 0,
	WL_REPLY_RST = 1,
	WL_REPLY_SYNACK = 2,
	WL_REPLY_ACK = 3,
	WL_REPLY_FIN = 4,
	WL_REPLY_DATA = 5,
	WL_REPLY_REOPEN = 6,
	WL_REPLY_NEXT = 7, /* next-message */
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
	WL_COUNT_MESSAGES = 8,
	WL_COUNT_UNDELIMITED = 9,
};

/* wl_efsm_flow.mflags (wirelab_load::efsm::END_KNOWN, FIN_SENT). */
#define M_END_KNOWN 1
#define M_FIN_SENT 2

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
	__u8 message_complete; /* 0 not compared, 1 must, 2 must not */
	__u8 requests_left; /* likewise */
	__u8 pad[5];
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
	__u32 requests; /* messages a flow sends while requests are left */
	__u32 draining; /* no requests left, no reopening */
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
	__u32 base; /* where our current message starts */
	__u32 rcv_base; /* where the peer's starts ... */
	__u32 msg_end; /* ... and ends (M_END_KNOWN) */
	__u32 msgs; /* messages we started */
	__u32 mflags;
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

/* The head scanner's state across bytes (wirelab_load::efsm::message_len,
 * the same machine). */
struct wl_scan {
	__u32 n; /* bytes to read */
	__u32 crlf; /* bytes of "\r\n\r\n" matched */
	__u32 line_start;
	__u32 matching;
	__u32 name; /* bytes of "content-length:" matched */
	__u32 in_value;
	__u32 digits;
	__u32 len;
	__u32 have_len;
	__u32 head; /* 0: the blank line not found */
};

/* A message's first bytes, read once for its head, and the scanner's
 * state. In map memory, not on the stack: the verifier then reads the
 * state as unknown and the bpf_loop callback converges at once (on the
 * stack it tracked each counter's value through the 512 iterations, past
 * its limit). */
struct wl_efsm_scan_buf {
	struct wl_scan s;
	__u8 b[WL_EFSM_SCAN];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct wl_efsm_scan_buf);
} efsm_scan SEC(".maps");

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

/* A read-only global with BTF of its own (a static array would share
 * .rodata's offset 0 with test_clock in the BTF clang writes). */
const volatile char wl_cl_name[16] = "content-length:";

static long wl_scan_byte(__u64 i, void *ctx)
{
	struct wl_efsm_scan_buf *buf;
	struct wl_scan *s;
	__u32 zero = 0, k;
	__u8 c, lower;

	buf = bpf_map_lookup_elem(&efsm_scan, &zero);
	if (!buf)
		return 1;
	s = &buf->s;
	if (i >= WL_EFSM_SCAN || i >= s->n)
		return 1;
	c = buf->b[i];
	if (s->line_start) {
		s->matching = 1;
		s->name = 0;
	}
	if (s->matching) {
		lower = c >= 'A' && c <= 'Z' ? c | 0x20 : c;
		k = s->name;
		if (k < 15 && lower == wl_cl_name[k]) {
			s->name = k + 1;
			if (k + 1 == 15) {
				s->matching = 0;
				s->in_value = 1;
				s->digits = 0;
				s->len = 0;
				s->have_len = 0;
			}
		} else {
			s->matching = 0;
		}
	} else if (s->in_value) {
		if (c >= '0' && c <= '9') {
			s->digits++;
			s->len = s->len * 10 + (c - '0');
		} else if (!((c == ' ' || c == '\t') && s->digits == 0)) {
			s->in_value = 0;
			s->have_len = s->digits >= 1 && s->digits <= 9;
		}
	}
	s->line_start = c == '\n';
	k = s->crlf;
	if ((k == 0 || k == 2) ? c == '\r' : c == '\n')
		s->crlf = k + 1;
	else
		s->crlf = c == '\r';
	if (s->crlf == 4) {
		s->head = i + 1;
		return 1;
	}
	return 0;
}

/* The length of the message whose first segment's payload is at `off`
 * (`plen` bytes): its head and, for a response, Content-Length bytes of
 * body (RFC 9112 §6.3). 0: not known (see message_len). A global
 * function, verified once. */
__noinline __u32 wl_message_len(struct __sk_buff *skb, __u32 off, __u32 plen)
{
	struct wl_efsm_scan_buf *buf;
	__u32 zero = 0, n;

	if (!skb || !plen)
		return 0;
	buf = bpf_map_lookup_elem(&efsm_scan, &zero);
	if (!buf)
		return 0;
	n = plen < WL_EFSM_SCAN ? plen : WL_EFSM_SCAN;
	n = ((n - 1) & (WL_EFSM_SCAN - 1)) + 1;
	if (bpf_skb_load_bytes(skb, off & 0xff, buf->b, n))
		return 0;
	__builtin_memset(&buf->s, 0, sizeof(buf->s));
	buf->s.n = n;
	buf->s.line_start = 1;
	bpf_loop(WL_EFSM_SCAN, wl_scan_byte, NULL, 0);
	if (!buf->s.head)
		return 0;
	if (buf->s.have_len)
		return buf->s.head + buf->s.len;
	/* A response ("HTTP/") without a length ends with the connection. */
	if (n >= 5 && buf->b[0] == 'H' && buf->b[1] == 'T' && buf->b[2] == 'T' &&
	    buf->b[3] == 'P' && buf->b[4] == '/')
		return 0;
	return buf->s.head;
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

/* The first row of `state` whose condition holds for a packet with
 * `facts` (its TCP flags; bit 8 all acknowledged, 9 the peer's message
 * completed, 10 requests left), `plen` bytes of payload starting with
 * `prefix` (little-endian); WL_EFSM_ROWS: none. A global function,
 * verified once: inline, its 32 rows multiplied the caller's states. */
__noinline __u32 wl_match(const struct wl_efsm_conf *c, __u32 state, __u32 facts, __u32 plen,
			  __u64 prefix)
{
	__u32 i, k, rows, flags = facts & 0xff;
	__u32 all_acked = (facts >> 8) & 1, completed = (facts >> 9) & 1, left = (facts >> 10) & 1;

	if (!c)
		return WL_EFSM_ROWS;
	rows = c->rows;
	for (i = 0; i < WL_EFSM_ROWS; i++) {
		const struct wl_efsm_row *w = &c->row[i];
		__u32 ok = 1;

		if (i >= rows)
			break;
		if (w->from != state || (flags & w->flags_mask) != w->flags_value)
			continue;
		if ((w->payload == 1 && plen) || (w->payload == 2 && !plen))
			continue;
		if ((w->all_acked == 1 && !all_acked) || (w->all_acked == 2 && all_acked))
			continue;
		if ((w->message_complete == 1 && !completed) ||
		    (w->message_complete == 2 && completed))
			continue;
		if ((w->requests_left == 1 && !left) || (w->requests_left == 2 && left))
			continue;
		if (w->prefix_len > plen)
			continue;
		for (k = 0; k < WL_EFSM_PREFIX; k++)
			if (k < w->prefix_len && ((prefix >> (8 * k)) & 0xff) != w->prefix[k])
				ok = 0;
		if (!ok)
			continue;
		return i;
	}
	return WL_EFSM_ROWS;
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
	__u32 all_acked, ahead, broken = 0, fresh = 0, completed = 0, left;
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
			/* The first segment of the peer's message: its head
			 * says where it ends. */
			if (plen && f.rcv_nxt == f.rcv_base && !(f.mflags & M_END_KNOWN)) {
				__u32 n = wl_message_len(skb, 14 + 20 + doff, plen);

				if (n) {
					f.msg_end = f.rcv_base + n;
					f.mflags |= M_END_KNOWN;
				} else {
					bump(WL_EFSM_ROWS + WL_COUNT_UNDELIMITED, 1);
				}
			}
			f.rcv_nxt += plen + fin;
			fresh = plen > 0;
			bump(WL_EFSM_ROWS + WL_COUNT_RX_BYTES, plen);
			if ((f.mflags & M_END_KNOWN) && (__s32)(f.rcv_nxt - f.msg_end) >= 0) {
				/* The next message starts where this one ends. */
				completed = 1;
				f.rcv_base = f.msg_end;
				f.mflags &= ~M_END_KNOWN;
				bump(WL_EFSM_ROWS + WL_COUNT_MESSAGES, 1);
			}
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
		f.base = f.isn + 1;
		f.rcv_base = bpf_ntohl(in.tcp.seq) + syn;
		f.msgs = 1;
		if ((flags & (F_SYN | F_ACK)) != F_SYN)
			bump(WL_EFSM_ROWS + WL_COUNT_RX_BYTES, plen);
	}
	left = !c->draining && f.msgs < c->requests;

	/* 2. The first row of the state that matches. */
	all_acked = (flags & F_ACK) && bpf_ntohl(in.tcp.ack_seq) == f.snd_nxt;
	{
		__u64 pfx = 0;

		for (i = 0; i < WL_EFSM_PREFIX; i++)
			pfx |= (__u64)prefix[i] << (8 * i);
		hit = wl_match(c, f.state,
			       flags | all_acked << 8 | completed << 9 | left << 10, plen, pfx);
	}
	if (hit < WL_EFSM_ROWS) {
		/* The verifier bounds the index by the mask, which the
		 * compiler would otherwise drop after the comparison. */
		asm volatile("" : "+r"(hit));
		row = &c->row[hit & (WL_EFSM_ROWS - 1)];
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
		/* Our FIN went already: a plain ACK. */
		if (row->reply == WL_REPLY_FIN && !(f.mflags & M_FIN_SENT)) {
			((__u8 *)&r.tcp)[13] = F_FIN | F_ACK;
			f.snd_nxt++;
			f.mflags |= M_FIN_SENT;
		} else {
			((__u8 *)&r.tcp)[13] = F_ACK;
		}
		break;
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

	if (row->reply == WL_REPLY_DATA || row->reply == WL_REPLY_NEXT) {
		__u64 off, len_all = c->payload_len, mss = c->mss;
		__u32 s, len, last, fl, segs = c->segments;
		const struct wl_efsm_chunk *ch;

		/* The next message: only once the last was sent whole, and for
		 * new data (a repeated request does not start it again). */
		if (row->reply == WL_REPLY_NEXT && (__u32)(f.snd_nxt - f.base) >= len_all &&
		    fresh && !(f.mflags & M_FIN_SENT)) {
			f.base = f.snd_nxt;
			f.msgs++;
		}
		for (s = 0; s < WL_EFSM_SEGMENTS; s++) {
			if (s >= segs || !mss)
				break;
			off = (__u32)(f.snd_nxt - f.base);
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
			if (fl & F_FIN)
				f.mflags |= M_FIN_SENT;
			bytes += len;
			nsent++;
		}
	} else if (row->reply == WL_REPLY_REOPEN) {
		__u32 slot = (__u16)(key.local_port - c->port_base);
		__u32 range = c->port_range ? c->port_range : 1;

		/* The old connection's last word: the ACK of its FIN. */
		if (fin) {
			r.tcp.seq = bpf_htonl(f.snd_nxt);
			r.tcp.ack_seq = bpf_htonl(f.rcv_nxt);
			((__u8 *)&r.tcp)[13] = F_ACK;
			if (wl_build(skb, &r, 20, NULL, 0))
				broken = 1;
			else
				nsent = 1;
		}
		if (!c->draining && !broken) {
			/* The ACK leaves as a clone. */
			if (nsent && c->ifindex)
				bpf_clone_redirect(skb, c->ifindex, 0);
			r.tcp.source = bpf_htons((__u16)(c->port_base + (slot + c->connections) % range));
			r.tcp.seq = bpf_htonl(now >> 12);
			r.tcp.ack_seq = 0;
			((__u8 *)&r.tcp)[13] = F_SYN;
			r.opt[0] = 2;
			r.opt[1] = 4;
			r.opt[2] = c->mss >> 8;
			r.opt[3] = c->mss & 0xff;
			if (wl_build(skb, &r, 24, NULL, 0))
				broken = 1;
			else
				nsent++;
		}
	} else if (row->reply != WL_REPLY_NONE) {
		__u32 opt = row->reply == WL_REPLY_SYNACK;

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
