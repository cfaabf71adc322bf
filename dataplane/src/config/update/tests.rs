//! Runtime changes: batches apply all or nothing with errors keyed by operation, counts carry
//! over by entry identity, and a reload may change only the pipeline part.

use super::*;
use crate::table::PipelineState;

use crate::testing::PIPELINE_CONF as BASE;

fn base() -> (Model, Pipeline) {
    let l = crate::config::load_str(BASE, Path::new("base.toml")).unwrap();
    (Model::of(&l), l.pipeline)
}

fn ops(json: &str) -> Vec<Op> {
    match parse_request(format!(r#"{{"cmd":"apply","ops":{json}}}"#).as_bytes()).unwrap() {
        Request::Apply { ops } => ops,
        r => panic!("{r:?}"),
    }
}

fn apply(m: &Model, json: &str) -> Result<(Model, Pipeline), String> {
    m.apply(&ops(json), 2, false).map_err(|e| e.to_string())
}

#[test]
fn a_batch_applies_in_order() {
    let (m, _) = base();
    let (n, p) = apply(
        &m,
        r#"[{"op":"add_entry","table":"l2","entry":{"key":["02:00:00:00:00:03"],"action":"multicast(2)"}},
            {"op":"add_group","group":{"id":2,"copy":[{"port":1,"actions":"push_vlan(7)"}]}},
            {"op":"modify_entry","table":"l2","entry":{"key":["02:00:00:00:00:01"],"action":"forward(1)"}},
            {"op":"delete_entry","table":"acl","key":["10.0.0.0&&&255.0.0.0","9000->9100"],"priority":5},
            {"op":"set_default_action","table":"acl","action":"drop"}]"#,
    )
    .unwrap();
    assert_eq!(n.tables[0].entries.len(), 3);
    assert_eq!(n.tables[0].entries[0].action, "forward(1)");
    assert_eq!(n.tables[0].entries[2].action, "multicast(2)");
    assert!(n.tables[2].entries.is_empty());
    assert_eq!(n.tables[2].default_action, "drop");
    assert_eq!(n.groups.len(), 2);
    assert_eq!((p.tables[0].len(), p.tables[1].len(), p.tables[2].len(), p.groups.len()), (3, 1, 0, 2));
    // The running model is untouched.
    assert_eq!(m, base().0);
}

