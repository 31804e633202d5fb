// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Norma's generator and measurement in software (seed 002 §5-6; issue 20):
 * an object of its own, outside the switch's path, on the tester's ports.
 *
 * wl_gen (XDP, driven by BPF_PROG_RUN with BPF_F_TEST_XDP_LIVE_FRAMES, as
 * xdp-trafficgen is): every run is one template packet looping through
 * the pipeline at the CPU's rate, which Norma's loopback ports are. The
 * rate/burst controller (§5.2) decides which runs leave:
 *   1. a meter: GCRA (ITU-T I.371's virtual scheduling) in integer
 *      nanoseconds, one packet per `interval_ns`. A whole-nanosecond
 *      interval cannot express every rate, as a hardware meter cannot:
 *      the control plane sets the meter at or above the rate asked for;
 *   2. cascaded units, each "skip m after passing n" (Figure 4), which
 *      trim the meter's rate to the one asked for and shape bursts.
 * A packet that leaves goes through the packet editor (App. C's five
 * modes), gets the measurement's version bit in its IPv4 ID (§6.1) and,
 * when its payload has room, a sequence number and its send time, is
 * counted in its version's bank, and is redirected into the tester port.
 *
 * Several streams (templates, rates, editors) run at once, each on a
 * thread of its own: a thread's stream is looked up by its thread ID
 * (gen_threads; a thread not registered runs stream 0), and everything a
 * stream keeps (settings, per-CPU state, banks, histogram) is indexed by
 * it.
 *
 * wl_sink (XDP on the receiving tester port): counts each stream's
 * packets (told apart by protocol and destination port) in the bank of
 * the version they carry, with the blind delay's sums
 * (§6.2) and the per-packet one-way latency (the namespaces share one
 * clock) in a log-linear histogram; drops them (the tester is their end).
 *
 * Page contents persist across live-frame runs (Documentation/bpf/
 * bpf_prog_run.rst), and not only the generator's writes: a page that went
 * up a receiver's stack comes back as that stack left it (a router that
 * forwarded it rewrote its MACs and TTL). So every run first writes the
 * template's first WL_LOAD_HEAD bytes (headers and stamp) back, then
 * edits write absolute values from per-CPU state and patch the checksums
 * against the template's (RFC 1624). The payload past them is assumed
 * untouched: receivers read payloads, they do not write them.
 */
#include <stddef.h>
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/in.h>
#include <linux/udp.h>
#include <linux/tcp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "wl_clock.h"
#include "wl_hist.h"

enum wl_load_limits {
	/* Cascaded "skip m after n" units (Norma's Figure 4 has two). */
	WL_LOAD_UNITS = 4,
	/* Fields the editor may change per template. */
	WL_LOAD_EDITS = 8,
	/* Values of the indirect step mode's tables, all edits together. */
	WL_LOAD_TABLE = 256,
	/* Frames up to this size (the offsets are masked below it). */
	WL_LOAD_MAX_FRAME = 2048,
	/* The template's first bytes, rewritten into every frame. */
	WL_LOAD_HEAD = 128,
	/* The stamp: sequence number and send time, 8 bytes each. */
	WL_LOAD_STAMP = 16,
	/* Bytes of a sampled frame kept (the pcapng sample's snap length). */
	WL_SAMPLE_CAP = 128,
	/* A size mix's pattern (IMIX): frame lengths taken in turn. */
	WL_LOAD_SIZES = 64,
	/* Streams generated at once (a power of two: indices are masked). */
	WL_LOAD_STREAMS = 8,
};

enum wl_edit_mode {
	WL_EDIT_OFF = 0,
	/* App. C 1): value += step; past `hi` it wraps by the range. */
	WL_EDIT_STEP = 1,
	/* 2): the step's value indexes a table; the field gets the entry. */
	WL_EDIT_INDIRECT = 2,
	/* 4): the bits in `mask` are random, the rest as in `lo`. */
	WL_EDIT_RANDOM = 3,
	/* 5): n := (n' + r) mod l, r of `rand_bits` bits with 2^k <= l;
	 * the field gets lo + n. */
	WL_EDIT_RANGED = 4,
	/* 3) (cascaded step) is a step whose `carry_from` names the edit that
	 * drives it: it steps only when that one wrapped in this packet. */
};

struct wl_load_unit {
	__u32 pass; /* n: packets passed ... */
	__u32 skip; /* m: ... then skipped; pass 0 ends the cascade */
};

struct wl_load_edit {
	__u16 offset; /* byte offset of the field in the frame */
	__u8 width; /* 1, 2 or 4 bytes, big-endian */
	__u8 mode; /* enum wl_edit_mode */
	__u8 carry_from; /* 0: steps every packet; k: when edit k-1 wrapped */
	__u8 rand_bits; /* ranged random's k */
	__u16 table; /* indirect: the first of its entries in load_table */
	__u32 lo; /* step, indirect, ranged: first value (index); random: the fixed bits */
	__u32 hi; /* last value (index), inclusive; random: the random bits' mask */
	__u32 step;
};

