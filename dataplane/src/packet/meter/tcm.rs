//! The three-colour markers: one [`Meter`] holds the token buckets of one [`Profile`] and colours
//! packets by RFC 2697 §3, RFC 2698 §3 or RFC 4115 §3.

use super::bucket::{BucketError, TokenBucket};
use super::profile::{Profile, ProfileError};
use super::Color;

/// Why a [`Meter`] cannot be made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum MeterError {
    /// The profile breaks its RFC ([`Profile::validate`]).
    #[error(transparent)]
    Profile(#[from] ProfileError),
    /// The clock is unusable (0 ticks per second, or above [`super::bucket::MAX_HZ`]).
    #[error(transparent)]
    Clock(#[from] BucketError),
}

/// The srTCM's E bucket: filled only by what overflows C (RFC 2697 §3), so it has no rate.
#[derive(Debug, Clone)]
struct Excess {
    /// Whole tokens, bytes, `<= size`.
    tokens: u64,
    /// EBS, bytes.
    size: u64,
}

/// The marker's buckets. `repr(u8)` gives the enum a tag byte of its own: without it the
/// discriminant hides in a niche of the `Option`s and the packet's `match` decodes it (eleven
/// instructions where a byte compare does).
#[derive(Debug, Clone)]
#[repr(u8)]
enum State {
    SrTcm {
        c: TokenBucket,
        e: Excess,
    },
    TrTcm {
        c: TokenBucket,
        p: TokenBucket,
    },
    /// `None` is a bucket of rate 0 and size 0, always empty (CIR = CBS = 0 or EIR = EBS = 0):
    /// only a packet of 0 bytes fits it ("Tc(t)-B >= 0").
    Rfc4115 {
        c: Option<TokenBucket>,
        e: Option<TokenBucket>,
    },
}

/// The state of one meter: its profile's token buckets, all starting full.
///
/// One `Meter` belongs to one worker lcore (no sharing, no atomics): a flow spread over N
/// workers by RSS is metered N times, each at the full profile, so it may pass at up to N times
/// the configured rates.
///
/// `bytes` is the frame's length without FCS and without the padding a NIC adds to frames
/// shorter than 60 bytes (see [the module docs](super)); `now` is in ticks of the clock given to
/// [`Meter::new`].
#[derive(Debug, Clone)]
pub struct Meter {
    profile: Profile,
    state: State,
}

impl Meter {
    /// A meter for `profile` (validated first) on a clock of `hz` ticks per second, its buckets
    /// full at `now` (ticks) and their increments counted from `now`.
    ///
    /// Errors: [`MeterError::Profile`] for a profile its RFC forbids, [`MeterError::Clock`] for
    /// `hz` of 0 or above [`super::bucket::MAX_HZ`].
    pub fn new(profile: &Profile, hz: u64, now: u64) -> Result<Meter, MeterError> {
        profile.validate()?;
        let state = match *profile {
            Profile::SrTcm { cir, cbs, ebs } => {
                State::SrTcm { c: TokenBucket::new(cir, cbs, hz, now)?, e: Excess { tokens: ebs, size: ebs } }
            }
            Profile::TrTcm { cir, cbs, pir, pbs } => {
                State::TrTcm { c: TokenBucket::new(cir, cbs, hz, now)?, p: TokenBucket::new(pir, pbs, hz, now)? }
            }
            Profile::Rfc4115 { cir, cbs, eir, ebs } => {
                if hz == 0 {
                    return Err(BucketError::ZeroHz.into());
                }
                let bucket = |rate, size| match rate {
                    0 => Ok(None),
                    _ => TokenBucket::new(rate, size, hz, now).map(Some),
                };
                State::Rfc4115 { c: bucket(cir, cbs)?, e: bucket(eir, ebs)? }
            }
        };
        Ok(Meter { profile: *profile, state })
    }

    /// The profile this meter runs.
    pub fn profile(&self) -> &Profile {
        &self.profile
    }

    /// The whole tokens (bytes) in the meter's two buckets as of the last packet: (C, E) for
    /// srTCM and RFC 4115, (C, P) for trTCM. For counters and diagnostics.
    pub fn tokens_bytes(&self) -> (u64, u64) {
        let n = |b: &Option<TokenBucket>| b.as_ref().map_or(0, TokenBucket::tokens_bytes);
        match &self.state {
            State::SrTcm { c, e } => (c.tokens_bytes(), e.tokens),
            State::TrTcm { c, p } => (c.tokens_bytes(), p.tokens_bytes()),
            State::Rfc4115 { c, e } => (n(c), n(e)),
        }
    }

    /// Colours a packet of `bytes` arriving at `now` in Color-Blind mode (RFC 2697 §3,
    /// RFC 2698 §3, RFC 4115 §3) and takes its tokens.
    #[inline]
    pub fn color_blind(&mut self, now: u64, bytes: u32) -> Color {
        self.color_aware(now, bytes, Color::Green)
    }

    /// Colours a packet of `bytes` arriving at `now` that a preceding element coloured
    /// `in_color`, in Color-Aware mode (RFC 2697 §3, RFC 2698 §3, RFC 4115 §3), and takes its
    /// tokens. A packet never leaves lighter than it came: yellow stays yellow or turns red, red
    /// stays red. Color-Blind mode is Color-Aware mode with every packet green.
    #[inline]
    pub fn color_aware(&mut self, now: u64, bytes: u32, in_color: Color) -> Color {
        self.refill(now);
        self.color_refilled(bytes, in_color)
    }

    /// Adds the tokens earned up to `now` to every bucket (the srTCM's E takes what overflows
    /// C).
    #[inline]
    fn refill(&mut self, now: u64) {
        match &mut self.state {
            State::SrTcm { c, e } => {
                let overflow = c.refill(now);
                e.tokens = e.tokens.saturating_add(overflow).min(e.size);
            }
            State::TrTcm { c, p } => {
                c.refill(now);
                p.refill(now);
            }
            State::Rfc4115 { c, e } => {
                if let Some(c) = c {
                    c.refill(now);
                }
                if let Some(e) = e {
                    e.refill(now);
                }
            }
        }
    }

    /// True when a refill at `now` would change nothing: no bucket's latest instant is before
    /// `now` (a packet in the same tick as the one before it).
    #[inline(always)]
    pub fn is_refilled(&self, now: u64) -> bool {
        let fresh = |b: &TokenBucket| now <= b.last();
        match &self.state {
            State::SrTcm { c, .. } => fresh(c),
            State::TrTcm { c, p } => fresh(c) && fresh(p),
            State::Rfc4115 { c, e } => c.as_ref().is_none_or(fresh) && e.as_ref().is_none_or(fresh),
        }
    }

    /// [`Meter::color_aware`] with the buckets as they are (refilled up to the packet's
    /// arrival already: [`Meter::is_refilled`]).
    #[inline]
    pub fn color_refilled(&mut self, bytes: u32, in_color: Color) -> Color {
        let b = u64::from(bytes);
        match &mut self.state {
            // RFC 2697 §3: Tc and Te are updated CIR times per second: Tc if below CBS, else Te
            // if below EBS. Green if precoloured green and Tc(t)-B >= 0 (Tc -= B); else yellow if
            // precoloured green or yellow and Te(t)-B >= 0 (Te -= B); else red.
            State::SrTcm { c, e } => {
                if in_color == Color::Green && c.try_take(b) {
                    Color::Green
                } else if in_color != Color::Red && e.tokens >= b {
                    e.tokens -= b;
                    Color::Yellow
                } else {
                    Color::Red
                }
            }
            // RFC 2698 §3: Tp and Tc are incremented PIR and CIR times per second. Red if
            // precoloured red or Tp(t)-B < 0; else yellow if precoloured yellow or Tc(t)-B < 0
            // (Tp -= B); else green (Tp -= B, Tc -= B).
            State::TrTcm { c, p } => {
                // Both buckets run on one clock: B in byte·ticks is the same for both. The
                // colour is computed without branches (a trace's colours are hard to predict):
                // P pays unless red, C only for green.
                let need = p.scaled(b);
                if in_color == Color::Red || !p.holds_scaled(need) {
                    Color::Red
                } else if in_color == Color::Yellow || !c.holds_scaled(need) {
                    p.take_scaled(need);
                    Color::Yellow
                } else {
                    p.take_scaled(need);
                    c.take_scaled(need);
                    Color::Green
                }
            }
            // RFC 4115 §3: Tc and Te are incremented CIR and EIR times per second, independently.
            // Green if precoloured green and Tc(t)-B >= 0 (Tc -= B); else yellow if precoloured
            // green or yellow and Te(t)-B >= 0 (Te -= B); else red.
            State::Rfc4115 { c, e } => {
                if in_color == Color::Green && c.as_mut().map_or(b == 0, |c| c.try_take(b)) {
                    Color::Green
                } else if in_color != Color::Red && e.as_mut().map_or(b == 0, |e| e.try_take(b)) {
                    Color::Yellow
                } else {
                    Color::Red
                }
            }
        }
    }
}
