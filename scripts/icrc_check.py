#!/usr/bin/env python3
"""Recomputes the invariant CRC of every RoCEv2 packet in a capture with
scapy's scapy.contrib.roce, an implementation wirelab did not write, and
prints one line per RoCE packet: frame number, opcode, PSN, and `ok`, `bad`
or `truncated` (not captured whole). Used by the lab tests to cross-check
wirelab's ICRC (IBTA Annex A17.8); also handy on captures from real RNICs.

usage: icrc_check.py CAPTURE    (pcap or pcapng; exit 2 if unreadable)
"""
import sys

try:
    from scapy.contrib.roce import BTH
    from scapy.utils import PcapReader
except ImportError as e:  # pragma: no cover
    sys.exit(f"icrc_check: scapy is missing ({e}); make deps installs it")


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    try:
        reader = PcapReader(sys.argv[1])
    except (OSError, Exception) as e:  # scapy raises Scapy_Exception
        print(f"icrc_check: cannot read {sys.argv[1]}: {e}", file=sys.stderr)
        return 2
    with reader:
        for frame, pkt in enumerate(reader, 1):
            if BTH not in pkt:
                continue
            bth = pkt[BTH]
            wirelen = getattr(pkt, "wirelen", None)
            if wirelen is not None and wirelen > len(bytes(pkt)):
                verdict = "truncated"
            else:
                got = bytes(pkt)[-4:]
                verdict = "ok" if got == bth.compute_icrc(None) else "bad"
            print(frame, bth.opcode, bth.psn, verdict)
    return 0


if __name__ == "__main__":
    sys.exit(main())
