// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * The wirelab switch: one tc ingress program on every switch port, forming one
 * pipeline  parse -> classify -> inject events -> egress port -> vAQM ->
 * mirror -> forward. Stages are added here as stages a spec turns on (vAQM:
 * vaqm.h), not as separate programs that parse the packet again (DESIGN.md).
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/in.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "wirelab.h"

/* Set by the control plane before load (libbpf-bootstrap style). */
const volatile __u32 snap_len = 128;
/* The smallest power of two >= snap_len: the bytes reserved per record. */
const volatile __u32 snap_room = 128;
/* Wake the dumper only when this much is waiting (it also drains on a short
 * timer): a wakeup per packet costs the forwarding path a context switch. */
const volatile __u64 wake_bytes = 1 << 20;
/* The vAQM stage is in the pipeline only when a spec has virtual queues:
 * with 0 the verifier removes it, and the switch pays nothing for it. */
const volatile __u8 vaqm_on = 0;
/* Tests: the clock can be set through the fake_clock map. */
const volatile __u8 test_clock = 0;
/* Serialize vAQM updates with the queue's spin lock. Off in the lab, where
 * every switch port is steered to one CPU (netns steer_rx) and the
 * pipeline is serial like a hardware one: the lock (it disables interrupts)
 * costs more than the whole rest of the stage (bench vaqm). Each queue
 * counts updates that arrive from a different CPU, so a broken assumption
 * shows in the run summary instead of silently racing. */
const volatile __u8 vaqm_lock = 0;
/* A user discipline is linked in (wirelab_ext.h, src/ext.rs): the stage
 * calls the hooks, whose weak defaults the discipline's definitions
 * replace. With 0 the calls are removed and the built-in stage runs as it
 * is. */
const volatile __u8 vaqm_ext = 0;

/* Never read: these globals put the ABI enums no map value refers to into
 * BTF, so the generated skeleton carries them and the Rust side takes the
 * limits from there (crates/dataplane/src/lib.rs) instead of a copy. */
const volatile enum wl_limits wl_abi_limits;
const volatile enum wl_evk wl_abi_evk;
const volatile enum wl_ext_limits wl_abi_ext_limits;
const volatile enum wl_aqm_verdict wl_abi_aqm_verdict;

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, WL_MAX_PORTS);
	__type(key, __u32); /* ifindex */
	__type(value, struct wl_port);
} ports SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, WL_MAX_PORTS);
	__type(key, __u64); /* destination MAC */
	__type(value, struct wl_fwd);
} fwd SEC(".maps");

/* Where a frame whose destination MAC is not in `fwd` goes, by ingress
 * port: `wirelab bump` between two interfaces forwards each one's frames
 * to the other, whatever their addresses (a bump on the wire). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, WL_MAX_PORTS + 1);
	__type(key, __u32);
	__type(value, struct wl_fwd);
} default_out SEC(".maps");

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

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, struct wl_event_key);
	__type(value, struct wl_event);
} events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, WL_MAX_CONNS + 1);
	__type(key, __u32);
	__type(value, __u32); /* WL_EVK_* bits */
} ev_mask SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, WL_MAX_PORTS + 1);
	__type(key, __u32);
	__type(value, struct wl_counters);
} counters SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} mirror_seq SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 24); /* resized by the control plane */
} ring SEC(".maps");

/* icrc_migreq[k]: what flipping MigReq changes in the ICRC of a packet with
 * k covered bytes after the BTH byte that holds it. Filled by the control
 * plane (wirelab_roce::packet::migreq_icrc_delta) before an edit event is
 * armed; 0 means not filled, and the edit is refused. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, WL_ICRC_SHIFTS);
	__type(key, __u32);
	__type(value, __u32);
} icrc_migreq SEC(".maps");

/* Makes the record header part of the BTF so the skeleton exports its type. */
struct wl_mirror_hdr mirror_hdr_abi = {};
struct wl_truth_sample truth_sample_abi = {};

