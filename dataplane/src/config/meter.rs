//! `[[meter]]`: the meters the `meter(...)` and `police(...)` actions use (P4 `meter` externs,
//! RFC 2697, 2698 and 4115 three-colour markers), validated into [`MeterSpec`]s.

use super::ConfigError;
use crate::action::MeterRef;
use crate::meter::array::MeterSpec;
use crate::meter::{Profile, ProfileError};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// Most instances of one indexed meter.
pub const MAX_METER_SIZE: u32 = 1 << 20;

/// `[[meter]]` as written in the file. Rates in bytes per second and sizes in bytes, counting
/// each frame as sent on the wire without FCS or padding.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct MeterConfig {
    /// The name actions use: `meter(NAME)`, `police(NAME, ...)`.
    pub name: String,
    /// `"srtcm"` (RFC 2697), `"trtcm"` (RFC 2698) or `"rfc4115"` (RFC 4115).
    #[serde(rename = "type")]
    pub kind: String,
    /// Committed Information Rate (bytes/s).
    pub cir: u64,
    /// Committed Burst Size (bytes).
    pub cbs: u64,
    /// srTCM and RFC 4115: Excess Burst Size (bytes).
    pub ebs: Option<u64>,
    /// trTCM: Peak Information Rate (bytes/s).
    pub pir: Option<u64>,
    /// trTCM: Peak Burst Size (bytes).
    pub pbs: Option<u64>,
    /// RFC 4115: Excess Information Rate (bytes/s).
    pub eir: Option<u64>,
    /// Colour-aware: the packet's colour so far (`meta.color`, set by an earlier meter or
    /// `set_color`) is the marker's input colour. Default false: colour-blind.
    #[serde(default)]
    pub color_aware: bool,
    /// Instances of an indexed meter (`meter(NAME, FIELD)` picks one by the field's value
    /// modulo `size`). Default 1.
    #[serde(default = "d_size")]
    pub size: u32,
    /// A direct meter: every table entry (or default action) that uses it gets its own
    /// instance. Default false.
    #[serde(default)]
    pub direct: bool,
}

fn d_size() -> u32 {
    1
}

/// Validates the `[[meter]]` list into what action lists resolve (`refs`) and the profiles;
/// errors name the file, `meter[i].KEY` and the rule.
pub(super) fn check(meters: &[MeterConfig], path: &Path) -> Result<Vec<(MeterRef, Profile, bool)>, ConfigError> {
    let mut out: Vec<(MeterRef, Profile, bool)> = Vec::new();
    for (i, m) in meters.iter().enumerate() {
        let key = |k: &str| format!("meter[{i}].{k}");
        let err = |k: &str, msg: String| ConfigError::new(path, key(k), msg);
        if m.name.is_empty() || m.name.contains([',', '(', ')', ';', '=']) {
            return Err(err("name", format!("expected a name without , ( ) ; or =, found {:?}", m.name)));
        }
        if out.iter().any(|(r, ..)| r.name == m.name) {
            return Err(err("name", format!("meter name {:?} is used twice", m.name)));
        }
        // The keys each marker takes, and the ones it does not.
        let (profile, allowed): (Profile, &[&str]) = match m.kind.as_str() {
            "srtcm" => (Profile::SrTcm { cir: m.cir, cbs: m.cbs, ebs: need(m.ebs, "ebs", &err)? }, &["ebs"]),
            "trtcm" => (
                Profile::TrTcm {
                    cir: m.cir,
                    cbs: m.cbs,
                    pir: need(m.pir, "pir", &err)?,
                    pbs: need(m.pbs, "pbs", &err)?,
                },
                &["pir", "pbs"],
            ),
            "rfc4115" => (
                Profile::Rfc4115 {
                    cir: m.cir,
                    cbs: m.cbs,
                    eir: need(m.eir, "eir", &err)?,
                    ebs: need(m.ebs, "ebs", &err)?,
                },
                &["eir", "ebs"],
            ),
            other => {
                return Err(err(
                    "type",
                    format!(
                    "unknown meter type {other:?}; expected srtcm (RFC 2697), trtcm (RFC 2698) or rfc4115 (RFC 4115)"
                ),
                ))
            }
        };
        for (k, v) in [("ebs", m.ebs), ("pir", m.pir), ("pbs", m.pbs), ("eir", m.eir)] {
            if v.is_some() && !allowed.contains(&k) {
                return Err(err(
                    k,
                    format!("a {} meter takes no {k} (it takes cir, cbs and {})", m.kind, allowed.join(", ")),
                ));
            }
        }
        profile
            .validate()
            .map_err(|e: ProfileError| err(&e.field().to_lowercase().replace('/', " and "), e.to_string()))?;
        if m.size == 0 || m.size > MAX_METER_SIZE {
            return Err(err("size", format!("expected 1..={MAX_METER_SIZE} instances, found {}", m.size)));
        }
        if m.direct && m.size != 1 {
            return Err(err("size", "a direct meter has one instance per entry that uses it: leave size out".into()));
        }
        let instances = if m.direct { 0 } else { m.size };
        out.push((MeterRef { name: m.name.clone(), direct: m.direct, instances }, profile, m.color_aware));
    }
    Ok(out)
}

fn need(v: Option<u64>, k: &str, err: &impl Fn(&str, String) -> ConfigError) -> Result<u64, ConfigError> {
    v.ok_or_else(|| err(k, format!("expected {k} (this meter type needs it)")))
}

/// The pipeline's meters once every action list was read (a direct meter's instances are its
/// uses).
pub(super) fn specs(checked: Vec<(MeterRef, Profile, bool)>, refs: &[MeterRef]) -> Vec<MeterSpec> {
    checked
        .into_iter()
        .zip(refs)
        .map(|((r, profile, color_aware), used)| MeterSpec {
            name: r.name,
            profile,
            color_aware,
            instances: used.instances.max(1),
        })
        .collect()
}
