// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * DETER's recorder on a stock kernel (seed 004 §3-4; issue 21): tcx programs
 * on a host's interface that keep, per TCP connection, what the network did
 * to the packets arriving there and when the host sent its own.
 *
 * - Arrivals (ingress): IP-ID gaps (§4: Linux numbers a connected socket's
 *   packets consecutively, `ip_select_ident_segs`), so drops and
 *   reordering of data and of ACKs alike; CE marks (RFC 3168). In-sequence
 *   arrivals only count; an out-of-sequence one is an event.
 * - Departures (egress): Algorithm 1 (§3.3), rate-based sampling of send
 *   times within th, in the integer fixed point of wirelab_deter::sample
 *   (GAP_ONE = 1024 per ns), so this and the Rust reference are the same
 *   rule; only a sample that no rate can cover is an event.
 *
 * User space (wirelab_deter's assembler) turns the events and each
 * connection's final state into the connection's record. Its own object:
 * nothing in the switch's path. SYN packets are not followed: a SYN-ACK
 * carries IP-ID 0, and DETER too records from the established connection.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/in.h>
#include <linux/tcp.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "wl_clock.h"

/* tcx (bpf_link-based tc, Linux 6.6): the recorder's links go with the
 * process that holds them, so a recorder killed by SIGKILL leaves nothing
 * attached. Every verdict is "next": the recorder only looks. */
#ifndef TCX_NEXT
#define TCX_NEXT -1
#endif

/* A connection as the recording host sees it (addresses and ports in
 * network byte order, as on the wire). */
struct wl_rec_key {
	__u32 local;
	__u32 remote;
	__u16 lport;
	__u16 rport;
};

struct wl_rec_conn {
	/* A connection's packets are handled on several CPUs at once (a
	 * router's forwarding spreads them, the sender transmits from process
	 * and softirq context): its state changes under this lock, and each
	 * event gets the next number so user space applies them in order
	 * (helpers cannot be called while the lock is held). */
	struct bpf_spin_lock lock;
	__u32 ev_seq;
	/* Arrivals: the highest IP-ID so far, in-sequence IDs not yet
	 * reported, and the current CE run. */
	__u32 rx_run;
	__u32 ce_run;
	__u16 rx_high;
	__u8 rx_started;
	__u8 ce_state;
	/* The ACK number that acknowledges this host's FIN, once it sent one. */
	__u32 fin_ack;
	__u8 fin_out;
	__u8 pad[7];
	/* Departures: packets sent, and Algorithm 1's s and rec_range. */
	__u64 tx_count;
	__u64 s_index;
	__u64 s_time;
	__u64 lo;
	__u64 hi;
	__u64 first_ns;
	__u64 last_ns;
};

/* A connection's reads that kept up and are not reported yet
 * (wl_rec_recv): the first one's time, their bytes and how many. */
struct wl_rec_kept_key {
	struct wl_rec_key key;
	__u32 host;
};

struct wl_rec_kept {
	__u64 start;
	__u64 bytes;
	__u32 reads;
	__u32 pad;
};

enum wl_rec_kind {
	/* First arrival: a = IP-ID, b = segments. */
	WL_REC_START = 1,
	/* Out-of-sequence arrival: a = in-sequence IDs before it, b = IP-ID,
	 * c = segments. */
	WL_REC_ARRIVE = 2,
	/* A CE run ended: a = its length, b = 1 if marked. */
	WL_REC_CE = 3,
	/* Algorithm 1 line 6: a = s.index, b = s.time, c and d = rec_range
	 * (gaps; d = ~0: unbounded). User space picks the gap recorded
	 * (wirelab_deter::sample::recorded), which knows the sample before. */
	WL_REC_SAMPLE = 4,
	/* A socket call (sock:sock_send_length, sock_recv_length): a = 0 send,
	 * 1 receive; b = bytes; c = flags. Not numbered (seq = ~0). a = 2:
	 * reads that kept up (wl_rec_recv), at the first one's time: b =
	 * their bytes, c = how many. */
	WL_REC_CALL = 5,
	/* A kernel event: a = WL_REC_K_*, b and c as each says. Not numbered. */
	WL_REC_KERNEL = 6,
};

enum wl_rec_kernel {
	/* tcp:tcp_retransmit_skb, a retransmission sent (err 0): b = the
	 * segment's sequence number | the segments it carries << 32 (one
	 * skb may resend several MSS: tcp_skb_pcount); c = tcp_sock.reordering (the
	 * duplicate-ACK threshold, widened by reordering: DETER §5.2) |
	 * tcp_sock.sacked_out << 32 (SACKed segments, or for a flow without
	 * SACK the duplicate ACKs counted); d = tcp_sock.total_retrans. */
	WL_REC_K_RETRANSMIT = 1,
	/* tcp:tcp_cong_state_set: b = the state (TCP_CA_Open 0 .. Loss 4). */
	WL_REC_K_CONG_STATE = 2,
	/* sock:inet_sock_set_state: b = the old state, c = the new one, d =
	 * tcp_sock.total_retrans. */
	WL_REC_K_STATE = 3,
	/* The socket's congestion control (icsk_ca_ops->name, 16 bytes): b =
	 * its first 8 bytes, c = the next 8. On entering ESTABLISHED and on
	 * leaving it, so a TCP_CONGESTION set after accept(2) is seen. */
	WL_REC_K_CONG_CONTROL = 4,
	/* The socket's buffers and Nagle setting, at the same moments: b =
	 * sk_rcvbuf | sk_sndbuf << 32 (bytes, as the kernel keeps them:
	 * twice what setsockopt asked, socket(7)), c = sk_userlocks (which
	 * of them the application set) | tcp_sock.nonagle << 8. */
	WL_REC_K_SOCKOPTS = 5,
};

struct wl_rec_event {
	struct wl_rec_key key;
	/* Which host's event (the index user space gave it, `self_host` or
	 * `rec_netns`): one object's probes serve every recorded namespace. */
	__u32 host;
	__u64 ts;
	__u64 a;
	__u64 b;
	__u64 c;
	__u64 d;
	__u32 kind;
	/* The connection's event number (wl_rec_conn.ev_seq). */
	__u32 seq;
};

/* Makes the types part of the BTF so the skeleton exports them (the
 * connection by pointer: a global holding a bpf_spin_lock would make the
 * section impossible to memory-map). */
struct wl_rec_event rec_event_abi = {};
struct wl_rec_conn *rec_conn_abi = 0;
struct wl_rec_kept_key *rec_kept_key_abi = 0;
struct wl_rec_kept *rec_kept_abi = 0;

/* Algorithm 1's th (ns); DETER's default is 5 µs (§3.3). */
const volatile __u64 th_ns = 5000;
/* A sample's time is kept on a grid of 2^sample_shift ns
 * (wirelab_deter::sample::grid_shift: at most half of it off, under th),
 * and the rule runs from that time, as the record will hold it. */
const volatile __u32 sample_shift = 10;

static __always_inline __u64 on_grid(__u64 t)
{
	return ((t + ((1ULL << sample_shift) >> 1)) >> sample_shift) << sample_shift;
}

/* This object's host: the index its tc programs' events carry. */
const volatile __u32 self_host = 0;

/* The tracepoints fire for every namespace: with netns_filter, the probes
 * keep the sockets of the namespaces in rec_netns (inode -> host index),
 * else all, as self_host's. One recorder's probes serve all the hosts it
 * records, so a socket call runs one program however many hosts are
 * recorded (one per host before: each one's probes ran for every call on
 * the machine). */
const volatile __u8 netns_filter = 0;

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u32);
} rec_netns SEC(".maps");

