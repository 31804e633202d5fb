// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * DCTCP for the lab's end hosts, as a BPF struct_ops congestion control:
 * this kernel has no tcp_dctcp, and NetBump's DCTCP experiments (seed 003
 * §4.2, Figs. 15-16) need senders that react to the fraction of marks.
 * Registered as "wl_dctcp_<pid>" (not "dctcp", so it never clashes with a
 * kernel's own module; user space writes the name into `.name` before
 * loading, one per wirelab process, src/dctcp.rs); a spec's
 * `congestion_control: dctcp` selects it.
 *
 * The algorithm is RFC 8257's:
 *   §3.2 the receiver echoes the CE state of every packet: when the state
 *        changes it sends an immediate ACK, first flushing a delayed ACK
 *        for the packets of the previous state;
 *   §3.3 the sender keeps alpha, the EWMA of the fraction of marked bytes
 *        per window of data, alpha <- (1 - g) alpha + g M with g = 1/16;
 *   §3.3 on ECE it cuts once per window to cwnd (1 - alpha / 2);
 *   §3.5 on loss it halves, as standard TCP.
 * Marked bytes are counted in packets (delivered / delivered_ce), as Linux
 * does. Everything else (slow start, additive increase) is Reno's, through
 * the kernel's tcp_reno_cong_avoid kfunc.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* Just the kernel fields used; CO-RE relocates them (no vmlinux.h). */
struct sock {
	int __unused_placeholder;
} __attribute__((preserve_access_index));

struct inet_connection_sock {
	struct {
		__u8 pending;
	} icsk_ack;
	__u64 icsk_ca_priv[13];
} __attribute__((preserve_access_index));

struct tcp_sock {
	__u32 snd_cwnd;
	__u32 snd_ssthresh;
	__u32 snd_una;
	__u32 snd_nxt;
	__u32 rcv_nxt;
	__u32 delivered;
	__u32 delivered_ce;
	__u8 ecn_flags;
} __attribute__((preserve_access_index));

struct tcp_congestion_ops {
	__u32 (*ssthresh)(struct sock *sk);
	void (*cong_avoid)(struct sock *sk, __u32 ack, __u32 acked);
	void (*set_state)(struct sock *sk, __u8 new_state);
	void (*cwnd_event)(struct sock *sk, int ev);
	void (*in_ack_event)(struct sock *sk, __u32 flags);
	__u32 (*undo_cwnd)(struct sock *sk);
	void (*init)(struct sock *sk);
	__u32 flags;
	char name[16];
} __attribute__((preserve_access_index));

/* include/net/tcp.h and inet_connection_sock.h. */
#define TCP_CONG_NEEDS_ECN 0x2
#define TCP_ECN_DEMAND_CWR 4
#define TCP_CA_Recovery 3
#define TCP_CA_Loss 4
#define CA_EVENT_ECN_NO_CE 4
#define CA_EVENT_ECN_IS_CE 5
#define ICSK_ACK_TIMER 2
#define ICSK_ACK_NOW 16

/* alpha in 1/1024; g = 2^-4 (RFC 8257 §4.2 suggests 1/16). */
#define ALPHA_ONE 1024U
#define G_SHIFT 4

extern void tcp_reno_cong_avoid(struct sock *sk, __u32 ack, __u32 acked) __ksym;

/* Per-connection state, in the socket's congestion-control area. */
struct wl_dctcp {
	__u32 alpha;
	__u32 window_end; /* snd_nxt when this observation window began */
	__u32 delivered;  /* tp->delivered at the window's start */
	__u32 delivered_ce;
	__u32 loss_cwnd;
	__u32 prior_rcv_nxt; /* receiver: rcv_nxt before the last segment */
	__u32 ce_state;      /* receiver: CE state of the last segment */
};

static __always_inline struct wl_dctcp *ca(struct sock *sk)
{
	return (void *)((struct inet_connection_sock *)sk)->icsk_ca_priv;
}

static __always_inline struct tcp_sock *tp_of(struct sock *sk)
{
	return (struct tcp_sock *)sk;
}

static __always_inline void new_window(struct tcp_sock *tp, struct wl_dctcp *c)
{
	c->window_end = tp->snd_nxt;
	c->delivered = tp->delivered;
	c->delivered_ce = tp->delivered_ce;
}

SEC("struct_ops")
void BPF_PROG(wl_dctcp_init, struct sock *sk)
{
	struct tcp_sock *tp = tp_of(sk);
	struct wl_dctcp *c = ca(sk);

	/* RFC 8257 §3.3: alpha starts at 1, the conservative choice. */
	c->alpha = ALPHA_ONE;
	c->loss_cwnd = 0;
	c->prior_rcv_nxt = tp->rcv_nxt;
	c->ce_state = 0;
	new_window(tp, c);
}

