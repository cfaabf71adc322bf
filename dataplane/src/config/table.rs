//! `[[table]]`: tables, their keys, default actions and entries.

use super::ConfigError;
use crate::action::{parse_action_list, ActionContext};
use crate::table::{Field, MatchKind, Pipeline, Table};
use crate::wire::EthernetAddress;
use serde::Deserialize;
use std::path::Path;

/// `[[table]]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TableConfig {
    /// Unique name (used by `goto` and in stats).
    pub name: String,
    /// Key fields, like `[{ field = "eth.dst", match = "exact" }]`.
    pub key: Vec<KeyFieldConfig>,
    /// Action list on a miss, like `"forward(0)"`, `"flood"` or `"drop"` (default `"drop"`).
    #[serde(default = "d_default_action")]
    pub default_action: String,
    /// `[[table.entry]]`.
    #[serde(rename = "entry", default)]
    pub entries: Vec<EntryConfig>,
}

/// One key field.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyFieldConfig {
    /// Field name, like `eth.dst`.
    pub field: String,
    /// Match kind: `exact`.
    #[serde(rename = "match")]
    pub kind: String,
}

/// `[[table.entry]]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EntryConfig {
    /// One value per key field, in key order: a MAC `"02:00:00:00:00:01"` or an integer.
    pub key: Vec<toml::Value>,
    /// Action list, like `"forward(1)"`.
    pub action: String,
}

fn d_default_action() -> String {
    "drop".to_string()
}

/// Builds the pipeline from the `[[table]]` list; `ports` is the number of configured ports.
pub fn build_pipeline(
    tables: &[TableConfig],
    ports: u16,
    path: &Path,
) -> Result<Pipeline, ConfigError> {
    let err = |key: String, msg: String| ConfigError::new(path, key, msg);
    let names: Vec<String> = tables.iter().map(|t| t.name.clone()).collect();
    let mut out = Pipeline::default();
    for (ti, tc) in tables.iter().enumerate() {
        let tkey = format!("table[{ti}]");
        if tc.name.is_empty() {
            return Err(err(
                format!("{tkey}.name"),
                "expected a non-empty name".into(),
            ));
        }
        if names[..ti].contains(&tc.name) {
            return Err(err(
                format!("{tkey}.name"),
                format!("table name {:?} is used twice", tc.name),
            ));
        }
        if tc.key.is_empty() {
            return Err(err(
                format!("{tkey}.key"),
                "expected at least one key field".into(),
            ));
        }
        let mut fields = Vec::new();
        for (ki, kf) in tc.key.iter().enumerate() {
            let field = Field::from_name(&kf.field).ok_or_else(|| {
                let all: Vec<&str> = Field::ALL.iter().map(|f| f.name()).collect();
                err(
                    format!("{tkey}.key[{ki}].field"),
                    format!(
                        "unknown field {:?}; expected one of: {}",
                        kf.field,
                        all.join(", ")
                    ),
                )
            })?;
            let kind = match kf.kind.as_str() {
                "exact" => MatchKind::Exact,
                other => {
                    return Err(err(
                        format!("{tkey}.key[{ki}].match"),
                        format!("unknown match kind {other:?}; expected: exact"),
                    ))
                }
            };
            fields.push((field, kind));
        }
        let ctx = ActionContext {
            ports,
            tables: &names,
            table_index: ti,
        };
        let default_action = parse_action_list(&tc.default_action, ctx)
            .map_err(|e| err(format!("{tkey}.default_action"), e.0))?;
        let mut table = Table::new(&tc.name, fields.clone(), default_action);
        for (ei, ec) in tc.entries.iter().enumerate() {
            let ekey = format!("{tkey}.entry[{ei}]");
            if ec.key.len() != fields.len() {
                return Err(err(
                    format!("{ekey}.key"),
                    format!(
                        "expected {} value(s), one per key field, found {}",
                        fields.len(),
                        ec.key.len()
                    ),
                ));
            }
            let mut bytes = Vec::with_capacity(table.key_len());
            for (vi, (v, (f, _))) in ec.key.iter().zip(&fields).enumerate() {
                let b = field_value(*f, v).map_err(|m| err(format!("{ekey}.key[{vi}]"), m))?;
                bytes.extend_from_slice(&b);
            }
            let actions = parse_action_list(&ec.action, ctx)
                .map_err(|e| err(format!("{ekey}.action"), e.0))?;
            table
                .insert_exact(&bytes, actions)
                .map_err(|m| err(format!("{ekey}.key"), m))?;
        }
        out.tables.push(table);
    }
    Ok(out)
}

/// The big-endian bytes of a value for `field`.
fn field_value(field: Field, v: &toml::Value) -> Result<Vec<u8>, String> {
    match field {
        Field::EthDst | Field::EthSrc => {
            let s = v.as_str().ok_or_else(|| {
                format!(
                    "expected a MAC address string for {}, found {v}",
                    field.name()
                )
            })?;
            let mac: EthernetAddress = s.parse().map_err(|e| format!("{e}, found {s:?}"))?;
            Ok(mac.0.to_vec())
        }
        Field::IngressPort | Field::EthType => {
            let n = int_value(v)
                .ok_or_else(|| format!("expected an integer for {}, found {v}", field.name()))?;
            let max = (1u128 << field.bits()) - 1;
            if n > max {
                return Err(format!(
                    "expected at most {max} for {}, found {n}",
                    field.name()
                ));
            }
            Ok((n as u16).to_be_bytes().to_vec())
        }
    }
}

/// An integer from a TOML integer or a string like `"0x86dd"`.
fn int_value(v: &toml::Value) -> Option<u128> {
    match v {
        toml::Value::Integer(i) if *i >= 0 => Some(*i as u128),
        toml::Value::String(s) => {
            let s = s.trim();
            match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
                Some(h) => u128::from_str_radix(h, 16).ok(),
                None => s.parse().ok(),
            }
        }
        _ => None,
    }
}
