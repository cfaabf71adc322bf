//! Runtime changes to the parts of the configuration that change while the appliance runs
//! (`[[table]]`, `[[multicast_group]]`, `[[meter]]`, `[[collective]]`): the control plane's
//! requests and SIGHUP's reload, validated by the same builders as the file.
//!
//! A [`Model`] is that part of a configuration. A batch of [`Change`]s is applied to a copy of the
//! running model ([`Model::apply`]) and the result built into a new [`Pipeline`] and collective
//! set by [`Model::build`] against what does not change ([`Fixed`]: ports, addresses, memory),
//! all or nothing: the first fault is reported with the operation's key
//! (`ops[2].entry.key[0]`, `ops[0].collective.chunk_elements`) and the running model is never
//! touched. [`carry`] then says which counters the new version keeps: entries are the same entry
//! when their table, key and priority are (P4Runtime's identity), whatever their actions; and
//! [`kept`] which collectives keep their slot state: those whose configuration is unchanged.

use super::collective::CollectiveConfig;
use super::meter::MeterConfig;
use super::table::{build_pipeline, EntryConfig, GroupConfig, TableConfig};
use super::{Config, ConfigError, Loaded};
use crate::action::Action;
use crate::agg::collective::Collective;
use crate::table::value::parse_match_value;
use crate::table::{Carry, Field, MatchKind, Pipeline};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::Path;

mod keyed;
use keyed::Keyed;

/// The pipeline part of a configuration, as the file's tables say it.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Model {
    /// `[[table]]`, in pipeline order.
    pub tables: Vec<TableConfig>,
    /// `[[multicast_group]]`.
    pub groups: Vec<GroupConfig>,
    /// `[[meter]]`.
    pub meters: Vec<MeterConfig>,
    /// `[[collective]]`, in configuration order (spec section 3).
    pub collectives: Vec<CollectiveConfig>,
}

/// What runtime changes are validated against and never change: the configuration the
/// appliance started with (EAL memory, mempool, dataplane settings, ports and their addresses,
/// workers) without its runtime parts.
#[derive(Debug, Clone)]
pub struct Fixed {
    config: Config,
    ipv4: Vec<Option<[u8; 4]>>,
    ipv6: Vec<Option<[u8; 16]>>,
}

impl Fixed {
    /// What `loaded` fixes for the rest of the run.
    pub fn of(loaded: &Loaded) -> Fixed {
        let mut config = loaded.config.clone();
        config.tables.clear();
        config.groups.clear();
        config.meters.clear();
        config.collectives.clear();
        Fixed { config, ipv4: loaded.port_ipv4.clone(), ipv6: loaded.port_ipv6.clone() }
    }

    /// The number of ports.
    pub fn ports(&self) -> u16 {
        self.config.ports.len() as u16
    }
}

/// What a [`Model`] builds into.
#[derive(Debug, Clone)]
pub struct Built {
    /// The ingress pipeline.
    pub pipeline: Pipeline,
    /// The collectives, validated, in the model's order.
    pub collectives: Vec<Collective>,
    /// Ids of collectives that a batch deleted and added back: they start afresh even when
    /// their configuration is the old one (a delete discards a collective's state; the add is
    /// a new collective). Empty for a model built whole (a reload).
    pub restarted: Vec<u16>,
    /// Entries and meters that a batch deleted and added back: they start afresh too.
    pub renewed: Renewed,
}

/// Entries and meters that a batch deleted and added back ([`Built::renewed`]): a delete
/// discards an entry's counters and a meter's buckets and colour counts, and the add makes a
/// new one (as a P4Runtime DELETE then INSERT does), even with the old configuration.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Renewed {
    /// (table name, entry identity as [`carry`] compares them).
    pub entries: Vec<(String, String)>,
    /// Meter names, sorted.
    pub meters: Vec<String>,
}

impl Renewed {
    /// True when nothing was deleted and added back.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty() && self.meters.is_empty()
    }
}

/// What an operation of a request touched, found again by identity once every operation has
/// run ([`Model::apply`]).
enum Touched {
    Entry(String, String),
    Default(String),
    Group(u16),
    Meter(String),
    Collective(u16),
    Nothing,
}

