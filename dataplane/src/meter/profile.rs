//! Meter profiles (the three-colour markers' parameters) and their validation.

use super::bucket::{MAX_RATE, MAX_SIZE};

/// A meter's parameters. Rates are in bytes per second, burst sizes in bytes, both counting the
/// bytes described in [the module docs](super) (the frame without FCS or padding).
///
/// The three markers are those of DPDK's `rte_meter` (`rte_meter_srtcm_params`,
/// `rte_meter_trtcm_params`, `rte_meter_trtcm_rfc4115_params`), with the same units.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Profile {
    /// Single Rate Three Color Marker (RFC 2697): one rate filling C, its overflow filling E.
    SrTcm {
        /// Committed Information Rate, bytes/s (> 0).
        cir: u64,
        /// Committed Burst Size, bytes.
        cbs: u64,
        /// Excess Burst Size, bytes (CBS and EBS not both 0).
        ebs: u64,
    },
    /// Two Rate Three Color Marker (RFC 2698): red above PIR, yellow above CIR.
    TrTcm {
        /// Committed Information Rate, bytes/s (> 0).
        cir: u64,
        /// Committed Burst Size, bytes (> 0).
        cbs: u64,
        /// Peak Information Rate, bytes/s (>= CIR).
        pir: u64,
        /// Peak Burst Size, bytes (> 0).
        pbs: u64,
    },
    /// Two Rate Three Color Marker with efficient handling of in-profile traffic (RFC 4115):
    /// green within CIR, yellow within EIR, the two buckets filled independently (uncoupled),
    /// as DPDK's `rte_meter_trtcm_rfc4115`.
    Rfc4115 {
        /// Committed Information Rate, bytes/s (0 only with CBS 0: nothing is green).
        cir: u64,
        /// Committed Burst Size, bytes.
        cbs: u64,
        /// Excess Information Rate, bytes/s (0 only with EBS 0: nothing is yellow).
        eir: u64,
        /// Excess Burst Size, bytes.
        ebs: u64,
    },
}

/// Why a [`Profile`] is refused: the profile's name, the field, and the rule it breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ProfileError {
    /// A rate of 0 where the marker needs tokens (srTCM CIR, trTCM CIR and PIR).
    #[error("{profile} {field}: a rate of 0 bytes/s never adds a token; must be > 0 ({source_ref})")]
    ZeroRate {
        /// `"srTCM"`, `"trTCM"` or `"RFC 4115"`.
        profile: &'static str,
        /// `"CIR"`, `"PIR"`.
        field: &'static str,
        /// Where the rule is written.
        source_ref: &'static str,
    },
    /// srTCM with CBS = EBS = 0: nothing could ever be green or yellow.
    #[error("srTCM CBS and EBS: both are 0; at least one must be > 0 (RFC 2697 §2)")]
    NoBurst,
    /// trTCM with CBS or PBS = 0.
    #[error("trTCM {field}: 0 bytes; must be > 0 (RFC 2698 §2)")]
    ZeroBurst {
        /// `"CBS"` or `"PBS"`.
        field: &'static str,
    },
    /// trTCM with PIR below CIR.
    #[error("trTCM PIR: {pir} bytes/s is below CIR ({cir} bytes/s); must be >= CIR (RFC 2698 §2)")]
    PeakBelowCommitted {
        /// PIR, bytes/s.
        pir: u64,
        /// CIR, bytes/s.
        cir: u64,
    },
    /// RFC 4115 with a rate but no bucket to hold its tokens (CIR > 0 with CBS = 0, or EIR > 0
    /// with EBS = 0): the rate would be configured for nothing.
    #[error("RFC 4115 {field}: 0 bytes with a {rate_field} of {rate} bytes/s; must be > 0 (RFC 4115 §2)")]
    RateWithoutBurst {
        /// `"CBS"` or `"EBS"`.
        field: &'static str,
        /// `"CIR"` or `"EIR"`.
        rate_field: &'static str,
        /// The rate, bytes/s.
        rate: u64,
    },
    /// RFC 4115 with a burst size but a rate of 0: the bucket would start full and never refill,
    /// a one-off allowance rather than a rate.
    #[error("RFC 4115 {rate_field}: 0 bytes/s with a {field} of {size} bytes never refills; set both or neither")]
    BurstWithoutRate {
        /// `"CIR"` or `"EIR"`.
        rate_field: &'static str,
        /// `"CBS"` or `"EBS"`.
        field: &'static str,
        /// The size, bytes.
        size: u64,
    },
    /// RFC 4115 with CIR = EIR = 0: every packet would be red.
    #[error("RFC 4115 CIR and EIR: both are 0; every packet would be red")]
    NoRate,
    /// A rate or size above the token bucket's limit.
    #[error("{profile} {field}: {value} is above the limit {max}")]
    TooLarge {
        /// `"srTCM"`, `"trTCM"` or `"RFC 4115"`.
        profile: &'static str,
        /// The field's name.
        field: &'static str,
        /// The value given.
        value: u64,
        /// The limit ([`MAX_RATE`] bytes/s or [`MAX_SIZE`] bytes).
        max: u64,
    },
    /// A non-zero burst size smaller than the largest frame (see
    /// [`Profile::check_burst_sizes`]): such frames could never take that colour.
    #[error("{profile} {field}: {size} bytes is below the largest frame ({frame} bytes); RFC {rfc} §2 recommends at least that")]
    BurstBelowFrame {
        /// `"srTCM"`, `"trTCM"` or `"RFC 4115"`.
        profile: &'static str,
        /// The field's name.
        field: &'static str,
        /// The size, bytes.
        size: u64,
        /// The largest frame, bytes.
        frame: u64,
        /// 2697, 2698 or 4115.
        rfc: u16,
    },
}