struct pkt {
	__u32 l3_off;
	__u32 l4_off;
	__u32 payload_off;
	__u32 payload_len;
	__u8 is_tcp;
	__u8 is_roce;
	__u8 tcp_flags;
	__u8 tos;
	__u8 ip_proto;
	__u32 daddr; /* any IPv4 packet (l3_off != 0), for the vAQM classifier */
	__u32 saddr;
	__u16 sport; /* TCP and UDP, network byte order */
	__u16 dport;
	__u32 seq;
	struct wl_flow_key key;
	/* QCN: the sample's Q - Q_eq and Q - Q_old in 64-byte units, for the
	 * CNM's cnmQOffset and cnmQDelta. */
	__s16 qcn_off;
	__s16 qcn_delta;
};

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
static __always_inline int parse_roce(struct __sk_buff *skb, struct pkt *p, struct iphdr *ip,
				      __u32 ihl)
{
	__u8 bth[12];

	p->l4_off = p->l3_off + ihl;
	if (bpf_skb_load_bytes(skb, p->l4_off + sizeof(struct udphdr), bth, sizeof(bth)))
		return 0;
	p->is_roce = 1;
	/* For RoCE the byte a corruption flips: the last one before the ICRC,
	 * payload for every data packet, so only the ICRC (IBTA Annex A17.8)
	 * can catch it, as with Lumina's corruption event (§3.3). */
	p->payload_off = p->l3_off + bpf_ntohs(ip->tot_len) - 4 - 1;
	p->payload_len = roce_is_data(bth[0]);
	p->seq = ((__u32)bth[9] << 16) | ((__u32)bth[10] << 8) | bth[11];
	p->key.saddr = ip->saddr;
	p->key.daddr = ip->daddr;
	p->key.proto = IPPROTO_UDP | ((__u32)bth[5] << 24) | ((__u32)bth[6] << 16) |
		       ((__u32)bth[7] << 8);
	return 1;
}

/* Stage 1: parse Ethernet / IPv4 / TCP or RoCEv2. Anything else is forwarded as is. */
static __always_inline int parse(struct __sk_buff *skb, struct pkt *p)
{
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip;
	struct tcphdr *tcp;
	struct udphdr *udp;
	__u32 ihl, doff, tot;

	if ((void *)(eth + 1) > end || eth->h_proto != bpf_htons(ETH_P_IP))
		return 0;
	ip = (void *)(eth + 1);
	if ((void *)(ip + 1) > end)
		return 0;
	ihl = ip->ihl * 4;
	if (ihl < sizeof(*ip))
		return 0;
	p->l3_off = sizeof(*eth);
	p->tos = ip->tos;
	p->daddr = ip->daddr;
	p->saddr = ip->saddr;
	p->ip_proto = ip->protocol;
	if (ip->frag_off & bpf_htons(0x3fff))
		return 0;
	if (ip->protocol == IPPROTO_UDP) {
		udp = (void *)ip + ihl;
		if ((void *)(udp + 1) > end)
			return 0;
		p->sport = udp->source;
		p->dport = udp->dest;
		if (udp->dest != bpf_htons(WL_ROCE_PORT))
			return 0;
		return parse_roce(skb, p, ip, ihl);
	}
	if (ip->protocol != IPPROTO_TCP)
		return 0;
	p->l4_off = p->l3_off + ihl;
	tcp = data + p->l4_off;
	if ((void *)(tcp + 1) > end)
		return 0;
	doff = tcp->doff * 4;
	tot = bpf_ntohs(ip->tot_len);
	if (doff < sizeof(*tcp) || tot < ihl + doff)
		return 0;
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
	return 1;
}

#define TCP_FLAG_SYN 0x02

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
 */
static __always_inline __u32 index_of(__u32 conn, __u32 rel, __u32 first_tx)
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
static __always_inline void track_roce(struct pkt *p, struct wl_conn_state *st,
				       struct wl_mirror_hdr *m)
{
	__u32 rel, first = 0, iter;

	if (!p->payload_len)
		return;
	bpf_spin_lock(&st->lock);
	if (!st->synced) {
		bpf_spin_unlock(&st->lock);
		return;
	}
	rel = (p->seq - st->isn) & 0xffffff;
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
	bpf_spin_unlock(&st->lock);
	m->index = rel + 1;
	m->iter = iter;
	m->first_tx = first;
}

