//! `[[table]]` and `[[multicast_group]]`: the ingress pipeline.

use super::ConfigError;
use crate::action::{parse_action_list, ActionContext, MeterRef};
use crate::table::value::parse_match_value;
use crate::table::{Field, MatchKind, MulticastGroup, Pipeline, Table};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// `[[table]]`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TableConfig {
    /// Unique name (used by `goto` and in stats).
    pub name: String,
    /// Key fields, like `[{ field = "ipv4.dst", match = "lpm" }]`.
    pub key: Vec<KeyFieldConfig>,
    /// Action list on a miss, like `"forward(0)"`, `"flood"` or `"drop"` (default `"drop"`).
    #[serde(default = "d_default_action")]
    pub default_action: String,
    /// `[[table.entry]]`.
    #[serde(rename = "entry", default)]
    pub entries: Vec<EntryConfig>,
}

/// One key field.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct KeyFieldConfig {
    /// Field name, like `eth.dst`.
    pub field: String,
    /// Match kind: `exact`, `lpm`, `ternary` or `range`.
    #[serde(rename = "match")]
    pub kind: String,
}

/// `[[table.entry]]`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct EntryConfig {
    /// One value per key field, in key order (syntax per match kind: see the README).
    pub key: Vec<toml::Value>,
    /// Action list, like `"set_dscp(46); forward(1)"`.
    pub action: String,
    /// Priority, for tables with ternary or range fields (larger wins).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
}

impl TableConfig {
    /// Its entries as labels (Prometheus' `entry`), in order: each entry's key values in one
    /// spelling ([`crate::table::value::match_text`]: every spelling of the same key gives the same
    /// label, as the same key is the same entry), separated by `,`, then ` priority N` when it
    /// has one (`10.0.0.0/8`, `10.0.0.0&&&255.0.0.0,9000->9100 priority 5`). A value that does
    /// not parse (none does in a loaded table) stands as written, without whitespace.
    pub fn entry_labels(&self) -> Vec<String> {
        self.entries
            .iter()
            .map(|e| {
                let mut s = e
                    .key
                    .iter()
                    .enumerate()
                    .map(|(i, v)| {
                        let parsed = self.key.get(i).and_then(|k| {
                            let field = crate::field::Field::from_name(&k.field)?;
                            let kind = crate::table::MatchKind::from_name(&k.kind)?;
                            crate::table::value::parse_match_value(field, kind, v)
                                .ok()
                                .map(|m| crate::table::value::match_text(field, &m))
                        });
                        parsed.unwrap_or_else(|| match v {
                            toml::Value::String(t) => t.chars().filter(|c| !c.is_whitespace()).collect(),
                            other => other.to_string(),
                        })
                    })
                    .collect::<Vec<_>>()
                    .join(",");
                if let Some(p) = e.priority {
                    s += &format!(" priority {p}");
                }
                s
            })
            .collect()
    }
}

/// `[[multicast_group]]`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct GroupConfig {
    /// The id `multicast(id)` names.
    pub id: u16,
    /// `[[multicast_group.copy]]`: one per copy.
    #[serde(rename = "copy")]
    pub copies: Vec<CopyConfig>,
}

/// `[[multicast_group.copy]]`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct CopyConfig {
    /// Egress port.
    pub port: u16,
    /// Rewrites of this copy only, like `"set_eth_dst(02:00:00:00:00:03); push_vlan(30)"`.
    #[serde(default)]
    pub actions: String,
}

fn d_default_action() -> String {
    "drop".to_string()
}