#[test]
fn a_batch_with_one_bad_operation_changes_nothing_and_names_it() {
    let (m, _) = base();
    let cases = [
        // (batch, the key named, what is said)
        (
            r#"[{"op":"add_entry","table":"l2","entry":{"key":["02:00:00:00:00:03"],"action":"forward(1)"}},
                {"op":"add_entry","table":"l2","entry":{"key":["02:00:00:00:00:04"],"action":"forward(9)"}}]"#,
            "ops[1].entry.action",
            "port",
        ),
        (
            r#"[{"op":"add_entry","table":"nope","entry":{"key":["1"],"action":"drop"}}]"#,
            "ops[0].table",
            "tables: l2, routes, acl",
        ),
        (r#"[{"op":"add_entry","table":"l2","entry":{"key":["zz"],"action":"drop"}}]"#, "ops[0].entry.key[0]", ""),
        (
            r#"[{"op":"add_entry","table":"l2","entry":{"key":["02:00:00:00:00:01"],"action":"drop"}}]"#,
            "ops[0].entry.key",
            "use modify_entry",
        ),
        (r#"[{"op":"delete_entry","table":"l2","key":["02:00:00:00:00:09"]}]"#, "ops[0].key", "no entry"),
        (r#"[{"op":"delete_entry","table":"l2","key":["02:00:00:00:00:01", "1"]}]"#, "ops[0].key", "1 value"),
        // The acl entry's priority is part of its identity.
        (
            r#"[{"op":"delete_entry","table":"acl","key":["10.0.0.0&&&255.0.0.0","9000->9100"],"priority":6}]"#,
            "ops[0].key",
            "no entry",
        ),
        (
            r#"[{"op":"add_entry","table":"acl","entry":{"key":["10.0.0.1&&&255.255.255.255","*"],"action":"drop"}}]"#,
            "ops[0].entry.priority",
            "priority",
        ),
        // A priority missing where the table needs one, or given where it takes none.
        (
            r#"[{"op":"delete_entry","table":"acl","key":["10.0.0.0&&&255.0.0.0","9000->9100"]}]"#,
            "ops[0].priority",
            "expected `priority`",
        ),
        (
            r#"[{"op":"modify_entry","table":"l2","entry":{"key":["02:00:00:00:00:01"],"action":"drop","priority":3}}]"#,
            "ops[0].entry.priority",
            "only for tables with ternary or range fields",
        ),
        // Deleting what an action still names: the entry that names it is said.
        (r#"[{"op":"delete_meter","name":"m"}]"#, "table[2].entry[0].action", "would make"),
        (r#"[{"op":"delete_group","id":7}]"#, "ops[0].id", "groups: 1"),
        (r#"[{"op":"modify_meter","meter":{"name":"m","type":"srtcm","cir":0,"cbs":1,"ebs":1}}]"#, "ops[0].meter", ""),
        (r#"[{"op":"add_group","group":{"id":1,"copy":[{"port":0}]}}]"#, "ops[0].group.id", "exists"),
    ];
    for (batch, key, want) in cases {
        let e = apply(&m, batch).unwrap_err();
        assert!(e.starts_with("request: key `") && e.contains(&format!("`{key}")), "{batch}: {e}");
        assert!(e.contains(want), "{batch}: {e}");
    }
    assert_eq!(m, base().0);
}

#[test]
fn requests_are_parsed_strictly_and_size_limited() {
    for bad in [
        &br#"{"cmd":"stats","x":1}"#[..],
        br#"{"cmd":"frobnicate"}"#,
        br#"{"cmd":"apply","ops":[{"op":"add_entry","table":"l2","entry":{"key":[],"action":"drop","extra":1}}]}"#,
        br#"{"cmd":"apply"}"#,
        br#"{"cmd":"apply","ops":[{"op":"delete_group","id":1,"x":2}]}"#,
        br#"{"cmd":"reload","file":"other.toml"}"#,
        b"\xff\xfe",
        b"",
        b"[1,2]",
    ] {
        assert!(parse_request(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
    }
    let big = vec![b' '; MAX_REQUEST + 1];
    assert!(parse_request(&big).unwrap_err().contains("limit"));
    assert!(matches!(parse_request(br#" {"cmd":"tables"} "#), Ok(Request::Tables {})));
}

#[test]
fn counts_carry_over_by_entry_identity() {
    let (m, p) = base();
    let mut old = PipelineState::new(&p);
    // l2: entries 0, 1 and the miss (100..=102); routes: entry and miss (103, 104); acl: the same
    // (105, 106).
    let mut next = 100;
    for t in 0..3 {
        for c in old.entries_mut(t) {
            c.packets = next;
            next += 1;
        }
        old.miss_mut(t).packets = next;
        next += 1;
    }
    old.named[0].packets = 7;
    let (n, np) = apply(
        &m,
        r#"[{"op":"delete_entry","table":"l2","key":["02:00:00:00:00:01"]},
            {"op":"add_entry","table":"l2","entry":{"key":["02:00:00:00:00:03"],"action":"forward(0)"}},
            {"op":"modify_entry","table":"l2","entry":{"key":[" 02:00:00:00:00:02"],"action":"count(two); forward(0)"}},
            {"op":"delete_group","id":1}]"#,
    )
    .unwrap();
    let kept = carry(&m, &p, &n, &np);
    let mut new = PipelineState::new(&np);
    new.carry_from(&mut old, &kept);
    // l2 now holds ..02 (was entry 1: 101), ..03 (new: 0), then the miss (102).
    let l2: Vec<u64> = new.hits_of(0).iter().map(|c| c.packets).collect();
    assert_eq!(l2, [101, 0, 102]);
    let routes: Vec<u64> = new.hits_of(1).iter().map(|c| c.packets).collect();
    assert_eq!(routes, [103, 104]);
    let acl: Vec<u64> = new.hits_of(2).iter().map(|c| c.packets).collect();
    assert_eq!(acl, [105, 106]);
    assert_eq!(new.named[0].packets, 7);
    assert_eq!(kept.meters, [(0, 0)], "an unchanged meter keeps its buckets");
    assert!(kept.meter_colors.is_empty());
    // A changed meter starts afresh.
    let (n2, np2) =
        apply(&m, r#"[{"op":"modify_meter","meter":{"name":"m","type":"srtcm","cir":2000000,"cbs":3000,"ebs":3000}}]"#)
            .unwrap();
    // A changed meter's buckets start full; its colour counts carry.
    let c2 = carry(&m, &p, &n2, &np2);
    assert!(c2.meters.is_empty());
    assert_eq!(c2.meter_colors, [(0, 0)]);
    let mut old2 = PipelineState::new(&p);
    old2.meters[0].colors[2].packets = 9;
    let mut new2 = PipelineState::new(&np2);
    new2.carry_from(&mut old2, &c2);
    assert_eq!(new2.meter_colors(0)[2].packets, 9);
}

#[test]
fn a_reload_changes_only_the_pipeline_part() {
    let running: toml::Table = BASE.parse().unwrap();
    let path = Path::new("conf.toml");
    // Appended after the other arrays of tables, `[[table.entry]]` still belongs to the last table.
    let entry = "[[table.entry]]\nkey = [\"10.1.0.0&&&255.255.0.0\", \"*\"]\npriority = 20\naction = \"drop\"\n";
    let m = reload(&running, &format!("{BASE}\n{entry}"), path).unwrap();
    assert_eq!(m.tables[2].entries.len(), 2);
    let e = reload(&running, &format!("[dataplane]\nburst = 64\n{BASE}"), path).unwrap_err().to_string();
    assert!(e.starts_with("conf.toml: key `dataplane`: changed since the appliance started"), "{e}");
    let e = reload(&running, &BASE.replace("count(two); multicast(1)", "count(two); forward(5)"), path)
        .unwrap_err()
        .to_string();
    assert!(e.contains("conf.toml: key `table[0].entry[1].action`"), "{e}");
}