/*
 * Stage 2: classify the data direction of a connection and track its data
 * packet index and iteration. Lumina §3.3: "If its PSN is not larger than
 * Last_PSN, the event injector identifies this as a new round of
 * transmissions and increases ITER by 1 ... Regardless of the comparison
 * result, the event injector always updates Last_PSN". For TCP the PSN is the
 * segment's sequence number relative to the ISN, and the packet index counts
 * first transmissions (segments that start at or beyond the highest byte sent).
 */
static __always_inline void track(struct pkt *p, __u32 conn, __u32 slot_key,
				  struct wl_mirror_hdr *m)
{
	struct wl_conn_state *st = bpf_map_lookup_elem(&conn_state, &slot_key);
	__u32 rel, idx = 0, first = 0, iter, first_tx, slot;

	if (!st)
		return;
	if (p->is_roce) {
		track_roce(p, st, m);
		return;
	}
	if (p->tcp_flags & TCP_FLAG_SYN) {
		bpf_spin_lock(&st->lock);
		st->synced = 1;
		st->isn = p->seq;
		st->seen_data = 0;
		st->last_rel = 0;
		st->next_new = 1; /* the SYN consumes one sequence number */
		st->iter = 1;
		st->first_tx = 0;
		bpf_spin_unlock(&st->lock);
		return;
	}
	if (p->payload_len == 0)
		return;
	bpf_spin_lock(&st->lock);
	if (!st->synced) {
		bpf_spin_unlock(&st->lock);
		return;
	}
	rel = p->seq - st->isn;
	if (st->seen_data && rel <= st->last_rel)
		st->iter++;
	st->seen_data = 1;
	st->last_rel = rel;
	if ((__s32)(rel - st->next_new) >= 0) {
		first = 1;
		idx = ++st->first_tx;
	}
	if ((__s32)(rel + p->payload_len - st->next_new) > 0)
		st->next_new = rel + p->payload_len;
	iter = st->iter;
	first_tx = st->first_tx;
	bpf_spin_unlock(&st->lock);

	if (first) {
		slot = seg_slot(conn, idx);
		bpf_map_update_elem(&seg_start, &slot, &rel, BPF_ANY);
	} else {
		idx = index_of(conn, rel, first_tx);
	}
	m->index = idx;
	m->iter = iter;
	m->first_tx = first;
}

/* Stage 3: the event table, exact key first, then the wildcards; only the
 * key shapes this connection has events under are looked up. */
static __always_inline struct wl_event *match_event(__u32 conn, __u32 idx, __u32 iter)
{
	struct wl_event_key k = { .conn = conn, .index = idx, .iter = iter };
	struct wl_event *ev;
	__u32 *maskp = bpf_map_lookup_elem(&ev_mask, &conn);
	__u32 mask = maskp ? *maskp : 0;

	if (!mask)
		return 0;
	if (idx && (mask & WL_EVK_EXACT)) {
		ev = bpf_map_lookup_elem(&events, &k);
		if (ev)
			return ev;
	}
	if (idx && (mask & WL_EVK_ANY_ITER)) {
		k.iter = WL_ANY;
		ev = bpf_map_lookup_elem(&events, &k);
		if (ev)
			return ev;
	}
	k.index = WL_ANY;
	if (mask & WL_EVK_ALL_PKTS) {
		k.iter = iter;
		ev = bpf_map_lookup_elem(&events, &k);
		if (ev)
			return ev;
	}
	if (mask & WL_EVK_ALL_ALL) {
		k.iter = WL_ANY;
		return bpf_map_lookup_elem(&events, &k);
	}
	return 0;
}

/* RFC 3168 §5: CE may only be set on an ECN-capable (ECT(0)/ECT(1)) packet. */
static __always_inline int mark_ce(struct __sk_buff *skb, struct pkt *p)
{
	__u8 old = p->tos, new = p->tos | 0x3;
	__u16 old_w, new_w;
	__u8 first;

	if ((old & 0x3) == 0)
		return 0;
	if (bpf_skb_load_bytes(skb, p->l3_off, &first, 1))
		return 0;
	old_w = bpf_htons(((__u16)first << 8) | old);
	new_w = bpf_htons(((__u16)first << 8) | new);
	bpf_skb_store_bytes(skb, p->l3_off + 1, &new, 1, 0);
	bpf_l3_csum_replace(skb, p->l3_off + offsetof(struct iphdr, check), old_w, new_w, 2);
	return 1;
}

