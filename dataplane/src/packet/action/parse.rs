//! The text form of action lists: `name` or `name(arg)`, joined with `;`, like
//! `"set_dscp(46); forward(1)"`. `police(NAME, yellow=LIST, red=LIST)` nests lists.

use super::{Action, ActionList};
use crate::field::Field;
use crate::meter::Color;
use crate::wire::EthernetAddress;

/// Why an action list's text is not valid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ActionParseError(pub String);

/// What the parser needs to resolve names.
#[derive(Debug)]
pub struct ActionContext<'a> {
    /// Number of configured ports.
    pub ports: u16,
    /// Names of the pipeline's tables, in order.
    pub tables: &'a [String],
    /// Index of the table holding this action list (a `goto` must go forward).
    pub table_index: usize,
    /// Ids of the configured multicast groups, in order (`multicast(id)` resolves to the index).
    pub groups: &'a [u16],
    /// Named counters so far; `count(name)` adds new names.
    pub counters: &'a mut Vec<String>,
    /// Only header rewrites and `count` are allowed (a multicast copy's actions).
    pub rewrites_only: bool,
    /// The configuration has collectives, so `aggregate` has an aggregator to go to.
    pub aggregator: bool,
    /// The configured meters, in order; a direct meter's `instances` grows by one per use.
    pub meters: &'a mut Vec<MeterRef>,
}

/// A configured meter as action lists see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MeterRef {
    /// Its name in `[[meter]]`.
    pub name: String,
    /// One instance per action that uses it.
    pub direct: bool,
    /// Instances: an indexed meter's size; for a direct meter, the uses so far.
    pub instances: u32,
}

const KNOWN: &str = "forward(port), flood, multicast(group), drop, aggregate, goto(table), exit, count(name), \
                     meter(name[, field]), police(name[, field], yellow=actions, red=actions), set_color(colour), \
                     set_class(0..7), set_dscp(0..63), mark_ecn, dec_ttl, set_eth_src(mac), set_eth_dst(mac), \
                     push_vlan(vid), pop_vlan, set_vlan(vid)";

fn err<T>(s: String) -> Result<T, ActionParseError> {
    Err(ActionParseError(s))
}

/// Parses `text` into an [`ActionList`].
///
/// Errors name the action and what was expected: an unknown action, a missing or extra argument,
/// a port, group, DSCP or VID out of range, a `goto` to an unknown or earlier table, an egress
/// action where only rewrites are allowed, or an empty list.
pub fn parse_action_list(text: &str, ctx: &mut ActionContext<'_>) -> Result<ActionList, ActionParseError> {
    let mut out = Vec::new();
    for part in split_top(text, ';') {
        let part = part.trim();
        if part.is_empty() {
            continue;
        }
        let (name, arg) = match part.find('(') {
            Some(open) => {
                if !part.ends_with(')') {
                    return err(format!("expected `)` at the end of {part:?}"));
                }
                (part[..open].trim(), Some(part[open + 1..part.len() - 1].trim()))
            }
            None => (part, None),
        };
        let need = |what: &str| -> Result<&str, ActionParseError> {
            arg.filter(|a| !a.is_empty())
                .ok_or_else(|| ActionParseError(format!("`{name}` expects one argument ({what}), like {name}(...)")))
        };
        let none = || -> Result<(), ActionParseError> {
            match arg {
                None => Ok(()),
                Some(_) => err(format!("`{name}` takes no argument")),
            }
        };
        let int = |what: &str, max: u64| -> Result<u64, ActionParseError> {
            let a = need(what)?;
            let v = match a.strip_prefix("0x") {
                Some(h) => u64::from_str_radix(h, 16).ok(),
                None => a.parse().ok(),
            };
            match v {
                Some(v) if v <= max => Ok(v),
                _ => err(format!("{name}: expected {what} (0..={max}), found {a:?}")),
            }
        };
        let mac = || -> Result<EthernetAddress, ActionParseError> {
            let a = need("a MAC address")?;
            a.parse().map_err(|e| ActionParseError(format!("{name}: {e}, found {a:?}")))
        };
        let action = match name {
            "forward" => {
                let a = need("a port index")?;
                let port: u16 =
                    a.parse().map_err(|_| ActionParseError(format!("forward expects a port index, found {a:?}")))?;
                if port >= ctx.ports {
                    return err(format!(
                        "forward({port}): expected a port index below {} (the number of [[port]] tables)",
                        ctx.ports
                    ));
                }
                Action::Forward(port)
            }
            "flood" => none().map(|_| Action::Flood)?,
            "drop" => none().map(|_| Action::Drop)?,
            "aggregate" => {
                none()?;
                if !ctx.aggregator {
                    return err("`aggregate` needs collectives to sum into: the config has no [[collective]]".into());
                }
                Action::Aggregate
            }
            "exit" => none().map(|_| Action::Exit)?,
            "mark_ecn" => none().map(|_| Action::MarkEcn)?,
            "dec_ttl" => none().map(|_| Action::DecTtl)?,
            "pop_vlan" => none().map(|_| Action::PopVlan)?,
            "multicast" => {
                let id = int("a multicast group id", u16::MAX as u64)? as u16;
                let idx =
                    ctx.groups.iter().position(|g| *g == id).ok_or_else(|| {
                        ActionParseError(format!("multicast({id}): no [[multicast_group]] with id {id}"))
                    })?;
                Action::Multicast(idx as u16)
            }
            "goto" => {
                let a = need("a table name")?;
                let idx = ctx
                    .tables
                    .iter()
                    .position(|t| t == a)
                    .ok_or_else(|| ActionParseError(format!("goto({a}): no table named {a:?}")))?;
                if idx <= ctx.table_index {
                    return err(format!("goto({a}): expected a later table (the pipeline only goes forward)"));
                }
                Action::Goto(idx as u16)
            }
            "count" => {
                let a = need("a counter name")?;
                let idx = match ctx.counters.iter().position(|c| c == a) {
                    Some(i) => i,
                    None => {
                        ctx.counters.push(a.to_string());
                        ctx.counters.len() - 1
                    }
                };
                Action::Count(idx as u16)
            }
            "set_dscp" => Action::SetDscp(int("a DSCP", 63)? as u8),
            "set_eth_src" => Action::SetEthSrc(mac()?),
            "set_eth_dst" => Action::SetEthDst(mac()?),
            "push_vlan" => Action::PushVlan(int("a VLAN ID", 4095)? as u16),
            "set_vlan" => Action::SetVlan(int("a VLAN ID", 4095)? as u16),
            "set_color" => {
                let a = need("a colour: green, yellow or red")?;
                Action::SetColor(Color::from_name(a).ok_or_else(|| {
                    ActionParseError(format!("set_color: expected green, yellow or red, found {a:?}"))
                })?)
            }
            "set_class" => Action::SetClass(int("a traffic class", crate::meta::MAX_CLASSES as u64 - 1)? as u8),
            "meter" => meter_action(need("a meter name")?, ctx)?,
            "police" => {
                if ctx.rewrites_only {
                    return err(
                        "`police` is not allowed here: a multicast copy takes header rewrites and count only".into()
                    );
                }
                police(need("a meter name")?, ctx, &mut out)?;
                continue;
            }
            other => return err(format!("unknown action {other:?}; expected one of: {KNOWN}")),
        };
        if ctx.rewrites_only && !action.is_rewrite() {
            return err(format!("`{name}` is not allowed here: a multicast copy takes header rewrites and count only"));
        }
        out.push(action);
    }
    if out.is_empty() && !ctx.rewrites_only {
        return err(format!("expected at least one action ({KNOWN})"));
    }
    Ok(ActionList(out))
}

