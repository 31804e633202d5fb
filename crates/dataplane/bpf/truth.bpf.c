// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Ground truth for the vAQM stage (NetBump §6.2.2): the real occupancy of a
 * bottleneck qdisc downstream of the switch, next to the virtual queue's
 * estimate at the same instant. NetBump rebuilt the real queue offline from
 * frame timestamps of a pass-through machine; here the kernel says it: the
 * qdisc tracepoints (include/trace/events/qdisc.h) fire after every enqueue
 * and dequeue with the qdisc, whose qstats.backlog is the bytes it holds.
 * Each sample also drains the virtual queue up to now (read-only, with
 * vq_update's own vq_drained), so the two are compared without aligning clocks.
 *
 * Its own object, loaded only when a run asks for it (Config::truth); not
 * part of the forwarding path. It reaches the switch's `vqs` and
 * `fake_clock` maps by fd (src/truth.rs), and its test_clock setting is
 * the switch's.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "wirelab.h"
#include "wl_clock.h"
#include "wl_vq.h"

/* Just the kernel fields read here; CO-RE relocates them against the
 * running kernel's BTF, so no generated vmlinux.h is needed. */
struct ns_common {
	unsigned int inum;
} __attribute__((preserve_access_index));

struct net {
	struct ns_common ns;
} __attribute__((preserve_access_index));

struct net_device {
	int ifindex;
	struct {
		struct net *net;
	} nd_net;
} __attribute__((preserve_access_index));

struct netdev_queue {
	struct net_device *dev;
} __attribute__((preserve_access_index));

struct gnet_stats_queue {
	__u32 qlen;
	__u32 backlog;
} __attribute__((preserve_access_index));

struct qdisc_skb_head {
	__u32 qlen;
} __attribute__((preserve_access_index));

struct Qdisc {
	struct netdev_queue *dev_queue;
	struct qdisc_skb_head q;
	struct gnet_stats_queue qstats;
} __attribute__((preserve_access_index));

struct sk_buff {
	unsigned int len;
} __attribute__((preserve_access_index));

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 22);
} truth_ring SEC(".maps");

/* (network namespace inode, ifindex) of a watched qdisc -> virtual queue. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, WL_MAX_VQS);
	__type(key, struct wl_truth_port);
	__type(value, __u32);
} truth_ports SEC(".maps");

/* Makes the sample type part of the BTF so the skeleton exports it. */
struct wl_truth_sample truth_sample_abi = {};

/* Samples the ring had no room for (reported: the comparison is partial). */
__u64 truth_lost = 0;

static __always_inline void truth_sample(struct Qdisc *qd, struct sk_buff *skb, __u8 kind,
					 int packets)
{
	struct net_device *dev = qd->dev_queue->dev;
	struct wl_truth_port k = {
		.netns = dev->nd_net.net->ns.inum,
		.ifindex = dev->ifindex,
	};
	struct wl_truth_sample *s;
	struct wl_vq *q;
	__u64 frac;
	__u32 *vq;

	vq = bpf_map_lookup_elem(&truth_ports, &k);
	if (!vq)
		return;
	q = bpf_map_lookup_elem(&vqs, vq);
	if (!q)
		return;
	s = bpf_ringbuf_reserve(&truth_ring, sizeof(*s), 0);
	if (!s) {
		__sync_fetch_and_add(&truth_lost, 1);
		return;
	}
	s->ts_ns = pipeline_now();
	s->actual = qd->qstats.backlog;
	s->qlen = qd->q.qlen;
	s->virt = vq_drained(q, s->ts_ns, &frac); /* read-only */
	s->vq = *vq;
	s->len = skb->len;
	s->packets = packets;
	s->kind = kind;
	bpf_ringbuf_submit(s, BPF_RB_NO_WAKEUP);
}

SEC("tp_btf/qdisc_enqueue")
int BPF_PROG(wl_truth_enqueue, struct Qdisc *qd, const struct netdev_queue *txq,
	     struct sk_buff *skb)
{
	truth_sample(qd, skb, WL_TRUTH_ENQUEUE, 1);
	return 0;
}

SEC("tp_btf/qdisc_dequeue")
int BPF_PROG(wl_truth_dequeue, struct Qdisc *qd, const struct netdev_queue *txq, int packets,
	     struct sk_buff *skb)
{
	/* Also fires when the qdisc had nothing to send (skb NULL); a bulk
	 * dequeue (dequeue_skb's try_bulk_dequeue_skb) reports `packets`
	 * linked skbs in one event. */
	if (skb)
		truth_sample(qd, skb, WL_TRUTH_DEQUEUE, packets);
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
