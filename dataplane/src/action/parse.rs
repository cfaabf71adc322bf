//! The text form of action lists: `name` or `name(arg)`, joined with `;`.

use super::{Action, ActionList};

/// Why an action list's text is not valid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ActionParseError(pub String);

/// What the parser needs to resolve names: the number of ports, the table names, and the index
/// of the table the list belongs to (a `goto` must go forward).
#[derive(Debug, Clone, Copy)]
pub struct ActionContext<'a> {
    /// Number of configured ports.
    pub ports: u16,
    /// Names of the pipeline's tables, in order.
    pub tables: &'a [String],
    /// Index of the table holding this action list.
    pub table_index: usize,
}

const KNOWN: &str = "forward(port), flood, drop, goto(table), exit";

/// Parses `text` like `"forward(1)"` or `"goto(acl)"` into an [`ActionList`].
///
/// Errors name the action and what was expected: an unknown action, a missing or extra argument,
/// a port out of range, a `goto` to an unknown or earlier table, or an empty list.
pub fn parse_action_list(
    text: &str,
    ctx: ActionContext<'_>,
) -> Result<ActionList, ActionParseError> {
    let mut out = Vec::new();
    for part in text.split(';') {
        let part = part.trim();
        if part.is_empty() {
            continue;
        }
        let (name, arg) = match part.find('(') {
            Some(open) => {
                if !part.ends_with(')') {
                    return Err(ActionParseError(format!(
                        "expected `)` at the end of {part:?}"
                    )));
                }
                (
                    part[..open].trim(),
                    Some(part[open + 1..part.len() - 1].trim()),
                )
            }
            None => (part, None),
        };
        let need_arg = |what: &str| -> Result<&str, ActionParseError> {
            arg.filter(|a| !a.is_empty()).ok_or_else(|| {
                ActionParseError(format!(
                    "`{name}` expects one argument ({what}), like {name}(...)"
                ))
            })
        };
        let no_arg = || -> Result<(), ActionParseError> {
            match arg {
                None => Ok(()),
                Some(_) => Err(ActionParseError(format!("`{name}` takes no argument"))),
            }
        };
        let action = match name {
            "forward" => {
                let a = need_arg("a port index")?;
                let port: u16 = a.parse().map_err(|_| {
                    ActionParseError(format!("forward expects a port index, found {a:?}"))
                })?;
                if port >= ctx.ports {
                    return Err(ActionParseError(format!(
                        "forward({port}): expected a port index below {} (the number of [[port]] tables)",
                        ctx.ports
                    )));
                }
                Action::Forward(port)
            }
            "flood" => {
                no_arg()?;
                Action::Flood
            }
            "drop" => {
                no_arg()?;
                Action::Drop
            }
            "exit" => {
                no_arg()?;
                Action::Exit
            }
            "goto" => {
                let a = need_arg("a table name")?;
                let idx =
                    ctx.tables.iter().position(|t| t == a).ok_or_else(|| {
                        ActionParseError(format!("goto({a}): no table named {a:?}"))
                    })?;
                if idx <= ctx.table_index {
                    return Err(ActionParseError(format!(
                        "goto({a}): expected a later table (the pipeline only goes forward)"
                    )));
                }
                Action::Goto(idx as u16)
            }
            other => {
                return Err(ActionParseError(format!(
                    "unknown action {other:?}; expected one of: {KNOWN}"
                )));
            }
        };
        out.push(action);
    }
    if out.is_empty() {
        return Err(ActionParseError(format!(
            "expected at least one action ({KNOWN})"
        )));
    }
    Ok(ActionList(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx<'a>(tables: &'a [String]) -> ActionContext<'a> {
        ActionContext {
            ports: 2,
            tables,
            table_index: 0,
        }
    }

    #[test]
    fn parses_lists() {
        let t = vec!["l2".to_string(), "acl".to_string()];
        assert_eq!(
            parse_action_list("forward(1)", ctx(&t)).unwrap().0,
            vec![Action::Forward(1)]
        );
        assert_eq!(
            parse_action_list(" flood ; goto(acl) ", ctx(&t)).unwrap().0,
            vec![Action::Flood, Action::Goto(1)]
        );
        assert_eq!(
            parse_action_list("drop", ctx(&t)).unwrap().0,
            vec![Action::Drop]
        );
    }

    #[test]
    fn rejects_bad_lists() {
        let t = vec!["l2".to_string()];
        let e = |s: &str| parse_action_list(s, ctx(&t)).unwrap_err().0;
        assert!(e("forward(2)").contains("below 2"));
        assert!(e("forward(x)").contains("port index"));
        assert!(e("forward").contains("expects one argument"));
        assert!(e("flood(1)").contains("takes no argument"));
        assert!(e("teleport").contains("unknown action"));
        assert!(e("goto(l2)").contains("later table"));
        assert!(e("goto(nope)").contains("no table"));
        assert!(e("").contains("at least one"));
        assert!(e("forward(1").contains("`)`"));
    }
}
