//! Arbitrary bytes as a control request (`dpuctl`'s JSON), through the parser and, for a batch,
//! through `Model::apply` on a running model (`testing::PIPELINE_CONF`: two ports, three
//! tables, a meter, a group).
//!
//! Invariants: nothing panics; a refused request is one line; a refused batch leaves the model
//! as it was and names an operation's key (`ops[K]...`) or the part of the new pipeline at
//! fault; an accepted batch builds a pipeline with the model's tables, each with as many
//! entries as the model says, and the counts it carries over fit both versions.
#![no_main]

use dataplane::config::update::{carry, parse_request, Fixed, Model, Request};
use dataplane::table::PipelineState;
use libfuzzer_sys::fuzz_target;
use std::path::Path;
use std::sync::OnceLock;


fn running() -> &'static (Model, dataplane::table::Pipeline, Fixed) {
    static R: OnceLock<(Model, dataplane::table::Pipeline, Fixed)> = OnceLock::new();
    R.get_or_init(|| {
        let l = dataplane::config::load_str(dataplane::testing::PIPELINE_CONF, Path::new("fuzz.toml")).expect("the fuzz config loads");
        (Model::of(&l), l.pipeline.clone(), Fixed::of(&l))
    })
}

fuzz_target!(|data: &[u8]| {
    let req = match parse_request(data) {
        Ok(r) => r,
        Err(e) => {
            assert!(!e.contains('\n'), "one line: {e:?}");
            return;
        }
    };
    let Request::Apply { ops } = req else { return };
    let (model, pipeline, fixed) = running();
    match model.apply_request(&ops, fixed) {
        Err(e) => {
            let msg = e.to_string();
            assert!(msg.starts_with("request: "), "{msg}");
            assert!(!msg.contains('\n'), "one line: {msg:?}");
            assert!(e.key.starts_with("ops[") || e.key.starts_with("table[") || e.key.starts_with("multicast_group[") || e.key.starts_with("meter[") || e.key.starts_with("collective") || e.key.is_empty(), "{msg}");
        }
        Ok((m, built)) => {
            let p = &built.pipeline;
            assert_eq!(m.collectives.len(), built.collectives.len());
            assert_eq!(m.tables.len(), p.tables.len());
            for (tc, t) in m.tables.iter().zip(&p.tables) {
                assert_eq!(tc.entries.len(), t.len(), "table {}", tc.name);
            }
            let c = carry(model, pipeline, &m, p, &built.renewed);
            let (old, mut new) = (PipelineState::new(pipeline), PipelineState::new(p));
            let olen: usize = (0..old.tables()).map(|t| old.hits_of(t).len()).sum();
            let nlen: usize = (0..new.tables()).map(|t| new.hits_of(t).len()).sum();
            assert!(c.hits.iter().all(|&(o, n)| o < olen && n < nlen), "{c:?}");
            new.carry_from(&mut old.clone(), &c);
        }
    }
});