#define WL_GAP_ONE 1024

/* Bounded memory whatever the traffic: past the limit a new connection
 * is not followed (counted in rec_full); user space removes each one
 * whose record it wrote. (A hash, not an LRU: only a hash's values may
 * hold a bpf_spin_lock.) */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, struct wl_rec_key);
	__type(value, struct wl_rec_conn);
} rec_conns SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	/* Events are rare (only what is out of the ordinary), and there is
	 * one recorder per host: 1 MiB, 21,845 events between two drains. */
	__uint(max_entries, 1 << 20);
} rec_ring SEC(".maps");

/* Events the ring had no room for: a record with one is incomplete. */
__u64 rec_lost = 0;
/* Connections not followed: the map was full. */
__u64 rec_full = 0;

/* An event decided under the lock, emitted after it. */
struct pending {
	__u64 a, b, c, d;
	__u32 kind, seq;
};

static __always_inline void emit(const struct wl_rec_key *k, __u32 host, __u64 now,
				 const struct pending *p)
{
	struct wl_rec_event *e = bpf_ringbuf_reserve(&rec_ring, sizeof(*e), 0);

	if (!e) {
		__sync_fetch_and_add(&rec_lost, 1);
		return;
	}
	e->key = *k;
	e->host = host;
	e->ts = now;
	e->a = p->a;
	e->b = p->b;
	e->c = p->c;
	e->d = p->d;
	e->kind = p->kind;
	e->seq = p->seq;
	bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
}