struct wl_gen_conf {
	/* The meter: one packet per interval_ns (0: no meter). A generator
	 * late by up to tolerance_ns catches up (the runs it sends a slot or
	 * more behind are counted); later, it gives up the slots it missed
	 * (counted) rather than sending them back to back. */
	__u64 interval_ns;
	__u64 tolerance_ns;
	/* Where packets go: a device of the caller's namespace. */
	__u32 ifindex;
	/* The version bit written into the IPv4 ID's top bit (§6.1). */
	__u32 version;
	/* Frame offsets: the IPv4 header, the UDP/TCP header, the L4
	 * checksum (0: none, or a UDP checksum of 0) and the stamp (seq and
	 * send time, 16 bytes; 0: no room). */
	__u16 l3_off;
	__u16 l4_off;
	__u16 csum_off;
	__u16 stamp_off;
	/* An inner TCP checksum under VXLAN (0: none), which covers the
	 * stamp; the outer checksum (csum_off) covers it in turn. */
	__u16 inner_csum_off;
	/* The inner IPv4 header under VXLAN (0: none): a size mix fixes its
	 * lengths too. */
	__u16 inner_l3_off;
	/* 1: the network header is IPv6 (no header checksum; the version bit
	 * in the flow label's low word; the pseudo-header's addresses at
	 * l3 + 8 .. l3 + 40, RFC 8200 §8.1). */
	__u32 ipv6;
	/* 1: the L4 header is TCP (its length is in no header of its own:
	 * a size mix changes only the pseudo-header's, RFC 9293 §3.1). */
	__u32 tcp;
	/* 1: no IP header (an ARP reply, RFC 826): no version bit, and no
	 * checksum to patch (l3_off == l4_off, csum_off 0); counted in the
	 * bank of the version it was sent in. */
	__u32 no_ip;
	__u32 edits;
	/* Frames whose sequence number is a multiple of this are copied to
	 * sample_ring (0: none); the sink samples the same numbers, so the
	 * sample holds each frame as sent and as received. */
	__u32 sample_every;
	struct wl_load_unit unit[WL_LOAD_UNITS];
	struct wl_load_edit edit[WL_LOAD_EDITS];
	/* A size mix (IMIX; 0 sizes: every frame the template's length):
	 * frame k is sizes[k % nsizes] bytes long, cut from the template (a
	 * UDP frame of the largest size, its payload zeros past the stamp). */
	__u32 nsizes;
	__u16 sizes[WL_LOAD_SIZES];
};

/* A generator CPU's state: the meter's theoretical arrival time, the
 * units' positions, the editor's values. */
struct wl_gen_state {
	__u64 tat;
	__u64 seq;
	/* Runs the meter held back, the units skipped, slots missed, and
	 * runs sent a slot or more behind their time (catching up). */
	__u64 held;
	__u64 skipped;
	__u64 missed;
	__u64 behind;
	__u32 unit_pos[WL_LOAD_UNITS];
	__u32 value[WL_LOAD_EDITS];
};

/* One version's counters (a bank): packets, bytes, and the blind delay's
 * base and sum of times since it (§6.2: B, T, P). */
struct wl_load_bank {
	__u64 packets;
	__u64 bytes;
	__u64 base_ns;
	__u64 sum_ns;
	/* The last packet's time: with base_ns, the rate over the bank. */
	__u64 last_ns;
	/* Sink only: stamped packets, the latency's extremes, sequence numbers
	 * lower than one seen before (reordered or duplicated). */
	__u64 stamped;
	__u64 lat_min;
	__u64 lat_max;
	__u64 late_seq;
	__u64 max_seq;
};

struct wl_sink_conf {
	/* The stream's packets: UDP (or TCP, below) to this port (network
	 * order). */
	__u16 port;
	/* The stamp's offset in the L4 payload (0xffff: none): past a VXLAN
	 * header, the inner frame's headers and raw bytes. */
	__u16 stamp_off;
	/* 1: the stream is TCP. */
	__u32 tcp;
	/* As the generator's (wl_gen_conf.sample_every). */
	__u32 sample_every;
};

/* One sampled frame: the side (0 sent, 1 received), its sequence number,
 * the time, its length and its first bytes. */
struct wl_sample {
	__u64 ts;
	__u64 seq;
	__u32 len;
	__u32 cap;
	__u32 side;
	__u32 stream;
	__u8 data[WL_SAMPLE_CAP];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, WL_LOAD_STREAMS);
	__type(key, __u32);
	__type(value, struct wl_gen_conf);
} gen_conf SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, WL_LOAD_STREAMS);
	__type(key, __u32);
	__type(value, struct wl_gen_state);
} gen_state SEC(".maps");