impl ProfileError {
    /// The field the error is about (`"CIR"`, `"CBS"`, ...; `"CBS/EBS"` or `"CIR/EIR"` when it is
    /// a pair).
    pub fn field(&self) -> &'static str {
        match *self {
            ProfileError::ZeroRate { field, .. }
            | ProfileError::ZeroBurst { field }
            | ProfileError::RateWithoutBurst { field, .. }
            | ProfileError::TooLarge { field, .. }
            | ProfileError::BurstBelowFrame { field, .. } => field,
            ProfileError::BurstWithoutRate { rate_field, .. } => rate_field,
            ProfileError::NoBurst => "CBS/EBS",
            ProfileError::PeakBelowCommitted { .. } => "PIR",
            ProfileError::NoRate => "CIR/EIR",
        }
    }
}

impl Profile {
    /// The profile's name: `"srTCM"`, `"trTCM"` or `"RFC 4115"`.
    pub fn name(&self) -> &'static str {
        match self {
            Profile::SrTcm { .. } => "srTCM",
            Profile::TrTcm { .. } => "trTCM",
            Profile::Rfc4115 { .. } => "RFC 4115",
        }
    }

    /// The RFC the profile implements: 2697, 2698 or 4115.
    pub fn rfc(&self) -> u16 {
        match self {
            Profile::SrTcm { .. } => 2697,
            Profile::TrTcm { .. } => 2698,
            Profile::Rfc4115 { .. } => 4115,
        }
    }

    /// The rates (bytes/s) and sizes (bytes) by field name, rates first.
    fn fields(&self) -> [(&'static str, u64, bool); 4] {
        match *self {
            Profile::SrTcm { cir, cbs, ebs } => {
                [("CIR", cir, true), ("CBS", cbs, false), ("EBS", ebs, false), ("EBS", ebs, false)]
            }
            Profile::TrTcm { cir, cbs, pir, pbs } => {
                [("CIR", cir, true), ("PIR", pir, true), ("CBS", cbs, false), ("PBS", pbs, false)]
            }
            Profile::Rfc4115 { cir, cbs, eir, ebs } => {
                [("CIR", cir, true), ("EIR", eir, true), ("CBS", cbs, false), ("EBS", ebs, false)]
            }
        }
    }

    /// Checks the profile against its RFC; the first rule broken is returned.
    ///
    /// - srTCM (RFC 2697 §2): CIR > 0 (a zero rate never refills; DPDK refuses it too), and CBS
    ///   and EBS not both 0 ("at least one of them is larger than 0").
    /// - trTCM (RFC 2698 §2): CIR > 0, PIR > 0, PIR >= CIR ("The PIR must be equal to or greater
    ///   than the CIR"), CBS > 0 and PBS > 0 ("both of them must be configured to be greater
    ///   than 0").
    /// - RFC 4115 (§2): each rate goes with its bucket: CIR > 0 needs CBS > 0 and EIR > 0 needs
    ///   EBS > 0 (as `rte_meter_trtcm_rfc4115_profile_config`), a size with a zero rate is refused
    ///   too (a bucket that never refills), and CIR = EIR = 0 is refused (all red). CIR = CBS = 0
    ///   is allowed (nothing green: an excess-only meter), as EIR = EBS = 0 (no yellow).
    /// - every rate <= [`MAX_RATE`] bytes/s and size <= [`MAX_SIZE`] bytes.
    ///
    /// The RFCs also *recommend* non-zero sizes of at least the largest packet; that depends on
    /// the port's MTU, so it is checked separately by [`check_burst_sizes`](Self::check_burst_sizes).
    pub fn validate(&self) -> Result<(), ProfileError> {
        let profile = self.name();
        for (field, value, is_rate) in self.fields() {
            let max = if is_rate { MAX_RATE } else { MAX_SIZE };
            if value > max {
                return Err(ProfileError::TooLarge { profile, field, value, max });
            }
        }
        match *self {
            Profile::SrTcm { cir, cbs, ebs } => {
                if cir == 0 {
                    return Err(ProfileError::ZeroRate { profile, field: "CIR", source_ref: "RFC 2697 §2" });
                }
                if cbs == 0 && ebs == 0 {
                    return Err(ProfileError::NoBurst);
                }
            }
            Profile::TrTcm { cir, cbs, pir, pbs } => {
                for (field, rate) in [("CIR", cir), ("PIR", pir)] {
                    if rate == 0 {
                        return Err(ProfileError::ZeroRate { profile, field, source_ref: "RFC 2698 §2" });
                    }
                }
                if pir < cir {
                    return Err(ProfileError::PeakBelowCommitted { pir, cir });
                }
                for (field, size) in [("CBS", cbs), ("PBS", pbs)] {
                    if size == 0 {
                        return Err(ProfileError::ZeroBurst { field });
                    }
                }
            }
            Profile::Rfc4115 { cir, cbs, eir, ebs } => {
                if cir == 0 && eir == 0 {
                    return Err(ProfileError::NoRate);
                }
                for (rate_field, rate, field, size) in [("CIR", cir, "CBS", cbs), ("EIR", eir, "EBS", ebs)] {
                    if rate > 0 && size == 0 {
                        return Err(ProfileError::RateWithoutBurst { field, rate_field, rate });
                    }
                    if rate == 0 && size > 0 {
                        return Err(ProfileError::BurstWithoutRate { rate_field, field, size });
                    }
                }
            }
        }
        Ok(())
    }

    /// [`validate`](Self::validate), then checks that every non-zero burst size holds at least
    /// one frame of `max_frame_bytes` (the port's largest frame without FCS), as the RFCs
    /// recommend (RFC 2697 §2, RFC 2698 §2, RFC 4115 §2): a smaller bucket could never give that
    /// frame its colour. Error: [`ProfileError::BurstBelowFrame`].
    pub fn check_burst_sizes(&self, max_frame_bytes: u64) -> Result<(), ProfileError> {
        self.validate()?;
        for (field, size, is_rate) in self.fields() {
            if !is_rate && size != 0 && size < max_frame_bytes {
                return Err(ProfileError::BurstBelowFrame {
                    profile: self.name(),
                    field,
                    size,
                    frame: max_frame_bytes,
                    rfc: self.rfc(),
                });
            }
        }
        Ok(())
    }
}