/* §3.3: once per window of data, alpha <- (1 - g) alpha + g M, where M is
 * the fraction of the window's packets that carried CE. */
SEC("struct_ops")
void BPF_PROG(wl_dctcp_in_ack_event, struct sock *sk, __u32 flags)
{
	struct tcp_sock *tp = tp_of(sk);
	struct wl_dctcp *c = ca(sk);
	__u32 delivered, marked, alpha;

	if ((__s32)(tp->snd_una - c->window_end) < 0)
		return;
	delivered = tp->delivered - c->delivered;
	marked = tp->delivered_ce - c->delivered_ce;
	alpha = c->alpha - (c->alpha >> G_SHIFT);
	if (marked && delivered)
		alpha += (marked << (10 - G_SHIFT)) / delivered;
	c->alpha = alpha > ALPHA_ONE ? ALPHA_ONE : alpha;
	new_window(tp, c);
}

/* §3.3: the cut on ECE, cwnd (1 - alpha / 2); the kernel calls this once
 * per window when it enters CWR. */
SEC("struct_ops")
__u32 BPF_PROG(wl_dctcp_ssthresh, struct sock *sk)
{
	struct tcp_sock *tp = tp_of(sk);
	struct wl_dctcp *c = ca(sk);
	__u32 cwnd = tp->snd_cwnd, cut = (cwnd * c->alpha) >> 11;

	c->loss_cwnd = cwnd;
	return cwnd - cut > 2 ? cwnd - cut : 2;
}

/* §3.5: a loss halves the window, as in standard TCP. The kernel has just
 * asked ssthresh() (the alpha cut, saving the window in loss_cwnd) when it
 * enters fast recovery or the loss state; the halving replaces that. */
SEC("struct_ops")
void BPF_PROG(wl_dctcp_set_state, struct sock *sk, __u8 new_state)
{
	struct tcp_sock *tp = tp_of(sk);
	__u32 half = ca(sk)->loss_cwnd >> 1;

	if (new_state == TCP_CA_Recovery || new_state == TCP_CA_Loss)
		tp->snd_ssthresh = half > 2 ? half : 2;
}

/* §3.2: the receiver's ACKs carry ECE exactly while the segments they
 * acknowledge carried CE. On a change of CE state a delayed ACK for the
 * previous state goes out first, then the new state is acknowledged at
 * once. */
SEC("struct_ops")
void BPF_PROG(wl_dctcp_cwnd_event, struct sock *sk, int ev)
{
	struct inet_connection_sock *icsk = (struct inet_connection_sock *)sk;
	struct tcp_sock *tp = tp_of(sk);
	struct wl_dctcp *c = ca(sk);
	__u32 ce;

	if (ev != CA_EVENT_ECN_IS_CE && ev != CA_EVENT_ECN_NO_CE)
		return;
	ce = ev == CA_EVENT_ECN_IS_CE;
	if (c->ce_state != ce) {
		if (icsk->icsk_ack.pending & ICSK_ACK_TIMER) {
			if (c->ce_state)
				tp->ecn_flags |= TCP_ECN_DEMAND_CWR;
			else
				tp->ecn_flags &= ~TCP_ECN_DEMAND_CWR;
			bpf_tcp_send_ack(tp, c->prior_rcv_nxt);
		}
		icsk->icsk_ack.pending |= ICSK_ACK_NOW;
	}
	c->prior_rcv_nxt = tp->rcv_nxt;
	c->ce_state = ce;
	if (ce)
		tp->ecn_flags |= TCP_ECN_DEMAND_CWR;
	else
		tp->ecn_flags &= ~TCP_ECN_DEMAND_CWR;
}

SEC("struct_ops")
void BPF_PROG(wl_dctcp_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
	tcp_reno_cong_avoid(sk, ack, acked);
}

SEC("struct_ops")
__u32 BPF_PROG(wl_dctcp_undo_cwnd, struct sock *sk)
{
	struct tcp_sock *tp = tp_of(sk);
	__u32 l = ca(sk)->loss_cwnd;

	return tp->snd_cwnd > l ? tp->snd_cwnd : l;
}

SEC(".struct_ops.link")
struct tcp_congestion_ops wl_dctcp = {
	.init = (void *)wl_dctcp_init,
	.in_ack_event = (void *)wl_dctcp_in_ack_event,
	.ssthresh = (void *)wl_dctcp_ssthresh,
	.set_state = (void *)wl_dctcp_set_state,
	.cwnd_event = (void *)wl_dctcp_cwnd_event,
	.cong_avoid = (void *)wl_dctcp_cong_avoid,
	.undo_cwnd = (void *)wl_dctcp_undo_cwnd,
	.flags = TCP_CONG_NEEDS_ECN,
	.name = "wl_dctcp",
};