/// One change. Requests carry them as JSON objects tagged by `op`, with the fields of the
/// configuration file's tables (README, "Runtime control"); [`parse_request`] reads each as
/// `{NAME: {fields}}`, serde's external tagging, which keeps the path of a fault (an
/// internally tagged enum is read through a buffer that loses it).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Change {
    /// Adds `entry` to table `table` (its key must be new in the table).
    AddEntry {
        /// The table's name.
        table: String,
        /// As a `[[table.entry]]`.
        entry: EntryConfig,
    },
    /// Gives the entry with `entry`'s key (and priority) `entry`'s action; its counts stay.
    ModifyEntry {
        /// The table's name.
        table: String,
        /// As a `[[table.entry]]`: the key and priority find the entry, the action replaces its
        /// action.
        entry: EntryConfig,
    },
    /// Removes the entry with this key (and priority) from table `table`.
    DeleteEntry {
        /// The table's name.
        table: String,
        /// One value per key field, as in `[[table.entry]]`.
        key: Vec<toml::Value>,
        /// For tables with ternary or range fields.
        #[serde(default)]
        priority: Option<i32>,
    },
    /// Replaces table `table`'s `default_action`.
    SetDefaultAction {
        /// The table's name.
        table: String,
        /// An action list, as `default_action`.
        action: String,
    },
    /// Adds a multicast group (its id must be new).
    AddGroup {
        /// As a `[[multicast_group]]`.
        group: GroupConfig,
    },
    /// Replaces the multicast group with `group`'s id.
    ModifyGroup {
        /// As a `[[multicast_group]]`.
        group: GroupConfig,
    },
    /// Removes multicast group `id` (no action may still name it).
    DeleteGroup {
        /// The group's id.
        id: u16,
    },
    /// Adds a meter (its name must be new).
    AddMeter {
        /// As a `[[meter]]`.
        meter: MeterConfig,
    },
    /// Replaces the meter with `meter`'s name; its buckets start full again.
    ModifyMeter {
        /// As a `[[meter]]`.
        meter: MeterConfig,
    },
    /// Removes meter `name` (no action may still name it).
    DeleteMeter {
        /// The meter's name.
        name: String,
    },
    /// Adds a collective (its `collective_id` must be new); its slots are allocated now and
    /// must fit `dataplane.memory_limit_mb` with the collectives kept (spec section 3).
    AddCollective {
        /// As a `[[collective]]`.
        collective: CollectiveConfig,
    },
    /// Replaces the collective with `collective`'s `collective_id`: it starts afresh (no round
    /// in progress, no kept result, PSN counters and counters at 0), as after a restart with
    /// the changed configuration.
    ModifyCollective {
        /// As a `[[collective]]`.
        collective: CollectiveConfig,
    },
    /// Removes collective `id`: its rounds in progress are discarded, and from the switch on its
    /// packets are refused as an unknown collective (NAK reason 1).
    DeleteCollective {
        /// The collective's `collective_id`.
        id: u16,
    },
}

/// Where what an operation added or changed ended up in the new model: errors found there while
/// building are reported at the operation (`table[1].entry[4].action` as `ops[0].entry.action`).
struct Origin {
    /// The operation's index.
    op: usize,
    /// The path of what it touched in the new model, like `table[1].entry[4]`.
    at: String,
    /// The operation's field that holds it, like `entry`.
    field: &'static str,
}

/// The file name request errors carry.
pub const REQUEST: &str = "request";

impl Model {
    /// The pipeline part of a loaded configuration.
    pub fn of(loaded: &Loaded) -> Model {
        let c = &loaded.config;
        Model {
            tables: c.tables.clone(),
            groups: c.groups.clone(),
            meters: c.meters.clone(),
            collectives: c.collectives.clone(),
        }
    }

    /// Builds this model as the file's pipeline and collectives are built, against `fixed`: the
    /// pipeline (`aggregate` needs a collective), then the collectives (every check of
    /// `[[collective]]`, the memory limit counted over them all); errors name `path` and the
    /// model's keys (`table[1].entry[4].action`, `collective[2].chunk_elements`).
    pub fn build(&self, fixed: &Fixed, path: &Path) -> Result<Built, ConfigError> {
        let pipeline = build_pipeline(
            &self.tables,
            &self.groups,
            &self.meters,
            fixed.ports(),
            !self.collectives.is_empty(),
            path,
        )?;
        let mut config = fixed.config.clone();
        config.collectives = self.collectives.clone();
        let collectives = super::validate::collectives(&config, &fixed.ipv4, &fixed.ipv6, path)?;
        Ok(Built { pipeline, collectives, restarted: Vec::new(), renewed: Renewed::default() })
    }