/* A generating thread's stream: thread ID -> stream. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u32);
} gen_threads SEC(".maps");

struct wl_gen_head {
	__u64 w[WL_LOAD_HEAD / 8];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, WL_LOAD_STREAMS);
	__type(key, __u32);
	__type(value, struct wl_gen_head);
} gen_head SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, WL_LOAD_TABLE);
	__type(key, __u32);
	__type(value, __u32);
} load_table SEC(".maps");

/* Per stream, banks 0 and 1 by version; 2 counts every packet, the
 * naive counter a tester without versions reads: key = stream * 3 + bank. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, WL_LOAD_STREAMS * 3);
	__type(key, __u32);
	__type(value, struct wl_load_bank);
} gen_banks SEC(".maps");

/* Per stream; a port of 0: the stream is not measured here. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, WL_LOAD_STREAMS);
	__type(key, __u32);
	__type(value, struct wl_sink_conf);
} sink_conf SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, WL_LOAD_STREAMS * 3);
	__type(key, __u32);
	__type(value, struct wl_load_bank);
} sink_banks SEC(".maps");

/* Latency histogram, per stream and version:
 * key = (stream * 2 + version) * WL_HIST_BUCKETS + bucket. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, WL_LOAD_STREAMS * 2 * WL_HIST_BUCKETS);
	__type(key, __u32);
	__type(value, __u64);
} sink_hist SEC(".maps");

/* The pcapng sample, drained by user space while the stream runs. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 22);
} sample_ring SEC(".maps");

/* Frames the bare sink (wl_drop) dropped: the bench's baseline. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} drop_count SEC(".maps");

/* Samples the ring had no room for, by side. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u64);
} sample_lost SEC(".maps");

/* Force the enums into BTF, for the skeleton's types. */
const volatile enum wl_load_limits wl_load_limits_btf = WL_LOAD_UNITS;
const volatile enum wl_hist_limits wl_hist_limits_btf = WL_HIST_BITS;
const volatile enum wl_edit_mode wl_edit_mode_btf = WL_EDIT_OFF;
const volatile struct wl_sample wl_sample_btf;

/* Copies the frame's first bytes to sample_ring; `side` carries the
 * stream in its bits above the first. A global function, verified once
 * for both programs. */
__noinline int wl_take_sample(struct xdp_md *ctx, __u32 side, __u64 seq, __u64 now)
{
	struct wl_sample *r;
	__u32 len, cap, k = side & 1;
	__u64 *lost;

	if (!ctx)
		return 0;
	len = bpf_xdp_get_buff_len(ctx);
	cap = len < WL_SAMPLE_CAP ? len : WL_SAMPLE_CAP;
	if (cap < 1 || cap > WL_SAMPLE_CAP)
		return 0;
	r = bpf_ringbuf_reserve(&sample_ring, sizeof(*r), 0);
	if (!r) {
		lost = bpf_map_lookup_elem(&sample_lost, &k);
		if (lost)
			__sync_fetch_and_add(lost, 1);
		return 0;
	}
	r->ts = now;
	r->seq = seq;
	r->len = len;
	r->cap = cap;
	r->side = k;
	r->stream = (side >> 1) & (WL_LOAD_STREAMS - 1);
	/* The same value, in a form whose bounds (1..WL_SAMPLE_CAP) survive
	 * clang's register choices for the verifier. */
	if (bpf_xdp_load_bytes(ctx, 0, r->data, ((cap - 1) & (WL_SAMPLE_CAP - 1)) + 1)) {
		bpf_ringbuf_discard(r, 0);
		return 0;
	}
	bpf_ringbuf_submit(r, 0);
	return 1;
}

/* RFC 1624 eqn. 3: HC' = ~(~HC + ~m + m'), on 16-bit words. */
static __always_inline __u16 csum_update(__u16 hc, __u16 old, __u16 new)
{
	__u32 s = (__u16)~hc + (__u16)~old + (__u32)new;

	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return ~s;
}

/* Writes the 16-bit word at `off` (even; network order `new`) and patches
 * the checksums that cover it: the IPv4 header's (at l3, up to l4), and
 * the L4 one at `ck` for the L4 header, the payload and the
 * pseudo-header's addresses. A global function, verified once on its own
 * (with every caller it would multiply the verifier's states). */