/// Splits `text` at each `sep` outside parentheses.
fn split_top(text: &str, sep: char) -> Vec<&str> {
    let (mut depth, mut start, mut parts) = (0i32, 0, Vec::new());
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            c if c == sep && depth == 0 => {
                parts.push(&text[start..i]);
                start = i + c.len_utf8();
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
}

/// `meter(NAME)` or `meter(NAME, FIELD)`: the meter action.
fn meter_action(arg: &str, ctx: &mut ActionContext<'_>) -> Result<Action, ActionParseError> {
    let mut args = split_top(arg, ',').into_iter().map(str::trim);
    let name = args.next().unwrap_or_default();
    let field = args.next();
    if args.next().is_some() {
        return err(format!("meter({arg}): expected a meter name and at most one field"));
    }
    let i = ctx.meters.iter().position(|m| m.name == name).ok_or_else(|| {
        let names: Vec<&str> = ctx.meters.iter().map(|m| m.name.as_str()).collect();
        ActionParseError(format!("meter({name}): no [[meter]] named {name:?} (the config has: {})", names.join(", ")))
    })?;
    let m = &mut ctx.meters[i];
    match (field, m.direct) {
        (None, false) => Ok(Action::MeterAt(i as u16, 0)),
        (None, true) => {
            m.instances += 1;
            Ok(Action::MeterAt(i as u16, m.instances - 1))
        }
        (Some(_), true) => {
            err(format!("meter({arg}): {name} is a direct meter (one instance per entry); it takes no index field"))
        }
        (Some(f), false) => {
            let field = Field::from_name(f).ok_or_else(|| {
                ActionParseError(format!("meter({arg}): unknown field {f:?} to index the meter with"))
            })?;
            Ok(Action::MeterBy(i as u16, field))
        }
    }
}

/// `police(NAME[, FIELD], yellow=LIST, red=LIST)`: the meter, then each colour's list run only
/// for that colour. Without `yellow`, yellow packets go on; without `red`, red ones are dropped.
fn police(arg: &str, ctx: &mut ActionContext<'_>, out: &mut Vec<Action>) -> Result<(), ActionParseError> {
    let mut meter = Vec::new();
    let (mut yellow, mut red) = ("", "drop");
    for a in split_top(arg, ',').into_iter().map(str::trim) {
        match a.split_once('=') {
            Some((k, v)) if k.trim() == "yellow" => yellow = v.trim(),
            Some((k, v)) if k.trim() == "red" => red = v.trim(),
            Some((k, _)) => {
                return err(format!("police: unknown argument {:?}; expected yellow=... or red=...", k.trim()))
            }
            None => meter.push(a),
        }
    }
    let meter = meter_action(&meter.join(","), ctx)?;
    if let (Action::MeterAt(m, i), "", "drop") = (meter, yellow, red) {
        out.push(Action::PoliceAt(m, i));
        return Ok(());
    }
    out.push(meter);
    for (color, list) in [(Color::Yellow, yellow), (Color::Red, red)] {
        if list.is_empty() {
            continue;
        }
        let actions =
            parse_action_list(list, ctx).map_err(|e| ActionParseError(format!("police {}: {}", color.name(), e.0)))?;
        if actions.0.iter().any(|a| matches!(a, Action::WhenColor(..))) {
            return err("police: a colour's actions cannot police again".into());
        }
        let n = u8::try_from(actions.0.len())
            .map_err(|_| ActionParseError("police: at most 255 actions per colour".into()))?;
        out.push(Action::WhenColor(color, n));
        // Drops by the policer are counted apart from table drops.
        out.extend(actions.0.into_iter().map(|a| if a == Action::Drop { Action::DropPoliced } else { a }));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str, rewrites_only: bool) -> Result<ActionList, String> {
        let tables = vec!["l2".to_string(), "acl".to_string()];
        let mut counters = vec!["seen".to_string()];
        let mut meters = vec![
            MeterRef { name: "m".into(), direct: false, instances: 4 },
            MeterRef { name: "d".into(), direct: true, instances: 0 },
        ];
        let mut ctx = ActionContext {
            ports: 2,
            tables: &tables,
            table_index: 0,
            groups: &[7],
            counters: &mut counters,
            rewrites_only,
            aggregator: true,
            meters: &mut meters,
        };
        parse_action_list(s, &mut ctx).map_err(|e| e.0)
    }

    #[test]
    fn parses_lists() {
        assert_eq!(parse("forward(1)", false).unwrap().0, vec![Action::Forward(1)]);
        assert_eq!(parse("count(seen); aggregate", false).unwrap().0, vec![Action::Count(0), Action::Aggregate]);
        assert_eq!(parse(" flood ; goto(acl) ", false).unwrap().0, vec![Action::Flood, Action::Goto(1)]);
        assert_eq!(
            parse("set_dscp(46); mark_ecn; dec_ttl; count(new); count(seen); multicast(7)", false).unwrap().0,
            vec![
                Action::SetDscp(46),
                Action::MarkEcn,
                Action::DecTtl,
                Action::Count(1),
                Action::Count(0),
                Action::Multicast(0)
            ]
        );
        assert_eq!(
            parse("set_eth_dst(02:00:00:00:00:01); push_vlan(100); pop_vlan; set_vlan(0x20)", true).unwrap().0,
            vec![
                Action::SetEthDst("02:00:00:00:00:01".parse().unwrap()),
                Action::PushVlan(100),
                Action::PopVlan,
                Action::SetVlan(32)
            ]
        );
        assert!(parse("", true).unwrap().0.is_empty());
    }

    #[test]
    fn rejects_bad_lists() {
        let e = |s: &str| parse(s, false).unwrap_err();
        assert!(e("forward(2)").contains("below 2"));
        assert!(e("forward(x)").contains("port index"));
        assert!(e("forward").contains("expects one argument"));
        assert!(e("flood(1)").contains("takes no argument"));
        // The list of actions reads as one line with single spaces.
        let known = "forward(port), flood, multicast(group), drop, aggregate, goto(table), exit, count(name), \
                     meter(name[, field]), police(name[, field], yellow=actions, red=actions), set_color(colour), \
                     set_class(0..7), set_dscp(0..63), mark_ecn, dec_ttl, set_eth_src(mac), set_eth_dst(mac), \
                     push_vlan(vid), pop_vlan, set_vlan(vid)";
        assert_eq!(e("teleport"), format!("unknown action \"teleport\"; expected one of: {known}"));
        assert_eq!(e(" ; "), format!("expected at least one action ({known})"));
        assert!(!known.contains("  "));
        assert!(e("goto(l2)").contains("later table"));
        assert!(e("goto(nope)").contains("no table"));
        assert!(e("").contains("at least one"));
        assert!(e("forward(1").contains("`)`"));
        assert!(e("set_dscp(64)").contains("0..=63"));
        assert!(e("push_vlan(4096)").contains("0..=4095"));
        assert!(e("multicast(8)").contains("no [[multicast_group]] with id 8"));
        assert!(e("set_eth_src(02:00)").contains("MAC"));
        assert!(parse("forward(1)", true).unwrap_err().contains("not allowed here"));
        assert!(parse("aggregate", true).unwrap_err().contains("not allowed here"));
        assert!(e("aggregate(1)").contains("takes no argument"));
    }
}