    /// This model with `ops` applied in order, and what it builds into: all or nothing. Errors
    /// are keyed by operation (`ops[K]...`) in file [`REQUEST`]; one found only when the whole
    /// new model is built names the operation that put the faulty part there, or else the part's
    /// place in the new model (e.g. a deleted group that an entry still names).
    ///
    /// Entries, groups, meters and collectives are found by identity through an index built once
    /// per batch ([`Keyed`]): a batch costs in proportion to its operations plus the model, not
    /// their product.
    pub fn apply(&self, ops: &[Change], fixed: &Fixed) -> Result<(Model, Built), ConfigError> {
        let path = Path::new(REQUEST);
        let mut w = Work::of(self);
        let mut touched = Vec::new();
        for (k, op) in ops.iter().enumerate() {
            touched.push(w.change(k, op)?);
        }
        let (m, placed) = w.finish();
        let mut origins = Vec::new();
        for (op, t) in touched.into_iter().enumerate() {
            if let Some((at, field)) = placed.place(&m, t) {
                origins.push(Origin { op, at, field });
            }
        }
        let mut built = m.build(fixed, path).map_err(|e| at_origin(e, &origins))?;
        built.restarted = ops
            .iter()
            .filter_map(|op| match op {
                Change::DeleteCollective { id } => Some(*id),
                _ => None,
            })
            .filter(|id| built.collectives.iter().any(|c| c.id == *id))
            .collect();
        built.restarted.sort_unstable();
        built.restarted.dedup();
        let mut renewed = Renewed::default();
        // The identities of the entries of each table a delete named, found once per table.
        let mut present: HashMap<&str, std::collections::HashSet<String>> = HashMap::new();
        for op in ops {
            match op {
                Change::DeleteEntry { table, key, priority } => {
                    let Some(t) = m.tables.iter().find(|t| t.name == *table) else { continue };
                    let Ok(id) = entry_id(t, key, *priority) else { continue };
                    let ids = present.entry(table.as_str()).or_insert_with(|| {
                        t.entries.iter().filter_map(|e| entry_id(t, &e.key, e.priority).ok()).collect()
                    });
                    if ids.contains(&id) {
                        renewed.entries.push((table.clone(), id));
                    }
                }
                Change::DeleteMeter { name } => renewed.meters.push(name.clone()),
                _ => {}
            }
        }
        renewed.entries.sort_unstable();
        renewed.entries.dedup();
        // Meters deleted and present at the end: added back.
        let meters: std::collections::HashSet<&str> = m.meters.iter().map(|x| x.name.as_str()).collect();
        renewed.meters.retain(|n| meters.contains(n.as_str()));
        renewed.meters.sort_unstable();
        renewed.meters.dedup();
        built.renewed = renewed;
        Ok((m, built))
    }

    /// [`Model::apply`], its errors one line each ([`one_line`]): what a request is answered.
    pub fn apply_request(&self, ops: &[Change], fixed: &Fixed) -> Result<(Model, Built), ConfigError> {
        self.apply(ops, fixed).map_err(|mut e| {
            e.key = one_line(&e.key);
            e.message = one_line(&e.message);
            e
        })
    }

    /// The index of table `name`, or what the tables are.
    fn table(&self, name: &str) -> Result<usize, String> {
        self.tables.iter().position(|t| t.name == name).ok_or_else(|| {
            let names: Vec<&str> = self.tables.iter().map(|t| t.name.as_str()).collect();
            format!("no table {name:?}; tables: {}", if names.is_empty() { "none".into() } else { names.join(", ") })
        })
    }
}

/// A model being changed by a batch: its lists held as [`Keyed`] lists (a table's entries from
/// the first operation on the table on), so that each operation finds what it names by identity
/// without walking the list.
struct Work {
    /// The model; the entries of the tables in `entries`, and the groups, meters and
    /// collectives, are held below until [`Work::finish`].
    model: Model,
    /// Per table: its entries by identity ([`entry_id`]), once an operation touched the table.
    entries: Vec<Option<Keyed<String, EntryConfig>>>,
    groups: Keyed<u16, GroupConfig>,
    meters: Keyed<String, MeterConfig>,
    collectives: Keyed<u16, CollectiveConfig>,
}

/// Where the items of a changed model are, by identity: what [`Work::finish`] gives to find
/// what each operation touched ([`Placed::place`]).
struct Placed {
    /// Per table: its entries' indices, for the tables the batch touched.
    entries: Vec<Option<HashMap<String, usize>>>,
    groups: HashMap<u16, usize>,
    meters: HashMap<String, usize>,
    collectives: HashMap<u16, usize>,
}

impl Work {
    /// `m`, to be changed.
    fn of(m: &Model) -> Work {
        let mut model = m.clone();
        let groups = Keyed::new(std::mem::take(&mut model.groups), |g| Some(g.id));
        let meters = Keyed::new(std::mem::take(&mut model.meters), |x| Some(x.name.clone()));
        let collectives = Keyed::new(std::mem::take(&mut model.collectives), |c| Some(c.collective_id));
        let entries = model.tables.iter().map(|_| None).collect();
        Work { model, entries, groups, meters, collectives }
    }