__noinline int wl_put16(struct xdp_md *ctx, __u32 off, __u32 new_w, __u32 l3_l4, __u32 ck)
{
	void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
	/* BPF calls take 5 arguments: the two header offsets share one. */
	__u32 l3 = l3_l4 & (WL_LOAD_MAX_FRAME - 1), l4 = (l3_l4 >> 16) & (WL_LOAD_MAX_FRAME - 1);
	/* ... and the IPv6 flag rides in the checksum offset's top bit. */
	__u32 v6 = ck >> 31;
	__u32 ph_lo = v6 ? l3 + 8 : l3 + 12, ph_hi = v6 ? l3 + 40 : l3 + 20;
	__u16 *w, *h, old, new = new_w;

	ck &= WL_LOAD_MAX_FRAME - 1;

	off &= WL_LOAD_MAX_FRAME - 2;
	w = data + off;
	if ((void *)(w + 1) > end)
		return -1;
	old = *w;
	if (old == new)
		return 0;
	*w = new;
	if (!v6 && off >= l3 && off < l4) {
		h = data + l3 + offsetof(struct iphdr, check);
		if ((void *)(h + 1) > end)
			return -1;
		*h = csum_update(*h, old, new);
	}
	if (ck && (off >= l4 || (off >= ph_lo && off < ph_hi))) {
		h = data + ck;
		if ((void *)(h + 1) > end)
			return -1;
		/* RFC 768: a UDP checksum of 0 means none, and stays so; a
		 * computed 0 is sent as 0xffff. */
		if (*h) {
			__u16 v = csum_update(*h, old, new);
			*h = v ? v : 0xffff;
		}
	}
	return 0;
}

static __always_inline int put16(struct xdp_md *ctx, const struct wl_gen_conf *c, __u32 off,
				 __u16 new)
{
	return wl_put16(ctx, off, new, c->l3_off | ((__u32)c->l4_off << 16),
			c->csum_off | ((__u32)(c->ipv6 & 1) << 31));
}

/* ~(~hc + d) folded: RFC 1624 eqn. 3 with the words' changes summed in d
 * (Σ ~m_i + m'_i, at most a few dozen words' worth). */
static __always_inline __u16 csum_add(__u16 hc, __u32 d)
{
	__u32 s = (__u16)~hc + d;

	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return ~s;
}

/* The stamp (sequence number, then send time; 8 big-endian words) at `s`,
 * written at once, and each checksum over it patched once for all eight
 * words (RFC 1624 eqn. 3 summed over the words): an inner TCP checksum
 * under VXLAN first, then the L4 checksum for the stamp and that change
 * (a UDP checksum of 0 stays 0, RFC 768). Inline: a put16 per word cost a
 * global call each, about 11 ns here (the README's SRSO note), nine in
 * every frame. The stamp lies in the payload, past every IP header. */
static __always_inline int put_stamp(struct xdp_md *ctx, const struct wl_gen_conf *c, __u32 s,
				     __u64 seq, __u64 now)
{
	void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
	__u32 ick = c->inner_csum_off & (WL_LOAD_MAX_FRAME - 2);
	__u32 ck = c->csum_off & (WL_LOAD_MAX_FRAME - 2);
	__u16 *w, *h, nw, old, v;
	__u32 d = 0;
	int i;

	s &= WL_LOAD_MAX_FRAME - 2;
	w = data + s;
	if ((void *)(w + 8) > end)
		return -1;
	for (i = 0; i < 8; i++) {
		nw = bpf_htons(((i < 4 ? seq : now) >> (48 - 16 * (i & 3))) & 0xffff);
		d += (__u16)~w[i] + (__u32)nw;
		w[i] = nw;
	}
	if (ick) {
		h = data + ick;
		if ((void *)(h + 1) > end)
			return -1;
		old = *h;
		v = csum_add(old, d);
		/* TCP has no "none": a 0 goes as 0xffff, its ones'-complement
		 * equal. */
		v = v ? v : 0xffff;
		*h = v;
		d += (__u16)~old + (__u32)v;
	}
	if (ck) {
		h = data + ck;
		if ((void *)(h + 1) > end)
			return -1;
		if (*h) {
			v = csum_add(*h, d);
			*h = v ? v : 0xffff;
		}
	}
	return 0;
}

/* Writes `width` bytes of `v` (big-endian) at `off`, word by word. */
static __always_inline int put_field(struct xdp_md *ctx, const struct wl_gen_conf *c, __u32 off,
				     __u32 width, __u32 v)
{
	void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
	__u32 even = off & (WL_LOAD_MAX_FRAME - 2);
	__u8 *b;
	__u16 w;

	if (width == 4) {
		if (put16(ctx, c, even, bpf_htons(v >> 16)))
			return -1;
		return put16(ctx, c, even + 2, bpf_htons(v & 0xffff));
	}
	if (width == 2)
		return put16(ctx, c, even, bpf_htons(v & 0xffff));
	/* One byte: its word, the other byte kept. */
	b = data + even;
	if ((void *)(b + 2) > end)
		return -1;
	if (off & 1)
		w = ((__u16)b[0] << 8) | (v & 0xff);
	else
		w = ((__u16)(v & 0xff) << 8) | b[1];
	return put16(ctx, c, even, bpf_htons(w));
}

