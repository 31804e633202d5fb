//! IEEE 802.1Qau Quantized Congestion Notification, as NetBump runs it
//! (seed 003, §4.3 and §6.3.3), without I/O: every call takes `now` or a
//! count, so the same code is driven by the lab and by unit tests.
//!
//! - [`cp`]: the congestion point's feedback Fb = −(Q_off + w·Q_δ), its
//!   6-bit quantisation and the sampling probability (the switch computes
//!   the same in BPF, `stage_vaqm.h`; this is the reference the analyzer and the
//!   fixtures check it against);
//! - [`cnm`]: the congestion notification message on the wire;
//! - [`rp`]: the reaction point's fast recovery and additive increase.
//!
//! Sources: Alizadeh, Atikoglu, Kabbani, Lakshmikantha, Pan, Prabhakar and
//! Seaman, "Data Center Transport Mechanisms: Congestion Control Theory and
//! IEEE Standardization", Allerton 2008 (the QCN algorithm of 802.1Qau), and
//! IEEE 802.1Qau-2010 clause 32-33 (the CNM format).

pub mod cnm;
pub mod cp;
pub mod rp;