/* An IPv4 TCP packet's IP header, TCP flags and segment count, or 0. */
static __always_inline struct iphdr *tcp_ip(struct __sk_buff *skb, struct tcphdr **tcp)
{
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip;

	if ((void *)(eth + 1) > end || eth->h_proto != bpf_htons(ETH_P_IP))
		return 0;
	ip = (void *)(eth + 1);
	if ((void *)(ip + 1) > end || ip->protocol != IPPROTO_TCP || ip->ihl < 5)
		return 0;
	*tcp = (void *)ip + ip->ihl * 4;
	if ((void *)(*tcp + 1) > end)
		return 0;
	return ip;
}

static __always_inline struct wl_rec_conn *conn(const struct wl_rec_key *k, __u64 now)
{
	struct wl_rec_conn *c = bpf_map_lookup_elem(&rec_conns, k);
	struct wl_rec_conn fresh = { .hi = ~0ULL, .first_ns = now };

	if (c)
		return c;
	if (bpf_map_update_elem(&rec_conns, k, &fresh, BPF_NOEXIST) == -7 /* E2BIG */)
		__sync_fetch_and_add(&rec_full, 1);
	return bpf_map_lookup_elem(&rec_conns, k);
}

SEC("tcx/ingress")
int wl_rec_in(struct __sk_buff *skb)
{
	struct tcphdr *tcp;
	struct iphdr *ip = tcp_ip(skb, &tcp);
	struct wl_rec_key k;
	struct wl_rec_conn *c;
	struct pending ev[2];
	__u16 id, segs, end;
	__u64 now;
	__u8 ce;

	/* A RST comes from the stack's control socket, not the connection's
	 * own: its IP-ID is from another series. */
	if (!ip || tcp->syn || tcp->rst)
		return TCX_NEXT;
	now = pipeline_now();
	k.local = ip->daddr;
	k.remote = ip->saddr;
	k.lport = tcp->dest;
	k.rport = tcp->source;
	c = conn(&k, now);
	if (!c)
		return TCX_NEXT;
	id = bpf_ntohs(ip->id);
	/* A GRO packet holds gso_segs segments, their IDs consecutive. */
	segs = skb->gso_segs > 1 ? skb->gso_segs : 1;
	end = id + segs - 1;
	ce = (ip->tos & 3) == 3;
	ev[0].kind = 0;
	ev[1].kind = 0;
	bpf_spin_lock(&c->lock);
	c->last_ns = now;
	/* Once this host's FIN is acknowledged the peer may answer from a
	 * time-wait or control socket, whose IP-IDs are not the connection's
	 * (DETER's public recorder skips packets that ACK our FIN too). */
	if (c->fin_out && (__s32)(bpf_ntohl(tcp->ack_seq) - c->fin_ack) >= 0) {
		bpf_spin_unlock(&c->lock);
		return TCX_NEXT;
	}
	if (!c->rx_started) {
		c->rx_started = 1;
		c->rx_high = end;
		ev[0].kind = WL_REC_START;
		ev[0].a = id;
		ev[0].b = segs;
		ev[0].c = 0;
		ev[0].d = 0;
		ev[0].seq = c->ev_seq++;
	} else if (id == (__u16)(c->rx_high + 1)) {
		c->rx_run += segs;
		c->rx_high = end;
	} else {
		ev[0].kind = WL_REC_ARRIVE;
		ev[0].a = c->rx_run;
		ev[0].b = id;
		ev[0].c = segs;
		ev[0].d = 0;
		ev[0].seq = c->ev_seq++;
		c->rx_run = 0;
		/* Serial number arithmetic (RFC 1982): ahead or behind. */
		if ((__s16)(end - c->rx_high) > 0)
			c->rx_high = end;
	}
	if (ce != c->ce_state && c->ce_run) {
		ev[1].kind = WL_REC_CE;
		ev[1].a = c->ce_run;
		ev[1].b = c->ce_state;
		ev[1].c = 0;
		ev[1].d = 0;
		ev[1].seq = c->ev_seq++;
		c->ce_run = 0;
	}
	c->ce_state = ce;
	c->ce_run += segs;
	bpf_spin_unlock(&c->lock);
	if (ev[0].kind)
		emit(&k, self_host, now, &ev[0]);
	if (ev[1].kind)
		emit(&k, self_host, now, &ev[1]);
	return TCX_NEXT;
}