    /// Table `ti`'s entries, indexed (on the first call for the table: every entry's key parsed
    /// once).
    fn entries(&mut self, ti: usize) -> &mut Keyed<String, EntryConfig> {
        if self.entries[ti].is_none() {
            let t = &mut self.model.tables[ti];
            let items = std::mem::take(&mut t.entries);
            let t = &*t;
            self.entries[ti] = Some(Keyed::new(items, |e| entry_id(t, &e.key, e.priority).ok()));
        }
        self.entries[ti].as_mut().expect("indexed above")
    }

    /// The model as changed, and where its items are.
    fn finish(self) -> (Model, Placed) {
        let Work { mut model, entries, groups, meters, collectives } = self;
        let mut placed = Placed {
            entries: Vec::with_capacity(entries.len()),
            groups: HashMap::new(),
            meters: HashMap::new(),
            collectives: HashMap::new(),
        };
        for (t, e) in model.tables.iter_mut().zip(entries) {
            placed.entries.push(e.map(|e| {
                let (items, at) = e.finish();
                t.entries = items;
                at
            }));
        }
        (model.groups, placed.groups) = groups.finish();
        (model.meters, placed.meters) = meters.finish();
        (model.collectives, placed.collectives) = collectives.finish();
        (model, placed)
    }

    /// Operation `k` of a request, `op`, applied to this model: what it touched (found again
    /// in the new model once every operation has run, to name the operation a fault comes
    /// from). Errors are keyed `ops[K]...` in file [`REQUEST`].
    fn change(&mut self, k: usize, op: &Change) -> Result<Touched, ConfigError> {
        let path = Path::new(REQUEST);
        let err = |k: usize, key: &str, msg: String| ConfigError::new(path, format!("ops[{k}]{key}"), msg);
        Ok(match op {
            Change::AddEntry { table, entry } | Change::ModifyEntry { table, entry } => {
                let ti = self.model.table(table).map_err(|e| err(k, ".table", e))?;
                let t = &self.model.tables[ti];
                priority_check(t, entry.priority).map_err(|e| err(k, ".entry.priority", e))?;
                let id =
                    entry_id(t, &entry.key, entry.priority).map_err(|(i, e)| err(k, &key_path(".entry.key", i), e))?;
                let entries = self.entries(ti);
                match (op, entries.find(&id)) {
                    (Change::AddEntry { .. }, Some(e)) => {
                        let e = entries.position(e);
                        return Err(err(
                            k,
                            ".entry.key",
                            format!("table {table:?} has this entry already (entry {e}): use modify_entry"),
                        ));
                    }
                    (Change::AddEntry { .. }, None) => entries.push(id.clone(), entry.clone()),
                    (_, Some(e)) => {
                        if let Some(x) = entries.get_mut(e) {
                            x.action = entry.action.clone();
                        }
                    }
                    (_, None) => {
                        return Err(err(k, ".entry.key", format!("table {table:?} has no entry with this key")))
                    }
                }
                Touched::Entry(table.clone(), id)
            }
            Change::DeleteEntry { table, key, priority } => {
                let ti = self.model.table(table).map_err(|e| err(k, ".table", e))?;
                let t = &self.model.tables[ti];
                priority_check(t, *priority).map_err(|e| err(k, ".priority", e))?;
                let id = entry_id(t, key, *priority).map_err(|(i, e)| err(k, &key_path(".key", i), e))?;
                self.entries(ti)
                    .remove(&id)
                    .ok_or_else(|| err(k, ".key", format!("table {table:?} has no entry with this key")))?;
                Touched::Nothing
            }
            Change::SetDefaultAction { table, action } => {
                let ti = self.model.table(table).map_err(|e| err(k, ".table", e))?;
                self.model.tables[ti].default_action = action.clone();
                Touched::Default(table.clone())
            }
            Change::AddGroup { group } | Change::ModifyGroup { group } => {
                let add = matches!(op, Change::AddGroup { .. });
                self.groups.upsert(group.id, add, group).map_err(|exists| {
                    let why = if exists {
                        format!("multicast group {} exists already: use modify_group", group.id)
                    } else {
                        format!("no multicast group {}{}", group.id, self.group_ids())
                    };
                    err(k, ".group.id", why)
                })?;
                Touched::Group(group.id)
            }
            Change::DeleteGroup { id } => {
                self.groups
                    .remove(id)
                    .ok_or_else(|| err(k, ".id", format!("no multicast group {id}{}", self.group_ids())))?;
                Touched::Nothing
            }
            Change::AddMeter { meter } | Change::ModifyMeter { meter } => {
                let add = matches!(op, Change::AddMeter { .. });
                self.meters.upsert(meter.name.clone(), add, meter).map_err(|exists| {
                    let why = if exists {
                        format!("meter {:?} exists already: use modify_meter", meter.name)
                    } else {
                        format!("no meter {:?}{}", meter.name, self.meter_names())
                    };
                    err(k, ".meter.name", why)
                })?;
                Touched::Meter(meter.name.clone())
            }
            Change::DeleteMeter { name } => {
                self.meters
                    .remove(name)
                    .ok_or_else(|| err(k, ".name", format!("no meter {name:?}{}", self.meter_names())))?;
                Touched::Nothing
            }
            Change::AddCollective { collective } | Change::ModifyCollective { collective } => {
                let id = collective.collective_id;
                let add = matches!(op, Change::AddCollective { .. });
                self.collectives.upsert(id, add, collective).map_err(|exists| {
                    let why = if exists {
                        format!("collective {id} exists already: use modify_collective")
                    } else {
                        format!("no collective {id}{}", self.collective_ids())
                    };
                    err(k, ".collective.collective_id", why)
                })?;
                Touched::Collective(id)
            }
            Change::DeleteCollective { id } => {
                self.collectives
                    .remove(id)
                    .ok_or_else(|| err(k, ".id", format!("no collective {id}{}", self.collective_ids())))?;
                Touched::Nothing
            }
        })
    }