/* Under VXLAN, the inner frame's lengths for a frame of `want` bytes: its
 * IPv4 total length and the header checksum over it (RFC 1624), and its
 * UDP length (its checksum is 0) or, for TCP, the pseudo-header's length
 * in its checksum (RFC 9293 §3.1). Each word goes through put16, which
 * patches the outer checksum for it where there is one (IPv6). A global
 * function, verified once. */
__noinline int wl_inner_lengths(struct xdp_md *ctx, __u32 want, __u32 stream)
{
	struct wl_gen_conf *c;
	void *data, *end;
	__u32 il3, ick;
	__u16 *tot, *hck, *tck, old_tot, new_tot, old_l4, new_l4, v;

	stream &= WL_LOAD_STREAMS - 1;
	c = bpf_map_lookup_elem(&gen_conf, &stream);
	if (!c)
		return -1;
	il3 = c->inner_l3_off & (WL_LOAD_MAX_FRAME - 2);
	ick = c->inner_csum_off & (WL_LOAD_MAX_FRAME - 2);
	if (want < il3 + 28)
		return -1;
	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	tot = data + il3 + 2;
	hck = data + il3 + 10;
	if ((void *)(hck + 1) > end || (void *)(tot + 1) > end)
		return -1;
	old_tot = *tot;
	new_tot = bpf_htons(want - il3);
	old_l4 = bpf_htons(bpf_ntohs(old_tot) - 20);
	new_l4 = bpf_htons(want - il3 - 20);
	v = csum_update(*hck, old_tot, new_tot);
	if (put16(ctx, c, il3 + 2, new_tot) || put16(ctx, c, il3 + 10, v))
		return -1;
	if (!ick)
		return put16(ctx, c, il3 + 20 + 4, new_l4);
	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	tck = data + ick;
	if ((void *)(tck + 1) > end)
		return -1;
	v = csum_update(*tck, old_l4, new_l4);
	return put16(ctx, c, ick, v ? v : 0xffff);
}

/* A frame of a size mix, `want` bytes long now: what counts the length,
 * the IPv4 total length and the UDP length (each a word put16 patches the
 * checksums of; TCP has no length of its own), and the L4 checksum once
 * more for the length in its pseudo-header (RFC 768, RFC 9293 §3.1). The payload cut away is zeros, which no
 * checksum counts. A global function, verified once. */
__noinline int wl_lengths(struct xdp_md *ctx, __u32 want, __u32 stream)
{
	struct wl_gen_conf *c;
	struct iphdr *ip;
	struct udphdr *udp;
	void *data, *end;
	__u32 l3, l4;
	__u16 old_ulen, new_ulen, *ck;

	stream &= WL_LOAD_STREAMS - 1;
	c = bpf_map_lookup_elem(&gen_conf, &stream);
	if (!c)
		return -1;
	l3 = c->l3_off & (WL_LOAD_MAX_FRAME - 1);
	l4 = c->l4_off & (WL_LOAD_MAX_FRAME - 1);
	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	ip = data + l3;
	udp = data + l4;
	if ((void *)(ip + 1) > end || (void *)(udp + 1) > end)
		return -1;
	/* The L4 length as the pseudo-header counts it (RFC 768, RFC 9293
	 * §3.1, RFC 8200 §8.1): UDP's own length field, or for TCP what the
	 * network header's length leaves. */
	if (c->tcp)
		old_ulen = bpf_htons(c->ipv6 ? bpf_ntohs(((__u16 *)ip)[2]) :
					       bpf_ntohs(ip->tot_len) - (l4 - l3));
	else
		old_ulen = udp->len;
	new_ulen = bpf_htons(want - l4);
	/* IPv4's total length, or IPv6's payload length (RFC 8200 §3). */
	if (c->ipv6) {
		if (put16(ctx, c, l3 + 4, bpf_htons(want - l3 - 40)))
			return -1;
	} else if (put16(ctx, c, (void *)&ip->tot_len - data, bpf_htons(want - l3))) {
		return -1;
	}
	if (!c->tcp && put16(ctx, c, (void *)&udp->len - data, new_ulen))
		return -1;
	/* The pseudo-header's copy of the length. */
	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	ck = data + (c->csum_off & (WL_LOAD_MAX_FRAME - 2));
	if (c->csum_off && (void *)(ck + 1) <= end && *ck) {
		__u16 v = csum_update(*ck, old_ulen, new_ulen);
		*ck = v ? v : 0xffff;
	}
	if (c->inner_l3_off)
		return wl_inner_lengths(ctx, want, stream);
	return 0;
}

/* Edit i of the template; returns 1 when a step wrapped (its cascade
 * moves), -1 when the frame is too short. A global function: the editor
 * is verified once, not once per edit and branch. */