SEC("tcx/egress")
int wl_rec_out(struct __sk_buff *skb)
{
	struct tcphdr *tcp;
	struct iphdr *ip = tcp_ip(skb, &tcp);
	struct wl_rec_key k;
	struct wl_rec_conn *c;
	struct pending ev;
	__u64 now, idx, k_pkts, hi_ns, lo_ns, p_lo, p_hi, lo, hi, segs;
	__u32 fin_ack;

	if (!ip || tcp->syn || tcp->rst)
		return TCX_NEXT;
	now = pipeline_now();
	k.local = ip->saddr;
	k.remote = ip->daddr;
	k.lport = tcp->source;
	k.rport = tcp->dest;
	segs = skb->gso_segs > 1 ? skb->gso_segs : 1;
	fin_ack = bpf_ntohl(tcp->seq) + 1 + (bpf_ntohs(ip->tot_len) - ip->ihl * 4 - tcp->doff * 4);
	c = conn(&k, now);
	if (!c)
		return TCX_NEXT;
	ev.kind = 0;
	bpf_spin_lock(&c->lock);
	c->last_ns = now;
	if (tcp->fin) {
		c->fin_out = 1;
		c->fin_ack = fin_ack;
	}
	idx = c->tx_count;
	c->tx_count = idx + segs;
	if (idx == 0) {
		c->s_index = 0;
		c->s_time = on_grid(now);
		bpf_spin_unlock(&c->lock);
		return TCX_NEXT;
	}
	/* Algorithm 1 line 2, as gaps (wirelab_deter::sample). */
	k_pkts = idx - c->s_index;
	if (!k_pkts)
		k_pkts = 1;
	if (now + th_ns >= c->s_time) {
		hi_ns = now + th_ns - c->s_time;
		lo_ns = now > c->s_time + th_ns ? now - c->s_time - th_ns : 0;
		p_lo = (lo_ns * WL_GAP_ONE + k_pkts - 1) / k_pkts;
		p_hi = hi_ns * WL_GAP_ONE / k_pkts;
		lo = c->lo > p_lo ? c->lo : p_lo;
		hi = c->hi < p_hi ? c->hi : p_hi;
		if (lo <= hi) {
			/* Line 4. */
			c->lo = lo;
			c->hi = hi;
			bpf_spin_unlock(&c->lock);
			return TCX_NEXT;
		}
	}
	/* Lines 6-7. */
	ev.kind = WL_REC_SAMPLE;
	ev.a = c->s_index;
	ev.b = c->s_time;
	ev.c = c->lo;
	ev.d = c->hi;
	ev.seq = c->ev_seq++;
	c->s_index = idx;
	c->s_time = on_grid(now);
	c->lo = 0;
	c->hi = ~0ULL;
	bpf_spin_unlock(&c->lock);
	emit(&k, self_host, now, &ev);
	return TCX_NEXT;
}

/*
 * The socket calls and the kernel's TCP events (issue 21 item 1), from
 * BTF-typed tracepoints (tp_btf: no kprobes on this kernel). Only the
 * fields read here are declared; CO-RE relocates them against the running
 * kernel's BTF, as truth.bpf.c does.
 */
struct ns_common {
	unsigned int inum;
} __attribute__((preserve_access_index));

struct net {
	struct ns_common ns;
} __attribute__((preserve_access_index));

struct sock_common {
	__be32 skc_daddr;
	__be32 skc_rcv_saddr;
	__be16 skc_dport;
	__u16 skc_num;
	unsigned short skc_family;
	struct {
		struct net *net;
	} skc_net;
} __attribute__((preserve_access_index));