    fn group_ids(&self) -> String {
        let ids: Vec<String> = self.groups.items().map(|g| g.id.to_string()).collect();
        format!("; groups: {}", if ids.is_empty() { "none".into() } else { ids.join(", ") })
    }

    fn collective_ids(&self) -> String {
        let ids: Vec<String> = self.collectives.items().map(|c| c.collective_id.to_string()).collect();
        format!("; collectives: {}", if ids.is_empty() { "none".into() } else { ids.join(", ") })
    }

    fn meter_names(&self) -> String {
        let n: Vec<&str> = self.meters.items().map(|x| x.name.as_str()).collect();
        format!("; meters: {}", if n.is_empty() { "none".into() } else { n.join(", ") })
    }
}

impl Placed {
    /// Where `t` stands in the changed model `m` (its key, e.g. `table[0].entry[3]`, and the
    /// field an error there names), if it is still there.
    fn place(&self, m: &Model, t: Touched) -> Option<(String, &'static str)> {
        match t {
            Touched::Entry(table, id) => {
                let ti = m.table(&table).ok()?;
                let e = self.entries.get(ti)?.as_ref()?.get(&id)?;
                Some((format!("table[{ti}].entry[{e}]"), "entry"))
            }
            Touched::Default(table) => m.table(&table).ok().map(|ti| (format!("table[{ti}].default_action"), "action")),
            Touched::Group(id) => self.groups.get(&id).map(|g| (format!("multicast_group[{g}]"), "group")),
            Touched::Meter(name) => self.meters.get(&name).map(|i| (format!("meter[{i}]"), "meter")),
            Touched::Collective(id) => self.collectives.get(&id).map(|i| (format!("collective[{i}]"), "collective")),
            Touched::Nothing => None,
        }
    }
}

/// Whether `table` takes the priority given: tables with ternary or range fields need one, the
/// others take none (as the table's builder says).
fn priority_check(table: &TableConfig, priority: Option<i32>) -> Result<(), String> {
    let needs = table.key.iter().any(|k| k.kind == "ternary" || k.kind == "range");
    match (needs, priority) {
        (true, None) => Err(format!(
            "expected `priority` (an integer; larger wins): table {:?} has ternary or range fields",
            table.name
        )),
        (false, Some(_)) => {
            Err(format!("`priority` is only for tables with ternary or range fields; table {:?} has none", table.name))
        }
        _ => Ok(()),
    }
}

/// `base` with `[i]` appended when the fault is in key value `i`.
fn key_path(base: &str, i: Option<usize>) -> String {
    match i {
        Some(i) => format!("{base}[{i}]"),
        None => base.to_string(),
    }
}

/// A build error at the operation that put its part in the new model, if one did. An error
/// about a whole list (`collective`: the collectives' slot memory against the EAL memory) is
/// at the first operation that put an item in it.
fn at_origin(mut e: ConfigError, origins: &[Origin]) -> ConfigError {
    let whole =
        |o: &&Origin| !e.key.is_empty() && o.at.strip_prefix(e.key.as_str()).is_some_and(|r| r.starts_with('['));
    if let Some(o) = origins.iter().find(whole) {
        e.key = format!("ops[{}].{}", o.op, o.field);
        return e;
    }
    for o in origins {
        let rest = match e.key.strip_prefix(&o.at) {
            Some(r) if r.is_empty() || r.starts_with('.') || r.starts_with('[') => r.to_string(),
            _ => continue,
        };
        e.key = format!("ops[{}].{}{rest}", o.op, o.field);
        return e;
    }
    if !e.key.is_empty() {
        e.message = format!("{} (in the pipeline these operations would make)", e.message);
    }
    e
}

