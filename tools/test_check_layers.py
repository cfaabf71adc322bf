"""tools/check_layers.py on small synthetic trees: it names a cycle, an import of the runtime
from the packet core (by the path as written), a stray `dpdk_sys`, and passes a tree without
them (test code, comments and literals left out).
Runs with the first `python3` on PATH (standard library only)."""

import os
import tempfile
import unittest

import check_layers


def tree(files):
    root = tempfile.mkdtemp()
    for path, text in files.items():
        p = os.path.join(root, "dataplane", "src", path)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "w") as f:
            f.write(text)
    return root


GOOD = {
    "packet/mod.rs": "pub mod wire;\npub mod parse;\npub mod table;\n",
    "packet/wire/mod.rs": "pub fn x() {}\n",
    "packet/parse/mod.rs": "use crate::wire::x;\n",
    "packet/table/mod.rs": "use crate::{parse, wire::x};\n// use crate::runtime::worker;\n"
    "#[cfg(test)]\nmod tests { use crate::config::load; use crate::table; }\n",
    "packet/table/tests.rs": "use crate::worker::Worker;\n",
    "runtime/mod.rs": "pub mod worker;\npub mod control;\npub mod dpdk;\n",
    "runtime/worker.rs": "use crate::control::Mailbox;\nuse crate::dpdk::Mbuf;\n",
    "runtime/control/mod.rs": "use crate::packet::table;\n",
    "runtime/dpdk/mod.rs": "use dpdk_sys::rte_mbuf;\n",
    "config/mod.rs": "use crate::table::Table;\n",
}


def faults_with(changes):
    """check_layers' faults on GOOD with `changes` (path -> text) made."""
    return check_layers.check(tree({**GOOD, **changes}))[0]


class CheckLayers(unittest.TestCase):
    def test_a_layered_tree_passes_and_test_code_is_left_out(self):
        faults, graph = check_layers.check(tree(GOOD))
        self.assertEqual(faults, [])
        self.assertEqual(graph["packet"]["table"], {"parse", "wire"})
        self.assertEqual(graph["runtime"]["worker"], {"control", "dpdk"})

    def test_cycles_in_either_layer_are_named_with_their_edges(self):
        faults = faults_with({
            "packet/wire/mod.rs": "use crate::table::Key;\n",
            "runtime/control/mod.rs": "use crate::worker::ask_stop;\n",
        })
        self.assertIn(
            "packet: an import cycle among parse, table, wire (parse -> wire; table -> parse; table -> wire; "
            "wire -> table)",
            faults,
        )
        self.assertIn("runtime: an import cycle among control, worker (control -> worker; worker -> control)", faults)
        self.assertEqual(len(faults), 2, faults)

    def test_the_core_importing_the_runtime_or_config_or_dpdk_sys_is_named(self):
        faults = faults_with({
            "packet/parse/mod.rs": "use crate::{wire::x, runtime::worker};\nuse crate::config::C;\n",
            "packet/wire/mod.rs": "fn f() { dpdk_sys::rte_pktmbuf_free(); }\n",
            "config/mod.rs": "use crate::dpdk::Eal;\n",
        })
        self.assertEqual(
            sorted(faults),
            [
                "config/mod.rs: config imports the runtime (crate::dpdk)",
                "packet/parse/mod.rs: the packet core imports the runtime or config (crate::config)",
                "packet/parse/mod.rs: the packet core imports the runtime or config (crate::runtime)",
                "packet/wire/mod.rs: names dpdk_sys (only runtime/dpdk/ may)",
            ],
        )

    def test_a_cycle_between_sibling_files_is_named_and_mod_rs_is_left_out(self):
        faults = faults_with({
            "packet/agg/mod.rs": "mod state;\nmod swap;\npub struct Ctx;\nuse state::S;\n",
            "packet/agg/state.rs": "use super::swap::Ctx;\nuse super::Ctx as C;\n",
            "packet/agg/swap.rs": "use crate::agg::state::S;\n",
        })
        self.assertEqual(faults, ["packet/agg/: an import cycle among the files state, swap (state -> swap; swap -> state)"])

    def test_imports_after_a_test_module_declared_early_are_read(self):
        files = dict(GOOD)
        files["packet/wire/mod.rs"] = "#[cfg(test)]\nmod tests;\n    #[cfg(test)]\n    fn t() {\n    }\nuse crate::table::K;\n"
        faults, graph = check_layers.check(tree(files))
        self.assertEqual(graph["packet"]["wire"], {"table"})
        self.assertEqual(len(faults), 1, faults)

    def test_an_item_after_a_one_line_test_module_is_read(self):
        faults = faults_with({"packet/wire/mod.rs": "#[cfg(test)] mod tests;\nuse crate::runtime::worker;\n"})
        self.assertEqual(
            faults, ["packet/wire/mod.rs: the packet core imports the runtime or config (crate::runtime::worker)"]
        )
        faults, graph = check_layers.check(tree({
            **GOOD,
            "packet/wire/mod.rs": "#[cfg(test)] #[allow(dead_code)] mod tests { use crate::table; } use crate::parse;\n",
        }))
        self.assertEqual(graph["packet"]["wire"], {"parse"})

    def test_braces_in_literals_do_not_hide_the_rest_of_a_file(self):
        faults = faults_with({
            "packet/wire/mod.rs": "#[cfg(test)]\nmod tests {\n    fn t() { assert_eq!('{', '{'); let s = \"{{\"; }\n}\n"
            "fn f<'a>(x: &'a str) -> char { let _ = r#\"}\"#; '\\'' }\nuse crate::config::C;\n",
        })
        self.assertEqual(faults, ["packet/wire/mod.rs: the packet core imports the runtime or config (crate::config)"])

    def test_block_comments_and_strings_are_skipped(self):
        faults = faults_with({
            "packet/wire/mod.rs": "/* Unlike crate::runtime::worker, /* nested */ crate::config. */\n"
            "const S: &str = \"crate::runtime::dpdk\";\npub fn p() {}\n",
        })
        self.assertEqual(faults, [])

    def test_this_repository_is_layered(self):
        faults, graph = check_layers.check(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        self.assertEqual(faults, [])
        self.assertNotIn("table", graph["packet"]["action"])
        self.assertNotIn("worker", graph["runtime"]["control"])
        # Read past `mod tests;` near the top of table/mod.rs: its imports below it count.
        self.assertIn("meter", graph["packet"]["table"])


if __name__ == "__main__":
    unittest.main()