struct sock {
	struct sock_common __sk_common;
	__u16 sk_protocol;
	int sk_rcvbuf;
	int sk_sndbuf;
	__u8 sk_userlocks;
} __attribute__((preserve_access_index));

/* TCP_NODELAY and TCP_CORK live in this bitfield (TCP_NAGLE_OFF 1,
 * TCP_NAGLE_CORK 2, include/net/tcp.h). */
struct tcp_sock {
	__u8 nonagle : 4;
	__u32 reordering;
	__u32 sacked_out;
	__u32 total_retrans;
	__u32 rcv_nxt;
	__u32 copied_seq;
	__u64 tcp_mstamp;
} __attribute__((preserve_access_index));

struct sk_buff {
	char cb[48];
} __attribute__((preserve_access_index));

struct inet_sock {
	__be16 inet_sport;
} __attribute__((preserve_access_index));

struct tcp_congestion_ops {
	char name[16];
} __attribute__((preserve_access_index));

struct inet_connection_sock {
	const struct tcp_congestion_ops *icsk_ca_ops;
} __attribute__((preserve_access_index));

/* A connected IPv4 TCP socket of a recorded namespace: its key and host. */
static __always_inline int sk_key(const struct sock *sk, struct wl_rec_key *k, __u32 *host)
{
	__be16 sport = 0;

	if (!sk || sk->__sk_common.skc_family != 2 /* AF_INET */ ||
	    sk->sk_protocol != IPPROTO_TCP || !sk->__sk_common.skc_dport)
		return 0;
	*host = self_host;
	if (netns_filter) {
		__u32 inum = sk->__sk_common.skc_net.net->ns.inum;
		__u32 *h = bpf_map_lookup_elem(&rec_netns, &inum);

		if (!h)
			return 0;
		*host = *h;
	}
	/* The source port from inet_sport, not skc_num: closing releases the
	 * port (inet_put_port zeroes inet_num) before the move to TCP_CLOSE
	 * is traced. A socket still without a port (connect's move to
	 * SYN_SENT) is not a connection yet. struct inet_sock extends struct
	 * sock, so the field is read by address, not through the sock type. */
	bpf_probe_read_kernel(&sport, sizeof(sport),
			      __builtin_preserve_access_index(&((struct inet_sock *)sk)->inet_sport));
	if (!sport)
		return 0;
	k->local = sk->__sk_common.skc_rcv_saddr;
	k->remote = sk->__sk_common.skc_daddr;
	k->lport = sport;
	k->rport = sk->__sk_common.skc_dport;
	return 1;
}

static __always_inline void sk_emit_d(const struct sock *sk, __u32 kind, __u64 a, __u64 b, __u64 c,
				      __u64 d)
{
	struct pending p = { .a = a, .b = b, .c = c, .d = d, .kind = kind, .seq = ~0U };
	struct wl_rec_key k;
	__u32 host;

	if (sk_key(sk, &k, &host))
		emit(&k, host, pipeline_now(), &p);
}

static __always_inline void sk_emit(const struct sock *sk, __u32 kind, __u64 a, __u64 b, __u64 c)
{
	sk_emit_d(sk, kind, a, b, c, 0);
}

/* tcp_sock.total_retrans: the kernel's own count of the socket's
 * retransmitted segments (tcp_output.c adds an skb's pcount before sending
 * it, with TcpRetransSegs). A retransmission and a state change carry it,
 * so user space sees the retransmissions no tracepoint run delivered: on
 * this kernel (6.18) the program ran 41 times (its run_cnt) for 42
 * tcp_retransmit_skb events tracefs saw, with no recursion miss counted;
 * one short in 4 of 80 runs of the iperf3 record test under load (issue
 * 21). */
static __always_inline __u64 total_retrans(const struct sock *sk)
{
	return BPF_CORE_READ((const struct tcp_sock *)sk, total_retrans);
}