/// An entry's identity in `table`: its key values parsed for the table's fields (so that
/// `"10.0.0.0/8"` and `" 10.0.0.0/8"` are the same key) and its priority. Errors: (the value's
/// index, or `None` for the key as a whole, and why).
fn entry_id(
    table: &TableConfig,
    key: &[toml::Value],
    priority: Option<i32>,
) -> Result<String, (Option<usize>, String)> {
    if key.len() != table.key.len() {
        return Err((None, format!("expected {} value(s), one per key field, found {}", table.key.len(), key.len())));
    }
    let mut id = String::new();
    for (i, (v, kf)) in key.iter().zip(&table.key).enumerate() {
        let field = Field::from_name(&kf.field).ok_or((None, format!("unknown field {:?}", kf.field)))?;
        let kind = MatchKind::from_name(&kf.kind).ok_or((None, format!("unknown match kind {:?}", kf.kind)))?;
        let value = parse_match_value(field, kind, v).map_err(|e| (Some(i), e))?;
        id += &format!("{value:?};");
    }
    if let Some(p) = priority {
        id += &format!("priority {p}");
    }
    Ok(id)
}

/// What the pipeline `new` (of model `new_m`) keeps of `old` (of model `old_m`): the counters of
/// every entry with the same identity in a table of the same name, of every table's miss, of
/// every named counter of the same name, the colour counts of every meter of the same name, and
/// the buckets of those whose configuration did not change. A direct meter's instances follow
/// the action lists that use it: an instance keeps its buckets when the entry (same identity)
/// or table default that used it still uses the meter, the k-th use of the list to the k-th;
/// a new entry's instance starts full. Nothing of the entries and meters in `renewed` (deleted
/// and added back by the batch).
pub fn carry(old_m: &Model, old: &Pipeline, new_m: &Model, new: &Pipeline, renewed: &Renewed) -> Carry {
    let bases = |p: &Pipeline| {
        let mut at = 0;
        p.tables
            .iter()
            .map(|t| {
                let b = at;
                at += t.len() + 1;
                b
            })
            .collect::<Vec<_>>()
    };
    let (ob, nb) = (bases(old), bases(new));
    let mut c = Carry::default();
    // The action lists that stay the same list (a table's default, an entry of the same
    // identity), as (old, new): a direct meter's instance used by both carries.
    let mut lists: Vec<(&[Action], &[Action])> = Vec::new();
    for (nt, ntc) in new_m.tables.iter().enumerate() {
        let Some(ot) = old_m.tables.iter().position(|t| t.name == ntc.name) else { continue };
        let otc = &old_m.tables[ot];
        let (Some(op), Some(np)) = (old.tables.get(ot), new.tables.get(nt)) else { continue };
        // The built tables hold the models' entries in order (else carry nothing of the table).
        if op.len() != otc.entries.len() || np.len() != ntc.entries.len() || otc.key != ntc.key {
            continue;
        }
        let ids: HashMap<String, usize> = otc
            .entries
            .iter()
            .enumerate()
            .filter_map(|(i, e)| entry_id(otc, &e.key, e.priority).ok().map(|id| (id, i)))
            .collect();
        let renewed_here: std::collections::HashSet<&str> =
            renewed.entries.iter().filter(|(t, _)| *t == ntc.name).map(|(_, id)| id.as_str()).collect();
        for (ni, e) in ntc.entries.iter().enumerate() {
            let Ok(id) = entry_id(ntc, &e.key, e.priority) else { continue };
            if let Some(&oi) = ids.get(&id).filter(|_| !renewed_here.contains(id.as_str())) {
                c.hits.push((ob[ot] + oi, nb[nt] + ni));
                lists.push((op.actions(oi), np.actions(ni)));
            }
        }
        c.hits.push((ob[ot] + op.len(), nb[nt] + np.len()));
        lists.push((op.default_action(), np.default_action()));
    }
    for (ni, name) in new.counter_names.iter().enumerate() {
        if let Some(oi) = old.counter_names.iter().position(|n| n == name) {
            c.named.push((oi, ni));
        }
    }
    for (ni, spec) in new.meters.iter().enumerate() {
        if renewed.meters.binary_search(&spec.name).is_ok() {
            continue;
        }
        let same = |m: &Model| m.meters.iter().find(|x| x.name == spec.name).cloned();
        let (Some(oi), Some(nc)) = (old.meters.iter().position(|s| s.name == spec.name), same(new_m)) else {
            continue;
        };
        // A direct meter's instances follow the action lists that use it (multicast copies
        // use no meter): all of them stay when no table changed, else those of the lists that
        // stay. Its colour counts always carry.
        let config_same = same(old_m).as_ref() == Some(&nc);
        let instances_same = !nc.direct || (old_m.tables == new_m.tables && renewed.entries.is_empty());
        if config_same && instances_same {
            c.meters.push((oi, ni));
        } else if config_same {
            let pairs: Vec<(u32, u32)> =
                lists.iter().flat_map(|(o, n)| direct_uses(o, oi).zip(direct_uses(n, ni))).collect();
            c.meter_instances.push((oi, ni, pairs));
        } else {
            c.meter_colors.push((oi, ni));
        }
    }
    c
}