/*
 * A bit error in one payload byte (TCP: the first; RoCE: the last before the
 * ICRC), checksums left as they were, so the receiver's TCP checksum (RFC 793
 * §3.1) or ICRC check must discard it.
 */
static __always_inline void corrupt(struct __sk_buff *skb, struct pkt *p)
{
	__u8 b;

	if (bpf_skb_load_bytes(skb, p->payload_off, &b, 1))
		return;
	b ^= 0x01;
	bpf_skb_store_bytes(skb, p->payload_off, &b, 1, 0);
}

/*
 * Lumina §6.2.3's edit: MigReq (BTH byte 1, bit 0x40; IBTA §9.2.4) set or
 * cleared, and the ICRC patched rather than recomputed. CRC-32 is linear:
 * for messages of one length crc(m ^ d) = crc(m) ^ crc(d) ^ crc(0), and
 * crc(d) ^ crc(0) for a one-bit d depends only on how many bytes follow
 * that bit, so a table lookup replaces a pass over up to 4 KiB. Returns 0
 * when the packet was left as it was (not RoCE, table not filled).
 */
static __always_inline int edit_migreq(struct __sk_buff *skb, struct pkt *p, int set)
{
	__u32 bth1 = p->l4_off + sizeof(struct udphdr) + 1, icrc_off, k, icrc, *delta;
	__u8 b;

	if (!p->is_roce)
		return 0;
	if (bpf_skb_load_bytes(skb, bth1, &b, 1))
		return 0;
	if (!!(b & 0x40) == set)
		return 1; /* already so */
	/* parse_roce put payload_off on the last byte before the ICRC. */
	icrc_off = p->payload_off + 1;
	k = icrc_off - bth1 - 1;
	delta = bpf_map_lookup_elem(&icrc_migreq, &k);
	if (!delta || !*delta)
		return 0;
	if (bpf_skb_load_bytes(skb, icrc_off, &icrc, sizeof(icrc)))
		return 0;
	/* The ICRC goes least significant byte first (Annex A17.8). */
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
	icrc ^= __builtin_bswap32(*delta);
#else
	icrc ^= *delta;
#endif
	b ^= 0x40;
	bpf_skb_store_bytes(skb, bth1, &b, 1, 0);
	bpf_skb_store_bytes(skb, icrc_off, &icrc, sizeof(icrc), 0);
	return 1;
}

#include "vaqm.h"
#include "truth.h"

/* Stage 4: mirror into the capture ring, before any drop (Lumina §3.4). */
static __always_inline void mirror(struct __sk_buff *skb, struct wl_mirror_hdr *m,
				   struct wl_counters *c)
{
	__u32 zero = 0, cap = skb->len;
	__u64 *seqp = bpf_map_lookup_elem(&mirror_seq, &zero);
	struct wl_mirror_hdr *r;

	if (!seqp)
		return;
	m->seq = __sync_fetch_and_add(seqp, 1);
	r = bpf_ringbuf_reserve(&ring, sizeof(*r) + snap_room, 0);
	if (!r) {
		c->mirror_lost++;
		return;
	}
	if (cap > snap_len)
		cap = snap_len;
	m->cap_len = cap;
	__builtin_memcpy(r, m, sizeof(*r));
	/* cap is in [1, snap_len] and snap_len <= snap_room (a power of two),
	 * so this mask changes nothing at run time; it shows the verifier a lower
	 * bound of 1 that survives clang's register copies. */
	cap = ((cap - 1) & (snap_room - 1)) + 1;
	if (bpf_skb_load_bytes(skb, 0, (void *)(r + 1), cap))
		r->cap_len = 0;
	bpf_ringbuf_submit(r, bpf_ringbuf_query(&ring, BPF_RB_AVAIL_DATA) >= wake_bytes ?
				      BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP);
	c->mirrored++;
}

