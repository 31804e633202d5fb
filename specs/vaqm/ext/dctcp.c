// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * DCTCP marking as a wirelab vAQM discipline (NetBump §4.2; Alizadeh et
 * al., SIGCOMM 2010, §3.1): mark CE while the queue is above K, on the
 * instantaneous queue, not an average. The switch has this built in
 * (`dctcp: {k: ...}`); this file is the extension API's smallest example.
 *
 *   vaqm:
 *     extension: ext/dctcp.c
 *     queues:
 *       - {port: receiver, rate: 100mbit, extension: [30000]}   # K in bytes
 */
#include "wirelab_ext.h"

enum { K }; /* the queue's `extension:` numbers */

WL_PROCESS(skb, p, vq)
{
	/* vq->bytes is the leaky bucket's estimate with this packet in it
	 * (NetBump Fig. 5). A Not-ECT packet cannot carry the mark: the
	 * switch queues it unmarked, as a DCTCP switch does. */
	return vq->bytes > vq->param[K] ? WL_AQM_MARK : WL_AQM_PASS;
}