__noinline int wl_edit(struct xdp_md *ctx, __u32 i, __u32 carries, __u32 stream)
{
	const struct wl_load_edit *e;
	struct wl_gen_state *st;
	struct wl_gen_conf *c;
	__u32 v, out, wrapped = 0, *t, k, r, l;

	stream &= WL_LOAD_STREAMS - 1;
	c = bpf_map_lookup_elem(&gen_conf, &stream);
	st = bpf_map_lookup_elem(&gen_state, &stream);
	if (!c || !st)
		return -1;
	i &= WL_LOAD_EDITS - 1;
	e = &c->edit[i];
	v = st->value[i];

	switch (e->mode) {
	case WL_EDIT_STEP:
	case WL_EDIT_INDIRECT:
		/* The first packet gets lo; a cascaded step moves only when
		 * the edit driving it wrapped in this packet. */
		if (v == 0xffffffff) {
			v = e->lo;
			break;
		}
		if (e->carry_from && !(carries & (1u << ((e->carry_from - 1) & 31))))
			break;
		/* Past hi, back by the range's length (App. C 1). */
		if ((__u64)v + e->step > e->hi) {
			v = (__u32)((__u64)v + e->step - ((__u64)e->hi - e->lo + 1));
			wrapped = 1;
		} else {
			v += e->step;
		}
		break;
	case WL_EDIT_RANDOM:
		v = (e->lo & ~e->hi) | (bpf_get_prandom_u32() & e->hi);
		break;
	case WL_EDIT_RANGED:
		/* n := (n' + r) mod l with r < 2^k <= l: one subtraction does
		 * the mod (App. C 5). */
		l = e->hi - e->lo + 1;
		k = e->rand_bits & 31;
		r = bpf_get_prandom_u32() & ((1u << k) - 1);
		if (v == 0xffffffff)
			v = 0;
		v += r;
		if (v >= l)
			v -= l;
		break;
	default:
		return 0;
	}
	st->value[i] = v;
	out = v;
	if (e->mode == WL_EDIT_INDIRECT) {
		k = (e->table + v) & (WL_LOAD_TABLE - 1);
		t = bpf_map_lookup_elem(&load_table, &k);
		out = t ? *t : 0;
	} else if (e->mode == WL_EDIT_RANGED) {
		out = e->lo + v;
	}
	if (put_field(ctx, c, e->offset, e->width, out))
		return -1;
	return wrapped;
}

/* Unit k of the cascade (k a constant, for the verifier): 1 when it
 * skips this packet. A unit passing nothing ends the cascade. */
static __always_inline int unit_step(const struct wl_gen_conf *c, struct wl_gen_state *st, int k)
{
	const struct wl_load_unit *u = &c->unit[k];
	__u32 pos = st->unit_pos[k];

	if (!u->pass)
		return 0;
	st->unit_pos[k] = pos + 1 >= u->pass + u->skip ? 0 : pos + 1;
	if (pos < u->pass)
		return 0;
	st->skipped++;
	return 1;
}

/* Bank `b`: one more packet of `len` bytes at `now`. */
static __always_inline void count(struct wl_load_bank *b, __u64 len, __u64 now)
{
	b->packets++;
	b->bytes += len;
	if (!b->base_ns)
		b->base_ns = now;
	b->sum_ns += now - b->base_ns;
	b->last_ns = now;
}