/* A read that kept up: one that came as data arrived and took all of it
 * but what came meanwhile. DETER records every socket call (§4), and a
 * reader that keeps up with the network makes as many as there are
 * arrivals: iperf3's reader made 42,721 reads for 47,459 data packets,
 * 1.3 bytes of record each, more than DETER's whole goal (`wirelab bench
 * record`). Such a read's time and size are the data's, not the
 * application's: a replayed read blocked until the data comes returns at
 * the same moment with the same bytes. So a run of them is reported
 * once, as how many bytes it read, at its first read's time
 * (wirelab_deter::record::CallKind::Drain), and a replay reads as the
 * data comes until it has that many. A run ends at the socket's next send
 * or read that did not keep up, or when its record is written.
 *
 * "As data arrived": within kept_us of the socket's last packet
 * (tcp_sock.tcp_mstamp, which tcp_rcv_established refreshes, on the
 * tcp_clock_us clock: CLOCK_MONOTONIC); a reader woken by an arrival
 * runs within tens of µs here. "All of it": at most kept_left bytes
 * still queued after it (rcv_nxt - copied_seq), since segments that came
 * while it copied wait in the socket's backlog and are queued as the
 * read returns (release_sock). A read that left more, came later,
 * peeked, or read urgent data is recorded as it was: a slow reader's
 * reads (DETER §5.1) are its own timing. */
const volatile __u64 kept_us = 50;
const volatile __u32 kept_left = 8192;

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, struct wl_rec_kept_key);
	__type(value, struct wl_rec_kept);
} rec_kept SEC(".maps");

/* Reports the connection's pending run of reads, if any. */
static __always_inline void flush_kept(struct wl_rec_kept_key *kk)
{
	struct wl_rec_kept *v = bpf_map_lookup_elem(&rec_kept, kk);
	struct pending p = { .kind = WL_REC_CALL, .seq = ~0U, .a = 2 };

	if (!v)
		return;
	p.b = v->bytes;
	p.c = v->reads;
	emit(&kk->key, kk->host, v->start, &p);
	bpf_map_delete_elem(&rec_kept, kk);
}

/* A send ends the socket's run of reads: a replay issues its calls in
 * order, and reads after the send may wait for what the send asked for.
 * Any other run is taken from rec_kept when the record is written
 * (Recorder::take_kept). */
SEC("tp_btf/sock_send_length")
int BPF_PROG(wl_rec_send, struct sock *sk, int ret, int flags)
{
	struct wl_rec_kept_key kk = {};
	struct pending p = { .a = 0, .b = ret, .c = (__u32)flags, .kind = WL_REC_CALL, .seq = ~0U };

	if (ret < 0 || !sk_key(sk, &kk.key, &kk.host))
		return 0;
	flush_kept(&kk);
	emit(&kk.key, kk.host, pipeline_now(), &p);
	return 0;
}

SEC("tp_btf/sock_recv_length")
int BPF_PROG(wl_rec_recv, struct sock *sk, int ret, int flags)
{
	const struct tcp_sock *tp = (const struct tcp_sock *)sk;
	struct wl_rec_kept_key kk = {};
	struct wl_rec_kept *v, fresh = {};
	struct pending p = { .a = 1, .b = ret, .c = (__u32)flags, .kind = WL_REC_CALL, .seq = ~0U };

	if (ret < 0 || !sk_key(sk, &kk.key, &kk.host))
		return 0;
	/* MSG_OOB 1, MSG_PEEK 2: not reads a replay repeats by bytes. */
	if (ret > 0 && !(flags & 3) &&
	    BPF_CORE_READ(tp, rcv_nxt) - BPF_CORE_READ(tp, copied_seq) <= kept_left &&
	    bpf_ktime_get_ns() / 1000 - BPF_CORE_READ(tp, tcp_mstamp) <= kept_us) {
		v = bpf_map_lookup_elem(&rec_kept, &kk);
		/* Not atomic: two threads reading one socket at once could
		 * miscount a run (a tracing program may not take a lock). */
		if (v) {
			v->reads++;
			v->bytes += ret;
			return 0;
		}
		fresh.start = pipeline_now();
		fresh.bytes = ret;
		fresh.reads = 1;
		/* A full map: recorded as it was. */
		if (!bpf_map_update_elem(&rec_kept, &kk, &fresh, BPF_NOEXIST))
			return 0;
	}
	flush_kept(&kk);
	emit(&kk.key, kk.host, pipeline_now(), &p);
	return 0;
}