/*
 * A QCN congestion point's notification (802.1Qau §33.4; NetBump §4.3:
 * "This QCN frame is destined to the upstream reaction point from which the
 * just-added frame was received"). The sampled frame is cloned out of its
 * egress port as usual, then this skb becomes the CNM: addressed to the
 * frame's source MAC, from the switch (02:77:6c:00:00:<egress port>),
 * carrying |Fb| and the frame's first 64 MSDU bytes so the reaction point
 * knows the flow, and sent back out of the ingress port. Returns the tc
 * verdict for the CNM; CNM_NOT_CLONED if the frame could not be cloned
 * (the caller forwards it as usual), CNM_LOST if it was but the CNM could
 * not be built (the skb is then dropped: the frame already went).
 */
#define CNM_NOT_CLONED -1
#define CNM_LOST -2
static __always_inline int send_cnm(struct __sk_buff *skb, struct wl_fwd *out, __u32 in_ifindex,
				    struct wl_mirror_hdr *m, struct pkt *p)
{
	__u8 h[WL_CNM_HDR] = {}, msdu[WL_CNM_MSDU];
	__u32 len = skb->len, carried;

	if (len <= ETH_HLEN)
		return CNM_NOT_CLONED;
	carried = len - ETH_HLEN;
	if (carried > WL_CNM_MSDU)
		carried = WL_CNM_MSDU;
	/* carried is in [1, 64]: the mask changes nothing at run time and
	 * shows the verifier bounds that survive clang's register copies. */
	carried = ((carried - 1) & (WL_CNM_MSDU - 1)) + 1;
	if (bpf_skb_load_bytes(skb, ETH_HLEN, msdu, carried))
		return CNM_NOT_CLONED;
	/* DA <- the frame's SA; the encapsulated DA <- the frame's DA. */
	if (bpf_skb_load_bytes(skb, ETH_ALEN, h, ETH_ALEN) ||
	    bpf_skb_load_bytes(skb, 0, h + 30, ETH_ALEN))
		return CNM_NOT_CLONED;
	if (bpf_clone_redirect(skb, out->ifindex, 0))
		return CNM_NOT_CLONED;
	h[6] = 0x02; h[7] = 0x77; h[8] = 0x6c; h[11] = out->port;
	h[12] = WL_ETH_P_CN >> 8; h[13] = WL_ETH_P_CN & 0xff;
	h[14] = 0; /* version 0 */
	h[15] = m->qcn_fb & 0x3f;
	/* CPID: the switch port's MAC and the virtual queue. */
	__builtin_memcpy(h + 16, h + 6, ETH_ALEN);
	h[22] = m->vq >> 8; h[23] = m->vq;
	h[24] = (__u16)p->qcn_off >> 8; h[25] = p->qcn_off;
	h[26] = (__u16)p->qcn_delta >> 8; h[27] = p->qcn_delta;
	h[36] = (len - ETH_HLEN) >> 8; h[37] = len - ETH_HLEN;
	if (bpf_skb_change_tail(skb, WL_CNM_HDR + carried, 0) ||
	    bpf_skb_store_bytes(skb, 0, h, WL_CNM_HDR, 0) ||
	    bpf_skb_store_bytes(skb, WL_CNM_HDR, msdu, carried, 0))
		return CNM_LOST;
	return bpf_redirect(in_ifindex, 0);
}