SEC("xdp")
int wl_gen(struct xdp_md *ctx)
{
	void *data, *end;
	__u32 stream = 0, i, carries = 0, version, tid, *mine;
	struct wl_load_bank *bank, *total;
	struct wl_gen_head *head;
	__u64 n;
	struct wl_gen_state *st;
	struct wl_gen_conf *c;
	__u64 now, late, seq;
	struct iphdr *ip;
	__u32 want = 0;
	int r;

	/* The calling thread's stream (BPF_PROG_RUN runs in its context). */
	tid = (__u32)bpf_get_current_pid_tgid();
	mine = bpf_map_lookup_elem(&gen_threads, &tid);
	if (mine)
		stream = *mine & (WL_LOAD_STREAMS - 1);
	c = bpf_map_lookup_elem(&gen_conf, &stream);
	st = bpf_map_lookup_elem(&gen_state, &stream);
	if (!c || !st)
		return XDP_ABORTED;
	now = pipeline_now();

	/* 1. The meter (GCRA): a run before the theoretical arrival time is
	 * held back; a conforming one moves it on by one interval. */
	if (c->interval_ns) {
		if (!st->tat)
			st->tat = now;
		if (now < st->tat) {
			st->held++;
			return XDP_DROP;
		}
		late = now - st->tat;
		if (late > c->tolerance_ns) {
			st->missed += late / c->interval_ns;
			st->tat = now;
		} else if (late >= c->interval_ns) {
			st->behind++;
		}
		st->tat += c->interval_ns;
	}
	/* 2. The cascade: unit i sees what unit i-1 passed (Figure 4). */
	if (unit_step(c, st, 0) || unit_step(c, st, 1) || unit_step(c, st, 2) ||
	    unit_step(c, st, 3))
		return XDP_DROP;
	/* 3. The frame's length when the stream mixes sizes (before its head
	 * is written: a live frame keeps the length its last run left, and
	 * the bytes past the head are the template's, untouched), then the
	 * template's head, back as it was (see the top). */
	if (c->nsizes) {
		__s64 have = bpf_xdp_get_buff_len(ctx);

		want = c->sizes[(st->seq % c->nsizes) & (WL_LOAD_SIZES - 1)];
		if (want < 60 || want > WL_LOAD_MAX_FRAME)
			return XDP_ABORTED;
		if (want != have && bpf_xdp_adjust_tail(ctx, (__s64)want - have))
			return XDP_ABORTED;
	}
	head = bpf_map_lookup_elem(&gen_head, &stream);
	if (!head)
		return XDP_ABORTED;
	n = bpf_xdp_get_buff_len(ctx);
	if (n > WL_LOAD_HEAD)
		n = WL_LOAD_HEAD;
	if (n < 1 || bpf_xdp_store_bytes(ctx, 0, head->w, n))
		return XDP_ABORTED;
	/* The lengths, when the stream mixes sizes. */
	if (want && wl_lengths(ctx, want, stream) < 0)
		return XDP_ABORTED;
	/* 4. The editor (App. C), in the order of the edits, so a cascaded
	 * step follows the one that drives it. */
	for (i = 0; i < WL_LOAD_EDITS; i++) {
		if (i >= c->edits)
			break;
		r = wl_edit(ctx, i, carries, stream);
		if (r < 0)
			return XDP_ABORTED;
		carries |= (__u32)r << i;
	}
	/* 5. The version bit and the stamp. */
	seq = st->seq++;
	version = c->version & 1;
	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	ip = data + (c->l3_off & (WL_LOAD_MAX_FRAME - 1));
	if ((void *)(ip + 1) > end && !c->no_ip)
		return XDP_ABORTED;
	/* IPv4: the ID; IPv6 has none: the flow label's low word. */
	if (!c->no_ip &&
	    put16(ctx, c, c->ipv6 ? (void *)ip + 2 - data : (void *)&ip->id - data,
		  bpf_htons((version << 15) | (seq & 0x7fff))))
		return XDP_ABORTED;
	/* A frame of a size mix too short for the stamp goes without one
	 * (the sink counts it, without a latency). */
	if (c->stamp_off && c->stamp_off + WL_LOAD_STAMP <= bpf_xdp_get_buff_len(ctx)) {
		__u32 s = c->stamp_off & (WL_LOAD_MAX_FRAME - 2);
		__u64 zero16[2] = {0, 0};

		/* A stamp past the head keeps the last run's values in a live
		 * frame, while the checksums over it came back as the
		 * template's: the template's stamp (zeros) first, so the
		 * patches below start from the bytes the checksums count. */
		if (s + WL_LOAD_STAMP > WL_LOAD_HEAD &&
		    bpf_xdp_store_bytes(ctx, s, zero16, sizeof(zero16)))
			return XDP_ABORTED;

		if (put_stamp(ctx, c, s, seq, now))
			return XDP_ABORTED;
	}
	if (c->sample_every && seq % c->sample_every == 0)
		wl_take_sample(ctx, stream << 1, seq, now);
	/* 6. Counted in its version's bank and in the naive total. */
	i = stream * 3 + version;
	bank = bpf_map_lookup_elem(&gen_banks, &i);
	i = stream * 3 + 2;
	total = bpf_map_lookup_elem(&gen_banks, &i);
	if (!bank || !total)
		return XDP_ABORTED;
	count(bank, bpf_xdp_get_buff_len(ctx), now);
	count(total, bpf_xdp_get_buff_len(ctx), now);
	return bpf_redirect(c->ifindex, 0);
}

static __always_inline __u64 be64_at(const __u8 *p)
{
	__u64 v = 0;
	int i;

	for (i = 0; i < 8; i++)
		v = (v << 8) | p[i];
	return v;
}

/* The stream whose packets go to `port` (network order) over `proto`
 * (1: TCP), and its settings; WL_LOAD_STREAMS: none. */
static __always_inline __u32 sink_stream(__u16 port, __u32 tcp, struct wl_sink_conf **conf)
{
	__u32 k;

	for (k = 0; k < WL_LOAD_STREAMS; k++) {
		struct wl_sink_conf *c = bpf_map_lookup_elem(&sink_conf, &k);

		if (c && c->port && c->port == port && c->tcp == tcp) {
			*conf = c;
			return k;
		}
	}
	return WL_LOAD_STREAMS;
}