SEC("tp_btf/tcp_retransmit_skb")
int BPF_PROG(wl_rec_retransmit, const struct sock *sk, const struct sk_buff *skb, int err)
{
	__u32 seq = 0;
	__u16 segs = 0;

	/* The tracepoint fires for attempts too (its `err` argument): with
	 * -EBUSY when the original is still in the host's queue
	 * (TcpExtTCPSpuriousRtxHostQueues, tcp_output.c) nothing is sent, and
	 * a replay under another load makes more or fewer such attempts with
	 * the same packets on the wire. A record holds what went out. */
	if (err)
		return 0;

	/* TCP_SKB_CB(skb)->seq: the first field of the control block. */
	bpf_probe_read_kernel(&seq, sizeof(seq), __builtin_preserve_access_index(&skb->cb));
	/* TCP_SKB_CB(skb)->tcp_gso_segs, after seq and end_seq
	 * (include/net/tcp.h): tcp_skb_pcount, what TcpRetransSegs adds for
	 * this skb. One tracepoint can resend two lost segments. */
	bpf_probe_read_kernel(&segs, sizeof(segs),
			      (const char *)__builtin_preserve_access_index(&skb->cb) + 8);
	{
		const struct tcp_sock *tp = (const struct tcp_sock *)sk;

		sk_emit_d(sk, WL_REC_KERNEL, WL_REC_K_RETRANSMIT,
			  (__u64)seq | (__u64)(segs ? segs : 1) << 32,
			  (__u64)BPF_CORE_READ(tp, reordering) |
				  (__u64)BPF_CORE_READ(tp, sacked_out) << 32,
			  total_retrans(sk));
	}
	return 0;
}

SEC("tp_btf/tcp_cong_state_set")
int BPF_PROG(wl_rec_cong_state, struct sock *sk, __u8 state)
{
	sk_emit(sk, WL_REC_KERNEL, WL_REC_K_CONG_STATE, state, 0);
	return 0;
}

/* A second word that the socket closed: tcp:tcp_destroy_sock, as the
 * move to TCP_CLOSE (old and new state both TCP_CLOSE). A tracepoint's
 * program did not run for a few of the kernel's events in about 3 runs of
 * 100 (the total_retrans comment), the move to TCP_CLOSE among them once;
 * user space keeps the first close it hears of. */
SEC("tp_btf/tcp_destroy_sock")
int BPF_PROG(wl_rec_destroy, struct sock *sk)
{
	sk_emit_d(sk, WL_REC_KERNEL, WL_REC_K_STATE, 7 /* TCP_CLOSE */, 7, total_retrans(sk));
	return 0;
}

SEC("tp_btf/inet_sock_set_state")
int BPF_PROG(wl_rec_state, const struct sock *sk, const int oldstate, const int newstate)
{
	sk_emit_d(sk, WL_REC_KERNEL, WL_REC_K_STATE, oldstate, newstate, total_retrans(sk));
	if (oldstate == 1 /* TCP_ESTABLISHED */ || newstate == 1) {
		/* DETER Table 1's per-socket settings: the congestion control
		 * a replay must run. inet_connection_sock extends sock, so it
		 * is read by address, as inet_sport is. */
		const struct tcp_congestion_ops *ops = 0;
		char name[16] = {};
		__u64 lo, hi;

		bpf_probe_read_kernel(&ops, sizeof(ops),
				      __builtin_preserve_access_index(
					      &((struct inet_connection_sock *)sk)->icsk_ca_ops));
		if (ops &&
		    !bpf_probe_read_kernel(name, sizeof(name), __builtin_preserve_access_index(&ops->name))) {
			__builtin_memcpy(&lo, name, 8);
			__builtin_memcpy(&hi, name + 8, 8);
			sk_emit(sk, WL_REC_KERNEL, WL_REC_K_CONG_CONTROL, lo, hi);
		}
		/* ... and the socket options no tracepoint shows being set
		 * (setsockopt has none): read from the socket, so what the
		 * application set before connect(2), or before it closed,
		 * is what the record holds. */
		{
			const struct tcp_sock *tp = (const struct tcp_sock *)sk;
			__u64 nonagle = BPF_CORE_READ_BITFIELD_PROBED(tp, nonagle);
			__u64 bufs = (__u32)BPF_CORE_READ(sk, sk_rcvbuf) |
				     (__u64)(__u32)BPF_CORE_READ(sk, sk_sndbuf) << 32;

			sk_emit(sk, WL_REC_KERNEL, WL_REC_K_SOCKOPTS, bufs,
				BPF_CORE_READ(sk, sk_userlocks) | nonagle << 8);
		}
	}
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