SEC("tc")
int wl_switch(struct __sk_buff *skb)
{
	__u32 ifindex = skb->ifindex, port_no, conn = 0;
	struct wl_mirror_hdr m = {};
	struct pkt p = {};
	struct wl_port *port;
	struct wl_counters *c, *oc;
	struct wl_flow *flow = 0;
	struct wl_event *ev = 0;
	struct wl_fwd *out;
	struct wl_ext_pkt x = {};
	__u64 dmac = 0;
	void *data, *end;

	port = bpf_map_lookup_elem(&ports, &ifindex);
	if (!port)
		return TC_ACT_OK; /* not a switch port */
	port_no = port->port;
	c = bpf_map_lookup_elem(&counters, &port_no);
	if (!c)
		return TC_ACT_SHOT;
	c->rx_pkts++;
	c->rx_bytes += skb->len;

	m.ts_ns = pipeline_now();
	m.pkt_len = skb->len;
	m.port = port_no;

	if (parse(skb, &p)) {
		flow = bpf_map_lookup_elem(&flows, &p.key);
		if (flow) {
			conn = flow->conn;
			m.conn = conn;
			m.data_dir = !!flow->data_dir;
			if (flow->data_dir) {
				track(&p, conn,
				      flow->data_dir == 2 ? conn + WL_STATE_SECOND : conn, &m);
				if (m.index || m.iter)
					ev = match_event(conn, m.index, m.iter);
			}
		}
	}
	if (ev) {
		m.action = ev->action;
		m.event_id = ev->id;
		__sync_fetch_and_add(&ev->hits, 1);
		if (ev->action == WL_EV_ECN && !mark_ce(skb, &p))
			m.action = WL_EV_ECN_NOT_ECT;
	}

	/* Stage 3: the egress port, needed by the vAQM classifier. */
	data = (void *)(long)skb->data;
	end = (void *)(long)skb->data_end;
	if (data + ETH_ALEN > end)
		return TC_ACT_SHOT;
	__builtin_memcpy(&dmac, data, ETH_ALEN);
	out = bpf_map_lookup_elem(&fwd, &dmac);
	if (!out) {
		out = bpf_map_lookup_elem(&default_out, &port_no);
		if (out && !out->ifindex)
			out = 0;
	}
	if (vaqm_ext) {
		ext_pkt(&x, skb, &p, port_no, out ? out->port : 0, m.ts_ns);
		out = ext_forward(&x, out);
	}

	/* Stage 5: vAQM, on what the events let through to a known port. */
	if (vaqm_on && out && m.action != WL_EV_DROP &&
	    vaqm(skb, &p, out->port, m.ts_ns, &m, &x) == WL_AQM_MARK)
		mark_ce(skb, &p);

	/* The trace shows the packet as the receiver gets it: CE set, a bit
	 * flipped, so anyone recomputing a checksum or ICRC on the capture sees
	 * what the receiver saw. */
	if (m.action == WL_EV_CORRUPT)
		corrupt(skb, &p);
	else if ((m.action == WL_EV_MIGREQ_SET || m.action == WL_EV_MIGREQ_CLEAR) &&
		 !edit_migreq(skb, &p, m.action == WL_EV_MIGREQ_SET))
		m.action = WL_EV_NONE;
	mirror(skb, &m, c);

	if (m.action == WL_EV_DROP) {
		c->event_drops++;
		return TC_ACT_SHOT;
	}
	if (m.aqm == WL_AQM_DROP) {
		c->aqm_drops++;
		return TC_ACT_SHOT;
	}
	if (m.aqm == WL_AQM_MARK)
		c->aqm_marks++;
	if (!out) {
		c->no_route++;
		return TC_ACT_SHOT;
	}
	port_no = out->port;
	oc = bpf_map_lookup_elem(&counters, &port_no);
	if (oc) {
		oc->tx_pkts++;
		oc->tx_bytes += skb->len;
	}
	if (vaqm_on && m.qcn_fb) {
		int v = send_cnm(skb, out, ifindex, &m, &p);

		if (v >= 0) {
			c->cnm_sent++;
			return v;
		}
		c->cnm_failed++;
		if (v == CNM_LOST)
			return TC_ACT_SHOT;
	}
	return bpf_redirect(out->ifindex, 0);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/*
 * Baseline for `wirelab bench switch-overhead`: forwarding alone, on the same
 * static table, so the pipeline's own cost can be measured against it.
 */
SEC("tc")
int wl_forward_only(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	struct wl_fwd *out;
	__u64 dmac = 0;

	if (data + ETH_ALEN > end)
		return TC_ACT_SHOT;
	__builtin_memcpy(&dmac, data, ETH_ALEN);
	out = bpf_map_lookup_elem(&fwd, &dmac);
	if (!out)
		return TC_ACT_SHOT;
	return bpf_redirect(out->ifindex, 0);
}
