//! Runtime changes: batches apply all or nothing with errors keyed by operation, counts carry
//! over by entry identity, collectives are validated as in the file and keep their state when
//! unchanged, and a reload may change only the runtime parts.

use super::*;
use crate::agg::collective::Collective;
use crate::meter::Color;
use crate::table::PipelineState;

use crate::testing::PIPELINE_CONF as BASE;

fn base() -> (Model, Pipeline) {
    let l = crate::config::load_str(BASE, Path::new("base.toml")).unwrap();
    (Model::of(&l), l.pipeline)
}

/// What `BASE` fixes.
fn fixed() -> Fixed {
    Fixed::of(&crate::config::load_str(BASE, Path::new("base.toml")).unwrap())
}

fn ops(json: &str) -> Vec<Change> {
    match parse_request(format!(r#"{{"cmd":"apply","ops":{json}}}"#).as_bytes()).unwrap() {
        Request::Apply { ops } => ops,
        r => panic!("{r:?}"),
    }
}

fn apply(m: &Model, json: &str) -> Result<(Model, Pipeline), String> {
    m.apply(&ops(json), &fixed()).map(|(m, b)| (m, b.pipeline)).map_err(|e| e.to_string())
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
    let kept = carry(&m, &p, &n, &np, &Renewed::default());
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
    let c2 = carry(&m, &p, &n2, &np2, &Renewed::default());
    assert!(c2.meters.is_empty());
    assert_eq!(c2.meter_colors, [(0, 0)]);
    let mut old2 = PipelineState::new(&p);
    old2.meters[0].colors[2].packets = 9;
    let mut new2 = PipelineState::new(&np2);
    new2.carry_from(&mut old2, &c2);
    assert_eq!(new2.meter_colors(0)[2].packets, 9);
}

/// An entry or meter that a batch deletes and adds back is a new one: its counts (and a
/// meter's buckets and colours) start afresh, even when it comes back as it was; the others
/// carry as ever.
#[test]
fn what_a_batch_deletes_and_adds_back_starts_afresh() {
    let (m, p) = base();
    let mut old = PipelineState::new(&p);
    for (i, c) in old.entries_mut(0).iter_mut().enumerate() {
        c.packets = 100 + i as u64;
    }
    old.meters[0].colors[0].packets = 9;
    let renew = |json: &str| {
        let (n, b) = m.apply(&ops(json), &fixed()).unwrap();
        let kept = carry(&m, &p, &n, &b.pipeline, &b.renewed);
        let mut new = PipelineState::new(&b.pipeline);
        let mut from = old.clone();
        new.carry_from(&mut from, &kept);
        (n, b.renewed, kept, new)
    };
    let two = r#"{"key":["02:00:00:00:00:02"],"action":"count(two); multicast(1)"}"#;
    // Back as it was: the model is the old one, the entry is not.
    let (n, renewed, _, new) = renew(&format!(
        r#"[{{"op":"delete_entry","table":"l2","key":["02:00:00:00:00:02"]}},{{"op":"add_entry","table":"l2","entry":{two}}}]"#
    ));
    assert!(n == m);
    assert_eq!(renewed.entries.len(), 1);
    assert_eq!(new.hits_of(0).iter().map(|c| c.packets).collect::<Vec<_>>(), [100, 0, 0]);
    // Back with another action: the same.
    let (_, _, _, new) = renew(
        r#"[{"op":"delete_entry","table":"l2","key":["02:00:00:00:00:02"]},
            {"op":"add_entry","table":"l2","entry":{"key":[" 02:00:00:00:00:02"],"action":"forward(1)"}}]"#,
    );
    assert_eq!(new.hits_of(0).iter().map(|c| c.packets).collect::<Vec<_>>(), [100, 0, 0]);
    // Deleted, not added back: nothing renewed. Modified: its counts carry.
    let (_, renewed, _, _) = renew(r#"[{"op":"delete_entry","table":"l2","key":["02:00:00:00:00:02"]}]"#);
    assert!(renewed.is_empty());
    let (_, _, _, new) =
        renew(&format!(r#"[{{"op":"modify_entry","table":"l2","entry":{}}}]"#, two.replace("multicast(1)", "drop")));
    assert_eq!(new.hits_of(0).iter().map(|c| c.packets).collect::<Vec<_>>(), [100, 101, 0]);
    // A meter deleted and added back as it was: neither buckets nor colours carry.
    let meter = r#"{"name":"m","type":"srtcm","cir":1000000,"cbs":3000,"ebs":3000}"#;
    let (n, renewed, kept, new) =
        renew(&format!(r#"[{{"op":"delete_meter","name":"m"}},{{"op":"add_meter","meter":{meter}}}]"#));
    assert!(n == m);
    assert_eq!(renewed.meters, ["m"]);
    assert!(kept.meters.is_empty() && kept.meter_colors.is_empty());
    assert_eq!(new.meter_colors(0)[0].packets, 0);
    assert_eq!(new.hits_of(0).iter().map(|c| c.packets).collect::<Vec<_>>(), [100, 101, 0]);
}

/// A direct meter's instances follow the table entries that use it, and multicast copies use
/// no meter: a change of groups alone keeps its buckets; a change of a table keeps those of
/// the entries that stay.
#[test]
fn a_direct_meter_keeps_its_buckets_across_group_changes() {
    let conf = BASE.replace("name = \"m\"\n", "name = \"m\"\ndirect = true\n");
    let l = crate::config::load_str(&conf, Path::new("base.toml")).unwrap();
    let f = Fixed::of(&l);
    let (m, p) = (Model::of(&l), l.pipeline);
    let kept = |json: &str| {
        let (n, b) = m.apply(&ops(json), &f).unwrap();
        carry(&m, &p, &n, &b.pipeline, &b.renewed)
    };
    let group = kept(
        r#"[{"op":"add_group","group":{"id":2,"copy":[{"port":1}]}},{"op":"delete_group","id":1},
                        {"op":"modify_entry","table":"l2","entry":{"key":["02:00:00:00:00:02"],"action":"count(two); multicast(2)"}}]"#,
    );
    assert!(group.meters.is_empty(), "an entry changed");
    let group = kept(r#"[{"op":"modify_group","group":{"id":1,"copy":[{"port":1,"actions":"push_vlan(9)"}]}}]"#);
    assert_eq!(group.meters, [(0, 0)]);
    let table = kept(r#"[{"op":"add_entry","table":"routes","entry":{"key":["10.1.0.0/16"],"action":"drop"}}]"#);
    assert!(table.meters.is_empty() && table.meter_colors.is_empty());
    // The acl entry that polices with it stays: its instance (the only one) carries.
    assert_eq!(table.meter_instances, [(0, 0, vec![(0, 0)])]);
}

/// A table change keeps the buckets of a direct meter's instances whose users stay (an entry
/// of the same identity, a table's default), wherever the change moves them; a new entry's
/// instance starts full, a deleted one's leaves.
#[test]
fn a_direct_meter_keeps_the_buckets_of_the_entries_that_stay() {
    let conf = r#"
[[port]]
vdev = "net_null0"
[[table]]
name = "t"
key = [{ field = "ipv4.src", match = "exact" }]
default_action = "meter(d); forward(0)"
entry = [
    { key = ["10.0.0.1"], action = "police(d); forward(0)" },
    { key = ["10.0.0.2"], action = "police(d); forward(0)" },
]
[[meter]]
name = "d"
type = "srtcm"
cir = 1000
cbs = 1500
ebs = 0
direct = true
"#;
    let l = crate::config::load_str(conf, Path::new("d.toml")).unwrap();
    let f = Fixed::of(&l);
    let (m, p) = (Model::of(&l), l.pipeline);
    // Instances: the default 0, 10.0.0.1 1, 10.0.0.2 2.
    let mut old = PipelineState::new(&p);
    let now = 1_000_000;
    for i in 0..3 {
        assert_eq!(old.meters[0].color(i, now, 1500, Color::Green), Color::Green);
    }
    let (n, b) = m
        .apply(
            &ops(r#"[{"op":"delete_entry","table":"t","key":["10.0.0.1"]},
                     {"op":"add_entry","table":"t","entry":{"key":["10.0.0.3"],"action":"police(d); forward(0)"}}]"#),
            &f,
        )
        .unwrap();
    let kept = carry(&m, &p, &n, &b.pipeline, &b.renewed);
    // Now: the default 0, 10.0.0.2 1, 10.0.0.3 2.
    assert!(kept.meters.is_empty() && kept.meter_colors.is_empty());
    assert_eq!(kept.meter_instances, [(0, 0, vec![(2, 1), (0, 0)])]);
    let mut new = PipelineState::new(&b.pipeline);
    new.carry_from(&mut old, &kept);
    assert_eq!(new.meter_colors(0)[0].packets, 3, "colour counts carry");
    assert_eq!(new.meters[0].color(0, now, 1500, Color::Green), Color::Red, "the default's bucket stays empty");
    assert_eq!(new.meters[0].color(1, now, 1500, Color::Green), Color::Red, "10.0.0.2's bucket stays empty");
    assert_eq!(new.meters[0].color(2, now, 1500, Color::Green), Color::Green, "10.0.0.3 starts full");
    // Deleted and added back in one batch: a new entry, full again.
    let (n2, b2) = m
        .apply(
            &ops(r#"[{"op":"delete_entry","table":"t","key":["10.0.0.2"]},
                     {"op":"add_entry","table":"t","entry":{"key":["10.0.0.2"],"action":"police(d); forward(0)"}}]"#),
            &f,
        )
        .unwrap();
    assert!(n2 == m);
    let kept2 = carry(&m, &p, &n2, &b2.pipeline, &b2.renewed);
    assert_eq!(kept2.meter_instances, [(0, 0, vec![(1, 1), (0, 0)])]);
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

/// Two ports (port 0 with an address), a 1 MiB memory limit, and collective 1: 200 slots of 400
/// f32 lanes, two members (200 x 3264 bytes = 0.62 MiB of slot memory).
const COLLS: &str = r#"
[dataplane]
memory_limit_mb = 1
[[port]]
vdev = "net_null0"
ipv4 = "10.0.0.254"
[[port]]
vdev = "net_null1"
[[table]]
name = "l2"
key = [{ field = "eth.dst", match = "exact" }]
[[collective]]
collective_id = 1
op = "sum"
dtype = "f32"
tensor_elements = 80000
chunk_elements = 400
"#;

/// [`COLLS`] with collective 1's two members (ranks 0 and 1 at 10.0.0.1 and .2, port 5000).
fn colls_conf() -> String {
    let members = (1..=2).map(|k| {
        format!(
            "[[collective.member]]\nrank = {}\nip = \"10.0.0.{k}\"\nudp_port = 5000\nmac = \"02:00:00:00:00:0{k}\"\n",
            k - 1
        )
    });
    COLLS.to_string() + &members.collect::<String>()
}

/// A collective as a request carries it: two members on port 0.
fn coll(id: u16, tensor: u64, chunk: u32) -> String {
    format!(
        r#"{{"collective_id":{id},"op":"sum","dtype":"f32","tensor_elements":{tensor},"chunk_elements":{chunk},"member":[{{"rank":0,"ip":"10.0.0.1","udp_port":5001,"mac":"02:00:00:00:00:01"}},{{"rank":1,"ip":"10.0.0.2","udp_port":5001,"mac":"02:00:00:00:00:02"}}]}}"#
    )
}

fn colls_base() -> (Model, Fixed, Vec<Collective>) {
    let l = crate::config::load_str(&colls_conf(), Path::new("c.toml")).unwrap();
    (Model::of(&l), Fixed::of(&l), l.collectives)
}

fn apply_c(m: &Model, f: &Fixed, json: &str) -> Result<(Model, Built), String> {
    m.apply_request(&ops(json), f).map_err(|e| e.to_string())
}

#[test]
fn collectives_are_added_modified_and_deleted_with_their_owners_and_kept_state() {
    let (m, f, running) = colls_base();
    let (n, b) =
        apply_c(&m, &f, &format!(r#"[{{"op":"add_collective","collective":{}}}]"#, coll(2, 1000, 100))).unwrap();
    assert_eq!(n.collectives.iter().map(|c| c.collective_id).collect::<Vec<_>>(), [1, 2]);
    assert_eq!(b.collectives.len(), 2);
    assert_eq!((b.collectives[1].id, b.collectives[1].slots(), b.collectives[1].members[1].udp_port), (2, 10, 5001));
    // Collective 1 keeps its state; 2 is new, and goes to worker 1 of 2 (index 1 % 2).
    assert_eq!(kept(&running, &b.collectives, &b.restarted), [Some(0), None]);
    assert_eq!(owners(&running, &[0], &b.collectives, 2), [0, 1]);
    // Deleting 1 moves 2 to index 0: it keeps its worker (1), and its state.
    let (n2, b2) = apply_c(&n, &f, r#"[{"op":"delete_collective","id":1}]"#).unwrap();
    assert_eq!(n2.collectives.len(), 1);
    assert_eq!(kept(&b.collectives, &b2.collectives, &b2.restarted), [Some(1)]);
    assert_eq!(owners(&b.collectives, &[0, 1], &b2.collectives, 2), [1]);
    // A new collective at index 1 then goes to worker 1 % 2, whatever the others' owners.
    assert_eq!(owners(&b2.collectives, &[1], &[b2.collectives[0].clone(), running[0].clone()], 2), [1, 1]);
    // Modified: the same id, another configuration: it starts afresh on its worker.
    let (n3, b3) =
        apply_c(&n, &f, &format!(r#"[{{"op":"modify_collective","collective":{}}}]"#, coll(1, 2000, 100))).unwrap();
    assert_eq!(n3.collectives[0].tensor_elements, 2000);
    assert_eq!(kept(&b.collectives, &b3.collectives, &b3.restarted), [None, Some(1)]);
    assert_eq!(owners(&b.collectives, &[0, 1], &b3.collectives, 2), [0, 1]);
    // The last collective deleted: none left (an `aggregate` action would now be refused).
    let (n4, b4) = apply_c(&n, &f, r#"[{"op":"delete_collective","id":2},{"op":"delete_collective","id":1}]"#).unwrap();
    assert!(n4.collectives.is_empty() && b4.collectives.is_empty());
    // Deleted and added back identical in one batch: a new collective, keeping nothing (the
    // delete discarded its rounds and kept result), though its configuration is the old one.
    let again = format!(
        r#"[{{"op":"delete_collective","id":2}},{{"op":"add_collective","collective":{}}}]"#,
        coll(2, 1000, 100)
    );
    let (n5, b5) = apply_c(&n, &f, &again).unwrap();
    let at = b5.collectives.iter().position(|c| c.id == 2).unwrap();
    assert_eq!(b5.collectives[at], b.collectives[1], "the same configuration");
    assert_eq!(n5.collectives.len(), 2);
    assert_eq!(b5.restarted, [2]);
    let k = kept(&b.collectives, &b5.collectives, &b5.restarted);
    assert_eq!(k[at], None);
    assert_eq!(k[1 - at], Some(0), "collective 1 keeps its state");
    // Deleted and not added back: not restarted, just gone.
    assert!(b2.restarted.is_empty() && b4.restarted.is_empty());
}

#[test]
fn a_batch_with_one_bad_collective_changes_nothing_and_names_the_op_and_key() {
    let (m, f, _) = colls_base();
    let before = m.clone();
    let entry = r#"{"op":"add_entry","table":"l2","entry":{"key":["02:00:00:00:00:09"],"action":"forward(1)"}}"#;
    for (batch, want) in [
        (
            format!(r#"[{entry},{{"op":"add_collective","collective":{}}}]"#, coll(2, 1000, 0)),
            "request: key `ops[1].collective.chunk_elements`: expected at least 1 element",
        ),
        (
            format!(r#"[{entry},{{"op":"add_collective","collective":{}}}]"#, coll(2, 1000, 3000)),
            "request: key `ops[1].collective.chunk_elements`: a chunk of 3000 f32 lanes is 12000 bytes: expected at most 8900 bytes",
        ),
        (
            format!(
                r#"[{{"op":"add_collective","collective":{}}}]"#,
                coll(2, 1000, 100).replace("10.0.0.2", "224.0.0.1")
            ),
            "request: key `ops[0].collective.member[1].ip`: expected a unicast address",
        ),
        (
            format!(r#"[{{"op":"add_collective","collective":{}}}]"#, coll(2, 1000, 100).replace("\"sum\"", "\"avg\"")),
            r#"request: key `ops[0].collective.op`: expected "sum", "max" or "min", found "avg""#,
        ),
        // Duplicate ids: added twice, or one that runs.
        (
            format!(r#"[{{"op":"add_collective","collective":{}}}]"#, coll(1, 1000, 100)),
            "request: key `ops[0].collective.collective_id`: collective 1 exists already: use modify_collective",
        ),
        (
            format!(
                r#"[{{"op":"add_collective","collective":{}}},{{"op":"add_collective","collective":{}}}]"#,
                coll(2, 1000, 100),
                coll(2, 500, 100)
            ),
            "request: key `ops[1].collective.collective_id`: collective 2 exists already",
        ),
        (
            format!(r#"[{{"op":"modify_collective","collective":{}}}]"#, coll(9, 1000, 100)),
            "request: key `ops[0].collective.collective_id`: no collective 9; collectives: 1",
        ),
        (r#"[{"op":"delete_collective","id":9}]"#.to_string(), "request: key `ops[0].id`: no collective 9; collectives: 1"),
        // The memory limit counts the collectives kept: 0.62 MiB more does not fit beside
        // collective 1's 0.62 MiB in 1 MiB.
        (
            format!(r#"[{entry},{{"op":"add_collective","collective":{}}}]"#, coll(2, 80000, 400)),
            "request: key `ops[1].collective`: the collectives need 2 MiB of slot memory (this one 200 slots, 1 MiB), more than dataplane.memory_limit_mb = 1 MiB",
        ),
        // A member whose port has no address.
        (
            format!(
                r#"[{{"op":"add_collective","collective":{}}}]"#,
                coll(2, 1000, 100).replace(r#""mac":"02:00:00:00:00:02""#, r#""mac":"02:00:00:00:00:02","port":1"#)
            ),
            "request: key `ops[0].collective.member[1].ip`: port[1] has no IPv4 address",
        ),
        // Unknown keys are refused as in the file.
        (
            format!(r#"[{{"op":"add_collective","collective":{}}}]"#, coll(2, 1000, 100).replace("\"op\"", "\"opp\":1,\"op\"")),
            "unknown field `opp`",
        ),
    ] {
        let e = match parse_request(format!(r#"{{"cmd":"apply","ops":{batch}}}"#).as_bytes()) {
            Ok(Request::Apply { ops }) => m.apply_request(&ops, &f).unwrap_err().to_string(),
            Ok(r) => panic!("{r:?}"),
            Err(e) => e,
        };
        assert!(e.starts_with(want) || (want.starts_with("unknown") && e.contains(want)), "{batch}:\n{e}\nwant {want}");
        assert!(!e.contains('\n'), "{e}");
        assert_eq!(m, before, "a refused batch changes nothing");
    }
    // The same memory fits once collective 1 is deleted in the same batch (all or nothing, in order).
    let (n, b) = apply_c(
        &m,
        &f,
        &format!(
            r#"[{{"op":"delete_collective","id":1}},{{"op":"add_collective","collective":{}}}]"#,
            coll(2, 80000, 400)
        ),
    )
    .unwrap();
    assert_eq!((n.collectives.len(), b.collectives[0].id), (1, 2));
}

#[test]
fn a_reload_may_change_the_collectives() {
    let conf = colls_conf();
    let running: toml::Table = conf.parse().unwrap();
    let path = Path::new("c.toml");
    let m = reload(&running, &conf.replace("tensor_elements = 80000", "tensor_elements = 40000"), path).unwrap();
    assert_eq!(m.collectives[0].tensor_elements, 40000);
    let m = reload(&running, conf.split("[[collective]]").next().unwrap(), path).unwrap();
    assert!(m.collectives.is_empty());
    // Checked as at the start.
    let e = reload(&running, &conf.replace("chunk_elements = 400", "chunk_elements = 0"), path).unwrap_err();
    assert_eq!(e.to_string(), "c.toml: key `collective[0].chunk_elements`: expected at least 1 element");
}

/// A MAC address from `i`, for large tables.
fn mac(i: u32) -> String {
    let b = i.to_be_bytes();
    format!("02:01:{:02x}:{:02x}:{:02x}:{:02x}", b[0], b[1], b[2], b[3])
}

/// A batch costs in proportion to its operations plus the table, not their product: 20,000 adds,
/// 2,000 modifies and 2,000 deletes on a table of 20,000 entries apply in one pass (finding
/// each entry by walking the table and parsing every key took minutes), with every entry where
/// it belongs, and an operation that clashes with one added or deleted earlier in the batch is
/// still named.
#[test]
fn a_large_batch_on_a_large_table_applies_in_one_pass() {
    let (mut m, _) = base();
    let n = 20_000;
    m.tables[0].entries =
        (0..n).map(|i| EntryConfig { key: vec![mac(i).into()], action: "forward(0)".into(), priority: None }).collect();
    let mut ops: Vec<Change> = (n..2 * n)
        .map(|i| Change::AddEntry {
            table: "l2".into(),
            entry: EntryConfig { key: vec![mac(i).into()], action: "forward(1)".into(), priority: None },
        })
        .collect();
    for i in (0..2 * n).step_by(20) {
        ops.push(Change::DeleteEntry { table: "l2".into(), key: vec![mac(i).into()], priority: None });
        ops.push(Change::ModifyEntry {
            table: "l2".into(),
            entry: EntryConfig { key: vec![mac(i + 1).into()], action: "drop".into(), priority: None },
        });
    }
    let t = std::time::Instant::now();
    let (new, built) = m.apply(&ops, &fixed()).unwrap();
    let took = t.elapsed();
    let e = &new.tables[0].entries;
    assert_eq!(e.len(), 2 * n as usize - 2_000);
    assert_eq!(built.pipeline.tables[0].len(), e.len());
    // In order: the old entries, then the added ones, each 20th gone and the one after it
    // dropping.
    assert_eq!((e[0].key[0].as_str(), e[0].action.as_str()), (Some(mac(1).as_str()), "drop"));
    assert_eq!((e[1].key[0].as_str(), e[1].action.as_str()), (Some(mac(2).as_str()), "forward(0)"));
    let first_added = n as usize - 1_000;
    assert_eq!((e[first_added].key[0].as_str(), e[first_added].action.as_str()), (Some(mac(n + 1).as_str()), "drop"));
    let last = e.last().unwrap();
    assert_eq!((last.key[0].as_str(), last.action.as_str()), (Some(mac(2 * n - 1).as_str()), "forward(1)"));
    assert_eq!(e.iter().filter(|x| x.action == "drop").count(), 2_000);
    // The old way took about a millisecond per operation at this size (minutes); one pass takes
    // well under a second in a release build.
    assert!(took < std::time::Duration::from_secs(30), "{took:?}");

    // Faults are found against what the batch did so far, by identity.
    let clash = |extra: Change| {
        let mut o = ops[..10].to_vec();
        o.push(extra);
        m.apply(&o, &fixed()).unwrap_err().to_string()
    };
    let e = clash(Change::AddEntry {
        table: "l2".into(),
        entry: EntryConfig { key: vec![mac(n + 3).into()], action: "drop".into(), priority: None },
    });
    assert!(e.contains("ops[10].entry.key") && e.contains("(entry 20003): use modify_entry"), "{e}");
    let e = clash(Change::DeleteEntry { table: "l2".into(), key: vec![mac(2 * n).into()], priority: None });
    assert!(e.contains("ops[10].key") && e.contains("has no entry with this key"), "{e}");
}

/// A malformed operation is named by its index and the key within it, with what was expected in
/// words, not Rust's type names.
#[test]
fn a_malformed_operation_is_named_by_index_and_key() {
    let coll = r#""collective_id":9,"op":"sum","dtype":"f32","chunk_elements":256"#;
    let cases = [
        (
            r#"[{"op":"delete_group","id":1},{"op":"add_entry","table":"l2","entry":{"key":["x"],"acton":"drop"}}]"#
                .to_string(),
            "request: key `ops[1].entry.acton`: unknown field `acton`, expected one of `key`, `action`, `priority`",
        ),
        (
            format!(r#"[{{"op":"add_collective","collective":{{{coll},"tensor_elements":"1024","member":[]}}}}]"#),
            "request: key `ops[0].collective.tensor_elements`: invalid type: string \"1024\", expected a \
             non-negative integer",
        ),
        (
            format!(
                r#"[{{"op":"add_collective","collective":{{{coll},"tensor_elements":1024,"member":[{{"rank":0,"ip":"10.0.0.1","mac":"02:00:00:00:00:01"}},{{"rank":70000}}]}}}}]"#
            ),
            "request: key `ops[0].collective.member[1].rank`: invalid value: integer `70000`, expected an integer \
             from 0 to 65535",
        ),
        (
            format!(r#"[{{"op":"modify_collective","collective":{{{coll},"tensor_elements":1024}}}}]"#),
            "request: key `ops[0].collective`: missing field `member`",
        ),
        (r#"[{"op":"delete_group","id":1},{"op":"delete_group","id":1},{"op":"add_entri"}]"#.to_string(), "request: key `ops[2].op`: unknown operation \"add_entri\": expected one of add_entry, modify_entry, delete_entry"),
        (r#"[{"table":"l2"}]"#.to_string(), "request: key `ops[0].op`: missing: expected the operation's name"),
        (r#"[{"op":"delete_group","id":1,"x":2}]"#.to_string(), "request: key `ops[0].x`: unknown field `x`, expected `id`"),
        (r#"[{"op":"add_group","group":{"id":2,"copy":[{"port":0},{"port":-1}]}}]"#.to_string(), "request: key `ops[0].group.copy[1].port`: invalid value: integer `-1`, expected an integer from 0 to 65535"),
        (r#"[7]"#.to_string(), "request: key `ops[0]`: expected an operation (an object with `op`), found 7"),
    ];
    for (batch, want) in cases {
        let e = parse_request(format!(r#"{{"cmd":"apply","ops":{batch}}}"#).as_bytes()).unwrap_err();
        assert!(e.starts_with(want), "{batch}:\n{e}\nwanted {want}");
    }
    assert_eq!(
        parse_request(br#"{"cmd":"apply","ops":[],"opps":[]}"#).unwrap_err(),
        "request: unknown field `opps`, expected `cmd` or `ops`"
    );
    // A well-formed operation reads as before.
    let ok =
        parse_request(br#"{"cmd":"apply","ops":[{"op":"delete_entry","table":"l2","key":["02:00:00:00:00:01"]}]}"#);
    assert!(
        matches!(&ok, Ok(Request::Apply { ops }) if matches!(&ops[..], [Change::DeleteEntry { table, priority: None, .. }] if table == "l2")),
        "{ok:?}"
    );
}
