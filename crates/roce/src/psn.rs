//! 24-bit packet sequence number arithmetic (IBTA §9.7.1: "PSNs are 24 bits
//! and wrap"). Comparisons are valid within half the space, which the
//! responder's duplicate/invalid PSN regions (§9.7.5.1.1) rely on too.

pub const MASK: u32 = 0xff_ffff;

pub fn add(psn: u32, n: u32) -> u32 {
    psn.wrapping_add(n) & MASK
}

/// `a - b` as a signed distance in (-2^23, 2^23].
pub fn diff(a: u32, b: u32) -> i32 {
    let d = a.wrapping_sub(b) & MASK;
    if d > 1 << 23 {
        d as i32 - (1 << 24)
    } else {
        d as i32
    }
}

pub fn lt(a: u32, b: u32) -> bool {
    diff(a, b) < 0
}

pub fn le(a: u32, b: u32) -> bool {
    diff(a, b) <= 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wraps_at_24_bits() {
        assert_eq!(add(MASK, 1), 0);
        assert_eq!(add(MASK - 1, 5), 3);
        assert_eq!(diff(2, MASK), 3);
        assert_eq!(diff(MASK, 2), -3);
        assert!(lt(MASK, 0));
        assert!(le(7, 7));
        assert!(!lt(0, MASK));
    }
}