/// The instances of direct meter `meter` (its index in the pipeline's meters) that `actions`
/// uses, in the order of use ([`Action::MeterAt`], [`Action::PoliceAt`]).
fn direct_uses(actions: &[Action], meter: usize) -> impl Iterator<Item = u32> + '_ {
    actions.iter().filter_map(move |a| match *a {
        Action::MeterAt(m, i) | Action::PoliceAt(m, i) if usize::from(m) == meter => Some(i),
        _ => None,
    })
}

/// The model of a configuration file reloaded while the appliance runs (SIGHUP): `text` must
/// load as a whole (every check of the start), and differ from the running file's `running`
/// only in `[[table]]`, `[[multicast_group]]`, `[[meter]]` and `[[collective]]`, the parts that
/// change at runtime. Errors name the file and the first key that may not change.
pub fn reload(running: &toml::Table, text: &str, path: &Path) -> Result<Model, ConfigError> {
    let loaded = super::load_str(text, path)?;
    let new: toml::Table = text.parse().map_err(|e| ConfigError::new(path, "", format!("{e}")))?;
    const RUNTIME: [&str; 4] = ["table", "multicast_group", "meter", "collective"];
    let keys: std::collections::BTreeSet<&String> = running.keys().chain(new.keys()).collect();
    for k in keys {
        if !RUNTIME.contains(&k.as_str()) && running.get(k) != new.get(k) {
            return Err(ConfigError::new(
                path,
                k.as_str(),
                "changed since the appliance started; only [[table]], [[multicast_group]], [[meter]] and \
                 [[collective]] change at runtime (restart the appliance for the rest)",
            ));
        }
    }
    Ok(Model::of(&loaded))
}

/// Per collective of `new`: the index in `old` of the collective whose slot state it keeps,
/// the one with the same id and the same configuration, unless its id is in `restarted` (a
/// batch deleted it and added it back: [`Built::restarted`]). A collective new or changed (by
/// `modify_collective` or a reload) keeps nothing: it starts afresh.
pub fn kept(old: &[Collective], new: &[Collective], restarted: &[u16]) -> Vec<Option<usize>> {
    new.iter().map(|n| old.iter().position(|o| o == n).filter(|_| !restarted.contains(&n.id))).collect()
}

/// Per collective of `new`: the worker that owns it, of `workers`. A collective whose id is in
/// `old` stays with its owner (`old_owners`, by `old`'s index); another, at index `k` of
/// `new`, goes to worker `k % workers`, the rule of the start (collective `i` of the file to
/// worker `i % workers`).
pub fn owners(old: &[Collective], old_owners: &[u16], new: &[Collective], workers: u16) -> Vec<u16> {
    let workers = workers.max(1);
    new.iter()
        .enumerate()
        .map(|(k, n)| match old.iter().position(|o| o.id == n.id) {
            Some(i) => old_owners[i],
            None => (k % workers as usize) as u16,
        })
        .collect()
}

/// The largest control request accepted (bytes): a batch of some thousands of entries.
pub const MAX_REQUEST: usize = 1 << 20;

/// A control request (one JSON object, tagged by `cmd`), as `dpuctl` sends it. (The variants
/// without fields are empty structs: serde refuses unknown fields only in those.)
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "cmd", rename_all = "snake_case", deny_unknown_fields)]
pub enum Request {
    /// Every counter but the tables' entries, summed over the workers (as `/dpu/stats`).
    Stats {},
    /// The tables as running (key fields, entries, default action) with each entry's counts.
    Tables {},
    /// The multicast groups as running.
    Groups {},
    /// The meters as running (their configuration; the colour counts are in the final stats).
    Meters {},
    /// The collectives as running (`[[collective]]` tables), with the worker owning each
    /// (`owners`, in the same order).
    Collectives {},
    /// Each collective's straggler view: per rank its contributions, their mean lateness after
    /// their round's first one, and the rounds it completed.
    Stragglers {},
    /// Applies `ops` in order, all or nothing ([`Model::apply`]).
    Apply {
        /// The operations: read by [`parse_request`] one by one (each `{"op": NAME, ...}`),
        /// never by this derive.
        #[serde(skip_deserializing)]
        ops: Vec<Change>,
    },
    /// Reloads the configuration file, as SIGHUP does ([`reload`]).
    Reload {},
}