/// Builds the pipeline from the `[[table]]` and `[[multicast_group]]` lists; `ports` is the
/// number of configured ports; `aggregator` says whether the config has collectives (which the
/// `aggregate` action needs).
pub fn build_pipeline(
    tables: &[TableConfig],
    groups: &[GroupConfig],
    meters: &[super::meter::MeterConfig],
    ports: u16,
    aggregator: bool,
    path: &Path,
) -> Result<Pipeline, ConfigError> {
    let checked = super::meter::check(meters, path)?;
    let mut meter_refs: Vec<MeterRef> = checked.iter().map(|(r, ..)| r.clone()).collect();
    let err = |key: String, msg: String| ConfigError::new(path, key, msg);
    let names: Vec<String> = tables.iter().map(|t| t.name.clone()).collect();
    let group_ids: Vec<u16> = groups.iter().map(|g| g.id).collect();
    let mut counters: Vec<String> = Vec::new();
    let mut out = Pipeline::default();

    for (gi, g) in groups.iter().enumerate() {
        let gkey = format!("multicast_group[{gi}]");
        if group_ids[..gi].contains(&g.id) {
            return Err(err(format!("{gkey}.id"), format!("multicast group id {} is used twice", g.id)));
        }
        if g.copies.is_empty() {
            return Err(err(format!("{gkey}.copy"), "expected at least one [[multicast_group.copy]]".into()));
        }
        let mut copies = Vec::new();
        for (ci, c) in g.copies.iter().enumerate() {
            let ckey = format!("{gkey}.copy[{ci}]");
            if c.port >= ports {
                return Err(err(
                    format!("{ckey}.port"),
                    format!("expected a port index below {ports} (the number of [[port]] tables), found {}", c.port),
                ));
            }
            let mut ctx = ActionContext {
                ports,
                tables: &names,
                table_index: usize::MAX,
                groups: &group_ids,
                counters: &mut counters,
                rewrites_only: true,
                aggregator,
                meters: &mut meter_refs,
            };
            let actions = parse_action_list(&c.actions, &mut ctx).map_err(|e| err(format!("{ckey}.actions"), e.0))?;
            copies.push((c.port, actions));
        }
        out.groups.push(MulticastGroup { id: g.id, copies });
    }

    for (ti, tc) in tables.iter().enumerate() {
        let tkey = format!("table[{ti}]");
        if let Some(why) = super::label_error(&tc.name) {
            return Err(err(format!("{tkey}.name"), why));
        }
        if names[..ti].iter().any(|n| super::label_key(n) == super::label_key(&tc.name)) {
            return Err(err(format!("{tkey}.name"), format!("table name {:?} is used twice", tc.name)));
        }
        if tc.key.is_empty() {
            return Err(err(format!("{tkey}.key"), "expected at least one key field".into()));
        }
        let mut fields = Vec::new();
        for (ki, kf) in tc.key.iter().enumerate() {
            let field = Field::from_name(&kf.field).ok_or_else(|| {
                let all: Vec<&str> = Field::ALL.iter().map(|f| f.name()).collect();
                err(
                    format!("{tkey}.key[{ki}].field"),
                    format!("unknown field {:?}; expected one of: {}", kf.field, all.join(", ")),
                )
            })?;
            let kind = MatchKind::from_name(&kf.kind).ok_or_else(|| {
                err(
                    format!("{tkey}.key[{ki}].match"),
                    format!("unknown match kind {:?}; expected exact, lpm, ternary or range", kf.kind),
                )
            })?;
            fields.push((field, kind));
        }
        // One context for the default action and the entries' actions, in that order.
        let mut ctx = ActionContext {
            ports,
            tables: &names,
            table_index: ti,
            groups: &group_ids,
            counters: &mut counters,
            rewrites_only: false,
            aggregator,
            meters: &mut meter_refs,
        };
        let default_action =
            parse_action_list(&tc.default_action, &mut ctx).map_err(|e| err(format!("{tkey}.default_action"), e.0))?;
        let mut table =
            Table::new(&tc.name, fields.clone(), default_action).map_err(|m| err(format!("{tkey}.key"), m))?;
        for (ei, ec) in tc.entries.iter().enumerate() {
            let ekey = format!("{tkey}.entry[{ei}]");
            if ec.key.len() != fields.len() {
                return Err(err(
                    format!("{ekey}.key"),
                    format!("expected {} value(s), one per key field, found {}", fields.len(), ec.key.len()),
                ));
            }
            let mut values = Vec::with_capacity(fields.len());
            for (vi, (v, (f, k))) in ec.key.iter().zip(&fields).enumerate() {
                values.push(parse_match_value(*f, *k, v).map_err(|m| err(format!("{ekey}.key[{vi}]"), m))?);
            }
            let actions = parse_action_list(&ec.action, &mut ctx).map_err(|e| err(format!("{ekey}.action"), e.0))?;
            table.insert(&values, ec.priority, actions).map_err(|e| {
                let k = match e {
                    crate::table::EntryError::Priority(_) => format!("{ekey}.priority"),
                    _ => format!("{ekey}.key"),
                };
                err(k, e.to_string())
            })?;
        }
        out.tables.push(table);
    }
    out.counter_names = counters;
    out.meters = super::meter::specs(checked, &meter_refs);
    Ok(out)
}
