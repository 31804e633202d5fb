// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * RED (Floyd & Jacobson, IEEE/ACM ToN 1993, Fig. 2; NetBump §4.1 and
 * Fig. 5 lines 9-17) as a wirelab vAQM discipline:
 *   avg <- (1 - w_q) avg + w_q q                       (vAQM hook)
 *   avg < min: pass; avg >= max: drop                  (process hook)
 *   between: count++, p_b = max_p (avg - min) / (max - min),
 *            mark with p_a = p_b / (1 - count p_b), then count <- 0
 * Fractions are in 1/65536, so p_a's test needs no division:
 *   mark when rand (1 - count p_b) < p_b.
 *
 *   vaqm:
 *     extension: ext/red.c
 *     queues:   # min, max (bytes), w_q, max_p (in 1/65536)
 *       - {port: receiver, rate: 100mbit, extension: [20000, 60000, 6554, 6554]}
 */
#include "wirelab_ext.h"

enum { MIN, MAX, W_Q, MAX_P }; /* the queue's `extension:` numbers */
enum { AVG, COUNT };           /* state: avg in 1/65536 bytes; count + 1 */

#define ONE 65536ULL

WL_VAQM(p, vq)
{
	__u64 q = vq->bytes * ONE, avg = vq->state[AVG], w = vq->param[W_Q];

	vq->state[AVG] = q >= avg ? avg + (q - avg) / ONE * w : avg - (avg - q) / ONE * w;
	return 0;
}

WL_PROCESS(skb, p, vq)
{
	__u64 avg = vq->state[AVG] / ONE, min = vq->param[MIN], max = vq->param[MAX];
	__u64 count, pb;

	if (avg < min) {
		vq->state[COUNT] = 0; /* count = -1 */
		return WL_AQM_PASS;
	}
	if (avg >= max) {
		vq->state[COUNT] = 1; /* count = 0 */
		return WL_AQM_DROP;
	}
	count = vq->state[COUNT]++; /* the incremented count */
	pb = (avg - min) * vq->param[MAX_P] / (max - min);
	if (count * pb < ONE &&
	    (bpf_get_prandom_u32() % ONE) * (ONE - count * pb) >= pb * ONE)
		return WL_AQM_PASS;
	vq->state[COUNT] = 1;
	return WL_AQM_MARK;
}