/// Parses a request: at most [`MAX_REQUEST`] bytes of UTF-8 JSON, one object, no unknown field.
/// Errors say what was wrong and where: line and column for the JSON, and for an operation of
/// `apply` its index and key (`request: key `ops[2].entry.acton`: unknown field `acton`, ...`), Rust's
/// type names said in words (`expected an integer from 0 to 65535`).
pub fn parse_request(bytes: &[u8]) -> Result<Request, String> {
    if bytes.len() > MAX_REQUEST {
        return Err(format!("request refused: more than the limit of {MAX_REQUEST} bytes"));
    }
    let text = std::str::from_utf8(bytes).map_err(|e| format!("request is not UTF-8: {e}"))?;
    let said = |e: serde_json::Error| one_line(&format!("request: {}", super::in_words(&e.to_string())));
    let v: serde_json::Value = serde_json::from_str(text).map_err(said)?;
    let serde_json::Value::Object(mut o) = v else { return serde_json::from_str(text).map_err(said) };
    if o.get("cmd").and_then(serde_json::Value::as_str) != Some("apply") {
        return serde_json::from_str(text).map_err(said);
    }
    if let Some(k) = o.keys().find(|k| *k != "cmd" && *k != "ops") {
        return Err(one_line(&format!("request: unknown field `{k}`, expected `cmd` or `ops`")));
    }
    let ops = match o.remove("ops") {
        Some(serde_json::Value::Array(a)) => a,
        Some(_) => return Err("request: key `ops`: expected an array of operations".into()),
        None => return Err("request: missing field `ops`".into()),
    };
    let ops = ops
        .into_iter()
        .enumerate()
        .map(|(k, op)| {
            change_of(op).map_err(|(key, msg)| {
                let e = ConfigError::new(Path::new(REQUEST), format!("ops[{k}]{key}"), msg);
                one_line(&e.to_string())
            })
        })
        .collect::<Result<_, _>>()?;
    Ok(Request::Apply { ops })
}

/// The operations' names, as `op` says them.
const OPS: [&str; 13] = [
    "add_entry",
    "modify_entry",
    "delete_entry",
    "set_default_action",
    "add_group",
    "modify_group",
    "delete_group",
    "add_meter",
    "modify_meter",
    "delete_meter",
    "add_collective",
    "modify_collective",
    "delete_collective",
];

/// One operation of a request, `{"op": NAME, ...}`: the change, or the key of its fault within
/// the operation (like `.entry.acton`, `.collective.member[1].ip`, or empty) and what was wrong.
fn change_of(op: serde_json::Value) -> Result<Change, (String, String)> {
    let serde_json::Value::Object(mut o) = op else {
        return Err((String::new(), format!("expected an operation (an object with `op`), found {op}")));
    };
    let names = OPS.join(", ");
    let name = match o.remove("op") {
        Some(serde_json::Value::String(s)) if OPS.contains(&s.as_str()) => s,
        Some(serde_json::Value::String(s)) => {
            return Err((".op".into(), format!("unknown operation {s:?}: expected one of {names}")))
        }
        Some(v) => return Err((".op".into(), format!("expected the operation's name, one of {names}; found {v}"))),
        None => return Err((".op".into(), format!("missing: expected the operation's name, one of {names}"))),
    };
    // Deserialized as {NAME: {fields}}, which serde reads without buffering: the path of a
    // fault within the operation is known.
    let mut tagged = serde_json::Map::new();
    tagged.insert(name, serde_json::Value::Object(o));
    let change: Result<Change, _> = serde_path_to_error::deserialize(serde_json::Value::Object(tagged));
    change.map_err(|e| {
        let mut key = String::new();
        for s in e.path().iter() {
            match s {
                serde_path_to_error::Segment::Seq { index } => key += &format!("[{index}]"),
                serde_path_to_error::Segment::Map { key: k } => key += &format!(".{k}"),
                serde_path_to_error::Segment::Enum { .. } => {}
                serde_path_to_error::Segment::Unknown => key += ".?",
            }
        }
        (key, super::in_words(&e.inner().to_string()))
    })
}

/// `s` with its control characters escaped (`\n`): an error that echoes a request's text
/// stays one line in a log.
pub fn one_line(s: &str) -> String {
    s.chars().map(|c| if c.is_control() { c.escape_default().to_string() } else { c.to_string() }).collect()
}

#[cfg(test)]
mod tests;