SEC("xdp")
int wl_sink(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct wl_load_bank *bank, *total;
	struct wl_sink_conf *c = 0;
	__u32 version, key, stream, tcp;
	struct iphdr *ip;
	struct udphdr *udp;
	__u64 now, *h;
	__u8 *payload, proto_l4;
	void *l3;
	__u16 proto, vword;

	if ((void *)(eth + 1) > end)
		return XDP_PASS;
	proto = eth->h_proto;
	l3 = eth + 1;
	/* One 802.1Q tag. */
	if (proto == bpf_htons(ETH_P_8021Q)) {
		__u16 *tag = l3;

		if ((void *)(tag + 2) > end)
			return XDP_PASS;
		proto = tag[1];
		l3 = tag + 2;
	}
	if (proto == bpf_htons(ETH_P_IP)) {
		ip = l3;
		if ((void *)(ip + 1) > end || ip->ihl != 5)
			return XDP_PASS;
		proto_l4 = ip->protocol;
		udp = (void *)(ip + 1);
		vword = ip->id;
	} else if (proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = l3;

		if ((void *)(ip6 + 1) > end)
			return XDP_PASS;
		proto_l4 = ip6->nexthdr;
		udp = (void *)(ip6 + 1);
		/* The flow label's low word (the generator's version bit). */
		vword = ((__u16 *)ip6)[1];
	} else {
		return XDP_PASS;
	}
	if (proto_l4 != IPPROTO_UDP && proto_l4 != IPPROTO_TCP)
		return XDP_PASS;
	tcp = proto_l4 == IPPROTO_TCP;
	/* UDP's and TCP's destination ports sit at the same offset. */
	if ((void *)(udp + 1) > end)
		return XDP_PASS;
	stream = sink_stream(udp->dest, tcp, &c);
	if (stream >= WL_LOAD_STREAMS || !c)
		return XDP_PASS;
	payload = (void *)(udp + 1);
	if (tcp) {
		struct tcphdr *th = (void *)udp;

		if ((void *)(th + 1) > end)
			return XDP_PASS;
		payload = (__u8 *)th + th->doff * 4;
	}
	now = pipeline_now();
	version = bpf_ntohs(vword) >> 15;
	key = stream * 3 + version;
	bank = bpf_map_lookup_elem(&sink_banks, &key);
	key = stream * 3 + 2;
	total = bpf_map_lookup_elem(&sink_banks, &key);
	if (!bank || !total)
		return XDP_DROP;
	count(bank, bpf_xdp_get_buff_len(ctx), now);
	count(total, bpf_xdp_get_buff_len(ctx), now);
	if (c->stamp_off != 0xffff) {
		__u8 *s = payload + (c->stamp_off & (WL_LOAD_MAX_FRAME - 1));
		__u64 seq, sent, lat;

		if ((void *)(s + 16) > end)
			return XDP_DROP;
		seq = be64_at(s);
		sent = be64_at(s + 8);
		lat = now > sent ? now - sent : 0;
		/* The bank is zeroed between its intervals: its first stamped
		 * packet sets the extremes. */
		bank->stamped++;
		if (bank->stamped == 1 || lat < bank->lat_min)
			bank->lat_min = lat;
		if (lat > bank->lat_max)
			bank->lat_max = lat;
		/* Sequence numbers are the stream's generator CPU's: with one
		 * generator CPU, one not above the highest seen is reordered or
		 * a duplicate. */
		if (bank->stamped > 1 && seq <= bank->max_seq)
			bank->late_seq++;
		else
			bank->max_seq = seq;
		if (c->sample_every && seq % c->sample_every == 0)
			wl_take_sample(ctx, 1 | stream << 1, seq, now);
		key = (stream * 2 + version) * WL_HIST_BUCKETS + hist_bucket(lat);
		h = bpf_map_lookup_elem(&sink_hist, &key);
		if (h)
			(*h)++;
	}
	return XDP_DROP;
}

/* On the peer of a veth tester port: a veth accepts redirected frames
 * (ndo_xdp_xmit) only while its peer runs NAPI, which an XDP program
 * turns on (as xdp-trafficgen loads a dummy program). It passes all. */
SEC("xdp")
int wl_pass(struct xdp_md *ctx)
{
	return XDP_PASS;
}

/* The path's limit, for `wirelab bench load` (issue 20: the generator
 * within 80% of what the receiving side sinks with XDP_DROP): the least a
 * source can do, each live frame sent on as it is to stream 0's device,
 * no meter, editor, stamp or count ... */
SEC("xdp")
int wl_raw(struct xdp_md *ctx)
{
	__u32 k = 0;
	struct wl_gen_conf *c = bpf_map_lookup_elem(&gen_conf, &k);

	if (!c)
		return XDP_ABORTED;
	return bpf_redirect(c->ifindex, 0);
}

/* ... and the least a sink can do: count and drop. */
SEC("xdp")
int wl_drop(struct xdp_md *ctx)
{
	__u32 k = 0;
	__u64 *n = bpf_map_lookup_elem(&drop_count, &k);

	if (n)
		(*n)++;
	return XDP_DROP;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
